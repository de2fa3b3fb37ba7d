//! A holder follows a Redis Cluster failover: when the master of the lock's slot dies, the holder
//! asks the other nodes for the slot map and renews on the replica they promote, which has the lock
//! if it was replicated; if it was not, the holder finds the lock gone there and stops its command
//! (76). Waiters are served afterwards. Real cluster: three masters, three replicas,
//! cluster-node-timeout 1000.

use crate::common::acl::suite_url;
use crate::common::{Background as Bg, RedisCluster, rlock, run, wait_until};
use std::path::Path;
use std::time::{Duration, Instant};

const KEY: &str = "fo";
const LOCK: &str = "rlock:fo";

fn clustered(cluster: &RedisCluster) -> std::process::Command {
    let mut cmd = rlock();
    cmd.arg("--cluster");
    for url in cluster.urls() {
        cmd.args(["-u", &url]);
    }
    cmd
}

/// `rlock exec` holding KEY for about `secs` seconds, its command writing `$D/ran` at the end.
fn holder(cluster: &RedisCluster, dir: &Path, secs: u32) -> Bg {
    let mut cmd = clustered(cluster);
    cmd.args(["exec", "-k", KEY, "--ttl", "10s", "--", "sh", "-c"])
        .arg(format!(
            r#"echo "$RLOCK_TOKEN" > "$D/token"; sleep {secs}; echo done > "$D/ran""#
        ));
    Bg::spawn_group("holder", dir, &mut cmd)
}

fn token(dir: &Path) -> Option<String> {
    let t = std::fs::read_to_string(dir.join("token")).ok()?;
    let t = t.trim().to_string();
    (!t.is_empty()).then_some(t)
}

/// GET on a replica (which redirects reads unless the connection is READONLY).
fn replica_get(node: &crate::common::RedisServer, key: &str) -> Option<String> {
    let mut conn = node.conn();
    redis::cmd("READONLY").query::<()>(&mut conn).ok()?;
    redis::cmd("GET").arg(key).query(&mut conn).ok()?
}

/// Waits until node `by` says another node than `dead` serves the lock's slot.
fn wait_promoted(cluster: &RedisCluster, slot: u16, dead: usize, by: usize) -> usize {
    wait_until(
        "the replica to be promoted",
        cluster.failover_bound(),
        || cluster.owner_of_slot_by(by, slot) != dead,
    );
    cluster.owner_of_slot_by(by, slot)
}

/// A cluster with replicas, and a holder of KEY whose command runs for `secs` seconds.
struct Setup {
    cluster: RedisCluster,
    dir: tempfile::TempDir,
    slot: u16,
    /// The master of the lock's slot, and its replica (indexes into the cluster's nodes).
    master: usize,
    replica: usize,
    rl: Bg,
}

fn holding(secs: u32) -> Setup {
    let cluster = RedisCluster::start_with_replicas();
    let dir = tempfile::tempdir().expect("temp dir");
    let slot = cluster.slot(LOCK);
    let master = cluster.owner(LOCK);
    let replica = cluster.replica_of(master);
    let mut rl = holder(&cluster, dir.path(), secs);
    rl.wait_for("the holder's command", Duration::from_secs(10), || {
        token(dir.path()).is_some()
    });
    Setup {
        cluster,
        dir,
        slot,
        master,
        replica,
        rl,
    }
}

/// A waiter gets the lock after the failover.
fn a_waiter_is_served(cluster: &RedisCluster) {
    let out = run(clustered(cluster).args(["exec", "-w", "30s", "-k", KEY, "--", "true"]));
    assert_eq!(out.code, 0, "a waiter after the failover: {out}");
}

#[test]
fn a_holder_keeps_a_replicated_lock_across_a_failover() {
    let Setup {
        mut cluster,
        dir,
        slot,
        master,
        replica,
        mut rl,
    } = holding(8);
    let d = dir.path();
    let token = token(d).expect("token");
    wait_until(
        "the lock to reach the replica",
        Duration::from_secs(5),
        || replica_get(cluster.node(replica), LOCK).as_deref() == Some(token.as_str()),
    );
    let killed = Instant::now();
    cluster.node_mut(master).kill9();
    let new_master = wait_promoted(&cluster, slot, master, replica);
    assert_eq!(
        new_master, replica,
        "the replica of the dead master took over"
    );
    let (out, _) = rl.finish(Duration::from_secs(30));
    assert_eq!(
        out.code, 0,
        "the holder must keep its lock across the failover: {out}"
    );
    assert!(d.join("ran").exists(), "the command did not run to its end");
    assert!(
        killed.elapsed() > Duration::from_secs(5),
        "the command ended too early to have needed the new master"
    );
    assert_eq!(
        cluster.node(replica).get(LOCK),
        None,
        "the lock was released on the new master"
    );
    a_waiter_is_served(&cluster);
}

