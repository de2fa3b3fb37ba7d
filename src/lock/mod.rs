//! The lock protocol: which keys a lock uses, what the scripts say, and how a waiter waits.
//!
//! Every Redis command rlock sends is in the `.lua` files beside this one. A lock named KEY is:
//! - `PREFIX+KEY`, a string holding the owner token, with the lease as its PTTL (so other clients'
//!   `SET NX PX` locks on the same key exclude and are excluded by rlock);
//! - `{PREFIX+KEY}:state`, a hash: the fencing counter, who holds the lock (host, pid, user,
//!   command, since), its TTL, and the leases of waiting rlock processes;
//! - `{PREFIX+KEY}:q`, a sorted set of waiting tokens, oldest first (deleted when empty);
//! - `{PREFIX+KEY}:wake`, a pub/sub channel on which a release names the next waiter (or `*`,
//!   anyone, when no rlock process waits in line).
//!
//! The `{…}` hash tag puts them all in one Redis Cluster slot with the lock key.

mod wait;

use std::time::{Duration, Instant};

use redis::Value;

use crate::backend::{Fault, Node, NodeError, Script, hash_tag};
use crate::exit::Failure;

pub use wait::{Interrupt, WaitPolicy};

/// The sources and SHA1s of the scripts, from build.rs (which lists the files of each).
mod sources {
    include!(concat!(env!("OUT_DIR"), "/scripts.rs"));
}

// The scripts, public so that tests can run and preload exactly what rlock sends.
pub static ACQUIRE: Script = Script::new("acquire", sources::ACQUIRE);
pub static RELEASE: Script = Script::new("release", sources::RELEASE);
pub static RENEW: Script = Script::new("renew", sources::RENEW);
// Sent whole: it gives back grants whose reply never came, often to a server that has just
// stalled and may never have cached it, and its own reply may never be read.
pub static LEAVE: Script = Script::sent_whole("leave", sources::LEAVE);
pub static INSPECT: Script = Script::new("inspect", sources::INSPECT);
pub static FENCE: Script = Script::new("fence", sources::FENCE);

/// How long a waiter keeps its place in line without renewing it, and how often it renews it.
/// A waiter that dies holds up the line for at most `WAITER_LEASE`.
pub const WAITER_LEASE: Duration = Duration::from_secs(5);
pub const WAITER_REFRESH: Duration = Duration::from_secs(2);

/// The Redis names of one lock.
#[derive(Debug, Clone)]
pub struct LockKey {
    /// The name the user gave (`-k`).
    pub name: String,
    /// PREFIX + name.
    pub redis_key: String,
    state: String,
    queue: String,
    channel: String,
}

impl LockKey {
    pub fn new(prefix: &str, name: &str) -> Result<Self, Failure> {
        if name.is_empty() {
            return Err(Failure::Usage("the key must not be empty".into()));
        }
        let redis_key = format!("{prefix}{name}");
        // Helper keys must hash to the lock key's cluster slot. Appending to a key that has a
        // hash tag keeps its tag; otherwise the whole key becomes the tag.
        let base = if hash_tag(&redis_key).is_some() {
            redis_key.clone()
        } else if redis_key.contains('}') {
            let culprit = if prefix.contains('}') {
                format!("--prefix '{prefix}'")
            } else {
                format!("key '{name}'")
            };
            return Err(Failure::Usage(format!(
                "{culprit} has a '}}' outside a {{hash tag}}; rlock could not keep its helper keys in the lock's cluster slot"
            )));
        } else {
            format!("{{{redis_key}}}")
        };
        Ok(LockKey {
            name: name.to_string(),
            state: format!("{base}:state"),
            queue: format!("{base}:q"),
            channel: format!("{base}:wake"),
            redis_key,
        })
    }

