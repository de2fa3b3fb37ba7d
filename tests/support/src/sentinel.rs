//! `Sentinels`: a master, its replica and three Sentinels watching them.

use std::collections::HashMap;
use std::fs;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

use crate::acl::Deployment;
use crate::cli::info_on;
use crate::limits::{CONN_TIMEOUT, READY_TIMEOUT, START_ATTEMPTS};
use crate::network::Rtt;
use crate::proxy::{Mode, Proxy};
use crate::server::{RedisServer, read_logs};
use crate::spawn::{connect, free_port, kill_and_reap, proc_state, spawn_redis, wait_ready};
use crate::wait::wait_until;

/// `down-after-milliseconds` of every Sentinel: how long a master is silent before it is down.
const DOWN_AFTER: Duration = Duration::from_millis(1000);
/// `failover-timeout` of every Sentinel: a failover not done by then is given up, and the next
/// try may start twice this after the last one began.
const FAILOVER_TIMEOUT: Duration = Duration::from_millis(5000);
/// How many tries of an election a failover may need on a loaded machine, where votes and the
/// promoted replica's answers can come too late for one try after another.
const ELECTIONS: u32 = 6;

/// One `redis-server --sentinel` process with its own config file (Sentinel rewrites it) in its
/// own temporary directory. Killed on drop.
struct SentinelProcess {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    /// With `behind_proxy`: the proxy in front of it, whose port it announces to the others.
    proxy: Option<Proxy>,
}

impl SentinelProcess {
    fn start(name: &str, master_port: u16) -> Self {
        Self::start_with(name, master_port, false)
    }

    fn start_with(name: &str, master_port: u16, behind_proxy: bool) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("rlock-sentinel-")
            .tempdir()
            .expect("create temp dir for a sentinel");
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port();
            let proxy = behind_proxy.then(|| Proxy::start(port));
            let conf = dir.path().join("sentinel.conf");
            let mut text = format!(
                "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\nlogfile {log}\n\
                 sentinel monitor {name} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {name} {down_after}\n\
                 sentinel failover-timeout {name} {failover_timeout}\n",
                dir = dir.path().display(),
                log = dir.path().join("redis.log").display(),
                down_after = DOWN_AFTER.as_millis(),
                failover_timeout = FAILOVER_TIMEOUT.as_millis(),
            );
            if let Some(p) = &proxy {
                text.push_str(&format!(
                    "sentinel announce-ip 127.0.0.1\nsentinel announce-port {}\n",
                    p.port()
                ));
            }
            fs::write(&conf, text).expect("write sentinel.conf");
            let args = [conf.display().to_string(), "--sentinel".to_string()];
            let mut child = spawn_redis(&args, dir.path());
            match wait_ready(&mut child, port, None, Instant::now() + READY_TIMEOUT) {
                Ok(()) => {
                    return SentinelProcess {
                        child: Some(child),
                        port,
                        dir,
                        proxy,
                    };
                }
                Err(e) => {
                    kill_and_reap(&mut child);
                    failures.push(format!("port {port}: {e}"));
                }
            }
        }
        panic!(
            "redis-server --sentinel did not come up after {START_ATTEMPTS} attempts:\n  {}\n{}",
            failures.join("\n  "),
            read_logs(dir.path())
        );
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
    }
}

/// One Sentinel of its own, watching the master on `master_port` under `name`: beside a set of
/// [`Sentinels`] under the same name, a Sentinel that names another master. Killed on drop.
pub struct LoneSentinel(SentinelProcess);

impl LoneSentinel {
    pub fn start(name: &str, master_port: u16) -> Self {
        LoneSentinel(SentinelProcess::start(name, master_port))
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.0.port)
    }
}

/// A master, one replica (`--replicaof`) and three Sentinels watching the master under `name`
/// with quorum 2, `down-after-milliseconds` (`DOWN_AFTER`) and `failover-timeout`
/// (`FAILOVER_TIMEOUT`). Every process is killed on drop.
pub struct Sentinels {
    name: String,
    /// `[first master, first replica]`; after a failover their roles may have changed.
    servers: Vec<RedisServer>,
    sentinels: Vec<SentinelProcess>,
    /// With `start_behind_proxies`: the proxy in front of each server, in the same order.
    proxies: Vec<Proxy>,
    /// No other heavy set-up runs meanwhile (dropped last).
    _heavy: std::sync::MutexGuard<'static, ()>,
}

impl Sentinels {
    /// Starts everything and returns once every Sentinel knows the master, its replica (with a
    /// working link) and the two other Sentinels, so a failover can be voted on.
    pub fn start(name: &str) -> Self {
        let heavy = crate::heavy();
        let mut master = RedisServer::start();
        master.join(Deployment::Sentinel);
        let mut replica =
            RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
        replica.join(Deployment::Sentinel);
        let sentinels = (0..3)
            .map(|_| SentinelProcess::start(name, master.port()))
            .collect();
        let s = Sentinels {
            name: name.to_string(),
            servers: vec![master, replica],
            sentinels,
            proxies: Vec::new(),
            _heavy: heavy,
        };
        s.wait_settled(s.servers[0].port(), Duration::from_secs(20));
        s
    }

