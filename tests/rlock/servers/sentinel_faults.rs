//! Sentinels that go silent: one frozen Sentinel of three costs no more than a refusing one (a
//! lock on a healthy master is never lost for it), and with every Sentinel frozen a request,
//! the final release included, still ends within --op-timeout.

use super::*;

#[test]
fn a_frozen_first_sentinel_never_loses_a_lock_on_a_healthy_master() {
    let set = Sentinels::start("locks");
    set.freeze_sentinel(0);
    let started = Instant::now();
    let out = run(set
        .rlock()
        .args(["exec", "-k", KEY, "--ttl", "5s", "--", "sleep", "10"]));
    let took = started.elapsed();
    set.thaw_sentinel(0);
    assert_eq!(
        out.code, 0,
        "one silent Sentinel of three lost the lock on a healthy master: {out}"
    );
    assert!(
        took < Duration::from_secs(10 + 5),
        "exec took {took:?} for a 10 s command"
    );
    assert_eq!(set.server(0).get(LOCK), None, "released at the end");
}

#[test]
fn with_every_sentinel_frozen_the_final_release_takes_at_most_op_timeout() {
    let set = Sentinels::start("locks");
    let dir = tempdir();
    let d = dir.path();
    let mut rl = Bg::spawn_group(
        "exec",
        d,
        set.rlock()
            .args(["--op-timeout", "2s", "exec", "-k", KEY, "--ttl", "60s"])
            .args(["--", "sh", "-c"])
            .arg(HOLD_UNTIL_STOP),
    );
    let token = rl.ready();
    for i in 0..3 {
        set.freeze_sentinel(i);
    }
    let stopped = Instant::now();
    touch(d.join("stop"));
    let (out, done) = rl.finish(FINISH);
    for i in 0..3 {
        set.thaw_sentinel(i);
    }
    let took = done - stopped;
    eprintln!("final release with every Sentinel frozen: {took:?}");
    // The command notices the stop file within 50 ms; the release may take --op-timeout (2 s).
    assert!(
        took < Duration::from_millis(2000 + 700),
        "the command ended and rlock exited {took:?} later: the final release took longer \
         than --op-timeout: {out}"
    );
    assert_eq!(out.code, 0, "the command's status: {out}");
    assert!(
        out.stderr.contains("expire by itself"),
        "the release that could not reach the master is told: {out}"
    );
    assert_eq!(set.server(0).get(LOCK).as_deref(), Some(token.as_str()));
}
