//! Waiting is free on the host too: an idle waiter's threads together make at most one
//! voluntary context switch per second while the holder's lease is alive (no read timeouts used
//! as a clock), for every kind of wait.

use super::*;
use crate::common::procfs::voluntary_switches as switches;

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

/// With -v, a waiter tells how its wait goes from what it already knows: no more wake-ups.
#[test]
fn a_verbose_lock_waiter() {
    let server = RedisServer::start();
    hold(&server, "60s");
    let rate = wakeups_per_second(
        &[&server],
        rlock_at(&server).args(["-v", "exec", "-k", KEY, "--", "true"]),
    );
    assert_free(rate, "verbose lock");
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
        let mut cmd = crate::common::rlock();
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
