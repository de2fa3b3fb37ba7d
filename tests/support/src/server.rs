//! `RedisServer`: one `redis-server` guard, killed on drop.

use std::collections::HashMap;
use std::fmt;
use std::fs;
use std::path::Path;
use std::process::Child;
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

use crate::acl::{self, Deployment};
use crate::limits::{CONN_TIMEOUT, READY_TIMEOUT, START_ATTEMPTS};
use crate::network::{self, Rtt};
use crate::proxy::Proxy;
use crate::spawn::{
    base_args, connect, free_port, kill_and_reap, proc_state, spawn_redis, wait_ready,
};
use crate::wait::wait_until;

/// A `redis-server` on 127.0.0.1 at a free port, with its own temporary directory. Killed (and
/// reaped) on drop, frozen or not.
pub struct RedisServer {
    child: Option<Child>,
    pid: i32,
    port: u16,
    extra: Vec<String>,
    password: Option<String>,
    /// The scale-out deployments this server is part of (`join`).
    deployments: Vec<Deployment>,
    /// With a network (`start_across`, `RLOCK_TEST_RTT`): the delaying proxy clients reach it by.
    front: Option<Proxy>,
    /// With `RLOCK_TEST_MANAGED`: the TLS front rlock reaches it by (managed.rs), held for as
    /// long as the server lives.
    _managed: Option<crate::managed::Front>,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// A plain server.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// A plain server that clients reach across a network of round trip `rtt` (network.rs).
    pub fn start_across(rtt: Rtt) -> Self {
        Self::start_with_across(&[], Some(rtt))
    }

    /// A server with extra `redis-server` arguments appended (later ones win), e.g.
    /// `&["--requirepass", "s3cret"]`. A `--requirepass` is remembered so `conn()` authenticates.
    /// With `RLOCK_TEST_RTT`, clients reach it across that network.
    pub fn start_with(extra: &[&str]) -> Self {
        Self::start_with_across(extra, Rtt::from_env())
    }