    /// As `start`, with every link to a server going through a fault proxy of its own: the
    /// replica replicates from the master's proxy, each server announces its proxy's port
    /// (`replica-announce-port`), and the Sentinels monitor the master's proxy, so they name
    /// proxies to clients too. A test cuts a server off from some processes with
    /// `proxy(i).set_for(pids, …)`.
    pub fn start_behind_proxies(name: &str) -> Self {
        let heavy = crate::heavy();
        let mut servers = [RedisServer::start(), RedisServer::start()];
        for server in &mut servers {
            server.join(Deployment::Sentinel);
        }
        let proxies: Vec<Proxy> = servers.iter().map(|s| Proxy::start(s.port())).collect();
        for (server, proxy) in servers.iter().zip(&proxies) {
            server.cmd(&["CONFIG", "SET", "replica-announce-ip", "127.0.0.1"]);
            server.cmd(&[
                "CONFIG",
                "SET",
                "replica-announce-port",
                &proxy.port().to_string(),
            ]);
        }
        servers[1].cmd(&["REPLICAOF", "127.0.0.1", &proxies[0].port().to_string()]);
        let sentinels = (0..3)
            .map(|_| SentinelProcess::start_with(name, proxies[0].port(), true))
            .collect();
        let [master, replica] = servers;
        let s = Sentinels {
            name: name.to_string(),
            servers: vec![master, replica],
            sentinels,
            proxies,
            _heavy: heavy,
        };
        s.wait_settled(s.proxies[0].port(), Duration::from_secs(20));
        s
    }

    /// As `start_behind_proxies`, every proxy delaying as a network of round trip `rtt` does
    /// (network.rs): clients reach the Sentinels and the servers across it, and so do the
    /// servers and Sentinels each other.
    pub fn start_across(name: &str, rtt: Rtt) -> Self {
        let s = Self::start_behind_proxies(name);
        for proxy in s
            .proxies
            .iter()
            .chain(s.sentinels.iter().flat_map(|p| &p.proxy))
        {
            proxy.set(rtt.mode());
        }
        s
    }

    /// How long the Sentinels may take to promote the replica once the master is gone or cut
    /// off from them: `down-after-milliseconds`, then up to a few elections, each started
    /// twice `failover-timeout` after the one before.
    pub fn failover_bound() -> Duration {
        DOWN_AFTER + 2 * FAILOVER_TIMEOUT * ELECTIONS
    }

    /// The proxy in front of server `i` (after `start_behind_proxies`).
    pub fn proxy(&self, i: usize) -> &Proxy {
        &self.proxies[i]
    }

    /// The name the Sentinels know the master by.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `rlock --sentinel NAME --url S1 --url S2 …` over every Sentinel; with `RLOCK_TEST_ACL`,
    /// logged in to the master as the documented user (the Sentinels themselves have none).
    pub fn rlock(&self) -> Command {
        let mut cmd = crate::binary::rlock();
        crate::acl::suite_login_behind_sentinels(&mut cmd);
        cmd.arg("--sentinel").arg(&self.name);
        for url in self.urls() {
            cmd.arg("--url").arg(url);
        }
        cmd
    }

