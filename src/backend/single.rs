//! One Redis server, reached over one reused connection.

mod cluster_node;
mod pipeline;
mod replicas;
mod script;
mod wire;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use redis::{RedisResult, Value};

use super::error::{CHECK_ADDRESS, NOT_REDIS, of_subscription};
use super::probe::{self, Speaks};
use super::subscriber::{Addr, Endpoint, tls_config};
use super::{
    Eval, Fault, Node, NodeError, Password, PasswordError, Replies, Script, Subscriber, TlsFiles,
};
use crate::redact::redact_text;
use script::{run_script, wait_replicas};
pub use wire::OVER_LIMIT;
use wire::{LONG_REPLY_LIMITS, Limits, REPLY_LIMITS, Wire};

thread_local! {
    /// Work to do while this thread waits for its next script's reply (`meanwhile`).
    static WHILE_ASKED: std::cell::Cell<Option<Box<dyn FnOnce()>>> = const { std::cell::Cell::new(None) };
}

/// `ask()`, with `work` done while Redis answers the first script `ask` sends from this thread
/// to a single server, rather than before or after that round trip; when no such script is sent
/// (no round trip, or Redlock's, whose threads never see it), once `ask` has returned. Either
/// way `work` runs exactly once. exec reaps the guardian and removes the command's cgroup while
/// the lock is given back: work of rlock's own, done while Redis works.
pub fn meanwhile<T>(work: Box<dyn FnOnce()>, ask: impl FnOnce() -> T) -> T {
    WHILE_ASKED.set(Some(work));
    let answer = ask();
    if let Some(work) = WHILE_ASKED.take() {
        work();
    }
    answer
}

/// Whether a rediss:// server of this process was asked if it is a plain Redis (`not_tls`).
static TLS_ASKED: AtomicBool = AtomicBool::new(false);

/// How long the first TLS handshake of the process may take before its port is asked whether it
/// is a plain Redis: a plain Redis never answers a TLS hello (it waits for the end of a line),
/// and a server named wrongly is a mistake to report at once, not after --op-timeout. A TLS
/// server slower than this at its first reply costs one failed try, once per process.
const FIRST_TLS_REPLY: Duration = Duration::from_millis(500);

pub struct Single {
    client: redis::Client,
    name: String,
    conn: Mutex<Option<Wire>>,
    /// The TLS settings of a rediss:// URL's connections, made at the first.
    tls: OnceLock<Arc<rustls::ClientConfig>>,
    /// Replicas that must acknowledge a script's write (--replicas), for the scripts that ask.
    replicas: u32,
    /// Known not to be a node of a Redis Cluster (see `refuse_cluster_node`).
    standalone: AtomicBool,
    /// For a rediss:// URL: known to speak TLS (a reply came; with TLS, connecting alone proves
    /// nothing, as the handshake waits for the first request), so never asked whether it is a
    /// plain Redis after all (see `not_tls`).
    tls_settled: AtomicBool,
    /// --tls-ca, --tls-cert, --tls-key: for a waiter's own subscriber connection over TLS.
    tls_files: TlsFiles,
    /// A password asked for anew by every new connection (--password-file, --password-command).
    password: Option<Password>,
}

/// What a server of a Redis Cluster said to a script: the reply, or where to send it instead.
pub(crate) enum Routed {
    Done(Value),
    /// MOVED: the slot lives at this address (host:port) now.
    Moved(String),
    /// ASK: this one request goes to this address, after ASKING.
    Ask(String),
}

impl Single {
    pub fn new(client: redis::Client, name: String) -> Self {
        Single {
            client,
            name,
            conn: Mutex::new(None),
            tls: OnceLock::new(),
            replicas: 0,
            standalone: AtomicBool::new(false),
            tls_settled: AtomicBool::new(false),
            tls_files: TlsFiles::default(),
            password: None,
        }
    }

