//! What the scripts answer, decoded by name in one place, straight into the types the callers
//! use. Every reply is a word (what happened, or for inspect the key's type) followed by fields
//! by name (common.lua's `reply`): a flat list of name, value pairs in which a field without a
//! value is left out. Only this file reads them; nothing is found by its position.

use std::time::{Duration, Instant};

use redis::Value;

use super::exclusive::Attempt;
use super::key::LockKey;
use super::read::LockInfo;
use super::{Grant, NotOwner, Renewed, Request, Sharing};

/// The Redis type of a lock key, as the scripts report it (`TYPE`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyType {
    /// No such key: the lock is free.
    None,
    /// A string: a lock (rlock's, or another client's `SET NX PX`).
    String,
    /// A hash: another client's lock, e.g. Redisson's.
    Hash,
    /// A sorted set: the holders of an rlock semaphore or shared lock (when its state says so).
    Holders,
    /// Anything else (a list, a set, ...): not a lock.
    Other(String),
}

impl KeyType {
    fn parse(name: &str) -> Self {
        match name {
            "none" => KeyType::None,
            "string" => KeyType::String,
            "hash" => KeyType::Hash,
            "zset" => KeyType::Holders,
            other => KeyType::Other(other.to_string()),
        }
    }

    /// The name Redis gives the type.
    pub fn as_str(&self) -> &str {
        match self {
            KeyType::None => "none",
            KeyType::String => "string",
            KeyType::Hash => "hash",
            KeyType::Holders => "zset",
            KeyType::Other(name) => name,
        }
    }
}

/// What Redis knows of a holder that rlock wrote.
#[derive(Debug, Clone, Default)]
pub struct Holder {
    pub host: Option<String>,
    pub pid: Option<HolderPid>,
    pub user: Option<String>,
    pub since_ms: Option<i64>,
    pub command: Option<String>,
    /// The pid namespace `pid` is counted in, where rlock recorded it.
    pub pidns: Option<String>,
}

/// A holder's process id as its record has it: a pid, as rlock writes it, or whatever else a
/// record written by another client (or by hand) holds there, kept as it is so that `inspect`
/// shows it rather than fail or hide it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HolderPid {
    Pid(u32),
    Other(String),
}

impl HolderPid {
    /// Leniently: a pid written as rlock writes one (decimal, no sign, no leading zero), or
    /// else the text.
    pub fn parse(text: String) -> Self {
        match text.parse::<u32>() {
            Ok(pid) if pid.to_string() == text => HolderPid::Pid(pid),
            _ => HolderPid::Other(text),
        }
    }

    /// The number the record gives, if it gives one: a pid, or an odd record's number (`+42`,
    /// `-1`, `007`), which the JSON output shows and the staleness check judges (and refuses).
    pub fn number(&self) -> Option<i64> {
        match self {
            HolderPid::Pid(pid) => Some(i64::from(*pid)),
            HolderPid::Other(text) => text.parse().ok(),
        }
    }
}

impl std::fmt::Display for HolderPid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HolderPid::Pid(pid) => write!(f, "{pid}"),
            HolderPid::Other(text) => f.write_str(text),
        }
    }
}

/// The holders of a semaphore or shared lock that a busy reply reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crowd {
    pub holders: i64,
    /// The semaphore's N; 0 for a shared lock.
    pub limit: i64,
    /// A shared request is kept out by an exclusive request ahead of it in line, not by the
    /// holders (who would let it in).
    pub exclusive_ahead: bool,
}

/// One holder of a semaphore or shared lock (multi.lua's record).
#[derive(Debug, Clone, Default)]
pub struct HolderLease {
    pub token: String,
    /// When its lease ends (server ms).
    pub ends_ms: i64,
    pub fence: Option<i64>,
    pub ttl_ms: Option<i64>,
    /// When it was last renewed (or granted), server ms.
    pub renewed_ms: Option<i64>,
    pub holder: Holder,
}

/// A reply that is none of the outcomes the caller asked for; the script changed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The key is not a lock: it holds a value of this Redis type.
    WrongType(String),
    /// The lock is held as another kind than the one asked for.
    Mismatch(Sharing),
    /// No version of the script answers this.
    Unexpected,
}

type Decoded<T> = Result<T, Refusal>;

/// A reply taken apart: its first word and its fields by name.
struct Reply<'a> {
    word: String,
    fields: Fields<'a>,
}

impl<'a> Reply<'a> {
    fn parse(r: &'a [Value]) -> Decoded<Self> {
        let (first, rest) = r.split_first().ok_or(Refusal::Unexpected)?;
        Ok(Reply {
            word: as_text(first).ok_or(Refusal::Unexpected)?,
            fields: Fields::parse(rest)?,
        })
    }

    /// The `{"wrongtype", type}` refusal.
    fn wrong_type(&self) -> Refusal {
        Refusal::WrongType(
            self.fields
                .text("type")
                .unwrap_or_else(|| "value of another type".into()),
        )
    }
}

