//! Whom the scale-out tests log in as. With `RLOCK_TEST_ACL` (`.ci/run` runs the Cluster,
//! Sentinel and Redlock modules again so), every server of a Cluster, of a Sentinel set and of a
//! Redlock has docs/connecting.md's user with that deployment's addition, and its default user
//! may not run rlock's scripts: the tests' rlock logs in as the documented user and locks, and
//! the same run as the default user is refused (77: Redlock's identity check is a plain INFO,
//! which the default user may run, and its grant a script, which it may not). Without it, both
//! are the default user and both lock.

use super::*;
use crate::common::acl::suite_acl;

/// What `as_default` (rlock against the servers as the default user) must end with: refused
/// under `RLOCK_TEST_ACL` (`refused`), a lock otherwise.
fn check(deployment: &str, as_suite: Output, as_default: Output, refused: i32) {
    assert_eq!(
        as_suite.code, 0,
        "{deployment}, as the tests log in: {as_suite}"
    );
    match suite_acl() {
        Some(which) => {
            assert_eq!(
                as_default.code, refused,
                "{deployment}: the default user locked where the tests run as the documented \
                 user ({which:?}): {as_default}"
            );
            assert!(
                as_default.stderr.contains("ACL") || as_default.stderr.contains("+info"),
                "{deployment}: refused for its rights: {as_default}"
            );
        }
        None => assert_eq!(as_default.code, 0, "{deployment}: {as_default}"),
    }
}

#[test]
fn the_scale_out_tests_lock_as_the_documented_user_and_the_default_one_cannot() {
    let cluster = RedisCluster::start();
    let as_suite = run(clustered(&cluster).args(["acquire", "-n", "-k", "suite"]));
    let mut as_default = rlock();
    as_default.arg("--cluster");
    for node in cluster.nodes() {
        as_default.arg("--url").arg(node.url());
    }
    let as_default = run(as_default.args(["acquire", "-n", "-k", "default"]));
    check("Cluster", as_suite, as_default, 77);

    let nodes = start_nodes(3);
    let as_suite = run(redlock(&nodes).args(["acquire", "-n", "-k", "suite"]));
    let mut as_default = rlock();
    for node in &nodes {
        as_default.arg("--url").arg(node.url());
    }
    let as_default = run(as_default.args(["acquire", "-n", "-k", "default"]));
    check("Redlock", as_suite, as_default, 77);

    let set = Sentinels::start("locks");
    let as_suite = run(set.rlock().args(["acquire", "-n", "-k", "suite"]));
    let mut as_default = rlock();
    as_default.arg("--sentinel").arg(set.name());
    for url in set.urls() {
        as_default.arg("--url").arg(url);
    }
    let as_default = run(as_default.args(["acquire", "-n", "-k", "default"]));
    check("Sentinel", as_suite, as_default, 77);
}