    /// As `start_with`, reached by clients across a network of round trip `rtt` when there is
    /// one (`RLOCK_TEST_RTT` not consulted).
    pub fn start_with_across(extra: &[&str], rtt: Option<Rtt>) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("rlock-redis-")
            .tempdir()
            .expect("create temp dir for redis-server");
        let mut extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        extra.extend(crate::managed::user_args());
        let password = extra
            .windows(2)
            .rev()
            .find(|w| w[0] == "--requirepass")
            .map(|w| w[1].clone())
            .filter(|p| !p.is_empty());
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port();
            let mut args = base_args(port, dir.path());
            args.extend(extra.iter().cloned());
            let mut child = spawn_redis(&args, dir.path());
            let deadline = Instant::now() + READY_TIMEOUT;
            match wait_ready(&mut child, port, password.as_deref(), deadline) {
                Ok(()) => {
                    let front = rtt.map(|rtt| rtt.proxy(port));
                    if let Some(front) = &front {
                        network::put_behind(port, front.port());
                    }
                    let managed = crate::managed::enabled().then(|| {
                        crate::managed::Front::start(port, front.as_ref().map_or(port, Proxy::port))
                    });
                    let server = RedisServer {
                        pid: child.id() as i32,
                        child: Some(child),
                        port,
                        extra,
                        password,
                        deployments: Vec::new(),
                        front,
                        _managed: managed,
                        dir,
                    };
                    server.make_suite_user();
                    return server;
                }
                Err(e) => {
                    kill_and_reap(&mut child);
                    failures.push(format!("port {port}: {e}"));
                }
            }
        }
        panic!(
            "redis-server did not come up after {START_ATTEMPTS} attempts:\n  {}\n{}",
            failures.join("\n  "),
            read_logs(dir.path())
        );
    }

    /// Makes this server part of `deployment`. With `RLOCK_TEST_ACL`, the documented user gets
    /// the rights docs/connecting.md adds for it, and the default user may no longer run rlock's
    /// scripts, so a test that reached this server as the default user fails; both again after
    /// every `restart`. Without it, nothing changes.
    pub fn join(&mut self, deployment: Deployment) -> &mut Self {
        if !self.deployments.contains(&deployment) {
            self.deployments.push(deployment);
            self.make_suite_user();
        }
        self
    }

    /// Makes the user `RLOCK_TEST_ACL` asks for, if any, with the additions of the server's
    /// deployments (acl.rs).
    fn make_suite_user(&self) {
        for command in acl::suite_user_commands(&self.deployments) {
            let args: Vec<&str> = command.iter().map(String::as_str).collect();
            assert_eq!(self.cmd(&args), redis::Value::Okay, "{}", command.join(" "));
        }
    }

    /// The server's own port (behind a network, not the one clients reach it by: see
    /// `client_port`).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The port clients reach the server by: its proxy's behind a network, else its own.
    pub fn client_port(&self) -> u16 {
        self.front.as_ref().map_or(self.port, Proxy::port)
    }

    /// The network in front of the server's clients, if any.
    pub fn front(&self) -> Option<&Proxy> {
        self.front.as_ref()
    }

    /// `redis://127.0.0.1:PORT` of `client_port`, without the password even if one is required.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.client_port())
    }

    /// The pid of the current (or, after `kill9`, the last) server process.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// A fresh connection (authenticated when the server requires a password) with 5 s
    /// connect, read and write timeouts.
    pub fn conn(&self) -> redis::Connection {
        connect(self.port, self.password.as_deref(), CONN_TIMEOUT).unwrap_or_else(|e| {
            panic!(
                "cannot connect to redis-server on port {}: {e}\n{}",
                self.port,
                self.log()
            )
        })
    }

    /// SIGSTOP: the server keeps its socket but answers nothing. Returns once it is stopped.
    pub fn freeze(&self) {
        self.signal(Signal::SIGSTOP);
        let pid = self.pid;
        wait_until("redis-server to stop after SIGSTOP", CONN_TIMEOUT, || {
            matches!(proc_state(pid), Some('T') | None)
        });
    }

    /// SIGCONT after `freeze`. Returns once the server is no longer stopped.
    pub fn thaw(&self) {
        self.signal(Signal::SIGCONT);
        let pid = self.pid;
        wait_until("redis-server to resume after SIGCONT", CONN_TIMEOUT, || {
            !matches!(proc_state(pid), Some('T'))
        });
    }

    /// SIGKILL and reap: the server is gone, with its data, and the port is closed.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
    }

    /// Starts the server again on the same port with the same arguments (killing it first if it
    /// still runs). Nothing persists, so it comes back empty, but for the users of
    /// `RLOCK_TEST_ACL`, which it has from its first reply. Returns once it answers PING.
    pub fn restart(&mut self) {
        self.kill9();
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut args = base_args(self.port, self.dir.path());
        args.extend(self.extra.iter().cloned());
        args.extend(acl::suite_user_args(&self.deployments));
        loop {
            let mut child = spawn_redis(&args, self.dir.path());
            match wait_ready(&mut child, self.port, self.password.as_deref(), deadline) {
                Ok(()) => {
                    self.pid = child.id() as i32;
                    self.child = Some(child);
                    return;
                }
                Err(e) => {
                    kill_and_reap(&mut child);
                    // The port may be briefly held by someone else; retry until the deadline.
                    if Instant::now() >= deadline {
                        panic!(
                            "redis-server did not restart on port {}: {e}\n{}",
                            self.port,
                            self.log()
                        );
                    }
                    thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }

    /// The server's log (and anything it printed before opening it), for failure messages.
    pub fn log(&self) -> String {
        read_logs(self.dir.path())
    }

    /// Runs one command and returns its reply; panics on an error reply.
    pub fn cmd(&self, args: &[&str]) -> redis::Value {
        self.try_cmd(args)
            .unwrap_or_else(|e| panic!("redis {args:?} failed: {e}"))
    }

    /// Runs one command; an error reply comes back as `Err`.
    pub fn try_cmd(&self, args: &[&str]) -> redis::RedisResult<redis::Value> {
        let (name, rest) = args
            .split_first()
            .expect("cmd needs at least a command name");
        redis::cmd(name).arg(rest).query(&mut self.conn())
    }

    pub fn get(&self, key: &str) -> Option<String> {
        self.query(redis::cmd("GET").arg(key))
    }

    /// PTTL in ms: -1 without expiry, -2 when the key does not exist.
    pub fn pttl(&self, key: &str) -> i64 {
        self.query(redis::cmd("PTTL").arg(key))
    }

    pub fn exists(&self, key: &str) -> bool {
        self.query(redis::cmd("EXISTS").arg(key))
    }

    pub fn set(&self, key: &str, val: &str) {
        self.query::<()>(redis::cmd("SET").arg(key).arg(val));
    }

    pub fn hgetall(&self, key: &str) -> HashMap<String, String> {
        self.query(redis::cmd("HGETALL").arg(key))
    }

    /// `TYPE key`: `string`, `hash`, `list`, …, or `none`.
    pub fn key_type(&self, key: &str) -> String {
        self.query(redis::cmd("TYPE").arg(key))
    }

    fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        cmd.query(&mut self.conn())
            .unwrap_or_else(|e| panic!("redis command failed on port {}: {e}", self.port))
    }

    fn signal(&self, sig: Signal) {
        assert!(
            self.child.is_some(),
            "redis-server on port {} is not running",
            self.port
        );
        signal::kill(Pid::from_raw(self.pid), sig)
            .unwrap_or_else(|e| panic!("kill -{sig} {}: {e}", self.pid));
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
        if self.front.is_some() {
            network::forget(self.port);
        }
    }
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("pid", &self.pid)
            .field("running", &self.child.is_some())
            .finish()
    }
}

pub(crate) fn read_logs(dir: &Path) -> String {
    let mut text = String::new();
    for name in ["stderr.log", "redis.log"] {
        let log = fs::read_to_string(dir.join(name)).ok();
        if let Some(s) = log.filter(|s| !s.trim().is_empty()) {
            text.push_str(&format!("--- {name} ---\n{s}"));
        }
    }
    if text.is_empty() {
        text.push_str("(redis-server wrote no log)");
    }
    text
}
