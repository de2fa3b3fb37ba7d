//! `RedisCluster`: three masters made into one Redis Cluster.

use std::process::Command;
use std::time::Duration;

use crate::acl::Deployment;
use crate::binary::run;
use crate::cli::redis_cli_bin;
use crate::proxy::{Mode, Proxy};
use crate::server::RedisServer;
use crate::spawn::{free_port, redis_version};
use crate::wait::wait_until;

/// `cluster-node-timeout` of the Clusters with replicas: how long a master is silent before its
/// replica may take over, and how long a master cut off from the majority takes writes.
const FAILOVER_NODE_TIMEOUT: Duration = Duration::from_millis(1000);
/// `cluster-node-timeout` of the Clusters behind fault proxies: every message of their bus goes
/// through threads of the test process, which a loaded two-core machine delays enough that at
/// one second the nodes took each other for failed, and no election won its votes in time.
pub const PROXIED_NODE_TIMEOUT: Duration = Duration::from_millis(3000);
/// How many tries of an election a failover may need on a loaded machine, where the masters'
/// votes can come too late for one try after another.
const ELECTIONS: u32 = 15;

/// Three `redis-server` masters (no replicas) made into one Redis Cluster with
/// `redis-cli --cluster create`; every node is a [`RedisServer`], killed on drop.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    /// With `start_behind_proxies`: per node, the proxy of its client port and of its bus port.
    proxies: Vec<(Proxy, Proxy)>,
    /// Its `cluster-node-timeout`.
    node_timeout: Duration,
    /// With replicas (failovers): no other heavy set-up runs meanwhile (dropped last).
    _heavy: Option<std::sync::MutexGuard<'static, ()>>,
    /// Under the managed-service profile, a Cluster without replicas: per node, the port of its
    /// TLS front, which the node announces (managed.rs).
    fronts: Vec<u16>,
}

impl RedisCluster {
    /// Starts the three nodes, creates the cluster and returns once every node says
    /// `cluster_state:ok` and knows the owner of all 16384 slots.
    pub fn start() -> Self {
        Self::start_nodes(0, Duration::from_millis(2000), false)
    }

    /// Three masters with one replica each (six nodes), failing over once a master has not
    /// answered for `FAILOVER_NODE_TIMEOUT` (`cluster-node-timeout`).
    pub fn start_with_replicas() -> Self {
        Self::settled(Self::start_nodes(1, FAILOVER_NODE_TIMEOUT, false))
    }

    /// As `start_with_replicas` (but with [`PROXIED_NODE_TIMEOUT`]), with every link through a
    /// fault proxy: each node announces
    /// its client proxy's port and its bus proxy's port (`cluster-announce-port`,
    /// `cluster-announce-bus-port`), so clients, replicas and the other nodes all reach it
    /// through them. `partition` cuts a node off.
    pub fn start_behind_proxies() -> Self {
        Self::settled(Self::start_nodes(1, PROXIED_NODE_TIMEOUT, true))
    }

    /// How long a replica may take to be promoted once its master is gone or cut off: the node
    /// timeout for the master to be failed (twice, for the reports to meet), then up to a few
    /// elections. Each try waits for votes twice the node timeout (2 s at least) and the next
    /// one starts twice that after it began (Redis Cluster's rule).
    pub fn failover_bound(&self) -> Duration {
        let auth_timeout = (2 * self.node_timeout).max(Duration::from_secs(2));
        2 * self.node_timeout + 2 * auth_timeout * ELECTIONS
    }

