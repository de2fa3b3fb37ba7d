//! What the scripts answer, decoded by name in one place: each script's reply is a list whose
//! positions are documented in the script's header, and only this file knows them.

use redis::Value;

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
    pub pid: Option<String>,
    pub user: Option<String>,
    pub since_ms: Option<i64>,
    pub command: Option<String>,
    /// The pid namespace `pid` is counted in, where rlock recorded it.
    pub pidns: Option<String>,
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

impl HolderLease {
    /// The triples {token, lease end, record JSON} from position `at` on.
    fn list(r: &[Value], at: usize) -> Vec<HolderLease> {
        let mut out = Vec::new();
        let mut i = at;
        while let Some(token) = text(r, i) {
            let rec: serde_json::Value = text(r, i + 2)
                .and_then(|j| serde_json::from_str(&j).ok())
                .unwrap_or_default();
            let field = |name: &str| match &rec[name] {
                serde_json::Value::String(s) => Some(s.clone()),
                serde_json::Value::Number(n) => Some(n.to_string()),
                _ => None,
            };
            let number = |name: &str| field(name).and_then(|s| s.parse::<f64>().ok());
            out.push(HolderLease {
                token,
                ends_ms: int(r, i + 1).unwrap_or(0),
                fence: field("fence").and_then(|s| s.parse().ok()),
                ttl_ms: number("ttl").map(|n| n as i64),
                renewed_ms: number("renewed").map(|n| n as i64),
                holder: Holder {
                    host: field("host"),
                    pid: field("pid"),
                    user: field("user").filter(|u| !u.is_empty()),
                    since_ms: number("since").map(|n| n as i64),
                    command: field("cmd"),
                    pidns: field("pidns"),
                },
            });
            i += 3;
        }
        out
    }
}

/// acquire.lua's answer.
#[derive(Debug)]
pub enum AcquireReply {
    Granted {
        fence: i64,
        ttl_ms: i64,
    },
    Busy {
        pttl: i64,
        now_ms: i64,
        holder: Holder,
        crowd: Option<Crowd>,
    },
    Queued {
        wait_ms: i64,
    },
    /// Held as another kind: "exclusive", "shared" or "limit N".
    Mismatch(String),
    WrongType(String),
}