    /// A key found by a listing, for reading only: a key with a `}` outside a hash tag (another
    /// client's lock) has no helper keys that share its cluster slot, so the lock key stands in
    /// for them, which the inspect script reads as "no state, no queue".
    fn listed(prefix: &str, name: &str) -> Self {
        LockKey::new(prefix, name).unwrap_or_else(|_| {
            let redis_key = format!("{prefix}{name}");
            LockKey {
                name: name.to_string(),
                state: redis_key.clone(),
                queue: redis_key.clone(),
                channel: format!("{redis_key}:wake"),
                redis_key,
            }
        })
    }

    /// The keys a script declares. Renew and fence use only the lock and its state: a key that
    /// does not exist (the queue, usually) would make a Cluster answer TRYAGAIN while the slot
    /// migrates, and a renewal must get through then.
    fn keys_for(&self, script: &Script) -> Vec<&str> {
        let mut keys = self.keys().to_vec();
        if matches!(script.name, "renew" | "fence") {
            keys.truncate(2);
        }
        keys
    }

    fn keys(&self) -> [&str; 3] {
        [&self.redis_key, &self.state, &self.queue]
    }

    /// True for rlock's own helper keys, which a listing must not show as locks: `{K}:state`
    /// and `{K}:q`, or `K:state` and `K:q` for a K with a hash tag of its own.
    pub fn is_helper(redis_key: &str) -> bool {
        let Some(base) = redis_key
            .strip_suffix(":state")
            .or_else(|| redis_key.strip_suffix(":q"))
        else {
            return false;
        };
        (base.starts_with('{') && base.ends_with('}')) || hash_tag(base).is_some()
    }
}

/// Who takes the lock, as `inspect` shows it.
#[derive(Debug, Clone)]
pub struct Identity {
    pub host: String,
    pub pid: u32,
    pub user: String,
    pub command: String,
}

impl Identity {
    /// `pid` and `command` are the holder's: rlock itself for `exec`, the calling shell for
    /// `acquire` (which exits at once).
    pub fn current(pid: u32, command: String) -> Self {
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "unknown-host".into());
        // $USER, or $LOGNAME (what cron and login set), before asking the user database.
        let user = ["USER", "LOGNAME"]
            .iter()
            .find_map(|var| std::env::var(var).ok().filter(|u| !u.is_empty()))
            .or_else(|| {
                nix::unistd::User::from_uid(nix::unistd::getuid())
                    .ok()
                    .flatten()
                    .map(|u| u.name)
            })
            .unwrap_or_else(|| nix::unistd::getuid().to_string());
        Identity {
            host,
            pid,
            user,
            command,
        }
    }
}

/// A lock held by this process.
#[derive(Debug, Clone)]
pub struct Grant {
    pub key: LockKey,
    pub token: String,
    pub fence: i64,
    pub ttl: Duration,
    /// When the request that won the lock was sent: the first lease is measured from here.
    pub sent: Instant,
}

/// What Redis knows of a holder that rlock wrote.
#[derive(Debug, Clone, Default)]
pub struct Holder {
    pub host: Option<String>,
    pub pid: Option<String>,
    pub user: Option<String>,
    pub since_ms: Option<i64>,
    pub command: Option<String>,
}

impl Holder {
    /// `alice@build-7 pid 4411 for 2m13s` or `another client (not rlock)`.
    pub fn describe(&self, now_ms: i64) -> String {
        match (&self.host, &self.pid) {
            (Some(host), Some(pid)) => {
                let mut s = match &self.user {
                    Some(u) => format!("{u}@{host} pid {pid}"),
                    None => format!("{host} pid {pid}"),
                };
                if let Some(since) = self.since_ms {
                    s.push_str(&format!(" for {}", human_ms(now_ms - since)));
                }
                s
            }
            _ => "another client (not rlock)".into(),
        }
    }
}

/// One try at taking the lock.
#[derive(Debug)]
enum Attempt {
    Granted {
        fence: i64,
        ttl_ms: i64,
        sent: Instant,
    },
    Busy {
        pttl: i64,
        now_ms: i64,
        holder: Holder,
    },
    Queued {
        wait_ms: i64,
    },
}

/// The outcome of a release.
#[derive(Debug)]
pub enum Released {
    /// The token owned the lock and it is gone (or it had released it before).
    Done,
    /// Forced: who held it, as text, or None if it was free.
    Broken(Option<String>),
}

