//! A wait rides out an outage: while rlock waits for a lock, Redis unreachable or frozen means
//! "not yet"; rlock tries again at most 1 s apart until its wait ends, says once when the outage
//! began and once when it ended, and a wait that ends during the outage exits 69 naming the last
//! error. Names the DNS says do not exist fail at once; a resolver that cannot answer is retried. A run that has never reached Redis (a typo in the
//! port, a restart under way) tries for --connect-timeout (30s by default), then exits 69 naming
//! the address; with -n too, which concerns the lock, not the server.

use crate::common::{Background as Bg, RedisServer, rlock, rlock_at, run, wait_until};
use std::time::{Duration, Instant};

// What never heals (bad trust, credentials, not Redis at all) ends every wait at once.
mod never_heals;

// A resolver that cannot answer is waited out like a refused connection.
mod resolver;

const KEY: &str = "out";

fn hold(server: &RedisServer, ttl: &str) {
    let out = run(rlock_at(server).args(["acquire", "-k", KEY, "--ttl", ttl]));
    assert_eq!(out.code, 0, "{out}");
}

/// A waiting `acquire -w 30s`, started once the lock is held.
fn waiter(server: &RedisServer, dir: &std::path::Path, extra: &[&str]) -> Bg {
    let mut cmd = rlock_at(server);
    cmd.args(["--op-timeout", "300ms"])
        .args(extra)
        .args(["acquire", "-w", "30s", "-k", KEY, "--ttl", "5s"]);
    Bg::spawn("waiter", dir, &mut cmd)
}

fn queued(server: &RedisServer) -> bool {
    matches!(
        server.try_cmd(&["ZCARD", "{rlock:out}:q"]),
        Ok(redis::Value::Int(1))
    )
}

/// Kills the server under a queued waiter, keeps it down for longer than a few tries (the
/// waiter must not give up), restarts it empty (the holder's lock goes with the data) and
/// returns what the waiter did.
fn ride_out_a_restart(server: &mut RedisServer, w: &mut Bg) -> crate::common::Output {
    server.kill9();
    let down = Instant::now();
    wait_until("the outage to last", Duration::from_secs(5), || {
        down.elapsed() > Duration::from_millis(1500)
    });
    assert!(
        w.running(),
        "the waiter gave up during the outage: {}",
        w.describe()
    );
    server.restart();
    w.finish(Duration::from_secs(10)).0
}

#[test]
fn a_waiter_rides_out_a_restart() {
    let mut server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    hold(&server, "60s");
    // Once Redis has answered, --connect-timeout no longer bounds the wait: the outage below
    // outlasts it.
    let mut w = waiter(&server, dir.path(), &["--connect-timeout", "500ms"]);
    w.wait_for("the waiter to queue", Duration::from_secs(10), || {
        queued(&server)
    });
    let out = ride_out_a_restart(&mut server, &mut w);
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(server.get("rlock:out"), Some(out.stdout.trim().to_string()));
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(
        lines.len(),
        2,
        "one line when the outage began, one when it ended: {out}"
    );
    assert!(lines[0].contains("still waiting"), "{out}");
    assert!(lines[1].contains("answers again"), "{out}");
}

#[test]
fn a_waiter_rides_out_a_frozen_server_and_gets_the_lock_when_the_lease_ends() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    hold(&server, "1s");
    let mut w = waiter(&server, dir.path(), &["-q"]);
    w.wait_for("the waiter to queue", Duration::from_secs(10), || {
        queued(&server)
    });
    server.freeze();
    let frozen = Instant::now();
    // Past the holder's lease: the waiter's tries meet the frozen server.
    wait_until("the freeze to last", Duration::from_secs(5), || {
        frozen.elapsed() > Duration::from_millis(2000)
    });
    server.thaw();
    let (out, _) = w.finish(Duration::from_secs(15));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.stderr, "", "-q: no outage lines: {out}");
    assert_eq!(server.get("rlock:out"), Some(out.stdout.trim().to_string()));
}

#[test]
fn a_wait_that_ends_during_an_outage_exits_69_with_the_last_error() {
    let mut server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    hold(&server, "60s");
    let mut cmd = rlock_at(&server);
    cmd.args(["acquire", "-w", "2s", "-k", KEY]);
    let mut w = Bg::spawn("waiter", dir.path(), &mut cmd);
    w.wait_for("the waiter to queue", Duration::from_secs(10), || {
        queued(&server)
    });
    server.kill9();
    let (out, _) = w.finish(Duration::from_secs(10));
    assert_eq!(out.code, 69, "{out}");
    let last = out.stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("refused") && last.contains("gave up"),
        "the last line names the last error: {out}"
    );
}