    /// The password every new connection asks for anew, if it changes (see `password.rs`).
    pub fn password(self, password: Option<Password>) -> Self {
        Single { password, ..self }
    }

    /// The password a new connection logs in with: the URL's own, else the one asked for now.
    fn login(&self, redis: &redis::RedisConnectionInfo) -> Result<Option<String>, NodeError> {
        let Some(source) = &self.password else {
            return Ok(redis.password().map(str::to_string));
        };
        source.get().map(Some).map_err(|e| match e {
            PasswordError::File(e) => e.at(self.name.clone()),
            PasswordError::Command(why) => NodeError {
                kind: Fault::Credential,
                node: self.name.clone(),
                detail: format!("--password-command {why}"),
            },
        })
    }

    /// The TLS files every connection uses, for the subscriber connections this server opens
    /// itself (see `subscriber.rs`).
    pub fn tls_files(self, tls_files: TlsFiles) -> Self {
        Single { tls_files, ..self }
    }

    /// Where a subscriber connects, and as whom: what the redis client would use.
    fn endpoint(&self) -> Result<Endpoint, NodeError> {
        let info = self.client.get_connection_info();
        let addr = match info.addr() {
            redis::ConnectionAddr::Tcp(host, port) => Addr::Tcp(host.clone(), *port),
            redis::ConnectionAddr::TcpTls { host, port, .. } => {
                let files = &self.tls_files;
                let client = files.cert.as_deref().zip(files.key.as_deref());
                let config = tls_config(files.ca.as_deref(), client)
                    .map_err(|e| self.no_subscription(e.to_string()))?;
                Addr::Tls(host.clone(), *port, config)
            }
            redis::ConnectionAddr::Unix(path) => Addr::Unix(path.clone()),
            other => return Err(self.no_subscription(format!("cannot subscribe over {other}"))),
        };
        let redis = info.redis_settings();
        Ok(Endpoint {
            addr,
            username: redis.username().map(str::to_string),
            password: self.login(redis)?,
        })
    }

    /// Waits for `n` replicas after every script whose reply is a write that must survive a
    /// failover (a grant, a renewal): see `Script::replicated`.
    pub fn replicated(self, n: u32) -> Self {
        Single {
            replicas: n,
            ..self
        }
    }

    /// A subscriber connection that these settings cannot make, which no wait cures: a waiter
    /// waits without a wake channel.
    fn no_subscription(&self, detail: String) -> NodeError {
        NodeError {
            kind: Fault::Config,
            node: self.name.clone(),
            detail,
        }
    }

    /// A subscriber connection that could not be made: to a waiter, a connection that failed or
    /// a full server (maxclients), which it waits for as for an outage, or a refusal, after
    /// which it waits without a wake channel.
    fn cannot_subscribe(&self, detail: String) -> NodeError {
        let kind = of_subscription(&detail.to_ascii_lowercase());
        NodeError {
            kind,
            node: self.name.clone(),
            // The server's words, as the client library gives them (without "ERR").
            detail: match kind {
                Fault::Full => detail.trim_start_matches("ERR ").to_string(),
                _ => detail,
            },
        }
    }

    fn err(&self, e: &redis::RedisError) -> NodeError {
        NodeError::from_redis(&self.name, e)
    }

    /// `e` as a `NodeError`; when the port may not be a Redis server at all (a reply that is
    /// not RESP, or a connection dropped at its `first` exchange, as a TLS port does to
    /// plain text), the port is asked what it speaks, and the error says so. The other way
    /// round, a rediss:// URL whose first handshake fails is asked once whether it is a plain
    /// Redis.
    fn diagnosed(&self, e: &redis::RedisError, first: bool, timeout: Duration) -> NodeError {
        let err = self.err(e);
        match self.client.get_connection_info().addr() {
            redis::ConnectionAddr::Tcp(host, port) => {
                let dropped = first && err.kind == Fault::Io && e.is_connection_dropped();
                if err.kind != Fault::NotRedis && !dropped {
                    return err;
                }
                self.not_plain(err, host, *port, timeout)
            }
            redis::ConnectionAddr::TcpTls { host, port, .. } => {
                self.not_tls(err, first, host, *port, timeout)
            }
            _ => err,
        }
    }