/// The outcome of a renewal.
#[derive(Debug, PartialEq, Eq)]
pub enum Renewed {
    /// Extended for this long.
    Yes(Duration),
    /// The token no longer owns the lock: free, or someone else's.
    NotOwner(&'static str),
}

/// A lock as `inspect` reports it.
#[derive(Debug, Clone)]
pub struct LockInfo {
    pub name: String,
    pub redis_key: String,
    /// "none" when free, "string" for a lock, "hash" for e.g. Redisson's, or another type.
    pub kind: String,
    pub pttl: i64,
    pub now_ms: i64,
    pub token: Option<String>,
    pub fence: Option<i64>,
    pub ttl_ms: Option<i64>,
    pub holder: Holder,
    pub waiters: i64,
}

impl LockInfo {
    pub fn held(&self) -> bool {
        self.kind != "none"
    }

    /// Written by rlock (not by another client).
    pub fn ours(&self) -> bool {
        self.holder.host.is_some()
    }
}

/// The lock operations on one deployment: one logical Redis (single, Cluster, Sentinel), or a
/// Redlock quorum of independent masters.
pub struct Locker {
    nodes: Vec<Box<dyn Node>>,
    op_timeout: Duration,
}

/// What one node said to an acquire.
type NodeAttempt = Result<Attempt, NodeError>;

impl Locker {
    pub fn new(nodes: Vec<Box<dyn Node>>, op_timeout: Duration) -> Self {
        assert!(!nodes.is_empty(), "a Locker needs at least one node");
        Locker { nodes, op_timeout }
    }

    pub fn op_timeout(&self) -> Duration {
        self.op_timeout
    }

    /// True in Redlock mode (several independent masters).
    pub fn is_quorum(&self) -> bool {
        self.nodes.len() > 1
    }

    /// How many nodes make a majority.
    fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// The timeout of one request: --op-timeout, and in Redlock mode also well under the TTL,
    /// so that one dead node cannot use up the validity of a grant.
    pub fn node_timeout(&self, ttl: Duration) -> Duration {
        if self.is_quorum() {
            self.op_timeout.min(ttl / 10).max(Duration::from_millis(5))
        } else {
            self.op_timeout
        }
    }

    /// Runs `f` on every node, in parallel when there are several.
    fn on_all<T: Send>(&self, f: impl Fn(&dyn Node) -> T + Sync) -> Vec<T> {
        if self.nodes.len() == 1 {
            return vec![f(self.nodes[0].as_ref())];
        }
        let f = &f;
        std::thread::scope(|s| {
            let handles: Vec<_> = self
                .nodes
                .iter()
                .map(|n| s.spawn(move || f(n.as_ref())))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a node worker panicked"))
                .collect()
        })
    }

    /// Connections subscribed to the lock's wake channel: one per node that answers (in
    /// parallel, each within --op-timeout).
    pub fn subscribers(&self, key: &LockKey) -> Vec<redis::Connection> {
        self.on_all(|n| {
            let mut conn = n.subscriber(&key.redis_key, self.op_timeout).ok()?;
            let mut pubsub = conn.as_pubsub();
            let subscribed = pubsub.subscribe(&key.channel).is_ok();
            // Dropping a PubSub sends UNSUBSCRIBE and waits for the answer; the connection is
            // closed instead when the wait is over, which unsubscribes for free.
            std::mem::forget(pubsub);
            subscribed.then_some(conn)
        })
        .into_iter()
        .flatten()
        .collect()
    }

