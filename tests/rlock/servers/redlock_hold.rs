//! `--hold-at-least` over Redlock: the masters that took the grant keep the key until DUR after
//! it, by their own clocks, so the next process cannot gather a majority sooner, also across one
//! empty restart when the grant reached every master. What it does not survive (docs/safety.md):
//! after the release nothing repairs a master, so when the grant missed one, an empty restart of
//! another that took it leaves the hold on a minority once that master has run longer than what
//! is left of the hold.

use super::*;

/// The lease and the hold of the first holder: a hold far longer than the lease, so that what
/// keeps the next process out is the hold alone.
const HELD: &[&str] = &["--ttl", "2s", "--hold-at-least", "20s"];

/// `exec -n` of a command that ends at once, as the next process on the schedule would run it.
fn next_run(nodes: &[RedisServer]) -> Output {
    run(redlock(nodes).args(["exec", "-n", "-k", KEY, "--ttl", "2s", "--", "true"]))
}

/// The first holder's run: granted, its command ends at once, released with the hold left on
/// the masters that took the grant.
fn held_run(nodes: &[RedisServer]) {
    let out = run(redlock(nodes)
        .args(["exec", "-n", "-k", KEY])
        .args(HELD)
        .args(["--", "true"]));
    assert_eq!(out.code, 0, "{out}");
}

/// The grant reached all three masters: after the release each keeps the key past the lease;
/// the next run is busy (75), also once one master restarted empty and has run longer than the
/// lease (so that it votes); `release --force` frees the lock on every master.
#[test]
fn a_redlock_hold_outlives_the_release_and_one_empty_restart() {
    let mut nodes = start_nodes(3);
    held_run(&nodes);
    for n in &nodes {
        let left = n.pttl(LOCK);
        assert!(
            left > 2_000 && left <= 20_000,
            "each master keeps the key for the hold, not the lease: {left} ms"
        );
    }
    let out = next_run(&nodes);
    assert_eq!(out.code, 75, "held: {out}");

    nodes[1].restart();
    ran_for(&nodes[1..2], 2);
    let out = next_run(&nodes);
    assert_eq!(out.code, 75, "two of three still hold it: {out}");

    let out = run(redlock(&nodes).args(["release", "--force", "-k", KEY]));
    assert_eq!(out.code, 0, "{out}");
    assert!(
        nodes.iter().all(|n| !n.exists(LOCK)),
        "forced free everywhere"
    );
    let out = next_run(&nodes);
    assert_eq!(out.code, 0, "free again: {out}");
}

/// Outside what Redlock's hold survives: the grant missed a master that was down, so the hold is
/// on a bare majority; one of those restarts empty. While it has run for less than what is left
/// of the hold on the other (the longest lease a master reports) it does not vote, even once it
/// has run longer than the next process's lease; once it has run longer than that, it votes: the
/// next run gets the lock before the 20 s hold ended. (The same two faults under a live holder
/// are survived: its renewals repair the masters; after the release nothing does.)
#[test]
fn outside_a_redlock_hold_on_a_bare_majority_does_not_survive_an_empty_restart() {
    let mut nodes = start_nodes(3);
    nodes[2].kill9();
    let granted = Instant::now();
    held_run(&nodes);
    nodes[2].restart();
    let out = next_run(&nodes);
    assert_eq!(out.code, 75, "the bare majority holds it: {out}");

    nodes[1].restart();
    ran_for(&nodes[1..], 2);
    let out = next_run(&nodes);
    assert_eq!(
        out.code, 75,
        "the restarted master has run longer than the next lease, not than the hold left: {out}"
    );
    // Uptime counts whole seconds, and may overstate by one.
    wait_until(
        "the restarted master to outlast the hold left",
        SOON,
        || uptime(&nodes[1]) * 1000 > nodes[0].pttl(LOCK).max(0) as u64 + 2_000,
    );
    let out = next_run(&nodes);
    let after = granted.elapsed();
    assert!(
        after < Duration::from_secs(19),
        "the test meant to ask within the hold; asked {after:?} after the grant"
    );
    assert_eq!(
        out.code, 0,
        "the documented limit: a hold on a bare majority, one of it restarted empty: {out}"
    );
}
