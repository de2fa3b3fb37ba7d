mod common;

// Guarantee 7 (no polling) and the waiting behaviour around it: a parked waiter is woken by the
// release, finds a dead holder's lock at its TTL, survives a lost notification, leaves nothing
// behind when interrupted or timed out, and waiters are served in arrival order without overlap.
//
// Timing bounds are outcome bounds: each one separates "woken by the release / the TTL" from
// "woke up on the next 2 s refresh" (or from "never"), with generous slack either side.

use std::collections::HashMap;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use common::{Background as Bg, RedisServer, rlock_at, run, wait_until};

/// The lock every test uses, and the Redis names rlock gives it (see `src/lock/mod.rs`).
const KEY: &str = "k";
const LOCK: &str = "rlock:k";
const STATE: &str = "{rlock:k}:state";
const QUEUE: &str = "{rlock:k}:q";

/// How long the first waiter in line has to claim a lock handed to it (`CLAIM_MS` in
/// `src/lock/common.lua`): what a waiter that died costs the line, once.
const CLAIM: Duration = Duration::from_secs(1);

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("rlock-waiting-")
        .tempdir()
        .expect("create temp dir")
}

/// `rlock acquire -k k --ttl TTL` in the foreground; returns the token.
fn hold(server: &RedisServer, ttl: &str) -> String {
    let out = run(rlock_at(server).args(["acquire", "-k", KEY, "--ttl", ttl]));
    assert_eq!(out.code, 0, "holder's acquire failed: {out}");
    let token = out.stdout.trim().to_string();
    assert!(!token.is_empty(), "acquire printed no token: {out}");
    assert_eq!(server.get(LOCK).as_deref(), Some(token.as_str()));
    token
}

fn release(server: &RedisServer, token: &str) {
    let out = run(rlock_at(server).args(["release", "-k", KEY, "--token", token]));
    assert_eq!(out.code, 0, "release failed: {out}");
}

/// The waiting tokens, oldest first.
fn queue(server: &RedisServer) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(QUEUE)
        .arg(0)
        .arg(-1)
        .query(&mut server.conn())
        .expect("ZRANGE queue")
}

/// The waiter leases (`w:<token>` fields) in the state hash.
/// The waiter a free lock is reserved for, if any.
fn reserved(server: &RedisServer) -> Option<String> {
    server.hgetall(STATE).get("next").cloned()
}

fn state(server: &RedisServer) -> HashMap<String, String> {
    server.hgetall(STATE)
}

/// Waits until the queue holds `n` tokens and returns them, oldest first. Fails at once, with
/// its output, if one of `procs` exits meanwhile: it was never parked.
fn wait_queued(server: &RedisServer, n: usize, procs: &mut [Bg]) -> Vec<String> {
    let mut q = Vec::new();
    wait_until(
        &format!("{n} waiter(s) in the queue zset {QUEUE}"),
        Duration::from_secs(10),
        || {
            for p in procs.iter_mut() {
                if !p.running() {
                    panic!(
                        "a waiter exited before it was seen in the queue (queue: {:?})\n{}",
                        queue(server),
                        p.describe()
                    );
                }
            }
            q = queue(server);
            q.len() >= n
        },
    );
    assert_eq!(q.len(), n, "more waiters in the queue than started: {q:?}");
    q
}

