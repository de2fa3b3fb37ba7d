//! How the scripts answer, and the types of what they say: every reply is a word (what
//! happened, or for inspect the key's type) followed by fields by name (common.lua's `reply`):
//! a flat list of name, value pairs in which a field without a value is left out. Each script's
//! call (call/) decodes its reply with these, by name; a field the reply must carry is an error
//! when missing. Nothing is found by its position.

use std::time::Duration;

use redis::Value;

use super::Sharing;

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
    pub(super) fn parse(name: &str) -> Self {
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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
    /// A field the reply must carry is missing.
    Missing(&'static str),
    /// No version of the script answers this.
    Unexpected,
    /// A field holds what no version of the script gives it (a fence that is not a positive
    /// integer below 2^53): the field's name and what it held.
    Nonsense(&'static str, String),
}

pub(super) type Decoded<T> = Result<T, Refusal>;

/// A reply taken apart: the word that says what happened and its fields by name.
pub(super) struct Reply<'a> {
    pub word: String,
    pub fields: Fields<'a>,
}

impl<'a> Reply<'a> {
    pub fn parse(r: &'a [Value]) -> Decoded<Self> {
        let (first, rest) = r.split_first().ok_or(Refusal::Unexpected)?;
        Ok(Reply {
            word: as_text(first).ok_or(Refusal::Unexpected)?,
            fields: Fields::parse(rest)?,
        })
    }

    /// The `{"wrongtype", type}` refusal.
    pub fn wrong_type(&self) -> Refusal {
        Refusal::WrongType(
            self.fields
                .text("type")
                .unwrap_or_else(|| "value of another type".into()),
        )
    }
}

/// Fields by name (common.lua's `named`): name, value, name, value, ...
pub(super) struct Fields<'a>(Vec<(String, &'a Value)>);

impl<'a> Fields<'a> {
    pub fn parse(r: &'a [Value]) -> Decoded<Self> {
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

    /// An optional field, as text.
    pub fn text(&self, name: &str) -> Option<String> {
        self.get(name).and_then(as_text)
    }

    /// An optional field, as a whole number.
    pub fn int(&self, name: &str) -> Option<i64> {
        self.get(name).and_then(as_int)
    }

    /// A field the reply must carry, as text.
    pub fn need_text(&self, name: &'static str) -> Decoded<String> {
        self.text(name).ok_or(Refusal::Missing(name))
    }

    /// A field the reply must carry, as a whole number.
    pub fn need_int(&self, name: &'static str) -> Decoded<i64> {
        self.int(name).ok_or(Refusal::Missing(name))
    }

    /// A field the reply must carry, a number of milliseconds (none below zero).
    pub fn need_millis(&self, name: &'static str) -> Decoded<Duration> {
        self.need_int(name).map(millis)
    }

    /// A field that is itself a list (empty when absent).
    pub fn list(&self, name: &str) -> &'a [Value] {
        match self.get(name) {
            Some(Value::Array(items)) => items,
            _ => &[],
        }
    }

    /// The fields host, pid, user, since and cmd.
    pub fn holder(&self) -> Holder {
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

/// The waiters in line, first first: a list of fields each (host, pid, user, cmd, and since:
/// when it joined the line), read as holder records are.
pub(super) fn waiters(list: &[Value]) -> Decoded<Vec<Holder>> {
    list.iter()
        .map(|entry| {
            let Value::Array(items) = entry else {
                return Err(Refusal::Unexpected);
            };
            Ok(Fields::parse(items)?.holder())
        })
        .collect()
}

/// The holders of a semaphore or shared lock: a list of fields each (token and ends, which every
/// entry must carry, and record, multi.lua's JSON).
pub(super) fn holder_leases(list: &[Value]) -> Decoded<Vec<HolderLease>> {
    list.iter()
        .map(|entry| {
            let Value::Array(items) = entry else {
                return Err(Refusal::Unexpected);
            };
            let f = Fields::parse(items)?;
            Ok(holder_lease(
                f.need_text("token")?,
                f.need_int("ends")?,
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

pub(super) fn millis(ms: i64) -> Duration {
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