/// A failover that lost the lock (the grant never reached the replica: Redis replicates
/// asynchronously). A frozen replica still receives the replication stream into its socket, so
/// the loss is made by deleting the lock on the promoted replica, before or after the holder's
/// first renewal there: either way the holder must find the lock gone on the new master.
#[test]
fn a_lock_the_failover_lost_stops_the_holder_and_frees_the_key() {
    let Setup {
        mut cluster,
        dir,
        slot,
        master,
        replica,
        mut rl,
    } = holding(20);
    let d = dir.path();
    cluster.node_mut(master).kill9();
    wait_promoted(&cluster, slot, master, replica);
    cluster.node(replica).cmd(&["DEL", LOCK]);
    let (out, _) = rl.finish(Duration::from_secs(30));
    assert_eq!(out.code, 76, "the new master does not have the lock: {out}");
    assert!(
        out.stderr.contains("no longer owns"),
        "the holder must learn it from the new master, not from its deadline: {out}"
    );
    assert!(
        !d.join("ran").exists(),
        "the command ran to its end unprotected"
    );
    a_waiter_is_served(&cluster);
}

/// The holder follows the failover of whichever master dies, the first one named with `-u`
/// included (scenario 3 of the partition work): every node is named, the dying master first and
/// the others in port order, and the lock's slot is served by that first node. Before the fix
/// the holder kept renewing at the dead address and exited 76.
#[test]
fn a_holder_follows_the_failover_of_the_first_node_named() {
    let mut cluster = RedisCluster::start_with_replicas();
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    // The lowest port that serves slots: every node is named in port order, so it is the
    // first master named.
    let mut by_port: Vec<usize> = (0..cluster.nodes().len()).collect();
    by_port.sort_by_key(|&i| cluster.node(i).port());
    let masters: Vec<usize> = (0..16384u16)
        .step_by(512)
        .map(|s| cluster.owner_of_slot(s))
        .collect();
    let master = *by_port
        .iter()
        .find(|i| masters.contains(i))
        .expect("a master");
    let key = (0..10_000)
        .map(|i| format!("first-{i}"))
        .find(|k| cluster.owner(&format!("rlock:{k}")) == master)
        .expect("a key served by the first node");
    let lock = format!("rlock:{key}");
    let slot = cluster.slot(&lock);
    let replica = cluster.replica_of(master);
    let mut cmd = rlock();
    cmd.arg("--cluster");
    for &i in &by_port {
        cmd.args(["-u", &suite_url(cluster.node(i).port())]);
    }
    cmd.args(["exec", "-k", &key, "--ttl", "10s", "--", "sh", "-c"])
        .arg(r#"echo "$RLOCK_TOKEN" > "$D/token"; sleep 12; echo done > "$D/ran""#);
    let mut rl = Bg::spawn_group("holder", d, &mut cmd);
    rl.wait_for("the holder's command", Duration::from_secs(10), || {
        token(d).is_some()
    });
    let token = token(d).expect("token");
    wait_until(
        "the lock to reach the replica",
        Duration::from_secs(5),
        || replica_get(cluster.node(replica), &lock).as_deref() == Some(token.as_str()),
    );
    let granted = Instant::now();
    wait_until("a second after the grant", Duration::from_secs(2), || {
        granted.elapsed() >= Duration::from_secs(1)
    });
    cluster.node_mut(master).kill9();
    wait_promoted(&cluster, slot, master, replica);
    let (out, _) = rl.finish(Duration::from_secs(30));
    assert_eq!(
        out.code, 0,
        "the holder must follow the failover of the first node named: {out}"
    );
    assert!(d.join("ran").exists(), "the command did not run to its end");
}