/// Fields by name (common.lua's `named`): name, value, name, value, ...
struct Fields<'a>(Vec<(String, &'a Value)>);

impl<'a> Fields<'a> {
    fn parse(r: &'a [Value]) -> Decoded<Self> {
        if !r.len().is_multiple_of(2) {
            return Err(Refusal::Unexpected);
        }
        r.chunks(2)
            .map(|pair| Ok((as_text(&pair[0]).ok_or(Refusal::Unexpected)?, &pair[1])))
            .collect::<Decoded<_>>()
            .map(Fields)
    }

    fn get(&self, name: &str) -> Option<&'a Value> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }

    fn text(&self, name: &str) -> Option<String> {
        self.get(name).and_then(as_text)
    }

    fn int(&self, name: &str) -> Option<i64> {
        self.get(name).and_then(as_int)
    }

    /// A field that is itself a list (empty when absent).
    fn list(&self, name: &str) -> &'a [Value] {
        match self.get(name) {
            Some(Value::Array(items)) => items,
            _ => &[],
        }
    }

    /// The fields host, pid, user, since and cmd.
    fn holder(&self) -> Holder {
        Holder {
            host: self.text("host"),
            pid: self.text("pid").map(HolderPid::parse),
            user: self.text("user"),
            since_ms: self.int("since"),
            command: self.text("cmd"),
            pidns: self.text("pidns"),
        }
    }
}

impl Attempt {
    /// acquire.lua's reply to `req`, sent at `sent`.
    pub(super) fn from_reply(r: &[Value], req: &Request, sent: Instant) -> Decoded<Self> {
        let reply = Reply::parse(r)?;
        let f = &reply.fields;
        Ok(match reply.word.as_str() {
            "ok" => Attempt::Granted(Grant {
                key: req.key.clone(),
                token: req.token.to_string(),
                fence: f.int("fence").unwrap_or(0),
                ttl: millis(f.int("ttl").unwrap_or(0)),
                sent,
            }),
            "busy" => Attempt::Busy {
                pttl: f.int("pttl").unwrap_or(-2),
                now_ms: f.int("now").unwrap_or(0),
                holder: f.holder(),
                crowd: f.int("holders").map(|holders| Crowd {
                    holders,
                    limit: f.int("limit").unwrap_or(0),
                    exclusive_ahead: f.int("ahead") == Some(1),
                }),
                place: f.int("place"),
            },
            "queued" => Attempt::Queued {
                wait_ms: f.int("wait").unwrap_or(0),
            },
            "mismatch" => {
                return Err(Refusal::Mismatch(match f.text("held").as_deref() {
                    Some("exclusive") => Sharing::Exclusive,
                    Some("shared") => Sharing::Shared,
                    Some("limit") => Sharing::Limit(
                        f.int("limit")
                            .and_then(|n| u32::try_from(n).ok())
                            .unwrap_or(0),
                    ),
                    _ => return Err(Refusal::Unexpected),
                }));
            }
            "wrongtype" => return Err(reply.wrong_type()),
            _ => return Err(Refusal::Unexpected),
        })
    }
}

/// True for acquire.lua's grant ("ok"): what --replicas must see reach the replicas.
pub fn is_granted(reply: &Value) -> bool {
    first_word(reply) == Some(b"ok")
}

/// True for renew.lua's "renewed".
pub fn is_renewed(reply: &Value) -> bool {
    first_word(reply) == Some(b"renewed")
}

fn first_word(reply: &Value) -> Option<&[u8]> {
    match reply {
        Value::Array(items) => match items.first()? {
            Value::BulkString(b) => Some(b),
            Value::SimpleString(s) => Some(s.as_bytes()),
            _ => None,
        },
        _ => None,
    }
}

/// release.lua's answer.
#[derive(Debug)]
pub enum ReleaseReply {
    Released,
    /// This token released it before (a retried release).
    Already,
    /// The lock is free: the token's grant ran out.
    Expired,
    /// Someone else holds it.
    Other,
    /// Forced, and nobody held it.
    Free,
    /// Forced: what was there, and who held it when rlock wrote it.
    Broken {
        kind: KeyType,
        value: Option<String>,
        holder: Holder,
        now_ms: i64,
    },
    /// Forced, a semaphore or shared lock: every holder.
    BrokenAll {
        now_ms: i64,
        holders: Vec<HolderLease>,
    },
}

