//! exec stops the child before the lease can lapse: renewal keeps the lock, and a lock deleted or
//! taken over, Redis frozen, restarted empty or its scripts flushed stop the command (76).

use super::*;

// ---------------------------------------------------------------------------------------------
// 3. Renewal
// ---------------------------------------------------------------------------------------------

#[test]
fn watchdog_keeps_a_1s_lock_alive_across_a_3s_child() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let started = Instant::now();
    let script = r#"echo $$ > "$D/pid"; echo "$RLOCK_TOKEN" > "$D/token.tmp"; mv "$D/token.tmp" "$D/token"
sleep 3; : > "$D/ending""#;
    let mut rl = start_exec(&server, d, &["--ttl", "1s"], script);
    let token = rl.file(d.join("token"), SOON).trim().to_string();
    let mut watch = LockWatch::new(&server, LOCK, &token, Duration::from_secs(1));
    let ending = d.join("ending");
    while watch.sample(|| !ending.exists()) {
        assert!(started.elapsed() < FINISH, "the 3 s child never finished");
        thread::sleep(Duration::from_millis(20));
    }
    let (out, _) = rl.wait(FINISH);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "the child cannot have slept 3 s"
    );
    // Renewing every 333 ms for 3 s: about 9 renewals; a lock that was not renewed would
    // have failed a sample (gone or a different token) after 1 s.
    assert!(
        watch.renewals >= 4,
        "only {} renewals seen in {} samples",
        watch.renewals,
        watch.samples
    );
    assert!(!server.exists(LOCK), "lock not released");
}

// ---------------------------------------------------------------------------------------------
// 4. Lock deleted or taken over behind rlock's back
// ---------------------------------------------------------------------------------------------

#[test]
fn lock_deleted_behind_rlocks_back_stops_the_child_and_exits_76() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let mut rl = start_exec(&server, d, OFTEN, RUN_30S);
    let token = rl.ready(d);
    let child = wait_for_pid(d.join("pid"));
    assert_eq!(server.get(LOCK), Some(token));

    let deleted = Instant::now();
    server.cmd(&["DEL", LOCK]);
    let (out, exited) = rl.wait(FINISH);
    let took = exited - deleted;
    assert_eq!(out.code, 76, "{out}");
    assert!(
        out.stderr.contains("lost lock 'k'") && out.stderr.trim_end().lines().count() == 1,
        "want one line saying the lock was lost\n{out}"
    );
    assert!(
        took <= LOSS_NOTICED,
        "rlock took {took:?} after the DEL to stop the child and exit"
    );
    assert!(!pid_alive(child), "the child still runs");
    assert!(!server.exists(LOCK), "a lost lock was taken again");
}

/// A lock broken by an operator is told as such, not as one that expired or was deleted.
#[test]
fn lock_broken_by_release_force_says_it_was_broken() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let mut rl = start_exec(&server, d, OFTEN, RUN_30S);
    rl.ready(d);
    let out = run(rlock_at(&server).args(["release", "-k", "k", "--force"]));
    assert_eq!(out.code, 0, "{out}");
    let (out, _) = rl.wait(FINISH);
    assert_eq!(out.code, 76, "{out}");
    assert!(
        out.stderr
            .contains("it was broken by 'rlock release --force'"),
        "the holder is told who broke its lock\n{out}"
    );
}

#[test]
fn lock_taken_over_by_another_owner_stops_the_child_and_leaves_the_new_owner_alone() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let mut rl = start_exec(&server, d, OFTEN, RUN_30S);
    rl.ready(d);
    let child = wait_for_pid(d.join("pid"));

    let taken = Instant::now();
    server.cmd(&["SET", LOCK, "other", "PX", "60000"]);
    let (out, exited) = rl.wait(FINISH);
    let took = exited - taken;
    assert_eq!(out.code, 76, "{out}");
    assert!(out.stderr.contains("lost lock 'k'"), "{out}");
    assert!(
        took <= LOSS_NOTICED,
        "rlock took {took:?} after the takeover to stop the child and exit"
    );
    assert!(!pid_alive(child), "the child still runs");
    assert_eq!(
        server.get(LOCK).as_deref(),
        Some("other"),
        "the new owner's lock was changed"
    );
    let pttl = server.pttl(LOCK);
    assert!(
        pttl > 60_000 - FINISH.as_millis() as i64 && pttl <= 60_000,
        "the new owner's TTL was changed: PTTL {pttl}"
    );
}

// ---------------------------------------------------------------------------------------------
// 5. Redis frozen: the child is stopped before the lease can run out
// ---------------------------------------------------------------------------------------------

