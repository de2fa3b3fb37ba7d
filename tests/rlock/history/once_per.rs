//! `exec --once-per`: at most one successful run per window, counted by Redis's clock; a firing
//! whose window is done exits 0 (or -E) without running its command, quietly, on record as
//! skipped and by whom; a failed run leaves its window to the next firing; three hosts firing
//! with skew and long jobs run exactly once in every window in which they fired.

use super::*;
use crate::common::basic::assert_usage;
use std::collections::BTreeMap;
use std::fs;
use std::time::Instant;

/// The window record of lock `name`.
fn record_key(name: &str) -> String {
    format!("{{rlock:{name}}}:once")
}

#[test]
fn a_window_runs_once_and_its_later_firings_skip_in_silence() {
    let server = RedisServer::start();
    let dir = tempdir();
    let marker = dir.path().join("ran");
    let job = format!("echo \"$RLOCK_WINDOW\" >> '{}'", marker.display());
    // A window long enough that the three firings below share it.
    let once = ["--once-per", "1h", "--", "sh", "-c", job.as_str()];

    let first = exec(&server, "report", &once);
    assert_eq!(first.code, 0, "{first}");
    let second = exec(&server, "report", &once);
    assert_eq!(second.code, 0, "{second}");
    assert_eq!(second.stderr, "", "cron mails what is printed: {second}");
    let chosen = exec(&server, "report", &[&["-E", "3"][..], &once[..]].concat());
    assert_eq!(
        chosen.code, 3,
        "-E chooses the code of a done window: {chosen}"
    );

    let ran = fs::read_to_string(&marker).expect("the first run ran");
    let windows: Vec<&str> = ran.lines().collect();
    assert_eq!(windows.len(), 1, "the command ran once: {ran}");
    let start: i64 = windows[0].parse().expect("RLOCK_WINDOW is seconds");
    let now_s = crate::common::basic::redis_now_ms(&server) / 1000;
    assert!(
        start <= now_s && now_s - start < 3600 && start % 3600 == 0,
        "RLOCK_WINDOW is the start of this hour by Redis's clock: {start} (now {now_s})"
    );

    let runs = history_of(rlock_at(&server), "report", 10);
    assert_eq!(outcomes(&runs), ["skipped", "skipped", "ok"], "{runs:?}");
    let by = runs[0]["by"].as_str().unwrap_or_default();
    let first_run = runs[2]["run"].as_str().expect("the first run's ID");
    assert!(
        by.ends_with(first_run),
        "a skipped firing names the run that did the window: {by} / {first_run}"
    );
    assert_eq!(runs[0]["code"], 3);
    assert!(runs[0]["held_ms"].is_null(), "a skip never holds: {runs:?}");
    assert!(!server.exists("rlock:report"), "the lock is free");
    let ttl = server.pttl(&record_key("report"));
    assert!(
        ttl > 0 && ttl <= 2 * 3_600_000 + 60_000,
        "the window record expires: {ttl}"
    );
}

#[test]
fn a_failed_run_leaves_its_window_to_the_next_firing() {
    let server = RedisServer::start();
    let failed = exec(
        &server,
        "k",
        &["--once-per", "1h", "--", "sh", "-c", "exit 4"],
    );
    assert_eq!(failed.code, 4, "{failed}");
    assert!(!server.exists(&record_key("k")), "no window is marked");
    let retried = exec(&server, "k", &["--once-per", "1h", "--", "true"]);
    assert_eq!(retried.code, 0, "{retried}");
    let after = exec(
        &server,
        "k",
        &["--once-per", "1h", "--", "sh", "-c", "exit 5"],
    );
    assert_eq!(
        after.code, 0,
        "the window is done: the command does not run: {after}"
    );
    let runs = history_of(rlock_at(&server), "k", 10);
    assert_eq!(outcomes(&runs), ["skipped", "ok", "failed"], "{runs:?}");
}

#[test]
fn once_per_that_cannot_work_is_a_usage_error_that_writes_nothing() {
    let server = RedisServer::start();
    for (args, needle) in [
        (&["exec", "--once-per", "500ms"][..], "at least 1s"),
        (&["exec", "--once-per", "366d"][..], "at most 365d"),
        (&["exec", "--once-per", "1m", "--limit", "2"][..], "--limit"),
        (&["exec", "--once-per", "1m", "--shared"][..], "--shared"),
        (
            &["acquire", "--once-per", "1m"][..],
            "rlock exec --once-per",
        ),
    ] {
        let mut cmd = rlock_at(&server);
        cmd.args(args).args(["-k", "k"]);
        if args[0] == "exec" {
            cmd.args(["--", "true"]);
        }
        assert_usage(&run(&mut cmd), needle);
    }
    let (a, b, c) = (
        server.url(),
        format!("redis://127.0.0.1:{}", crate::common::basic::dead_port()),
        format!("redis://127.0.0.1:{}", crate::common::basic::dead_port()),
    );
    let out = run(rlock_at(&server).args([
        "-u",
        &a,
        "-u",
        &b,
        "-u",
        &c,
        "exec",
        "-k",
        "k",
        "--once-per",
        "1m",
        "--",
        "true",
    ]));
    assert_usage(&out, "Redlock");
    let keys: i64 = crate::common::basic::q(&server, &["DBSIZE"]);
    assert_eq!(keys, 0, "nothing was written");
}