impl ReleaseReply {
    pub fn decode(r: &[Value]) -> Decoded<Self> {
        let reply = Reply::parse(r)?;
        let f = &reply.fields;
        Ok(match reply.word.as_str() {
            "released" => ReleaseReply::Released,
            "already" => ReleaseReply::Already,
            "expired" => ReleaseReply::Expired,
            "other" => ReleaseReply::Other,
            "free" => ReleaseReply::Free,
            "broken" => ReleaseReply::Broken {
                kind: KeyType::parse(&f.text("type").unwrap_or_default()),
                value: f.text("value"),
                holder: f.holder(),
                now_ms: f.int("now").unwrap_or(0),
            },
            "brokenall" => ReleaseReply::BrokenAll {
                now_ms: f.int("now").unwrap_or(0),
                holders: holder_leases(f.list("holders")),
            },
            "wrongtype" => return Err(reply.wrong_type()),
            _ => return Err(Refusal::Unexpected),
        })
    }
}

/// Why release.lua did not record the hold it ended in the lock's history (its "unrecorded"
/// field: the ACL, a history key of another type, a full server); None when it did, or was not
/// asked to.
pub fn unrecorded(r: &[Value]) -> Option<String> {
    Reply::parse(r).ok()?.fields.text("unrecorded")
}

impl Renewed {
    /// renew.lua's reply.
    pub(super) fn from_reply(r: &[Value]) -> Decoded<Self> {
        let reply = Reply::parse(r)?;
        Ok(match reply.word.as_str() {
            "renewed" => Renewed::Yes(millis(reply.fields.int("ttl").unwrap_or(0))),
            "free" if reply.fields.int("broken") == Some(1) => Renewed::NotOwner(NotOwner::Broken),
            "free" => Renewed::NotOwner(NotOwner::Gone),
            "other" => Renewed::NotOwner(NotOwner::Taken),
            "wrongtype" => return Err(reply.wrong_type()),
            _ => return Err(Refusal::Unexpected),
        })
    }
}

impl LockInfo {
    /// inspect.lua's reply about `key`.
    pub(super) fn from_reply(key: &LockKey, r: &[Value]) -> Decoded<Self> {
        let reply = Reply::parse(r)?;
        let f = &reply.fields;
        let mode = f.text("mode");
        let kind = match KeyType::parse(&reply.word) {
            // A sorted set rlock did not write.
            KeyType::Holders if mode.is_none() => KeyType::Other("zset".into()),
            kind => kind,
        };
        let limit = mode.map(|mode| match mode.as_str() {
            "shared" => 0,
            _ => f.int("limit").unwrap_or(0),
        });
        let holders = holder_leases(f.list("holders"));
        let holder = f.holder();
        Ok(LockInfo {
            name: key.name.clone(),
            redis_key: key.redis_key.clone(),
            kind,
            pttl: f.int("pttl").unwrap_or(-2),
            now_ms: f.int("now").unwrap_or(0),
            token: f.text("value"),
            fence: f.int("fence"),
            ttl_ms: f.int("ttl"),
            // Never before the grant (a record an older rlock left may lack it, or be older).
            renewed_ms: f
                .int("renewed")
                .max(holder.since_ms)
                .filter(|_| limit.is_none()),
            // A semaphore or shared lock stands for its first holder where one is shown.
            holder: holders.first().map_or(holder, |first| first.holder.clone()),
            waiters: f.int("waiters").unwrap_or(0),
            limit,
            holders,
        })
    }
}

/// The holders of a semaphore or shared lock: a list of fields each (token, ends, and record,
/// multi.lua's JSON).
fn holder_leases(list: &[Value]) -> Vec<HolderLease> {
    list.iter()
        .filter_map(|entry| match entry {
            Value::Array(items) => Fields::parse(items).ok(),
            _ => None,
        })
        .filter_map(|f| {
            let token = f.text("token")?;
            Some(holder_lease(
                token,
                f.int("ends").unwrap_or(0),
                f.text("record"),
            ))
        })
        .collect()
}

/// One holder from its record (JSON: fence, host, pid, user, cmd, since, ttl, renewed, pidns);
/// a record that cannot be read leaves its fields unknown.
fn holder_lease(token: String, ends_ms: i64, record: Option<String>) -> HolderLease {
    let rec: serde_json::Value = record
        .and_then(|j| serde_json::from_str(&j).ok())
        .unwrap_or_default();
    let field = |name: &str| match &rec[name] {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let number = |name: &str| field(name).and_then(|s| s.parse::<f64>().ok());
    HolderLease {
        token,
        ends_ms,
        fence: field("fence").and_then(|s| s.parse().ok()),
        ttl_ms: number("ttl").map(|n| n as i64),
        renewed_ms: number("renewed").map(|n| n as i64),
        holder: Holder {
            host: field("host"),
            pid: field("pid").map(HolderPid::parse),
            user: field("user").filter(|u| !u.is_empty()),
            since_ms: number("since").map(|n| n as i64),
            command: field("cmd"),
            pidns: field("pidns"),
        },
    }
}

fn millis(ms: i64) -> Duration {
    Duration::from_millis(ms.max(0) as u64)
}

fn as_text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Okay => Some("OK".into()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