#[test]
fn a_bounded_wait_is_a_deadline_against_a_frozen_server() {
    // Frozen from the start: every try times out after --op-timeout (2 s), and the give-back
    // after it would too. Neither may outlast what is left of -w 5s.
    let server = RedisServer::start();
    server.freeze();
    for args in [
        &["acquire", "-w", "5s", "-k", KEY][..],
        &["exec", "-w", "5s", "-k", KEY, "--", "true"],
    ] {
        let started = Instant::now();
        let out = run(rlock_at(&server).args(args));
        let took = started.elapsed();
        assert_eq!(out.code, 69, "{out}");
        assert!(
            took >= Duration::from_millis(4900) && took < Duration::from_millis(5000 + 700),
            "{args:?} took {took:?} for -w 5s against a frozen server"
        );
        let last = out.stderr.lines().last().unwrap_or_default();
        assert!(
            last.contains("timed out") && last.contains("Redis unavailable throughout"),
            "down all along, not for the last few seconds: {out}"
        );
    }
    server.thaw();

    // Redlock with a frozen majority: each try asks every master who it is, then for the lock,
    // then gives back; all of it within what is left of the wait.
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    masters[1].freeze();
    masters[2].freeze();
    let mut cmd = rlock();
    for m in &masters {
        cmd.arg("-u").arg(m.url());
    }
    let started = Instant::now();
    let out = run(cmd.args(["acquire", "-w", "5s", "-k", KEY]));
    let took = started.elapsed();
    masters[1].thaw();
    masters[2].thaw();
    assert_eq!(out.code, 69, "{out}");
    assert!(
        took >= Duration::from_millis(4900) && took < Duration::from_millis(5000 + 700),
        "Redlock took {took:?} for -w 5s with a frozen majority: {out}"
    );
}

#[test]
fn names_that_do_not_resolve_fail_at_once() {
    let started = Instant::now();
    let out = run(rlock().args([
        "-u",
        "redis://no-such-host.invalid:6379",
        "acquire",
        "-w",
        "20s",
        "-k",
        KEY,
    ]));
    assert_eq!(out.code, 69, "{out}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "a bad name was retried"
    );
}

/// `-n` is about the lock: a cron run (`exec -n`) during a Redis restart waits for the server
/// within --connect-timeout and runs; against a closed port it gives up after that bound.
#[test]
fn no_wait_rides_out_a_restart_within_the_connect_timeout() {
    let mut server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    server.kill9();
    let mut cmd = rlock_at(&server);
    cmd.args([
        "--connect-timeout",
        "20s",
        "exec",
        "-n",
        "-k",
        KEY,
        "--",
        "true",
    ]);
    let mut w = Bg::spawn("cron run", dir.path(), &mut cmd);
    let down = Instant::now();
    wait_until("the outage to last", Duration::from_secs(5), || {
        down.elapsed() > Duration::from_millis(1500)
    });
    assert!(
        w.running(),
        "-n gave up on an unreachable server: {}",
        w.describe()
    );
    server.restart();
    let (out, _) = w.finish(Duration::from_secs(10));
    assert_eq!(out.code, 0, "the run ran once Redis was back: {out}");
    assert!(out.stderr.contains("trying again for up to 20s"), "{out}");

    let url = format!("redis://127.0.0.1:{}", closed_port());
    let (out, took) = timed(
        &url,
        &["--connect-timeout", "1s", "acquire", "-n", "-k", KEY],
        &[],
    );
    assert_eq!(out.code, 69, "{out}");
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(5),
        "-n --connect-timeout 1s gave up after {took:?}: {out}"
    );
    assert!(
        out.stderr.contains(&url) && out.stderr.contains("--connect-timeout"),
        "{out}"
    );
}

#[test]
fn a_waiter_rides_out_a_sentinel_failover() {
    let mut set = crate::common::Sentinels::start("out");
    let dir = tempfile::tempdir().expect("temp dir");
    let sentinels = |cmd: &mut std::process::Command| {
        cmd.arg("--sentinel").arg(set.name());
        for url in set.urls() {
            cmd.arg("--url").arg(url);
        }
    };
    let mut hold = rlock();
    sentinels(&mut hold);
    let out = run(hold.args(["acquire", "-k", KEY, "--ttl", "3s"]));
    assert_eq!(out.code, 0, "{out}");
    let mut cmd = rlock();
    sentinels(&mut cmd);
    cmd.args(["--op-timeout", "300ms", "acquire", "-w", "60s", "-k", KEY]);
    let mut w = Bg::spawn("waiter", dir.path(), &mut cmd);
    w.wait_for("the waiter to queue", Duration::from_secs(10), || {
        matches!(
            set.server(0).try_cmd(&["ZCARD", "{rlock:out}:q"]),
            Ok(redis::Value::Int(1))
        )
    });
    // The master dies while the waiter waits; the Sentinels promote the replica.
    let new_master = set.server(1).port();
    set.server_mut(0).kill9();
    set.wait_master(new_master, crate::common::Sentinels::failover_bound());
    let (out, _) = w.finish(Duration::from_secs(30));
    assert_eq!(out.code, 0, "the waiter gave up during the failover: {out}");
    assert_eq!(
        set.server(1).get("rlock:out"),
        Some(out.stdout.trim().to_string()),
        "the waiter holds the lock on the new master"
    );
}

