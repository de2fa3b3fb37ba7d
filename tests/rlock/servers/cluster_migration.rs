//! Replies that ask for a retry are retried within --op-timeout: a release while the lock's slot
//! migrates (`CLUSTER SETSLOT … MIGRATING`/`IMPORTING`, then `MIGRATE` of the lock's keys) gets
//! TRYAGAIN (its keys split between two masters, or some of them missing) and ASK until the
//! migration ends, and succeeds then instead of giving up at the first TRYAGAIN.

use super::cluster::{begin_migration, end_migration, move_keys};
use super::*;

/// How many TRYAGAIN errors `node` has answered (INFO errorstats).
fn tryagains(node: &RedisServer) -> u64 {
    let info = match node.cmd(&["INFO", "errorstats"]) {
        redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        redis::Value::VerbatimString { text, .. } => text,
        other => panic!("INFO errorstats: {other:?}"),
    };
    info.lines()
        .find_map(|l| l.strip_prefix("errorstat_TRYAGAIN:count="))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn a_release_during_a_slot_migration_retries_until_the_migration_ends() {
    if !crate::common::tryagain_counted_or_skip() {
        return;
    }
    let cluster = RedisCluster::start();
    let name = key_on(&cluster, 0);
    let lock = format!("rlock:{name}");
    let state = format!("{{rlock:{name}}}:state");
    let slot = cluster.slot(&lock);
    let out = expect(
        0,
        clustered(&cluster).args(["acquire", "--json", "-k", &name, "--ttl", "60s"]),
    );
    let token = token_of(&out);
    let (a, b) = (cluster.node(0), cluster.node(1));
    assert_eq!(a.get(&lock).as_deref(), Some(token.as_str()));

    begin_migration(&cluster, slot, 0, 1);
    let dir = tempdir();
    let mut release = Bg::spawn_group(
        "release",
        dir.path(),
        clustered(&cluster).args([
            "--op-timeout",
            "20s",
            "release",
            "-k",
            &name,
            "--token",
            &token,
        ]),
    );
    // The release's keys are not all on the source (its line of waiters does not exist):
    // TRYAGAIN, and again, while the migration lasts.
    release.wait_for(
        "the release to be told TRYAGAIN by the source",
        SOON,
        || tryagains(a) >= 2,
    );
    move_keys(&cluster, 0, 1, &[&lock, &state]);
    // Now the source sends it on (ASK), and the target, which has some of the keys, answers
    // TRYAGAIN until the slot is its own.
    let before = tryagains(b);
    wait_until("the target to answer the release TRYAGAIN", SOON, || {
        tryagains(b) > before + 1 || !release.running()
    });
    end_migration(&cluster, slot, 1);
    let (out, _) = release.finish(FINISH);
    assert_eq!(
        out.code, 0,
        "a release during a migration must wait for it (within --op-timeout): {out}"
    );
    assert!(!here(b, &lock), "the release must reach the new master");
    assert!(!here(a, &lock));
}

#[test]
fn tryagain_that_outlasts_the_op_timeout_has_its_own_advice() {
    let cluster = RedisCluster::start();
    let name = key_on(&cluster, 0);
    let lock = format!("rlock:{name}");
    let slot = cluster.slot(&lock);
    let out = expect(
        0,
        clustered(&cluster).args(["acquire", "--json", "-k", &name, "--ttl", "60s"]),
    );
    let token = token_of(&out);
    begin_migration(&cluster, slot, 0, 1);
    let started = Instant::now();
    let out = run(clustered(&cluster).args([
        "--op-timeout",
        "1s",
        "release",
        "-k",
        &name,
        "--token",
        &token,
    ]));
    let took = started.elapsed();
    assert_eq!(out.code, 69, "{out}");
    assert!(
        out.stderr.contains("TRYAGAIN") && out.stderr.contains("migration"),
        "a slot in migration is not a wrong URL: {out}"
    );
    assert!(!out.stderr.contains("--url is right"), "{out}");
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_millis(1000 + 700),
        "retried for --op-timeout (1 s), no longer: {took:?}"
    );
    // The migration is called off: the slot stays where it was, and the release goes through.
    for i in [0, 1] {
        cluster
            .node(i)
            .cmd(&["CLUSTER", "SETSLOT", &slot.to_string(), "STABLE"]);
    }
    expect(
        0,
        clustered(&cluster).args(["release", "-k", &name, "--token", &token]),
    );
}