    /// `err`, from a redis:// URL's port that does not answer in RESP, as what it speaks.
    fn not_plain(&self, err: NodeError, host: &str, port: u16, timeout: Duration) -> NodeError {
        let detail = match probe::speaks(host, port, timeout) {
            Speaks::Tls => {
                let url = match self.name.strip_prefix("redis://") {
                    Some(rest) => format!("rediss://{rest}"),
                    None => "rediss:// URLs".to_string(),
                };
                format!(
                    "{NOT_REDIS}: it answers in TLS; if it is a Redis with TLS, use {url} (and --tls-ca if its certificate is not from the system's roots)"
                )
            }
            Speaks::Text(line) => {
                format!("{NOT_REDIS}: it answered '{line}'; {CHECK_ADDRESS}")
            }
            // Dropped without a word, TLS or otherwise: perhaps a server going down.
            Speaks::Unknown => return err,
        };
        NodeError {
            kind: Fault::NotRedis,
            detail: redact_text(&detail),
            ..err
        }
    }

    /// `err`, from the first handshake of a rediss:// URL, as "a plain Redis" when its port
    /// answers a plain PING. Asked once per process (of whichever server fails first: the
    /// masters Sentinels name during a failover are new `Single`s each), and never of a server
    /// this rlock reached over TLS, so that a frozen server costs the question (at most a
    /// second) once, not at every attempt.
    fn not_tls(
        &self,
        err: NodeError,
        first: bool,
        host: &str,
        port: u16,
        timeout: Duration,
    ) -> NodeError {
        // A refused connection (nothing listens) or the server's own refusal says it all.
        let handshake = matches!(
            err.kind,
            Fault::Timeout | Fault::Io | Fault::NotRedis | Fault::Other
        );
        if !first
            || !handshake
            || self.tls_settled.load(Ordering::Relaxed)
            || TLS_ASKED.swap(true, Ordering::Relaxed)
        {
            return err;
        }
        if !probe::answers_plain_redis(host, port, timeout) {
            return err;
        }
        let url = match self.name.strip_prefix("rediss://") {
            Some(rest) => format!("redis://{rest}"),
            None => "a redis:// URL".to_string(),
        };
        NodeError {
            kind: Fault::NotRedis,
            // The URL is the node's name, redacted already.
            detail: format!(
                "does not speak TLS: it answers as a plain Redis; use {url} (or the port the server gives to --tls-port)"
            ),
            ..err
        }
    }

    /// Whether the next reply on a fresh connection is this process's first over TLS, not yet
    /// known to be TLS (see `FIRST_TLS_REPLY`).
    fn first_tls_reply(&self) -> bool {
        matches!(
            self.client.get_connection_info().addr(),
            redis::ConnectionAddr::TcpTls { .. }
        ) && !self.tls_settled.load(Ordering::Relaxed)
            && !TLS_ASKED.load(Ordering::Relaxed)
    }