#[test]
fn frozen_redis_child_is_stopped_before_the_ttl_runs_out() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    // The child records when TERM reached it (CLOCK_REALTIME), then exits.
    let script = r#"trap 'date +%s%N > "$D/died.tmp"; mv "$D/died.tmp" "$D/died"; exit 0' TERM
echo $$ > "$D/pid"; echo "$RLOCK_TOKEN" > "$D/token"; : > "$D/ready"
while :; do sleep 0.05; done"#;
    let mut rl = start_exec(&server, d, &["--ttl", "2s"], script);
    let token = rl.ready(d);
    // Let a renewal or two happen first, so the lease runs on renewals, not on the grant.
    LockWatch::new(&server, LOCK, &token, Duration::from_secs(2))
        .wait_renewals(2, Duration::from_secs(5));

    let child = wait_for_pid(d.join("pid"));
    let frozen_at = now_ns();
    server.freeze();
    wait_until("the child to be stopped", SOON, || !pid_alive(child));
    let died = read(d.join("died"));
    assert!(
        !died.is_empty(),
        "the child died without getting TERM first (its trap never ran)"
    );
    let died_at: i128 = died.trim().parse().expect("a date +%s%N timestamp");
    server.thaw();
    let (out, _) = rl.wait(FINISH);

    let after = ms(died_at - frozen_at);
    // TTL 2 s, renew every 667 ms, grace 500 ms, drift 22 ms: the last successful renewal was
    // sent at most 667 ms (plus a round trip) before the freeze, and TERM is due 1478 ms after
    // it, so between about 810 and 1478 ms after the freeze (near the top here: the freeze
    // follows a renewal). It must come before the key can expire (2 s after the freeze at the
    // latest), by the deadline minus the grace (plus scheduling slack), and not absurdly early.
    assert!(
        after < 2000,
        "child stopped {after} ms after Redis froze: the 2 s lock could have expired"
    );
    assert!(
        after <= 2000 - 22 - 500 + 350,
        "child got TERM {after} ms after Redis froze: later than the deadline minus --grace"
    );
    assert!(
        after >= 2000 - 667 - 500 - 170,
        "child stopped only {after} ms after Redis froze: too early for a 2 s lease"
    );
    assert_eq!(out.code, 76, "{out}");
    assert!(out.stderr.contains("lost lock 'k'"), "{out}");
}

// ---------------------------------------------------------------------------------------------
// 6. Redis restarted empty
// ---------------------------------------------------------------------------------------------

#[test]
fn redis_restarted_empty_during_exec_exits_76() {
    let mut server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let mut rl = start_exec(&server, d, &["--ttl", "6s"], RUN_30S);
    rl.ready(d);
    let child = wait_for_pid(d.join("pid"));

    let killed = Instant::now();
    server.kill9();
    server.restart();
    let (out, exited) = rl.wait(FINISH);
    assert_eq!(out.code, 76, "{out}");
    assert!(out.stderr.contains("lost lock 'k'"), "{out}");
    assert!(!pid_alive(child), "the child still runs");
    // Whichever way the loss was seen (Redis says free, or no renewal before the deadline),
    // the child must be stopped before the 6 s lease could have run out.
    assert!(
        exited - killed < Duration::from_secs(6) + Duration::from_millis(1500),
        "rlock exited {:?} after Redis was killed",
        exited - killed
    );
    assert!(!server.exists(LOCK), "a lost lock was taken again");
}

// ---------------------------------------------------------------------------------------------
// 7. SCRIPT FLUSH
// ---------------------------------------------------------------------------------------------

#[test]
fn script_flush_mid_run_is_survived() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let script = r#"echo $$ > "$D/pid"; echo "$RLOCK_TOKEN" > "$D/token"; : > "$D/ready"
while [ ! -e "$D/stop" ]; do sleep 0.02; done"#;
    let mut rl = start_exec(&server, d, &["--ttl", "1s"], script);
    let token = rl.ready(d);
    let mut watch = LockWatch::new(&server, LOCK, &token, Duration::from_secs(1));
    for _ in 0..4 {
        server.cmd(&["SCRIPT", "FLUSH"]);
        // The next renewal must reload the script (EVALSHA → NOSCRIPT → EVAL).
        watch.wait_renewals(1, Duration::from_secs(3));
    }
    touch(d.join("stop"));
    let (out, _) = rl.wait(FINISH);
    assert_eq!(out.code, 0, "{out}");
    assert!(!server.exists(LOCK), "lock not released");
}