#[test]
fn a_semaphore_waiter_rides_out_a_restart_and_gets_a_slot() {
    let mut server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    for _ in 0..2 {
        let out =
            run(rlock_at(&server)
                .args(["acquire", "-k", KEY, "--limit", "2", "--ttl", "60s", "-n"]));
        assert_eq!(out.code, 0, "{out}");
    }
    let mut cmd = rlock_at(&server);
    cmd.args(["--op-timeout", "300ms", "acquire", "-w", "30s", "-k", KEY])
        .args(["--limit", "2", "--ttl", "5s"]);
    let mut w = Bg::spawn("waiter", dir.path(), &mut cmd);
    w.wait_for("the waiter to queue", Duration::from_secs(10), || {
        queued(&server)
    });
    let out = ride_out_a_restart(&mut server, &mut w);
    assert_eq!(out.code, 0, "{out}");
    // A slot of a semaphore: its token is a member of the holders' sorted set.
    let score = server.cmd(&["ZSCORE", "rlock:out", out.stdout.trim()]);
    assert_ne!(
        score,
        redis::Value::Nil,
        "not a holder after the outage: {out}"
    );
    assert!(out.stderr.contains("still waiting"), "{out}");
    assert!(out.stderr.contains("answers again"), "{out}");
}

// First contact: a run that never reached Redis
// ---------------------------------------------------------------------------------------------

/// A loopback port where nothing listens (bound, then closed).
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("local addr").port()
}

/// `rlock ARGS` against `url`, timed.
fn timed(url: &str, args: &[&str], env: &[(&str, &str)]) -> (crate::common::Output, Duration) {
    let started = Instant::now();
    let mut cmd = rlock();
    cmd.args(["-u", url]).args(args).envs(env.iter().copied());
    let out = run(&mut cmd);
    (out, started.elapsed())
}

/// The cron job of the README with a typo in the port, no -n and no -w: it ends on its own
/// with 69 within the default 30s, with one line while it tries and one naming the address.
#[test]
fn a_run_against_a_closed_port_ends_69_on_its_own_within_the_default_bound() {
    let url = format!("redis://127.0.0.1:{}", closed_port());
    let (out, took) = timed(&url, &["exec", "-k", "jobs", "--", "true"], &[]);
    assert_eq!(out.code, 69, "{out}");
    assert!(
        took >= Duration::from_secs(29) && took < Duration::from_secs(40),
        "gave up after {took:?}, not after the default 30s: {out}"
    );
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(
        lines.len(),
        2,
        "one line while trying, one at the end: {out}"
    );
    assert!(lines[0].contains("trying again for up to 30s"), "{out}");
    assert!(
        lines[1].contains(&url) && lines[1].contains("--connect-timeout"),
        "the last line names the address and the option: {out}"
    );
}

/// --connect-timeout and RLOCK_CONNECT_TIMEOUT shorten it, also under a long -w; -q keeps only
/// the last line.
#[test]
fn connect_timeout_and_its_variable_bound_the_first_contact() {
    let url = format!("redis://127.0.0.1:{}", closed_port());
    let (out, took) = timed(
        &url,
        &["--connect-timeout", "2s", "acquire", "-k", "jobs"],
        &[],
    );
    assert_eq!(out.code, 69, "{out}");
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(6),
        "--connect-timeout 2s gave up after {took:?}: {out}"
    );
    let (out, took) = timed(
        &url,
        &["-q", "exec", "-w", "20m", "-k", "jobs", "--", "true"],
        &[("RLOCK_CONNECT_TIMEOUT", "1s")],
    );
    assert_eq!(out.code, 69, "{out}");
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(5),
        "RLOCK_CONNECT_TIMEOUT=1s under -w 20m gave up after {took:?}: {out}"
    );
    assert_eq!(
        out.stderr.lines().count(),
        1,
        "-q: only the last line: {out}"
    );
}