    /// The TLS settings of this server's connections, for a rediss:// URL (None for another).
    fn tls_config(&self) -> Result<Option<Arc<rustls::ClientConfig>>, NodeError> {
        let info = self.client.get_connection_info();
        if !matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }) {
            return Ok(None);
        }
        if let Some(config) = self.tls.get() {
            return Ok(Some(config.clone()));
        }
        let files = &self.tls_files;
        let client = files.cert.as_deref().zip(files.key.as_deref());
        let config = tls_config(files.ca.as_deref(), client).map_err(|e| NodeError {
            kind: Fault::Config,
            node: self.name.clone(),
            detail: redact_text(&e.to_string()),
        })?;
        Ok(Some(self.tls.get_or_init(|| config).clone()))
    }

    fn open(
        &self,
        wait: Duration,
        (timeout, began): (Duration, Instant),
    ) -> Result<Wire, NodeError> {
        let mut info = self.client.get_connection_info().clone();
        if self.password.is_some()
            && let Some(password) = self.login(info.redis_settings())?
        {
            let redis = info.redis_settings().clone().set_password(password);
            info = info.set_redis_settings(redis);
        }
        // Every read and write on it is bounded too: a frozen server must not hang rlock.
        Wire::connect(&info, self.tls_config()?, wait).map_err(|e| {
            // Connecting may send AUTH or SELECT: the first exchange.
            let mut err = self.diagnosed(&e, true, probe::asking_time(wait, timeout, began));
            // Nothing was sent yet, so a timeout here is a failure to connect.
            if matches!(err.kind, Fault::Timeout | Fault::Io) {
                err.kind = Fault::Connect;
            }
            err
        })
    }

    /// Runs `f` on the reused connection. A failure of the path to the server (connect,
    /// timeout, broken connection, a server that cannot serve) is the outer error, and drops
    /// the connection; the server's own error replies come back as they are, for the caller.
    fn call<T>(
        &self,
        timeout: Duration,
        mut f: impl FnMut(&mut Wire) -> RedisResult<T>,
    ) -> Result<RedisResult<T>, NodeError> {
        let began = Instant::now();
        let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        // A reused connection may have died since its last use (a restarted server): then
        // retry once on a fresh one. Every script is idempotent for the same token.
        for _ in 0..2 {
            let fresh = slot.is_none();
            // Connecting may already wait for the first reply (the handshake, then the
            // client's own setup commands).
            let wait = match fresh && self.first_tls_reply() {
                true => timeout.min(FIRST_TLS_REPLY),
                false => timeout,
            };
            let conn = match slot.as_mut() {
                Some(c) => c,
                None => slot.insert(self.open(wait, (timeout, began))?),
            };
            let _ = conn.set_timeout(wait);
            conn.limits = REPLY_LIMITS;
            match f(conn) {
                Ok(v) => {
                    self.tls_settled.store(true, Ordering::Relaxed);
                    return Ok(Ok(v));
                }
                Err(e) => {
                    let err = self.err(&e);
                    // A reply that is not RESP is no answer of the server's either: the
                    // connection is useless, and so is the port. A reply over the limits was
                    // left half read: the connection is out of step.
                    if !err.is_transport() && !matches!(err.kind, Fault::NotRedis | Fault::BadReply)
                    {
                        self.tls_settled.store(true, Ordering::Relaxed);
                        return Ok(Err(e));
                    }
                    *slot = None;
                    if !fresh && err.kind == Fault::Io {
                        continue;
                    }
                    let asking = probe::asking_time(timeout, timeout, began);
                    return Err(self.diagnosed(&e, fresh, asking));
                }
            }
        }
        unreachable!("the second attempt always uses a fresh connection")
    }

    /// Runs one command on the reused connection.
    pub(crate) fn query<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        timeout: Duration,
    ) -> Result<T, NodeError> {
        self.query_within(cmd, timeout, REPLY_LIMITS)
    }

    /// As `query`, for a reply that may be long (a Redis Cluster's slot map).
    pub(crate) fn query_long<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        timeout: Duration,
    ) -> Result<T, NodeError> {
        self.query_within(cmd, timeout, LONG_REPLY_LIMITS)
    }

    fn query_within<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        timeout: Duration,
        limits: Limits,
    ) -> Result<T, NodeError> {
        self.call(timeout, |c| {
            c.limits = limits;
            cmd.query(c)
        })?
        .map_err(|e| self.err(&e))
    }

    /// A script, for a server that may be part of a Cluster: redirections are returned, not
    /// followed. With `asking`, each request is preceded by ASKING (the answer to an ASK).
    pub(crate) fn eval_routed(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
        timeout: Duration,
        asking: bool,
    ) -> Result<Routed, NodeError> {
        let wait_for = match script.replicated {
            Some(write) if self.replicas > 0 => Some(write),
            _ => None,
        };
        // The WAIT goes on the connection that carried the write, in the same `call`: WAIT
        // counts the replicas that have this connection's last write, and on a fresh
        // connection (one that wrote nothing) it would count every replica at once.
        let ran = self.call(timeout, |c| {
            if script.long_reply {
                c.limits = LONG_REPLY_LIMITS;
            }
            let value = run_script(c, script, keys, args, asking)?;
            let acked = match wait_for {
                Some((_, wanted)) if wanted(&value) => {
                    match wait_replicas(c, self.replicas, timeout) {
                        Ok(n) => Some(Ok(n)),
                        // The server refused the WAIT (renamed away, BUSY, the ACL): the write
                        // stands, and the caller must hear that it was made, to give it back.
                        // (A timeout or a broken connection goes up as such, and drops the
                        // connection; the caller gives back after those too.)
                        Err(e) if e.code().is_some() => Some(Err(e)),
                        Err(e) => return Err(e),
                    }
                }
                _ => None,
            };
            Ok((value, acked))
        })?;
        let write = wait_for.map_or(script.name, |(write, _)| write);
        match ran {
            Ok((value, acked)) => self.replicated_or_not(value, acked, write, timeout),
            Err(e) => match (e.kind(), e.redirect_node()) {
                (redis::ErrorKind::Server(redis::ServerErrorKind::Moved), Some((addr, _))) => {
                    Ok(Routed::Moved(addr.to_string()))
                }
                (redis::ErrorKind::Server(redis::ServerErrorKind::Ask), Some((addr, _))) => {
                    Ok(Routed::Ask(addr.to_string()))
                }
                _ => Err(self.err(&e)),
            },
        }
    }

    /// What the server says it is (ROLE): a master, a replica or a Sentinel.
    pub fn role(&self, timeout: Duration) -> Result<redis::Role, NodeError> {
        self.query(&redis::cmd("ROLE"), timeout)
    }
}