#[test]
fn a_damaged_window_record_is_65_and_the_command_never_runs() {
    let server = RedisServer::start();
    let dir = tempdir();
    let marker = dir.path().join("ran");
    let job = format!("touch '{}'", marker.display());
    for (name, damage) in [
        ("string", vec!["SET", "{rlock:string}:once", "junk"]),
        (
            "words",
            vec!["HSET", "{rlock:words}:once", "window", "soon"],
        ),
    ] {
        server.cmd(&damage);
        let out = exec(&server, name, &["--once-per", "1m", "--", "sh", "-c", &job]);
        assert_eq!(out.code, 65, "{name}: {out}");
        assert!(
            out.stderr.contains(&record_key(name)),
            "{name}: names the key: {out}"
        );
        assert!(!marker.exists(), "{name}: the command never ran");
        assert!(
            !server.exists(&format!("rlock:{name}")),
            "{name}: no lock is left"
        );
    }
}

/// Three "hosts" (rlock in a UTS namespace of its own, each with its own host name) fire the same
/// job in every window, at skews of 5–85 % of the window; the jobs of two windows outlast the
/// next window. Every window in which they fired has exactly one run, and none is dropped.
#[test]
fn three_hosts_with_skew_and_long_jobs_run_once_in_every_window() {
    let server = RedisServer::start();
    let dir = tempdir();
    let log = dir.path().join("runs");
    // A longer run by hand: RLOCK_TEST_ONCE_WINDOWS=100 RLOCK_TEST_ONCE_WINDOW_MS=3000.
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let window = Duration::from_millis(env("RLOCK_TEST_ONCE_WINDOW_MS", 2000));
    let windows = env("RLOCK_TEST_ONCE_WINDOWS", 8) as i64;
    let bin = env!("CARGO_BIN_EXE_rlock");
    let w_ms = window.as_millis() as i64;
    // Start at the beginning of a window, by Redis's clock (the machine's clock here).
    let now = crate::common::basic::redis_now_ms(&server);
    let first = now / w_ms + 1;
    let long = [first + 2, first + 5];
    let job = format!(
        "case \"$RLOCK_WINDOW\" in {}|{}) sleep {};; *) sleep 0.2;; esac; echo \"$RLOCK_WINDOW $(hostname)\" >> '{}'",
        long[0] * w_ms / 1000,
        long[1] * w_ms / 1000,
        // Half as long again as a window.
        w_ms * 3 / 2000,
        log.display()
    );
    let mut seed: u64 = 0x5eed;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % 80 + 5
    };
    let mut fires: Vec<(i64, i64, &str)> = Vec::new();
    for w in first..first + windows {
        for host in ["host-a", "host-b", "host-c"] {
            fires.push((w * w_ms + w_ms * next() as i64 / 100, w, host));
        }
    }
    fires.sort();
    let started = Instant::now();
    let mut running = Vec::new();
    for (at, w, host) in &fires {
        let wait = at - crate::common::basic::redis_now_ms(&server);
        if wait > 0 {
            std::thread::sleep(Duration::from_millis(wait as u64));
        }
        let script = format!(
            "hostname {host} && exec '{bin}' exec -k report --once-per {}ms -- sh -c '{}'",
            window.as_millis(),
            job.replace('\'', "'\\''")
        );
        let mut cmd = std::process::Command::new("unshare");
        cmd.args(["--uts", "sh", "-c", &script])
            .env("RLOCK_URL", crate::common::acl::suite_url(server.port()))
            .env_remove("RLOCK_ONCE_PER");
        running.push((*w, *host, Background::spawn(host, dir.path(), &mut cmd)));
    }
    for (w, host, mut bg) in running {
        let (out, _) = bg.finish(window * (windows as u32 + 20));
        assert_eq!(out.code, 0, "window {w}, {host}: {out}");
    }
    let text = fs::read_to_string(&log).unwrap_or_default();
    let mut per_window: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for line in text.lines() {
        let (start, host) = line.split_once(' ').expect("window host");
        let start: i64 = start.parse().expect("window start");
        per_window
            .entry(start * 1000 / w_ms)
            .or_default()
            .push(host.to_string());
    }
    let expected: Vec<i64> = (first..first + windows).collect();
    assert_eq!(
        per_window.keys().copied().collect::<Vec<_>>(),
        expected,
        "a run in every window fired in, and in no other: {per_window:?}"
    );
    assert!(
        per_window.values().all(|hosts| hosts.len() == 1),
        "one run per window: {per_window:?}"
    );
    let hosts: std::collections::BTreeSet<&String> = per_window.values().flatten().collect();
    assert!(
        hosts.len() > 1,
        "the runs came from several hosts: {per_window:?}"
    );
    assert!(started.elapsed() < window * (windows as u32 + 20));
}