    /// `redis://127.0.0.1:PORT` of every Sentinel (of its proxy, behind proxies).
    pub fn urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| match &s.proxy {
                Some(p) => p.url(),
                None => format!("redis://127.0.0.1:{}", s.port),
            })
            .collect()
    }

    /// The proxy in front of Sentinel `i` (after `start_behind_proxies`).
    pub fn sentinel_proxy(&self, i: usize) -> &Proxy {
        self.sentinels[i]
            .proxy
            .as_ref()
            .expect("the Sentinels were started behind proxies")
    }

    /// Splits the set in two, as a network partition between hosts would: on one side server
    /// `i`, Sentinel `i` and the processes `with_i`; on the other the other server, the other
    /// two Sentinels and everyone else. Every link that crosses the cut is blackholed, both
    /// ways; links within a side pass. Sentinels talk to each other through their proxies too.
    pub fn partition(&self, i: usize, with_i: &[i32]) {
        let pid = |c: &Option<Child>| c.as_ref().map(|c| c.id() as i32);
        let mut side: Vec<i32> = with_i.to_vec();
        side.push(self.servers[i].pid());
        side.extend(pid(&self.sentinels[i].child));
        let mut other: Vec<i32> = vec![self.servers[1 - i].pid()];
        for (j, s) in self.sentinels.iter().enumerate() {
            if j != i {
                other.extend(pid(&s.child));
            }
        }
        // Links into side i's server and Sentinel from the other side, and the other way.
        self.proxies[i].set_for(&other, Mode::Blackhole);
        self.sentinel_proxy(i).set_for(&other, Mode::Blackhole);
        self.proxies[1 - i].set_for(&side, Mode::Blackhole);
        for (j, _) in self.sentinels.iter().enumerate() {
            if j != i {
                self.sentinel_proxy(j).set_for(&side, Mode::Blackhole);
            }
        }
    }

    /// Heals every link `partition` cut.
    pub fn heal(&self) {
        for p in &self.proxies {
            p.heal();
        }
        for s in &self.sentinels {
            if let Some(p) = &s.proxy {
                p.heal();
            }
        }
    }

    /// SIGSTOPs Sentinel `i`: it keeps its socket and answers nothing. Returns once stopped.
    pub fn freeze_sentinel(&self, i: usize) {
        self.signal_sentinel(i, Signal::SIGSTOP, true);
    }

    /// SIGCONT after `freeze_sentinel`.
    pub fn thaw_sentinel(&self, i: usize) {
        self.signal_sentinel(i, Signal::SIGCONT, false);
    }

    fn signal_sentinel(&self, i: usize, sig: Signal, stopped: bool) {
        let child = self.sentinels[i].child.as_ref().expect("the Sentinel runs");
        let pid = child.id() as i32;
        signal::kill(Pid::from_raw(pid), sig).unwrap_or_else(|e| panic!("kill -{sig} {pid}: {e}"));
        wait_until("the Sentinel to change state", CONN_TIMEOUT, || {
            (proc_state(pid) == Some('T')) == stopped
        });
    }

    /// The server started as the master (index 0) or as the replica (index 1).
    pub fn server(&self, i: usize) -> &RedisServer {
        &self.servers[i]
    }

    pub fn server_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.servers[i]
    }

    /// Runs one command on Sentinel `i`.
    pub fn sentinel_cmd(&self, i: usize, args: &[&str]) -> redis::RedisResult<redis::Value> {
        let (name, rest) = args.split_first().expect("a command name");
        redis::cmd(name)
            .arg(rest)
            .query(&mut connect(self.sentinels[i].port, None, CONN_TIMEOUT)?)
    }

    /// The master's port as Sentinel `i` names it now.
    pub fn master_port_by(&self, i: usize) -> Option<u16> {
        let v = self
            .sentinel_cmd(i, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", &self.name])
            .ok()?;
        let (_, port): (String, u16) = redis::from_redis_value(v).ok()?;
        Some(port)
    }

    /// Waits until every Sentinel names the server on `port` as the master.
    pub fn wait_master(&self, port: u16, timeout: Duration) {
        wait_until(
            &format!(
                "every Sentinel to name port {port} as master '{}'",
                self.name
            ),
            timeout,
            || (0..self.sentinels.len()).all(|i| self.master_port_by(i) == Some(port)),
        );
    }

    /// Waits until every Sentinel names `master_port`, sees one replica and two other
    /// Sentinels, and the other server replicates from the master with its link up.
    pub fn wait_settled(&self, master_port: u16, timeout: Duration) {
        let replica = match self.proxies.iter().position(|p| p.port() == master_port) {
            Some(i) => &self.servers[1 - i],
            None => self
                .servers
                .iter()
                .find(|s| s.port() != master_port)
                .expect("a replica"),
        };
        wait_until(
            &format!("the Sentinels of '{}' to settle", self.name),
            timeout,
            || {
                let sentinels_ok = (0..self.sentinels.len()).all(|i| {
                    let Ok(v) = self.sentinel_cmd(i, &["SENTINEL", "MASTER", &self.name]) else {
                        return false;
                    };
                    let Ok(m) = redis::from_redis_value::<HashMap<String, String>>(v) else {
                        return false;
                    };
                    m.get("port").map(String::as_str) == Some(&master_port.to_string())
                        && m.get("flags").map(String::as_str) == Some("master")
                        && m.get("num-slaves").map(String::as_str) == Some("1")
                        && m.get("num-other-sentinels").map(String::as_str) == Some("2")
                });
                let link_up = info_on(replica.port(), "replication").is_ok_and(|i| {
                    i.get("master_link_status").map(String::as_str) == Some("up")
                        && i.get("master_port").map(String::as_str)
                            == Some(&master_port.to_string())
                });
                sentinels_ok && link_up
            },
        );
    }

    /// Every log (servers and Sentinels), for failure messages.
    pub fn logs(&self) -> String {
        let mut text = String::new();
        for s in &self.servers {
            text.push_str(&format!(
                "=== server on port {} ===\n{}\n",
                s.port(),
                s.log()
            ));
        }
        for s in &self.sentinels {
            text.push_str(&format!(
                "=== sentinel on port {} ===\n{}\n",
                s.port,
                read_logs(s.dir.path())
            ));
        }
        text
    }
}