impl Node for Single {
    fn eval_then(
        &self,
        first: Eval<'_>,
        second: Eval<'_>,
        timeout: Duration,
    ) -> Result<Replies, NodeError> {
        if let Some(done) = self.pipelined(first, second, timeout) {
            return done;
        }
        let value = self.eval(first.script, first.keys, first.args, timeout)?;
        Ok((
            value,
            self.eval(second.script, second.keys, second.args, timeout),
        ))
    }

    fn eval(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
        timeout: Duration,
    ) -> Result<Value, NodeError> {
        match self.eval_routed(script, keys, args, timeout, false)? {
            Routed::Done(v) => Ok(v),
            Routed::Moved(to) => Err(NodeError::cluster_node(&self.name, "MOVED", &to)),
            Routed::Ask(to) => Err(NodeError::cluster_node(&self.name, "ASK", &to)),
        }
    }

    /// A node of a Redis Cluster holds only its own slots' keys: listing it alone would show part
    /// of the locks as if they were all, so it is refused (use --cluster).
    fn info(&self, sections: &[&str], timeout: Duration) -> Result<Vec<String>, NodeError> {
        self.info_sections(sections, timeout)
    }

    fn scan(&self, pattern: &str, timeout: Duration) -> Result<Vec<String>, NodeError> {
        self.refuse_cluster_node(timeout)?;
        self.scan_keys(pattern, timeout)
    }

    fn subscriber(
        &self,
        _key: &str,
        channel: &str,
        timeout: Duration,
    ) -> Result<Subscriber, NodeError> {
        let endpoint = self.endpoint()?;
        Subscriber::subscribe(&endpoint, channel, timeout)
            .map_err(|e| self.cannot_subscribe(e.to_string()))
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn hang_up(&self) {
        *self.conn.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}