    fn attempt(
        &self,
        key: &LockKey,
        token: &str,
        ttl: Duration,
        join_queue: bool,
        who: &Identity,
    ) -> Result<Attempt, Failure> {
        let ttl_ms = ttl.as_millis().max(1).to_string();
        let lease = WAITER_LEASE.as_millis().to_string();
        let pid = who.pid.to_string();
        // A Redlock waiter does not queue: queues on independent masters could disagree on
        // who is first. It waits for the release's "anyone" wake-up instead.
        let join = join_queue && !self.is_quorum();
        let args = [
            token,
            &ttl_ms,
            if join { "1" } else { "0" },
            &lease,
            &key.channel,
            &who.host,
            &pid,
            &who.user,
            &who.command,
        ];
        let timeout = self.node_timeout(ttl);
        let sent = Instant::now();
        let results = self.on_all(|n| attempt_on(n, key, &args, timeout, sent));
        if !self.is_quorum() {
            let result = results.into_iter().next().expect("one node");
            if let Err(e) = &result
                && matches!(e.kind, Fault::Timeout | Fault::Io)
            {
                // Sent, and no reply (a timeout, or the connection broke): the grant may have
                // happened. Give it back so it does not sit out its whole TTL.
                let _ = self.leave(key, token);
            }
            return result.map_err(|e| e.into_failure(&key.name));
        }
        self.combine_attempts(key, token, ttl, sent, results)
    }

    /// Redlock: a grant needs a majority of nodes *and* time left of the TTL after the
    /// round trip (validity = TTL − elapsed − drift). Anything less is given back on every
    /// node, including those that did not answer.
    fn combine_attempts(
        &self,
        key: &LockKey,
        token: &str,
        ttl: Duration,
        sent: Instant,
        results: Vec<NodeAttempt>,
    ) -> Result<Attempt, Failure> {
        let n = self.nodes.len();
        let timeout = self.node_timeout(ttl);
        let fences: Vec<i64> = results
            .iter()
            .filter_map(|r| match r {
                Ok(Attempt::Granted { fence, .. }) => Some(*fence),
                _ => None,
            })
            .collect();
        let elapsed = sent.elapsed();
        let validity = ttl
            .checked_sub(elapsed)
            .and_then(|v| v.checked_sub(crate::watchdog::drift(ttl)));
        if fences.len() >= self.quorum()
            && let Some(validity) = validity
        {
            let fence = fences.iter().copied().max().unwrap_or(0);
            // Keep the nodes' counters in step, so that the next grant's fence (the highest
            // counter of its majority, which overlaps this one) is higher than this one: raise
            // the granting nodes that are behind (they just answered; usually none is).
            let floor = fence.to_string();
            std::thread::scope(|s| {
                for (node, result) in self.nodes.iter().zip(&results) {
                    if let Ok(Attempt::Granted { fence: mine, .. }) = result
                        && *mine < fence
                    {
                        let (floor, keys) = (&floor, key.keys_for(&FENCE));
                        s.spawn(move || node.eval(&FENCE, &keys, &[token, floor], timeout));
                    }
                }
            });
            return Ok(Attempt::Granted {
                fence,
                ttl_ms: validity.as_millis() as i64,
                sent,
            });
        }
        // No grant: give back what was granted, everywhere, each node within its timeout.
        self.on_all(|n| n.eval(&LEAVE, &key.keys(), &[token, &key.channel], timeout));

        let mut busy: Option<Attempt> = None;
        let mut errors: Vec<NodeError> = Vec::new();
        for r in results {
            match r {
                Ok(a @ Attempt::Busy { .. }) => {
                    let shorter = match (&busy, &a) {
                        (Some(Attempt::Busy { pttl: old, .. }), Attempt::Busy { pttl, .. }) => {
                            *pttl >= 0 && (*old < 0 || pttl < old)
                        }
                        _ => true,
                    };
                    if shorter {
                        busy = Some(a);
                    }
                }
                Ok(_) => {}
                Err(e) => errors.push(e),
            }
        }
        if let Some(e) = errors.iter().find(|e| e.kind == Fault::WrongType) {
            return Err(e.clone().into_failure(&key.name));
        }
        if errors.len() > n - self.quorum() {
            return Err(no_quorum(&format!("lock '{}'", key.name), n, &errors));
        }
        Ok(busy.unwrap_or(Attempt::Busy {
            // Granted by a majority but too slowly: try again soon.
            pttl: 0,
            now_ms: 0,
            holder: Holder::default(),
        }))
    }