/// Asserts that no waiter is left in Redis: no queue, no waiter lease.
fn assert_no_waiters_left(server: &RedisServer) {
    assert!(
        !server.exists(QUEUE),
        "the queue zset is left behind: {:?}",
        queue(server)
    );
    let state = server.hgetall(STATE);
    assert!(
        !state.keys().any(|f| f.starts_with("w:")),
        "waiter leases in {STATE}: {state:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Wake-up on release, on expiry, after a lost notification
// ---------------------------------------------------------------------------------------------

#[test]
fn a_parked_waiter_acquires_promptly_after_release() {
    let server = RedisServer::start();
    let dir = tempdir();
    let holder = hold(&server, "60s");

    let mut waiter = [Bg::spawn(
        "waiter",
        dir.path(),
        rlock_at(&server).args(["acquire", "-k", KEY, "--ttl", "5s"]),
    )];
    let waiting = wait_queued(&server, 1, &mut waiter);
    // Its first attempt was at or before this moment; its first refresh comes REFRESH later.
    let queued_at = Instant::now();
    assert_eq!(server.get(LOCK).as_deref(), Some(holder.as_str()));

    release(&server, &holder);
    let released_at = Instant::now();
    let (out, acquired_at) = waiter[0].finish(Duration::from_secs(10));
    assert_eq!(out.code, 0, "the waiter failed: {out}");
    let token = out.stdout.trim();
    assert_eq!(
        token, waiting[0],
        "the waiter printed another token than it queued with"
    );
    assert_eq!(server.get(LOCK).as_deref(), Some(token));

    let after_release = acquired_at - released_at;
    assert!(
        after_release < Duration::from_secs(1),
        "the waiter took {after_release:?} after the release to acquire: a release must wake the \
         first waiter at once (not at the holder's 60 s TTL)"
    );
    let after_queued = acquired_at - queued_at;
    assert!(
        after_queued < Duration::from_millis(1500),
        "the waiter acquired {after_queued:?} after it was queued: the release did not wake it"
    );
    let pttl = server.pttl(LOCK);
    assert!(
        (1..=5000).contains(&pttl),
        "the new lock has PTTL {pttl}, not the waiter's 5 s"
    );
    assert_no_waiters_left(&server);
}

#[test]
fn a_waiter_takes_a_dead_holders_lock_at_its_ttl() {
    let server = RedisServer::start();
    let dir = tempdir();
    let spawned_at = Instant::now();
    // The holder never releases: `acquire` exits at once, as a holder that died would.
    let holder = hold(&server, "1500ms");
    let holder_returned = Instant::now();
    let held = state(&server);
    assert_eq!(held.get("token"), Some(&holder));
    let holder_since: i64 = held["since"].parse().expect("since is ms");

    let mut waiter = [Bg::spawn(
        "waiter",
        dir.path(),
        rlock_at(&server).args(["acquire", "-k", KEY, "--ttl", "5s"]),
    )];
    wait_queued(&server, 1, &mut waiter);
    let (out, acquired_at) = waiter[0].finish(Duration::from_secs(10));
    assert_eq!(out.code, 0, "the waiter failed: {out}");
    let token = out.stdout.trim();
    assert_eq!(server.get(LOCK).as_deref(), Some(token));

    // Redis's own clock (TIME in the acquire script) stamps both grants.
    let granted = state(&server);
    assert_eq!(granted.get("token").map(String::as_str), Some(token));
    let gap = granted["since"].parse::<i64>().expect("since is ms") - holder_since;
    assert!(
        gap >= 1500,
        "the waiter was granted the lock {gap} ms after the holder, before its 1500 ms TTL ran out"
    );
    assert!(
        gap < 1900,
        "the waiter was granted the lock {gap} ms after the holder: it should wake when the \
         holder's 1500 ms TTL runs out"
    );
    // The same on the test's clock, which includes process start and exit.
    assert!(acquired_at - spawned_at >= Duration::from_millis(1500));
    assert!(
        acquired_at - holder_returned < Duration::from_millis(3000),
        "the waiter exited {:?} after the holder took a 1500 ms lock",
        acquired_at - holder_returned
    );
    assert_no_waiters_left(&server);
}

#[test]
fn a_lost_notification_costs_only_latency() {
    let server = RedisServer::start();
    let dir = tempdir();
    // Another client's lock: a plain SET NX PX, released by DEL, which publishes nothing. A
    // waiter cannot hear it go, only find it gone when its lease would have ended.
    const LEASE: Duration = Duration::from_secs(3);
    server.cmd(&["SET", LOCK, "x", "NX", "PX", "3000"]);
    let set_at = Instant::now();

    let mut waiter = [Bg::spawn(
        "waiter",
        dir.path(),
        rlock_at(&server).args(["acquire", "-k", KEY, "--ttl", "5s"]),
    )];
    wait_queued(&server, 1, &mut waiter);
    assert!(waiter[0].running());
    server.cmd(&["DEL", LOCK]);
    let deleted_at = Instant::now();

    let (out, acquired_at) = waiter[0].finish(Duration::from_secs(30));
    assert_eq!(out.code, 0, "the waiter failed: {out}");
    assert_eq!(server.get(LOCK).as_deref(), Some(out.stdout.trim()));
    let _ = deleted_at;
    let latency = acquired_at - set_at;
    assert!(
        latency < LEASE + Duration::from_secs(1),
        "the waiter took {latency:?} to notice a lock deleted without a notification: it should \
         find out when the lease it saw would have ended ({LEASE:?})"
    );
    assert_no_waiters_left(&server);
}

#[test]
fn a_foreign_lock_that_expires_is_taken_at_its_ttl() {
    let server = RedisServer::start();
    let dir = tempdir();
    let set_at = Instant::now();
    server.cmd(&["SET", LOCK, "x", "NX", "PX", "1500"]);

    let mut waiter = [Bg::spawn(
        "waiter",
        dir.path(),
        rlock_at(&server).args(["acquire", "-k", KEY, "--ttl", "5s"]),
    )];
    wait_queued(&server, 1, &mut waiter);
    let (out, acquired_at) = waiter[0].finish(Duration::from_secs(30));
    assert_eq!(out.code, 0, "the waiter failed: {out}");
    assert_eq!(server.get(LOCK).as_deref(), Some(out.stdout.trim()));
    let after = acquired_at - set_at;
    assert!(
        after >= Duration::from_millis(1500),
        "acquired {after:?} after another client's 1500 ms lock was set"
    );
    assert!(
        after < Duration::from_millis(3000),
        "acquired only {after:?} after another client's 1500 ms lock was set"
    );
    assert_no_waiters_left(&server);
}

// ---------------------------------------------------------------------------------------------
// Giving up: signals and -w
// ---------------------------------------------------------------------------------------------

/// A waiting `rlock acquire` (or `rlock exec`) gets `sig`: within a second it dies of SIGINT
/// (as an interrupted command does, so that the caller's shell loop stops too) or exits 128+N
/// for another signal, and leaves nothing of its own in Redis; the holder's lock is untouched;
/// exec's child never ran.
fn interrupted_waiter(exec: bool, sig: Signal) {
    let server = RedisServer::start();
    let dir = tempdir();
    let holder = hold(&server, "60s");
    let held = state(&server);

    let ran = dir.path().join("child-ran");
    let mut cmd = rlock_at(&server);
    if exec {
        cmd.args(["exec", "-k", KEY, "--", "touch"]).arg(&ran);
    } else {
        cmd.args(["acquire", "-k", KEY, "--ttl", "5s"]);
    }
    let mut waiter = [Bg::spawn("waiter", dir.path(), &mut cmd)];
    let token = wait_queued(&server, 1, &mut waiter).remove(0);
    assert_eq!(
        reserved(&server),
        None,
        "nothing was handed to the waiter yet"
    );

    waiter[0].kill(sig);
    let sent = Instant::now();
    let (out, exited_at) = waiter[0].finish(Duration::from_secs(10));
    // `code` is -N for a death by signal N.
    let expected = if sig == Signal::SIGINT {
        -(sig as i32)
    } else {
        128 + sig as i32
    };
    assert_eq!(
        out.code, expected,
        "a waiter interrupted by {sig} should end as {expected}: {out}"
    );
    let took = exited_at - sent;
    assert!(
        took < Duration::from_secs(1),
        "the waiter took {took:?} to exit after {sig}"
    );
    assert!(
        out.stderr.contains("interrupted"),
        "no message saying why it stopped: {out}"
    );

    let q = queue(&server);
    assert!(
        !q.contains(&token),
        "the waiter is still in the queue: {q:?}"
    );
    let after = state(&server);
    assert_no_waiters_left(&server);
    // The holder's lock and record are untouched.
    assert_eq!(server.get(LOCK).as_deref(), Some(holder.as_str()));
    let pttl = server.pttl(LOCK);
    assert!(pttl > 45_000, "the holder's lock now has PTTL {pttl}");
    for field in ["token", "fence", "since", "pid", "ttl"] {
        assert_eq!(
            after.get(field),
            held.get(field),
            "state field {field} changed"
        );
    }
    if exec {
        assert!(!ran.exists(), "the waiting exec ran its command");
    }
}

/// Ctrl-C at a terminal sends SIGINT to the whole foreground job: a shell script waiting in
/// `rlock acquire` (or `rlock exec`) must stop there, as it does when any command of its own is
/// interrupted. bash goes on after a child that exited (130) but not after one that died of
/// SIGINT, so rlock must die of it.
fn ctrl_c_stops_the_callers_script(exec: bool) {
    let server = RedisServer::start();
    let dir = tempdir();
    hold(&server, "60s");
    let rlock = env!("CARGO_BIN_EXE_rlock");
    let waiter = if exec {
        format!("{rlock} -u {} exec -k {KEY} -- true", server.url())
    } else {
        format!("{rlock} -u {} acquire -k {KEY}", server.url())
    };
    let mut cmd = std::process::Command::new("bash");
    cmd.arg("-c")
        .arg(format!(r#"{waiter}; echo "went on after $?" > "$D/after""#));
    let mut script = [Bg::spawn_group("script", dir.path(), &mut cmd)];
    wait_queued(&server, 1, &mut script);
    let pgid = nix::unistd::Pid::from_raw(script[0].pid());
    nix::sys::signal::killpg(pgid, Signal::SIGINT).expect("killpg SIGINT");
    let (out, _) = script[0].finish(Duration::from_secs(10));
    assert_eq!(out.code, -2, "the script did not die of SIGINT: {out}");
    let after = dir.path().join("after");
    assert!(
        !after.exists(),
        "the script went on after Ctrl-C: {}",
        fs::read_to_string(&after).unwrap_or_default()
    );
    assert_no_waiters_left(&server);
}

#[test]
fn ctrl_c_stops_a_script_waiting_in_acquire() {
    ctrl_c_stops_the_callers_script(false);
}

#[test]
fn ctrl_c_stops_a_script_waiting_in_exec() {
    ctrl_c_stops_the_callers_script(true);
}

#[test]
fn sigint_ends_a_waiting_acquire_cleanly() {
    interrupted_waiter(false, Signal::SIGINT);
}

#[test]
fn sigterm_ends_a_waiting_acquire_cleanly() {
    interrupted_waiter(false, Signal::SIGTERM);
}

#[test]
fn sigint_ends_a_waiting_exec_cleanly() {
    interrupted_waiter(true, Signal::SIGINT);
}

#[test]
fn sigterm_ends_a_waiting_exec_cleanly() {
    interrupted_waiter(true, Signal::SIGTERM);
}

/// A waiter with `-w 1500ms` gives up with the busy code and leaves the queue.
fn wait_timeout_leaves_the_queue(exec: bool) {
    let server = RedisServer::start();
    let dir = tempdir();
    let holder = hold(&server, "60s");

    let ran = dir.path().join("child-ran");
    let mut cmd = rlock_at(&server);
    if exec {
        cmd.args(["exec", "-k", KEY, "-w", "1500ms", "--", "touch"])
            .arg(&ran);
    } else {
        cmd.args(["acquire", "-k", KEY, "--ttl", "5s", "-w", "1500ms"]);
    }
    let started = Instant::now();
    let mut waiter = [Bg::spawn("waiter", dir.path(), &mut cmd)];
    let token = wait_queued(&server, 1, &mut waiter).remove(0);
    let (out, exited_at) = waiter[0].finish(Duration::from_secs(10));
    assert_eq!(out.code, 75, "-w ran out: the busy code 75 expected: {out}");
    let waited = exited_at - started;
    assert!(
        waited >= Duration::from_millis(1500),
        "gave up after {waited:?}, before -w 1500ms"
    );
    assert!(
        waited < Duration::from_millis(1500) + Duration::from_secs(1),
        "gave up only after {waited:?} with -w 1500ms"
    );
    assert!(out.stderr.contains("busy"), "no busy message: {out}");

    let q = queue(&server);
    assert!(
        !q.contains(&token),
        "the waiter is still in the queue: {q:?}"
    );
    assert_no_waiters_left(&server);
    assert_eq!(server.get(LOCK).as_deref(), Some(holder.as_str()));
    if exec {
        assert!(!ran.exists(), "exec ran its command without the lock");
    }
}

#[test]
fn an_acquire_that_times_out_leaves_the_queue() {
    wait_timeout_leaves_the_queue(false);
}

#[test]
fn an_exec_that_times_out_leaves_the_queue() {
    wait_timeout_leaves_the_queue(true);
}

// ---------------------------------------------------------------------------------------------
// Many waiters
// ---------------------------------------------------------------------------------------------

/// A critical section for `sh -c CS sh DIR`: `mkdir` is atomic, so a second holder inside at the
/// same time fails it and records an overlap. Appends the fence to DIR/log.
const CRITICAL_SECTION: &str = r#"
mkdir "$1/inside" 2>/dev/null || { echo "overlap $RLOCK_FENCE" >> "$1/overlaps"; exit 3; }
echo "$RLOCK_FENCE" >> "$1/log"
sleep 0.4
rmdir "$1/inside"
"#;

#[test]
fn many_waiters_all_finish_one_at_a_time() {
    const WAITERS: usize = 8;
    let server = RedisServer::start();
    let dir = tempdir();
    let cs = dir.path().join("cs");
    fs::create_dir(&cs).unwrap();
    // Park them all behind a holder, so every handoff goes through the queue.
    let holder = hold(&server, "60s");
    let mut waiters: Vec<Bg> = (0..WAITERS)
        .map(|i| {
            Bg::spawn(
                &format!("waiter-{i}"),
                dir.path(),
                rlock_at(&server)
                    .args(["exec", "-k", KEY, "-w", "60s", "--"])
                    .args(["sh", "-c", CRITICAL_SECTION, "sh"])
                    .arg(&cs),
            )
        })
        .collect();
    wait_queued(&server, WAITERS, &mut waiters);
    release(&server, &holder);

    let deadline = Instant::now() + Duration::from_secs(40);
    for w in &mut waiters {
        let left = deadline.saturating_duration_since(Instant::now());
        let (out, _) = w.finish(left);
        assert_eq!(out.code, 0, "{} failed: {out}", w.name());
    }
    assert!(
        !cs.join("overlaps").exists(),
        "two holders overlapped: {}",
        fs::read_to_string(cs.join("overlaps")).unwrap_or_default()
    );
    let log = fs::read_to_string(cs.join("log")).expect("critical sections ran");
    let fences: Vec<i64> = log.lines().map(|l| l.parse().expect("a fence")).collect();
    assert_eq!(fences.len(), WAITERS, "critical sections run: {log}");
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences not strictly increasing in the order the critical sections ran: {fences:?}"
    );
    assert!(!server.exists(LOCK), "the lock is still held");
    assert_no_waiters_left(&server);
}

#[test]
fn waiters_get_the_lock_in_arrival_order() {
    const NAMES: [&str; 5] = ["A", "B", "C", "D", "E"];
    let server = RedisServer::start();
    let dir = tempdir();
    let log = dir.path().join("order");
    let holder = hold(&server, "60s");

    let mut waiters: Vec<Bg> = Vec::new();
    let mut tokens: Vec<String> = Vec::new();
    for name in NAMES {
        waiters.push(Bg::spawn(
            name,
            dir.path(),
            rlock_at(&server)
                .args(["exec", "-k", KEY, "-w", "60s", "--"])
                .args(["sh", "-c", "echo \"$2\" >> \"$1\"", "sh"])
                .arg(&log)
                .arg(name),
        ));
        // Only start the next one once this one is in line.
        let q = wait_queued(&server, waiters.len(), &mut waiters);
        assert_eq!(q[..tokens.len()], tokens[..], "the queue was reordered");
        tokens = q;
    }
    release(&server, &holder);

    let deadline = Instant::now() + Duration::from_secs(40);
    for w in &mut waiters {
        let left = deadline.saturating_duration_since(Instant::now());
        let (out, _) = w.finish(left);
        assert_eq!(out.code, 0, "{} failed: {out}", w.name());
    }
    let order = fs::read_to_string(&log).expect("the waiters ran");
    assert_eq!(
        order.lines().collect::<Vec<_>>(),
        NAMES,
        "waiters were not served in arrival order"
    );
    assert_no_waiters_left(&server);
}

// ---------------------------------------------------------------------------------------------
// No polling
// ---------------------------------------------------------------------------------------------

/// How many scripts (EVALSHA, EVAL) the server has run, from INFO commandstats.
fn scripts_run(conn: &mut redis::Connection) -> u64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(conn)
        .expect("INFO commandstats");
    stats
        .lines()
        .filter_map(|l| {
            let rest = l
                .strip_prefix("cmdstat_evalsha:")
                .or_else(|| l.strip_prefix("cmdstat_eval:"))?;
            rest.strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// `total_commands_processed` from INFO stats.
fn total_commands(conn: &mut redis::Connection) -> u64 {
    info(conn, "stats")
        .lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("total_commands_processed in INFO stats")
}

/// One section of INFO.
fn info(conn: &mut redis::Connection, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query(conn)
        .unwrap_or_else(|e| panic!("INFO {section}: {e}"))
}

/// How many scripts the server ran (EVALSHA and EVAL calls).
fn script_calls(conn: &mut redis::Connection) -> u64 {
    info(conn, "commandstats")
        .lines()
        .filter(|l| l.starts_with("cmdstat_evalsha:") || l.starts_with("cmdstat_eval:"))
        .filter_map(|l| {
            l.split_once("calls=")?
                .1
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

#[test]
fn an_idle_waiter_does_not_poll() {
    // Measured, not synchronised: the waiter is left alone for this long.
    const WINDOW: Duration = Duration::from_secs(4);
    let server = RedisServer::start();
    let dir = tempdir();
    hold(&server, "30s");
    let mut info = server.conn();
    let scripts_before = script_calls(&mut info);
    let mut waiter = [Bg::spawn(
        "waiter",
        dir.path(),
        rlock_at(&server).args(["acquire", "-k", KEY, "--ttl", "5s"]),
    )];
    wait_queued(&server, 1, &mut waiter);
    // The waiter's first try queues it; then it subscribes and tries once more (a release may
    // have come in between). Both belong to the start of the wait, not to idling.
    waiter[0].wait_for("the waiter's second try", Duration::from_secs(10), || {
        script_calls(&mut info) >= scripts_before + 2
    });

    // MONITOR shows each request a client sends, and marks the commands a script runs inside
    // Redis with "[0 lua]"; INFO's counter counts both.
    let mut monitor = TcpStream::connect(("127.0.0.1", server.port())).expect("connect");
    monitor.write_all(b"MONITOR\r\n").expect("send MONITOR");
    let mut lines = BufReader::new(monitor.try_clone().expect("clone socket"));
    let mut first = String::new();
    monitor
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    lines.read_line(&mut first).expect("MONITOR reply");
    assert_eq!(first.trim_end(), "+OK", "MONITOR refused");

    let before = total_commands(&mut info);
    let end = Instant::now() + WINDOW;
    let mut requests = Vec::new();
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        monitor.set_read_timeout(Some(left)).unwrap();
        let mut line = String::new();
        match lines.read_line(&mut line) {
            Ok(0) => panic!("the MONITOR connection closed"),
            Ok(_) => {
                let ours = line.to_ascii_lowercase().contains("\"info\"");
                if !line.contains(" lua]") && !ours {
                    requests.push(line.trim_end().to_string());
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break;
            }
            Err(e) => panic!("reading MONITOR: {e}"),
        }
    }
    // The first INFO is counted after it answers, so it is in the difference.
    let total = total_commands(&mut info) - before - 1;
    assert!(waiter[0].running(), "the waiter stopped waiting");

    assert!(
        requests.is_empty() && total == 0,
        "an idle waiter behind a 30 s lease sent {} requests ({total} commands with those its \
         scripts ran) in {WINDOW:?}; it must send none while the lease is alive:\n{}",
        requests.len(),
        requests.join("\n")
    );
    eprintln!(
        "idle waiter: {} requests, {total} commands (with script internals) in {WINDOW:?}",
        requests.len()
    );
}

// ---------------------------------------------------------------------------------------------
// Handoff: one wake-up, and a dead waiter's turn lasts one claim window
// ---------------------------------------------------------------------------------------------

/// A waiter killed with SIGKILL while in line keeps its turn for at most the claim window
/// (1 s), once: the waiter behind it is told when the window ends and takes the lock then.
#[test]
fn a_dead_waiter_costs_the_line_one_claim_window() {
    let server = RedisServer::start();
    let dir = tempdir();
    let holder = hold(&server, "60s");
    let mut line = vec![Bg::spawn(
        "doomed",
        dir.path(),
        rlock_at(&server).args(["acquire", "-k", KEY, "--ttl", "5s"]),
    )];
    wait_queued(&server, 1, &mut line);
    line.push(Bg::spawn(
        "next",
        dir.path(),
        rlock_at(&server).args(["acquire", "-k", KEY, "--ttl", "5s"]),
    ));
    let tokens = wait_queued(&server, 2, &mut line);
    line[0].kill(Signal::SIGKILL);
    line[0].finish(Duration::from_secs(5));
    release(&server, &holder);
    let released = Instant::now();
    let (out, got) = line[1].finish(Duration::from_secs(10));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(server.get(LOCK).as_deref(), Some(tokens[1].as_str()));
    let took = got - released;
    assert!(
        took >= CLAIM - Duration::from_millis(100) && took < CLAIM + Duration::from_millis(900),
        "the waiter behind a dead one got the lock {took:?} after the release: the dead one's \
         turn lasts the claim window ({CLAIM:?}), once"
    );
    assert!(
        !queue(&server).contains(&tokens[0]),
        "the dead waiter is still in line"
    );
}

/// A release wakes the first waiter in line and no other: with a long line, one waiter asks
/// Redis for the lock, whatever the line's length.
#[test]
fn a_handoff_wakes_one_waiter_however_long_the_line() {
    const WAITERS: usize = 6;
    let server = RedisServer::start();
    let dir = tempdir();
    let holder = hold(&server, "60s");
    let mut waiters: Vec<Bg> = Vec::new();
    for i in 0..WAITERS {
        waiters.push(Bg::spawn(
            &format!("w{i}"),
            dir.path(),
            rlock_at(&server).args(["acquire", "-k", KEY, "--ttl", "60s"]),
        ));
        wait_queued(&server, i + 1, &mut waiters);
    }
    // Each waiter listens on a channel of its own, so that a release reaches one process
    // whatever the length of the line (with one shared channel it reached every waiter).
    let mut channels: Vec<String> = redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg("{rlock:k}:wake*")
        .query(&mut server.conn())
        .expect("PUBSUB CHANNELS");
    channels.sort();
    assert_eq!(
        channels.len(),
        WAITERS,
        "one wake channel per waiter: {channels:?}"
    );
    for channel in &channels {
        let numsub: (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(channel)
            .query(&mut server.conn())
            .expect("PUBSUB NUMSUB");
        assert_eq!(numsub.1, 1, "{channel} has {} listeners", numsub.1);
    }
    let mut info = server.conn();
    // The release's script in the cache, so that it is one EVALSHA (not EVALSHA, NOSCRIPT, EVAL).
    server.cmd(&["SCRIPT", "LOAD", rlock::lock::RELEASE.source]);
    // Each waiter tries once more after it subscribes: let those tries land first.
    let mut before = scripts_run(&mut info);
    let mut quiet_since = Instant::now();
    wait_until("the waiters to settle", Duration::from_secs(10), || {
        let now = scripts_run(&mut info);
        if now != before {
            before = now;
            quiet_since = Instant::now();
        }
        quiet_since.elapsed() > Duration::from_millis(300)
    });
    release(&server, &holder);
    let (out, _) = waiters[0].finish(Duration::from_secs(5));
    assert_eq!(out.code, 0, "{out}");
    // Well inside the claim window: nobody else has a reason to ask.
    let settled = Instant::now() + Duration::from_millis(300);
    wait_until("a moment after the handoff", Duration::from_secs(2), || {
        Instant::now() >= settled
    });
    // The release, and the first waiter's claim: nobody else asked.
    assert_eq!(
        scripts_run(&mut info) - before,
        2,
        "a handoff to the first of {WAITERS} waiters ran more scripts than the release and one claim"
    );
    for w in &mut waiters[1..] {
        assert!(w.running(), "{} stopped waiting", w.name());
    }
}

// ---------------------------------------------------------------------------------------------
// Waiting is free on the host too: an idle waiter makes no wake-ups
// ---------------------------------------------------------------------------------------------

/// Contract, "Guarantee 7, sharpened again": an idle waiter's threads together make at most one
/// voluntary context switch per second while the holder's lease is alive (no read timeouts used
/// as a clock), for every kind of wait.
mod idle_wakeups {
    use super::*;

    /// Voluntary context switches of every thread of `pid`, summed.
    fn switches(pid: i32) -> u64 {
        let tasks = fs::read_dir(format!("/proc/{pid}/task")).expect("the waiter's threads");
        tasks
            .flatten()
            .filter_map(|t| fs::read_to_string(t.path().join("status")).ok())
            .flat_map(|s| {
                s.lines()
                    .filter_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                    .map(|v| v.trim().parse::<u64>().unwrap_or(0))
                    .collect::<Vec<_>>()
            })
            .sum()
    }

    /// Every server has the waiter's subscription.
    fn subscribed(servers: &[&RedisServer]) -> bool {
        servers.iter().all(|s| {
            matches!(s.try_cmd(&["PUBSUB", "CHANNELS", "*"]), Ok(redis::Value::Array(c)) if !c.is_empty())
        })
    }

    /// Starts the waiter `cmd` behind locks already held on `servers`, lets it settle, and
    /// returns its wake-ups per second over 5 s.
    fn wakeups_per_second(servers: &[&RedisServer], cmd: &mut std::process::Command) -> f64 {
        const WINDOW: Duration = Duration::from_secs(5);
        let dir = tempdir();
        let mut waiter = Bg::spawn("waiter", dir.path(), cmd);
        waiter.wait_for("the waiter to subscribe", Duration::from_secs(10), || {
            subscribed(servers)
        });
        // Its try after subscribing belongs to the start of the wait, not to idling.
        std::thread::sleep(Duration::from_millis(300));
        let before = switches(waiter.pid());
        let start = Instant::now();
        std::thread::sleep(WINDOW);
        let after = switches(waiter.pid());
        assert!(
            waiter.running(),
            "the waiter stopped waiting: {}",
            waiter.describe()
        );
        let rate = (after - before) as f64 / start.elapsed().as_secs_f64();
        eprintln!(
            "idle waiter: {} voluntary context switches in {WINDOW:?}",
            after - before
        );
        rate
    }

    fn assert_free(rate: f64, what: &str) {
        assert!(
            rate <= 1.0,
            "an idle {what} waiter woke up {rate:.1} times a second; at most 1 is allowed"
        );
    }

    #[test]
    fn a_lock_waiter() {
        let server = RedisServer::start();
        hold(&server, "60s");
        let rate = wakeups_per_second(
            &[&server],
            rlock_at(&server).args(["exec", "-k", KEY, "--", "true"]),
        );
        assert_free(rate, "lock");
    }

    #[test]
    fn a_semaphore_waiter() {
        let server = RedisServer::start();
        for _ in 0..2 {
            let out =
                run(rlock_at(&server).args(["acquire", "--limit", "2", "-k", KEY, "--ttl", "60s"]));
            assert_eq!(out.code, 0, "{out}");
        }
        let rate = wakeups_per_second(
            &[&server],
            rlock_at(&server).args(["exec", "--limit", "2", "-k", KEY, "--", "true"]),
        );
        assert_free(rate, "semaphore");
    }

    #[test]
    fn a_shared_waiter() {
        let server = RedisServer::start();
        hold(&server, "60s");
        let rate = wakeups_per_second(
            &[&server],
            rlock_at(&server).args(["exec", "--shared", "-k", KEY, "--", "true"]),
        );
        assert_free(rate, "shared");
    }

    #[test]
    fn a_redlock_waiter_on_three_masters() {
        let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
        let with_all = || {
            let mut cmd = common::rlock();
            for s in &servers {
                cmd.args(["-u", &s.url()]);
            }
            cmd
        };
        let out = run(with_all().args(["acquire", "-k", KEY, "--ttl", "60s"]));
        assert_eq!(out.code, 0, "{out}");
        let refs: Vec<&RedisServer> = servers.iter().collect();
        let rate = wakeups_per_second(&refs, with_all().args(["exec", "-k", KEY, "--", "true"]));
        assert_free(rate, "3-master Redlock");
    }

    /// Sleeping in `poll` costs nothing in promptness: a signal, a release and the `-w` deadline
    /// each end an idle wait within a few milliseconds (bounds kept generous for a loaded
    /// machine; the benchmark measures them precisely).
    #[test]
    fn an_idle_waiter_still_ends_at_once() {
        const PROMPT: Duration = Duration::from_millis(300);
        let server = RedisServer::start();
        let dir = tempdir();
        let holder = hold(&server, "60s");
        let settle = |w: &mut Bg| {
            w.wait_for("the waiter to subscribe", Duration::from_secs(10), || {
                subscribed(&[&server])
            });
        };

        // SIGTERM.
        let mut w = Bg::spawn(
            "term",
            dir.path(),
            rlock_at(&server).args(["exec", "-k", KEY, "--", "true"]),
        );
        settle(&mut w);
        w.kill(Signal::SIGTERM);
        let sent = Instant::now();
        let (out, at) = w.finish(Duration::from_secs(10));
        assert_eq!(out.code, 128 + Signal::SIGTERM as i32, "{out}");
        assert!(
            at - sent < PROMPT,
            "SIGTERM ended the wait after {:?}",
            at - sent
        );

        // A release wakes it: its command starts at once.
        let started = dir.path().join("started");
        let mut w = Bg::spawn(
            "woken",
            dir.path(),
            rlock_at(&server)
                .args(["exec", "-k", KEY, "--", "sh", "-c", "date +%s%N > \"$0\""])
                .arg(&started),
        );
        settle(&mut w);
        let released = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_nanos();
        release(&server, &holder);
        let (out, _) = w.finish(Duration::from_secs(10));
        assert_eq!(out.code, 0, "{out}");
        let began: u128 = fs::read_to_string(&started)
            .expect("the command's stamp")
            .trim()
            .parse()
            .expect("a stamp");
        let handoff = Duration::from_nanos((began.saturating_sub(released)) as u64);
        assert!(
            handoff < PROMPT,
            "the command started {handoff:?} after the release"
        );

        // The -w deadline.
        hold(&server, "60s");
        let begun = Instant::now();
        let mut w = Bg::spawn(
            "deadline",
            dir.path(),
            rlock_at(&server).args(["exec", "-k", KEY, "-w", "1s", "--", "true"]),
        );
        let (out, at) = w.finish(Duration::from_secs(10));
        assert_eq!(out.code, 75, "{out}");
        let waited = at - begun;
        assert!(
            waited >= Duration::from_secs(1) && waited < Duration::from_secs(1) + PROMPT,
            "-w 1s ended the wait after {waited:?}"
        );
    }
}