/// `rlock ARGS` as host `host` (a UTS namespace of its own), run to its end.
fn as_host(server: &RedisServer, host: &str, args: &[&str]) -> Output {
    let bin = env!("CARGO_BIN_EXE_rlock");
    let mut cmd = std::process::Command::new("unshare");
    cmd.args([
        "--uts",
        "sh",
        "-c",
        "hostname \"$0\" && exec \"$@\"",
        host,
        bin,
    ])
    .args(args)
    .env("RLOCK_URL", crate::common::acl::suite_url(server.port()))
    .env_remove("RLOCK_ONCE_PER");
    run(&mut cmd)
}

#[test]
fn the_timeline_draws_each_hosts_runs_skipped_windows_and_failures() {
    let server = RedisServer::start();
    let ok = as_host(
        &server,
        "host-a",
        &["exec", "-k", "t", "--once-per", "1h", "--", "sleep", "0.3"],
    );
    assert_eq!(ok.code, 0, "{ok}");
    let skipped = as_host(
        &server,
        "host-b",
        &["exec", "-k", "t", "--once-per", "1h", "--", "true"],
    );
    assert_eq!(skipped.code, 0, "{skipped}");
    let token = crate::common::basic::acquire(&server, "t", &["--ttl", "60s"]);
    let busy = as_host(&server, "host-b", &["exec", "-k", "t", "-n", "--", "true"]);
    assert_eq!(busy.code, 75, "{busy}");
    crate::common::basic::release(&server, "t", &token);
    let failed = as_host(
        &server,
        "host-c",
        &["exec", "-k", "t", "--", "sh", "-c", "sleep 0.2; exit 2"],
    );
    assert_eq!(failed.code, 2, "{failed}");
    // A host that goes down mid-run: rlock and its guardian SIGKILLed once the run is on record.
    let dir = tempdir();
    let bin = env!("CARGO_BIN_EXE_rlock");
    let mut down = std::process::Command::new("unshare");
    down.args([
        "--uts",
        "sh",
        "-c",
        "hostname host-d && exec \"$@\"",
        "sh",
        bin,
    ])
    .args(["exec", "-k", "t", "--ttl", "1s", "--", "sleep", "30"])
    .env("RLOCK_URL", crate::common::acl::suite_url(server.port()));
    let mut down = Background::spawn("host-d", dir.path(), &mut down);
    wait_until("host-d's run on record", Duration::from_secs(10), || {
        history_of(rlock_at(&server), "t", 20)
            .iter()
            .any(|r| r["outcome"] == "running")
    });
    let rlock = down.pid();
    let children =
        std::fs::read_to_string(format!("/proc/{rlock}/task/{rlock}/children")).unwrap_or_default();
    for pid in
        std::iter::once(rlock).chain(children.split_whitespace().filter_map(|p| p.parse().ok()))
    {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    let _ = down.finish(Duration::from_secs(10));
    wait_until("host-d's lease to run out", Duration::from_secs(10), || {
        !server.exists("rlock:t")
    });

    let out =
        run(rlock_at(&server).args(["inspect", "-k", "t", "--history", "--timeline", "-n", "20"]));
    assert_eq!(out.code, 0, "{out}");
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(
        lines.iter().all(|l| l.chars().count() <= 80),
        "80 columns:\n{}",
        out.stdout
    );
    let row = |host: &str| -> &str {
        lines
            .iter()
            .find(|l| l.starts_with(host))
            .unwrap_or_else(|| panic!("a row for {host}:\n{}", out.stdout))
    };
    let cells = |host: &str| row(host).split('|').nth(1).unwrap_or_default().to_string();
    assert!(
        cells("host-a").contains('='),
        "host-a held:\n{}",
        out.stdout
    );
    assert!(
        cells("host-b").contains('s') && cells("host-b").contains('b'),
        "host-b skipped its window, then found it busy:\n{}",
        out.stdout
    );
    assert!(
        cells("host-c").contains("=F") || cells("host-c").ends_with('F'),
        "host-c held, then failed:\n{}",
        out.stdout
    );
    assert!(
        cells("host-d").contains('x'),
        "host-d's run abandoned:\n{}",
        out.stdout
    );
    let a = cells("host-a").find('=').unwrap();
    let c = cells("host-c").find('=').unwrap();
    assert!(
        a < c,
        "along time: host-a's run before host-c's:\n{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("s skipped"),
        "a legend:\n{}",
        out.stdout
    );
    assert_usage(
        &run(rlock_at(&server).args(["inspect", "-k", "t", "--timeline"])),
        "--history",
    );
}