    /// Leaves the wait queue, giving back a grant that raced with giving up. Best effort.
    pub fn leave(&self, key: &LockKey, token: &str) -> Result<(), Failure> {
        let results =
            self.on_all(|n| n.eval(&LEAVE, &key.keys(), &[token, &key.channel], self.op_timeout));
        match results.into_iter().find_map(Result::err) {
            Some(e) if !self.is_quorum() => Err(e.into_failure(&key.name)),
            _ => Ok(()),
        }
    }

    /// Releases the lock if `token` owns it. A retried release of the same token succeeds.
    pub fn release(&self, key: &LockKey, token: &str) -> Result<Released, Failure> {
        let results = self.on_all(|n| {
            let reply = eval_on(
                n,
                &RELEASE,
                key,
                &[token, &key.channel, "0"],
                self.op_timeout,
            )?;
            match text(&reply, 0).as_deref() {
                Some(s @ ("released" | "already" | "expired" | "other")) => Ok(s.to_string()),
                Some("wrongtype") => Err(wrong_type(n, &reply)),
                _ => Err(unexpected_on(n, "release", &reply)),
            }
        });
        let said = |what: &str| {
            results
                .iter()
                .filter(|r| matches!(r, Ok(s) if s == what))
                .count()
        };
        if said("released") + said("already") > 0 {
            return Ok(Released::Done);
        }
        if let Some(e) = results.iter().find_map(|r| r.as_ref().err()) {
            let answered = results.iter().filter(|r| r.is_ok()).count();
            if e.kind == Fault::WrongType || answered == 0 || !self.is_quorum() {
                return Err(e.clone().into_failure(&key.name));
            }
        }
        if said("other") > 0 {
            return Err(Failure::NotPermitted(format!(
                "lock '{}' is held by another owner, not by this token; nothing was changed (use --force to break it)",
                key.name
            )));
        }
        Err(Failure::NotPermitted(format!(
            "lock '{}' is not held by this token: it expired or was broken before the release; nothing was changed",
            key.name
        )))
    }

    /// Breaks the lock whoever holds it.
    pub fn force_release(&self, key: &LockKey) -> Result<Released, Failure> {
        let results = self.on_all(|n| {
            let reply = eval_on(n, &RELEASE, key, &["", &key.channel, "1"], self.op_timeout)?;
            match text(&reply, 0).as_deref() {
                Some("free") => Ok(None),
                Some("broken") => {
                    let kind = text(&reply, 1).unwrap_or_default();
                    let holder = holder_at(&reply, 4);
                    let now = int(&reply, 9).unwrap_or(0);
                    Ok(Some(if holder.host.is_some() {
                        holder.describe(now)
                    } else if kind == "hash" {
                        "another client (a hash, e.g. Redisson)".into()
                    } else {
                        format!(
                            "another client (token {})",
                            text(&reply, 3).unwrap_or_default()
                        )
                    }))
                }
                Some("wrongtype") => Err(wrong_type(n, &reply)),
                _ => Err(unexpected_on(n, "release", &reply)),
            }
        });
        if let Some(who) = results
            .iter()
            .find_map(|r| r.as_ref().ok().cloned().flatten())
        {
            return Ok(Released::Broken(Some(who)));
        }
        match results.into_iter().find_map(Result::err) {
            Some(e) => Err(e.into_failure(&key.name)),
            None => Ok(Released::Broken(None)),
        }
    }

