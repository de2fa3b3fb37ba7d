//! Handoff: one wake-up, and a waiter that cannot claim its turn keeps it one claim window.

use super::*;

// Handoff: one wake-up, and a waiter that cannot claim its turn keeps it one claim window
// ---------------------------------------------------------------------------------------------

/// A waiter that is handed the lock and does not claim it (stopped, or killed after its wake-up
/// was sent) keeps its turn for at most the claim window (1 s), once: the waiter behind it is
/// told when the window ends and takes the lock then. (One killed before its turn costs nothing:
/// see at_scale.rs.)
#[test]
fn a_waiter_that_does_not_claim_its_turn_costs_the_line_one_claim_window() {
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
    // Stopped, its wake channel still open: the handoff reaches it, and nobody claims.
    line[0].kill(Signal::SIGSTOP);
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
        "the stopped waiter is still in line"
    );
    line[0].kill(Signal::SIGKILL);
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
    // whatever the length of the line (with one shared channel it reached every waiter). A
    // waiter subscribes before it takes its place in line: wait for the last one.
    let channels = || {
        let mut channels: Vec<String> = redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .arg("{rlock:k}:wake*")
            .query(&mut server.conn())
            .expect("PUBSUB CHANNELS");
        channels.sort();
        channels
    };
    wait_until("every waiter to listen", Duration::from_secs(10), || {
        channels().len() >= WAITERS
    });
    let channels = channels();
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
    // (The hold goes unrecorded: a recorded one is a script of its own, after the release.)
    let out = run(rlock_at(&server).args([
        "release",
        "-k",
        KEY,
        "--token",
        &holder,
        "--history-limit",
        "0",
    ]));
    assert_eq!(out.code, 0, "{out}");
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
