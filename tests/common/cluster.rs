//! `RedisCluster`: three masters made into one Redis Cluster.

use std::process::Command;
use std::time::Duration;

use super::binary::run;
use super::cli::redis_cli_bin;
use super::server::RedisServer;
use super::spawn::free_port;
use super::wait::wait_until;

/// Three `redis-server` masters (no replicas) made into one Redis Cluster with
/// `redis-cli --cluster create`; every node is a [`RedisServer`], killed on drop.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts the three nodes, creates the cluster and returns once every node says
    /// `cluster_state:ok` and knows the owner of all 16384 slots.
    pub fn start() -> Self {
        Self::start_nodes(0, "2000")
    }

    /// Three masters with one replica each (six nodes), failing over one second after a master
    /// stops answering (`cluster-node-timeout 1000`).
    pub fn start_with_replicas() -> Self {
        let cluster = Self::start_nodes(1, "1000");
        wait_until(
            "every replica to be in sync with its master",
            Duration::from_secs(20),
            || {
                cluster.nodes.iter().all(|n| {
                    let info = n
                        .try_cmd(&["INFO", "replication"])
                        .ok()
                        .and_then(|v| redis::from_redis_value::<String>(v).ok())
                        .unwrap_or_default();
                    info.contains("role:master") && info.contains("connected_slaves:1")
                        || info.contains("master_link_status:up")
                })
            },
        );
        cluster
    }

    fn start_nodes(replicas: usize, node_timeout: &str) -> Self {
        let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
            .map(|_| {
                // The bus port is named, so a client port above 55535 (no room for +10000)
                // cannot stop a node from starting.
                let bus = free_port().to_string();
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    node_timeout,
                    "--cluster-port",
                    &bus,
                ])
            })
            .collect();
        let cluster = RedisCluster { nodes };
        let mut create = Command::new(redis_cli_bin());
        create.args(["--cluster", "create"]);
        for n in &cluster.nodes {
            create.arg(format!("127.0.0.1:{}", n.port()));
        }
        let replicas = replicas.to_string();
        create.args(["--cluster-replicas", &replicas, "--cluster-yes"]);
        let out = run(&mut create);
        assert_eq!(
            out.code,
            0,
            "redis-cli --cluster create failed: {out}\n{}",
            cluster.logs()
        );
        let ports: Vec<u16> = cluster.nodes.iter().map(RedisServer::port).collect();
        wait_until(
            "every cluster node to say cluster_state:ok and agree on the slots",
            Duration::from_secs(20),
            || {
                cluster.nodes.iter().all(|n| {
                    let ok = n
                        .try_cmd(&["CLUSTER", "INFO"])
                        .ok()
                        .and_then(|v| redis::from_redis_value::<String>(v).ok())
                        .is_some_and(|s| s.contains("cluster_state:ok"));
                    ok && slot_owners_on(n)
                        .is_some_and(|owners| owners.iter().all(|p| ports.contains(p)))
                })
            },
        );
        cluster
    }

    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }

    pub fn node_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// The index of the replica of master `i` (by ROLE).
    pub fn replica_of(&self, i: usize) -> usize {
        let port = self.nodes[i].port();
        self.nodes
            .iter()
            .position(|n| {
                let role: Vec<redis::Value> =
                    redis::cmd("ROLE").query(&mut n.conn()).expect("ROLE");
                matches!(role.get(2), Some(redis::Value::Int(p)) if *p as u16 == port)
            })
            .unwrap_or_else(|| panic!("master {i} (port {port}) has no replica"))
    }

    /// `redis://127.0.0.1:PORT` of every node, the seed list for `rlock --cluster`.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// `CLUSTER KEYSLOT key`.
    pub fn slot(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[0].conn())
            .expect("CLUSTER KEYSLOT")
    }

    /// The index (into `nodes()`) of the master that serves `slot`, as node 0 sees it.
    pub fn owner_of_slot(&self, slot: u16) -> usize {
        self.owner_of_slot_by(0, slot)
    }

    /// The index of the master that serves `slot`, as node `by` sees it.
    pub fn owner_of_slot_by(&self, by: usize, slot: u16) -> usize {
        let owners = slot_owners_on(&self.nodes[by]).expect("CLUSTER SLOTS");
        let port = owners[slot as usize];
        self.nodes
            .iter()
            .position(|n| n.port() == port)
            .unwrap_or_else(|| panic!("slot {slot} is served by unknown port {port}"))
    }

    /// The index of the master that serves `key`.
    pub fn owner(&self, key: &str) -> usize {
        self.owner_of_slot(self.slot(key))
    }

    /// `CLUSTER MYID` of node `i`.
    pub fn node_id(&self, i: usize) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.nodes[i].conn())
            .expect("CLUSTER MYID")
    }

    /// The logs of every node, for failure messages.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("=== node on port {} ===\n{}", n.port(), n.log()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// `CLUSTER SLOTS` of `node`: the port of the master of each of the 16384 slots (0 where
/// none), or None when the node does not answer it.
fn slot_owners_on(node: &RedisServer) -> Option<Vec<u16>> {
    let reply = node.try_cmd(&["CLUSTER", "SLOTS"]).ok()?;
    let redis::Value::Array(ranges) = reply else {
        return None;
    };
    let mut owners = vec![0u16; 16384];
    for range in ranges {
        let redis::Value::Array(parts) = range else {
            return None;
        };
        let (Some(redis::Value::Int(from)), Some(redis::Value::Int(to))) =
            (parts.first(), parts.get(1))
        else {
            return None;
        };
        let Some(redis::Value::Array(master)) = parts.get(2) else {
            return None;
        };
        let Some(redis::Value::Int(port)) = master.get(1) else {
            return None;
        };
        for slot in *from..=*to {
            owners[slot as usize] = *port as u16;
        }
    }
    Some(owners)
}
