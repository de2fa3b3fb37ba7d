//! The lock protocol: which keys a lock uses, what the scripts say, and how a waiter waits.
//!
//! Every Redis command rlock sends is in the `.lua` files beside this one. A lock named KEY is:
//! - `PREFIX+KEY`, a string holding the owner token, with the lease as its PTTL (so other clients'
//!   `SET NX PX` locks on the same key exclude and are excluded by rlock);
//! - `{PREFIX+KEY}:state`, a hash: the fencing counter, who holds the lock (host, pid, user,
//!   command, since), its TTL, and the leases of waiting rlock processes;
//! - `{PREFIX+KEY}:q`, a sorted set of waiting tokens, oldest first (deleted when empty);
//! - `{PREFIX+KEY}:wake`, a pub/sub channel on which a release names the next waiter.
//!
//! The `{…}` hash tag puts them all in one Redis Cluster slot with the lock key.

mod wait;

use std::time::{Duration, Instant};

use redis::Value;

use crate::backend::{ErrorKind, Node, NodeError, Script};
use crate::exit::Failure;

pub use wait::{Interrupt, WaitPolicy};

static ACQUIRE: Script = Script::new("acquire", include_str!("acquire.lua"));
static RELEASE: Script = Script::new("release", include_str!("release.lua"));
static RENEW: Script = Script::new("renew", include_str!("renew.lua"));
static LEAVE: Script = Script::new("leave", include_str!("leave.lua"));
static INSPECT: Script = Script::new("inspect", include_str!("inspect.lua"));

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
            return Err(Failure::Usage(format!(
                "key '{name}' has a '}}' outside a {{hash tag}}; rlock could not keep its helper keys in the lock's cluster slot"
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

    fn keys(&self) -> [&str; 3] {
        [&self.redis_key, &self.state, &self.queue]
    }

    /// True for rlock's own helper keys, which a listing must not show as locks.
    pub fn is_helper(redis_key: &str) -> bool {
        redis_key.starts_with('{') && (redis_key.ends_with("}:state") || redis_key.ends_with("}:q"))
    }
}

/// The part of a key Redis Cluster hashes: the text between the first `{` and the next `}`,
/// when not empty.
fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let close = key[open + 1..].find('}')?;
    (close > 0).then(|| &key[open + 1..open + 1 + close])
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
        let user = std::env::var("USER")
            .ok()
            .filter(|u| !u.is_empty())
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

/// The lock operations on one deployment.
pub struct Locker {
    node: Box<dyn Node>,
    op_timeout: Duration,
}

impl Locker {
    pub fn new(node: Box<dyn Node>, op_timeout: Duration) -> Self {
        Locker { node, op_timeout }
    }

    pub fn node(&self) -> &dyn Node {
        self.node.as_ref()
    }

    pub fn op_timeout(&self) -> Duration {
        self.op_timeout
    }

    fn eval(
        &self,
        script: &Script,
        key: &LockKey,
        args: &[&str],
        timeout: Duration,
    ) -> Result<Vec<Value>, NodeError> {
        let reply = self.node.eval(script, &key.keys(), args, timeout)?;
        match reply {
            Value::Array(items) => Ok(items),
            other => Ok(vec![other]),
        }
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
        let args = [
            token,
            &ttl_ms,
            if join_queue { "1" } else { "0" },
            &lease,
            &key.channel,
            &who.host,
            &pid,
            &who.user,
            &who.command,
        ];
        let sent = Instant::now();
        let reply = match self.eval(&ACQUIRE, key, &args, self.op_timeout) {
            Ok(r) => r,
            Err(e) => {
                if e.kind == ErrorKind::Timeout {
                    // The grant may have happened with the reply lost: give it back so it does
                    // not sit out its whole TTL.
                    let _ = self.leave(key, token);
                }
                return Err(e.into_failure(&key.name));
            }
        };
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
            Some("wrongtype") => Err(not_a_lock(key, &reply)),
            _ => Err(unexpected(key, "acquire", &reply)),
        }
    }

    /// Leaves the wait queue, giving back a grant that raced with giving up. Best effort.
    pub fn leave(&self, key: &LockKey, token: &str) -> Result<(), Failure> {
        self.eval(&LEAVE, key, &[token, &key.channel], self.op_timeout)
            .map(|_| ())
            .map_err(|e| e.into_failure(&key.name))
    }

    /// Releases the lock if `token` owns it. A retried release of the same token succeeds.
    pub fn release(&self, key: &LockKey, token: &str) -> Result<Released, Failure> {
        let reply = self
            .eval(&RELEASE, key, &[token, &key.channel, "0"], self.op_timeout)
            .map_err(|e| e.into_failure(&key.name))?;
        match text(&reply, 0).as_deref() {
            Some("released" | "already") => Ok(Released::Done),
            Some("expired") => Err(Failure::NotPermitted(format!(
                "lock '{}' is not held by this token: it expired or was broken before the release; nothing was changed",
                key.name
            ))),
            Some("other") => Err(Failure::NotPermitted(format!(
                "lock '{}' is held by another owner, not by this token; nothing was changed (use --force to break it)",
                key.name
            ))),
            Some("wrongtype") => Err(not_a_lock(key, &reply)),
            _ => Err(unexpected(key, "release", &reply)),
        }
    }

    /// Breaks the lock whoever holds it.
    pub fn force_release(&self, key: &LockKey) -> Result<Released, Failure> {
        let reply = self
            .eval(&RELEASE, key, &["", &key.channel, "1"], self.op_timeout)
            .map_err(|e| e.into_failure(&key.name))?;
        match text(&reply, 0).as_deref() {
            Some("free") => Ok(Released::Broken(None)),
            Some("broken") => {
                let kind = text(&reply, 1).unwrap_or_default();
                let holder = holder_at(&reply, 4);
                let now = int(&reply, 9).unwrap_or(0);
                let who = if holder.host.is_some() {
                    holder.describe(now)
                } else if kind == "hash" {
                    "another client (a hash, e.g. Redisson)".into()
                } else {
                    format!(
                        "another client (token {})",
                        text(&reply, 3).unwrap_or_default()
                    )
                };
                Ok(Released::Broken(Some(who)))
            }
            Some("wrongtype") => Err(not_a_lock(key, &reply)),
            _ => Err(unexpected(key, "release", &reply)),
        }
    }

    /// Extends the lock if `token` owns it; `ttl` None keeps the TTL it was given.
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
        let reply = self.eval(&RENEW, key, &[token, &ttl_ms], timeout)?;
        match text(&reply, 0).as_deref() {
            Some("renewed") => Ok(Renewed::Yes(Duration::from_millis(
                int(&reply, 1).unwrap_or(0).max(0) as u64,
            ))),
            Some("free") => Ok(Renewed::NotOwner("it expired or was deleted")),
            Some("other") => Ok(Renewed::NotOwner("another owner holds it")),
            Some("wrongtype") => Err(NodeError {
                kind: ErrorKind::WrongType,
                node: self.node.name().into(),
                detail: format!("it is a {}", text(&reply, 1).unwrap_or_default()),
            }),
            _ => Err(NodeError {
                kind: ErrorKind::Other,
                node: self.node.name().into(),
                detail: format!("unexpected reply to renew: {reply:?}"),
            }),
        }
    }

    /// Reads one lock.
    pub fn inspect(&self, key: &LockKey) -> Result<LockInfo, Failure> {
        let r = self
            .eval(&INSPECT, key, &[], self.op_timeout)
            .map_err(|e| e.into_failure(&key.name))?;
        Ok(LockInfo {
            name: key.name.clone(),
            redis_key: key.redis_key.clone(),
            kind: text(&r, 0).unwrap_or_else(|| "none".into()),
            pttl: int(&r, 1).unwrap_or(-2),
            now_ms: int(&r, 2).unwrap_or(0),
            token: text(&r, 3),
            fence: int(&r, 4),
            holder: holder_at(&r, 5),
            ttl_ms: int(&r, 10),
            waiters: int(&r, 11).unwrap_or(0),
        })
    }

    /// Every lock under `prefix` (SCAN, never KEYS), rlock's helper keys left out.
    pub fn list(&self, prefix: &str) -> Result<Vec<LockInfo>, Failure> {
        let pattern = format!("{}*", glob_escape(prefix));
        let keys = self
            .node
            .scan(&pattern, self.op_timeout)
            .map_err(|e| e.into_failure(&format!("{prefix}*")))?;
        let mut out = Vec::new();
        for redis_key in keys {
            if LockKey::is_helper(&redis_key) {
                continue;
            }
            let name = redis_key[prefix.len()..].to_string();
            let Ok(key) = LockKey::new(prefix, &name) else {
                continue;
            };
            let info = self.inspect(&key)?;
            if info.held() {
                out.push(info);
            }
        }
        Ok(out)
    }

    /// The lock `token` holds on `key`, if it does: a nested rlock inside `rlock exec`.
    pub fn owned(&self, key: &LockKey, token: &str) -> Result<Option<Grant>, Failure> {
        let info = self.inspect(key)?;
        if info.kind == "string" && info.token.as_deref() == Some(token) {
            return Ok(Some(Grant {
                key: key.clone(),
                token: token.to_string(),
                fence: info.fence.unwrap_or(0),
                ttl: Duration::from_millis(info.pttl.max(0) as u64),
                sent: Instant::now(),
            }));
        }
        Ok(None)
    }
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

fn not_a_lock(key: &LockKey, reply: &[Value]) -> Failure {
    let kind = text(reply, 1).unwrap_or_else(|| "another type".into());
    Failure::NotALock(format!(
        "key '{}' holds a {kind}, not a lock rlock can use (Redis key '{}'); nothing was changed",
        key.name, key.redis_key
    ))
}

fn unexpected(key: &LockKey, what: &str, reply: &[Value]) -> Failure {
    Failure::Unavailable(format!(
        "unexpected reply from Redis to {what} of lock '{}': {reply:?}",
        key.name
    ))
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