impl AcquireReply {
    pub fn decode(r: &[Value]) -> Option<Self> {
        Some(match text(r, 0)?.as_str() {
            "ok" => AcquireReply::Granted {
                fence: int(r, 1).unwrap_or(0),
                ttl_ms: int(r, 2).unwrap_or(0),
            },
            "busy" => AcquireReply::Busy {
                pttl: int(r, 1).unwrap_or(-2),
                now_ms: int(r, 2).unwrap_or(0),
                holder: holder_at(r, 3),
                crowd: int(r, 8).map(|holders| Crowd {
                    holders,
                    limit: int(r, 9).unwrap_or(0),
                    exclusive_ahead: int(r, 10) == Some(1),
                }),
            },
            "mismatch" => AcquireReply::Mismatch(text(r, 1).unwrap_or_default()),
            "queued" => AcquireReply::Queued {
                wait_ms: int(r, 1).unwrap_or(0),
            },
            "wrongtype" => AcquireReply::WrongType(type_of(r)),
            _ => return None,
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
    WrongType(String),
}

impl ReleaseReply {
    pub fn decode(r: &[Value]) -> Option<Self> {
        Some(match text(r, 0)?.as_str() {
            "released" => ReleaseReply::Released,
            "already" => ReleaseReply::Already,
            "expired" => ReleaseReply::Expired,
            "other" => ReleaseReply::Other,
            "free" => ReleaseReply::Free,
            "broken" => ReleaseReply::Broken {
                kind: KeyType::parse(&text(r, 1).unwrap_or_default()),
                value: text(r, 3),
                holder: holder_at(r, 4),
                now_ms: int(r, 9).unwrap_or(0),
            },
            "brokenall" => ReleaseReply::BrokenAll {
                now_ms: int(r, 1).unwrap_or(0),
                holders: HolderLease::list(r, 2),
            },
            "wrongtype" => ReleaseReply::WrongType(type_of(r)),
            _ => return None,
        })
    }
}

/// renew.lua's answer.
#[derive(Debug)]
pub enum RenewReply {
    /// Extended: the lease it now has.
    Renewed {
        ttl_ms: i64,
    },
    Free,
    Other,
    WrongType(String),
}

impl RenewReply {
    pub fn decode(r: &[Value]) -> Option<Self> {
        Some(match text(r, 0)?.as_str() {
            "renewed" => RenewReply::Renewed {
                ttl_ms: int(r, 1).unwrap_or(0),
            },
            "free" => RenewReply::Free,
            "other" => RenewReply::Other,
            "wrongtype" => RenewReply::WrongType(type_of(r)),
            _ => return None,
        })
    }
}

/// inspect.lua's answer: a lock as Redis holds it.
#[derive(Debug, Clone)]
pub struct InspectReply {
    pub kind: KeyType,
    pub pttl: i64,
    pub now_ms: i64,
    /// The string's value (the owner token).
    pub token: Option<String>,
    pub fence: Option<i64>,
    pub holder: Holder,
    /// The lease the holder was last given.
    pub ttl_ms: Option<i64>,
    /// How many rlock processes wait in line.
    pub waiters: i64,
    /// When the lease was last renewed (or granted), server ms; rlock's own locks only.
    pub renewed_ms: Option<i64>,
    /// A semaphore (`Some(N)`) or shared lock (`Some(0)`); None for one holder.
    pub limit: Option<i64>,
    /// The holders of a semaphore or shared lock.
    pub holders: Vec<HolderLease>,
}

impl InspectReply {
    pub fn decode(r: &[Value]) -> Self {
        let mut kind = KeyType::parse(&text(r, 0).unwrap_or_else(|| "none".into()));
        if kind == KeyType::Holders && text(r, 13).is_none() {
            // A sorted set rlock did not write.
            kind = KeyType::Other("zset".into());
        }
        let limit = text(r, 13).map(|mode| {
            if mode == "shared" {
                0
            } else {
                int(r, 14).unwrap_or(0)
            }
        });
        let mut holder = holder_at(r, 5);
        // After a semaphore's mode and limit come its holders; after a lock's two nils, the
        // holder's pid namespace.
        let holders = match limit {
            Some(_) => HolderLease::list(r, 15),
            None => {
                holder.pidns = text(r, 15);
                Vec::new()
            }
        };
        InspectReply {
            kind,
            pttl: int(r, 1).unwrap_or(-2),
            now_ms: int(r, 2).unwrap_or(0),
            token: text(r, 3),
            fence: int(r, 4),
            holder,
            ttl_ms: int(r, 10),
            waiters: int(r, 11).unwrap_or(0),
            renewed_ms: int(r, 12),
            limit,
            holders,
        }
    }
}

/// `{"wrongtype", type}`: the type the key has instead.
fn type_of(r: &[Value]) -> String {
    text(r, 1).unwrap_or_else(|| "value of another type".into())
}

/// The holder fields (host, pid, user, since, command) from position `at` on.
fn holder_at(r: &[Value], at: usize) -> Holder {
    Holder {
        host: text(r, at),
        pid: text(r, at + 1),
        user: text(r, at + 2),
        since_ms: int(r, at + 3),
        command: text(r, at + 4),
        pidns: None,
    }
}

fn text(r: &[Value], i: usize) -> Option<String> {
    match r.get(i)? {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Okay => Some("OK".into()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

fn int(r: &[Value], i: usize) -> Option<i64> {
    match r.get(i)? {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn decodes_by_name() {
        let r = [bulk("ok"), Value::Int(7), Value::Int(30_000)];
        assert!(matches!(
            AcquireReply::decode(&r),
            Some(AcquireReply::Granted {
                fence: 7,
                ttl_ms: 30_000
            })
        ));
        let r = [bulk("wrongtype"), bulk("list")];
        assert!(
            matches!(ReleaseReply::decode(&r), Some(ReleaseReply::WrongType(t)) if t == "list")
        );
        assert!(RenewReply::decode(&[bulk("nonsense")]).is_none());
        let info = InspectReply::decode(&[bulk("hash"), Value::Int(5)]);
        assert_eq!(info.kind, KeyType::Hash);
        assert_eq!(info.pttl, 5);
        assert_eq!(info.waiters, 0);
    }
}