    fn settled(cluster: Self) -> Self {
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

    /// Three masters, no replica, each client link through a fault proxy (`client_proxy`):
    /// what rlock sends each master can be counted there.
    pub fn start_masters_behind_proxies() -> Self {
        Self::start_nodes(0, Duration::from_millis(2000), true)
    }

    /// The proxy in front of node `i`'s client port, behind proxies.
    pub fn client_proxy(&self, i: usize) -> Option<&Proxy> {
        self.proxies.get(i).map(|(client, _)| client)
    }

    fn start_nodes(replicas: usize, node_timeout: Duration, behind_proxies: bool) -> Self {
        let heavy = (replicas > 0).then(crate::heavy);
        let mut proxies = Vec::new();
        let nodes: Vec<RedisServer> = (0..3 * (1 + replicas))
            .map(|_| {
                let mut args = vec![
                    "--cluster-enabled".to_string(),
                    "yes".into(),
                    "--cluster-config-file".into(),
                    "nodes.conf".into(),
                    "--cluster-node-timeout".into(),
                    node_timeout.as_millis().to_string(),
                ];
                // The bus port is named, so a client port above 55535 (no room for +10000)
                // cannot stop a node from starting. Before Redis 7 it cannot be named: it is
                // the client port + 10000, and a node whose bus port is out of range or taken
                // fails to start and is started again on another port.
                let named_bus = (redis_version().0 >= 7).then(free_port);
                if let Some(bus) = named_bus {
                    args.extend(["--cluster-port".to_string(), bus.to_string()]);
                }
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let mut node = RedisServer::start_with(&args);
                node.join(Deployment::Cluster);
                let bus = named_bus.unwrap_or(node.port() + 10000);
                if behind_proxies {
                    let (client, bus) = (Proxy::start(node.port()), Proxy::start(bus));
                    for (name, value) in [
                        ("cluster-announce-ip", "127.0.0.1".to_string()),
                        ("cluster-announce-port", client.port().to_string()),
                        ("cluster-announce-bus-port", bus.port().to_string()),
                    ] {
                        node.cmd(&["CONFIG", "SET", name, &value]);
                    }
                    proxies.push((client, bus));
                }
                node
            })
            .collect();
        let mut cluster = RedisCluster {
            nodes,
            proxies,
            node_timeout,
            _heavy: heavy,
            fronts: Vec::new(),
        };
        let mut create = Command::new(redis_cli_bin());
        create.args(["--cluster", "create"]);
        for i in 0..cluster.nodes.len() {
            create.arg(format!("127.0.0.1:{}", cluster.client_port(i)));
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
        let ports: Vec<u16> = (0..cluster.nodes.len())
            .map(|i| cluster.client_port(i))
            .collect();
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
        if replicas == "0" && !behind_proxies && crate::managed::enabled() {
            cluster.announce_fronts();
        }
        cluster
    }

    /// Under the managed-service profile: every node announces its TLS front's port, so that
    /// the slot map sends rlock to the fronts, as a managed Cluster's does. Made once the
    /// Cluster is up (`redis-cli --cluster create` speaks plain), and only without replicas (a
    /// replica would follow its master's announced port, a TLS front).
    fn announce_fronts(&mut self) {
        self.fronts = self
            .nodes
            .iter()
            .map(|n| crate::managed::front_port(n.port()).expect("a front for every node"))
            .collect();
        for (node, front) in self.nodes.iter().zip(&self.fronts) {
            node.cmd(&["CONFIG", "SET", "cluster-announce-ip", "127.0.0.1"]);
            node.cmd(&["CONFIG", "SET", "cluster-announce-port", &front.to_string()]);
        }
        wait_until(
            "every cluster node to name the fronts in its slot map",
            Duration::from_secs(20),
            || {
                self.nodes.iter().all(|n| {
                    slot_owners_on(n)
                        .is_some_and(|owners| owners.iter().all(|p| self.fronts.contains(p)))
                })
            },
        );
    }

    /// The port clients reach node `i` on: its proxy's, behind proxies; its TLS front's under
    /// the managed-service profile.
    pub fn client_port(&self, i: usize) -> u16 {
        if let Some(front) = self.fronts.get(i) {
            return *front;
        }
        self.proxies
            .get(i)
            .map_or(self.nodes[i].port(), |(client, _)| client.port())
    }

    /// Cuts node `i` (and the processes `with_i`) off from every other node, both ways, on
    /// client and bus links alike, as a partition between hosts would; links within each side
    /// pass.
    pub fn partition(&self, i: usize, with_i: &[i32]) {
        let mut side = with_i.to_vec();
        side.push(self.nodes[i].pid());
        let others: Vec<i32> = (0..self.nodes.len())
            .filter(|&j| j != i)
            .map(|j| self.nodes[j].pid())
            .collect();
        for (j, (client, bus)) in self.proxies.iter().enumerate() {
            let cut = if j == i { &others } else { &side };
            client.set_for(cut, Mode::Blackhole);
            bus.set_for(cut, Mode::Blackhole);
        }
    }

    /// Heals every link `partition` cut.
    pub fn heal(&self) {
        for (client, bus) in &self.proxies {
            client.heal();
            bus.heal();
        }
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
        let port = self.client_port(i);
        self.nodes
            .iter()
            .position(|n| {
                let role: Vec<redis::Value> =
                    redis::cmd("ROLE").query(&mut n.conn()).expect("ROLE");
                matches!(role.get(2), Some(redis::Value::Int(p)) if *p as u16 == port)
            })
            .unwrap_or_else(|| panic!("master {i} (port {port}) has no replica"))
    }

    /// `redis://127.0.0.1:PORT` of every node (of its proxy, behind proxies), the seed list for
    /// `rlock --cluster`; with `RLOCK_TEST_ACL`, as the documented user (`acl::suite_url`).
    pub fn urls(&self) -> Vec<String> {
        (0..self.nodes.len())
            .map(|i| match self.fronts.is_empty() {
                true => crate::acl::suite_url(self.client_port(i)),
                false => crate::acl::suite_url(self.nodes[i].port()),
            })
            .collect()
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
        (0..self.nodes.len())
            .position(|i| self.client_port(i) == port)
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