    /// Extends the lock if `token` owns it; `ttl` None keeps the TTL it was given. In Redlock
    /// mode a majority must renew; the lock is lost once a majority can no longer renew it.
    pub fn renew(
        &self,
        key: &LockKey,
        token: &str,
        ttl: Option<Duration>,
        timeout: Duration,
    ) -> Result<Renewed, NodeError> {
        let ttl_ms = ttl
            .map(|t| t.as_millis().max(1).to_string())
            .unwrap_or_default();
        let timeout = ttl.map_or(timeout, |t| timeout.min(self.node_timeout(t)));
        let results = self.on_all(|n| {
            let reply = eval_on(n, &RENEW, key, &[token, &ttl_ms], timeout)?;
            match text(&reply, 0).as_deref() {
                Some("renewed") => Ok(Renewed::Yes(Duration::from_millis(
                    int(&reply, 1).unwrap_or(0).max(0) as u64,
                ))),
                Some("free") => Ok(Renewed::NotOwner("it expired or was deleted")),
                Some("other") => Ok(Renewed::NotOwner("another owner holds it")),
                Some("wrongtype") => Err(wrong_type(n, &reply)),
                _ => Err(unexpected_on(n, "renew", &reply)),
            }
        });
        if !self.is_quorum() {
            return results.into_iter().next().expect("one node");
        }
        let n = self.nodes.len();
        let renewed: Vec<Duration> = results
            .iter()
            .filter_map(|r| match r {
                Ok(Renewed::Yes(d)) => Some(*d),
                _ => None,
            })
            .collect();
        if renewed.len() >= self.quorum() {
            return Ok(Renewed::Yes(renewed.into_iter().min().unwrap_or_default()));
        }
        let not_owner = results
            .iter()
            .filter(|r| {
                matches!(r, Ok(Renewed::NotOwner(_)))
                    || matches!(r, Err(e) if e.kind == Fault::WrongType)
            })
            .count();
        if n - not_owner < self.quorum() {
            return Ok(Renewed::NotOwner(
                "a majority of the Redlock nodes no longer hold it",
            ));
        }
        Err(results
            .into_iter()
            .find_map(Result::err)
            .unwrap_or_else(|| NodeError {
                kind: Fault::Timeout,
                node: "Redlock".into(),
                detail: "too few nodes renewed in time".into(),
            }))
    }

    /// Reads one lock. In Redlock mode it is held when a majority holds the same token.
    pub fn inspect(&self, key: &LockKey) -> Result<LockInfo, Failure> {
        let results = self.on_all(|n| {
            eval_on(n, &INSPECT, key, &[], self.op_timeout).map(|r| lock_info(key, &r))
        });
        if !self.is_quorum() {
            let result = results.into_iter().next().expect("one node");
            return result.map_err(|e| e.into_failure(&key.name));
        }
        let infos: Vec<LockInfo> = results
            .iter()
            .filter_map(|r| r.as_ref().ok().cloned())
            .collect();
        if infos.len() < self.quorum() {
            let errors: Vec<NodeError> = results.into_iter().filter_map(Result::err).collect();
            return Err(no_quorum(
                &format!("lock '{}'", key.name),
                self.nodes.len(),
                &errors,
            ));
        }
        for info in &infos {
            if !info.held() {
                continue;
            }
            let same: Vec<&LockInfo> = infos
                .iter()
                .filter(|i| i.kind == info.kind && i.token == info.token)
                .collect();
            if same.len() >= self.quorum() {
                let mut out = info.clone();
                out.fence = same.iter().filter_map(|i| i.fence).max();
                out.pttl = same.iter().map(|i| i.pttl).min().unwrap_or(info.pttl);
                return Ok(out);
            }
        }
        let mut free = infos.into_iter().next().expect("a majority answered");
        free.kind = "none".into();
        free.pttl = -2;
        free.token = None;
        free.holder = Holder::default();
        Ok(free)
    }

