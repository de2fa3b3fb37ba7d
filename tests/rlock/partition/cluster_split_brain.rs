//! Cluster split brain (scenario 2): three masters with a replica each, every link (client and
//! bus) through a proxy, `cluster-node-timeout` `PROXIED_NODE_TIMEOUT` (3 s). Holder A runs on the master M of its key's
//! slot; then {M, A} is cut off from the other five nodes, the majority promotes M's replica,
//! and B asks the majority for the lock. Redis Cluster's own guard helps: a master cut off from
//! the majority for the node timeout refuses writes (CLUSTERDOWN).

use super::*;
use crate::common::{PROXIED_NODE_TIMEOUT, RedisCluster};

fn split(replicas: bool) -> (crate::common::Output, crate::common::Output, f64) {
    let cluster = RedisCluster::start_behind_proxies();
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let master = cluster.owner("rlock:cs");
    let replica = cluster.replica_of(master);
    let through = |urls: Vec<String>| {
        let mut cmd = rlock();
        cmd.arg("--cluster");
        for url in urls {
            cmd.args(["-u", &url]);
        }
        cmd
    };
    let mut a = through(cluster.urls());
    if replicas {
        a.args(["--replicas", "1"]);
    }
    // Meant to outlast what a cut-off master can keep A's lock for (about its node timeout
    // and a lease), so that A's end says who stopped it.
    a.args(holder_args("cs")).args(beating("a", 20));
    let mut a = Bg::spawn_group("a", d, &mut a);
    a.wait_for("A's first heartbeat", Duration::from_secs(10), || {
        !stamps(d, "a.beats").is_empty()
    });
    wait_until(
        "the lock to reach the replica",
        Duration::from_secs(20),
        || {
            let mut conn = cluster.node(replica).conn();
            redis::cmd("READONLY").query::<()>(&mut conn).is_ok()
                && redis::cmd("GET")
                    .arg("rlock:cs")
                    .query::<Option<String>>(&mut conn)
                    .ok()
                    .flatten()
                    .is_some()
        },
    );
    cluster.partition(master, &[a.pid()]);
    let slot = cluster.slot("rlock:cs");
    let promoted_by = Instant::now() + cluster.failover_bound();
    while cluster.owner_of_slot_by(replica, slot) != replica {
        assert!(
            Instant::now() < promoted_by,
            "the majority did not promote the replica within {:?}\n{}",
            cluster.failover_bound(),
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let majority: Vec<String> = cluster
        .urls()
        .into_iter()
        .enumerate()
        .filter(|&(i, _)| i != master)
        .map(|(_, u)| u)
        .collect();
    let mut b = through(majority);
    b.args(["exec", "-k", "cs", "-w", "30s", "--"])
        .args(starting("b"));
    let mut b = Bg::spawn_group("b", d, &mut b);
    let (b, _) = b.finish(Duration::from_secs(40));
    let (a, _) = a.finish(Duration::from_secs(40));
    cluster.heal();
    let overlap = overlap_ms(d, "a", "b");
    eprintln!(
        "cluster split brain, --replicas {}: A exit {}, B exit {}, A's last heartbeat {overlap:.0} ms after B's start",
        u8::from(replicas),
        a.code,
        b.code
    );
    (a, b, overlap)
}

#[test]
fn with_replicas_the_cut_off_holder_never_overlaps_the_next() {
    if !crate::common::proxied_cluster_or_skip() {
        return;
    }
    let (a, b, overlap) = split(true);
    assert_eq!(b.code, 0, "B: {b}");
    assert_eq!(a.code, 76, "A: {a}");
    assert!(
        overlap < 0.0,
        "A beat {overlap:.0} ms after B started; A: {a}"
    );
}

/// Without `--replicas`, what docs/safety.md states: the cut-off master takes A's renewals
/// until it has missed the majority for the node timeout, then answers CLUSTERDOWN and A is
/// stopped by its deadline (76); the renewals of that first second never reached the replica,
/// so B can get in on the new master before A stops: a window of about the node timeout plus
/// a second.
#[test]
fn without_replicas_the_cut_off_master_stops_at_the_node_timeout_with_a_window() {
    if !crate::common::proxied_cluster_or_skip() {
        return;
    }
    let (a, b, overlap) = split(false);
    assert_eq!(b.code, 0, "B: {b}");
    // Its last failed renewal says "The cluster is down" or, once it asks the other
    // nodes (cut off from it too), "timed out".
    assert_eq!(a.code, 76, "A: {a}");
    // M takes renewals until the other masters have not answered a ping for the node timeout:
    // the ping that finds them gone goes out up to half a node timeout into the cut, so up to
    // one and a half node timeouts, and as much again for a server cron that runs late on a
    // loaded machine. R's copy counts from the last renewal before the cut, at most one
    // renewal earlier, and A is stopped `GRACE` before its own lease ends.
    let window = 3 * PROXIED_NODE_TIMEOUT + RENEW_EVERY - GRACE + STOPPED_WITHIN;
    assert!(
        overlap < window.as_millis() as f64,
        "the window must be bounded by the node timeout ({PROXIED_NODE_TIMEOUT:?}) and one renewal ({window:?}): A's last beat {overlap:.0} ms after B's start"
    );
}