    /// Every lock under `prefix` (SCAN, never KEYS), rlock's helper keys left out.
    pub fn list(&self, prefix: &str) -> Result<Vec<LockInfo>, Failure> {
        let pattern = format!("{}*", glob_escape(prefix));
        let results = self.on_all(|n| n.scan(&pattern, self.op_timeout));
        let mut keys: Vec<String> = Vec::new();
        let mut errors = Vec::new();
        for r in results {
            match r {
                Ok(k) => keys.extend(k),
                Err(e) => errors.push(e),
            }
        }
        if !errors.is_empty()
            && (!self.is_quorum() || errors.len() > self.nodes.len() - self.quorum())
        {
            let what = format!("the locks under '{prefix}'");
            return Err(if self.is_quorum() {
                no_quorum(&what, self.nodes.len(), &errors)
            } else {
                errors.remove(0).into_failure_for(&what)
            });
        }
        keys.sort();
        keys.dedup();
        let mut out = Vec::new();
        for redis_key in keys {
            if LockKey::is_helper(&redis_key) {
                continue;
            }
            let name = redis_key[prefix.len()..].to_string();
            let key = LockKey::listed(prefix, &name);
            let info = self.inspect(&key)?;
            // With no prefix every key of the database matches: show only what looks like a
            // lock (rlock's, or a string or hash that expires).
            let lock_like = !prefix.is_empty()
                || info.ours()
                || (matches!(info.kind.as_str(), "string" | "hash") && info.pttl >= 0);
            if info.held() && lock_like {
                out.push(info);
            }
        }
        Ok(out)
    }

    /// The lock `token` holds on `key`, if it does: a nested rlock inside `rlock exec`.
    pub fn owned(&self, key: &LockKey, token: &str) -> Result<Option<Grant>, Failure> {
        let info = self.inspect(key)?;
        if info.kind == "string" && info.token.as_deref() == Some(token) {
            // The lease it was given, and a send time such that send + lease is when it ends.
            let left = Duration::from_millis(info.pttl.max(0) as u64);
            let lease = info
                .ttl_ms
                .filter(|t| *t > 0)
                .map_or(left, |t| Duration::from_millis(t as u64))
                .max(left);
            let now = Instant::now();
            return Ok(Some(Grant {
                key: key.clone(),
                token: token.to_string(),
                fence: info.fence.unwrap_or(0),
                ttl: lease,
                sent: now.checked_sub(lease - left).unwrap_or(now),
            }));
        }
        Ok(None)
    }
}

/// Runs a script on one node; the reply as a list.
fn eval_on(
    node: &dyn Node,
    script: &Script,
    key: &LockKey,
    args: &[&str],
    timeout: Duration,
) -> Result<Vec<Value>, NodeError> {
    match node.eval(script, &key.keys_for(script), args, timeout)? {
        Value::Array(items) => Ok(items),
        other => Ok(vec![other]),
    }
}

fn attempt_on(
    node: &dyn Node,
    key: &LockKey,
    args: &[&str],
    timeout: Duration,
    sent: Instant,
) -> NodeAttempt {
    let reply = eval_on(node, &ACQUIRE, key, args, timeout)?;
    match text(&reply, 0).as_deref() {
        Some("ok") => Ok(Attempt::Granted {
            fence: int(&reply, 1).unwrap_or(0),
            ttl_ms: int(&reply, 2).unwrap_or(0),
            sent,
        }),
        Some("busy") => Ok(Attempt::Busy {
            pttl: int(&reply, 1).unwrap_or(-2),
            now_ms: int(&reply, 2).unwrap_or(0),
            holder: holder_at(&reply, 3),
        }),
        Some("queued") => Ok(Attempt::Queued {
            wait_ms: int(&reply, 1).unwrap_or(0),
        }),
        Some("wrongtype") => Err(wrong_type(node, &reply)),
        _ => Err(unexpected_on(node, "acquire", &reply)),
    }
}

fn lock_info(key: &LockKey, r: &[Value]) -> LockInfo {
    LockInfo {
        name: key.name.clone(),
        redis_key: key.redis_key.clone(),
        kind: text(r, 0).unwrap_or_else(|| "none".into()),
        pttl: int(r, 1).unwrap_or(-2),
        now_ms: int(r, 2).unwrap_or(0),
        token: text(r, 3),
        fence: int(r, 4),
        holder: holder_at(r, 5),
        ttl_ms: int(r, 10),
        waiters: int(r, 11).unwrap_or(0),
    }
}

fn wrong_type(node: &dyn Node, reply: &[Value]) -> NodeError {
    NodeError {
        kind: Fault::WrongType,
        node: node.name().into(),
        detail: format!(
            "it is a {}",
            text(reply, 1).unwrap_or_else(|| "value of another type".into())
        ),
    }
}

fn unexpected_on(node: &dyn Node, what: &str, reply: &[Value]) -> NodeError {
    NodeError {
        kind: Fault::Other,
        node: node.name().into(),
        detail: format!("unexpected reply to {what}: {reply:?}"),
    }
}

/// A Redlock request that too few masters answered; `what` names what it was about.
fn no_quorum(what: &str, n: usize, errors: &[NodeError]) -> Failure {
    if let Some(auth) = errors
        .iter()
        .find(|e| matches!(e.kind, Fault::Auth | Fault::Denied))
    {
        return auth.clone().into_failure_for(what);
    }
    let detail = errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    Failure::Unavailable(format!(
        "no quorum for {what}: {} of {n} Redis nodes unavailable ({detail}); a majority must answer",
        errors.len()
    ))
}

/// `SCAN MATCH` glob with the prefix's own glob characters taken literally.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn holder_at(reply: &[Value], at: usize) -> Holder {
    Holder {
        host: text(reply, at),
        pid: text(reply, at + 1),
        user: text(reply, at + 2),
        since_ms: int(reply, at + 3),
        command: text(reply, at + 4),
    }
}

fn text(reply: &[Value], i: usize) -> Option<String> {
    match reply.get(i)? {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Okay => Some("OK".into()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

fn int(reply: &[Value], i: usize) -> Option<i64> {
    match reply.get(i)? {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

/// A short human duration: `850ms`, `4.2s`, `28s`, `2m13s`, `1h05m`.
pub fn human_ms(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 10_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else if ms < 60_000 {
        format!("{}s", ms / 1000)
    } else if ms < 3_600_000 {
        format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60)
    } else {
        format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60)
    }
}

/// `rlock:` + `{name}` → what the user sees for a busy lock.
fn busy_message(key: &LockKey, pttl: i64, now_ms: i64, holder: &Holder) -> String {
    let expiry = match pttl {
        p if p >= 0 => format!("expires in {}", human_ms(p)),
        -1 => "never expires".into(),
        _ => "just released".into(),
    };
    format!(
        "lock '{}' is busy (held by {}, {expiry})",
        key.name,
        holder.describe(now_ms)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_hashes_are_what_redis_computes() {
        for script in [&ACQUIRE, &RELEASE, &RENEW, &LEAVE, &INSPECT, &FENCE] {
            let sha = redis::Script::new(script.source).get_hash().to_string();
            assert_eq!(script.sha, sha, "SHA1 of {}", script.name);
        }
        assert!(ACQUIRE.source.starts_with(include_str!("common.lua")));
        assert!(ACQUIRE.source.ends_with(include_str!("acquire.lua")));
    }

    #[test]
    fn helper_keys_share_the_slot() {
        let k = LockKey::new("rlock:", "jobs").unwrap();
        assert_eq!(k.redis_key, "rlock:jobs");
        assert_eq!(k.state, "{rlock:jobs}:state");
        let k = LockKey::new("", "{user1}.jobs").unwrap();
        assert_eq!(k.state, "{user1}.jobs:state");
        assert!(LockKey::new("", "a}b").is_err());
        let k = LockKey::new("", "a{b").unwrap();
        assert_eq!(hash_tag(&k.state), Some("a{b"));
        assert!(LockKey::is_helper("{rlock:jobs}:state"));
        assert!(LockKey::is_helper("rlock:{grp}jobs:q"));
        assert!(!LockKey::is_helper("rlock:jobs"));
    }

    #[test]
    fn human_durations() {
        assert_eq!(human_ms(850), "850ms");
        assert_eq!(human_ms(4200), "4.2s");
        assert_eq!(human_ms(133_000), "2m13s");
        assert_eq!(human_ms(3_900_000), "1h05m");
    }

    #[test]
    fn escapes_globs() {
        assert_eq!(glob_escape("a*b?[c]"), "a\\*b\\?\\[c\\]");
    }
}
