//! The small calls: renew.lua (extend a lease), leave.lua (give up a place in line, and a grant
//! that raced with it) and fence.lua (raise a Redlock master's fencing counter).

use std::time::Duration;

use redis::Value;

use super::super::key::LockKey;
use super::super::reply::{Refusal, Reply};
use super::super::{NotOwner, Renewed};
use super::{Args, Call, sources};
use crate::backend::Script;

/// With --replicas, a renewal counts only once the replicas have it.
pub static RENEW: Script = Script::new("renew", sources::RENEW).replicated("renewal", is_renewed);
/// Sent whole: it gives back grants whose reply never came, often to a server that has just
/// stalled and may never have cached it, and its own reply may never be read.
pub static LEAVE: Script = Script::sent_whole("leave", sources::LEAVE);
pub static FENCE: Script = Script::new("fence", sources::FENCE);

/// renew.lua for `token`; `ttl` None keeps the TTL the lock was last given.
pub(in crate::lock) struct Renew<'a> {
    pub key: &'a LockKey,
    pub token: &'a str,
    pub ttl: Option<Duration>,
}

impl Call for Renew<'_> {
    type Reply = Renewed;

    fn script(&self) -> &'static Script {
        &RENEW
    }

    /// Only the lock and its state: a key that does not exist (the queue, usually) would make a
    /// Cluster answer TRYAGAIN while the slot migrates, and a renewal must get through then.
    fn keys(&self) -> Vec<&str> {
        self.key.keys()[..2].to_vec()
    }

    fn args(&self) -> Args {
        Args::new()
            .with("token", self.token)
            .with_some("ttl", self.ttl.map(|t| t.as_millis().max(1)))
    }

    fn decode(&self, reply: &[Value]) -> Result<Renewed, Refusal> {
        renewed(reply)
    }
}

fn renewed(r: &[Value]) -> Result<Renewed, Refusal> {
    let reply = Reply::parse(r)?;
    let f = &reply.fields;
    Ok(match reply.word.as_str() {
        "renewed" if f.int("superseded") == Some(1) => Renewed::Superseded {
            ttl: f.need_millis("ttl")?,
            by: Box::new(f.holder()),
        },
        "renewed" => Renewed::Yes(f.need_millis("ttl")?),
        "free" if f.int("broken") == Some(1) => Renewed::NotOwner(NotOwner::Broken),
        "free" => Renewed::NotOwner(NotOwner::Gone),
        "other" => Renewed::NotOwner(NotOwner::Taken),
        "wrongtype" => return Err(reply.wrong_type()),
        _ => return Err(Refusal::Unexpected),
    })
}

/// True for a renewal that extended the lease: what --replicas must see reach the replicas.
fn is_renewed(reply: &Value) -> bool {
    let Value::Array(items) = reply else {
        return false;
    };
    matches!(
        renewed(items),
        Ok(Renewed::Yes(_) | Renewed::Superseded { .. })
    )
}

/// leave.lua for `token`: a grant is given back only when a try up to `upto` took it (see
/// acquire.rs's `TRIES`).
pub(in crate::lock) struct Leave<'a> {
    pub key: &'a LockKey,
    pub token: &'a str,
    pub upto: u64,
}

impl<'a> Leave<'a> {
    /// Gives back what the tries made so far took.
    pub fn new(key: &'a LockKey, token: &'a str) -> Self {
        Leave {
            key,
            token,
            upto: super::acquire::tries_so_far(),
        }
    }
}

/// What leave.lua did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::lock) enum Left {
    /// Out of the line, or never in it.
    Left,
    /// A grant that raced with giving up was given back.
    GaveBack,
}

impl Call for Leave<'_> {
    type Reply = Left;

    fn script(&self) -> &'static Script {
        &LEAVE
    }

    fn keys(&self) -> Vec<&str> {
        self.key.keys().to_vec()
    }

    fn args(&self) -> Args {
        Args::new()
            .with("token", self.token)
            .with("channel", &self.key.channel)
            .with("upto", self.upto)
    }

    fn decode(&self, reply: &[Value]) -> Result<Left, Refusal> {
        match Reply::parse(reply)?.word.as_str() {
            "left" => Ok(Left::Left),
            "released" => Ok(Left::GaveBack),
            _ => Err(Refusal::Unexpected),
        }
    }
}

/// fence.lua: raise the counter to at least `floor` while `token` holds the lock.
pub(in crate::lock) struct Fence<'a> {
    pub key: &'a LockKey,
    pub token: &'a str,
    pub floor: i64,
}

impl Call for Fence<'_> {
    /// True when the counter was raised.
    type Reply = bool;

    fn script(&self) -> &'static Script {
        &FENCE
    }

    /// Only the lock and its state, as renew.
    fn keys(&self) -> Vec<&str> {
        self.key.keys()[..2].to_vec()
    }

    fn args(&self) -> Args {
        Args::new()
            .with("token", self.token)
            .with("floor", self.floor)
    }

    fn decode(&self, reply: &[Value]) -> Result<bool, Refusal> {
        match Reply::parse(reply)?.word.as_str() {
            "raised" => Ok(true),
            "kept" => Ok(false),
            _ => Err(Refusal::Unexpected),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(word: &str, fields: &[(&str, i64)]) -> Vec<Value> {
        let mut v = vec![Value::BulkString(word.as_bytes().to_vec())];
        for (name, n) in fields {
            v.push(Value::BulkString(name.as_bytes().to_vec()));
            v.push(Value::Int(*n));
        }
        v
    }

    #[test]
    fn a_renewal_names_its_arguments_and_declares_two_keys() {
        let key = LockKey::new("rlock:", "jobs").unwrap();
        let renew = Renew {
            key: &key,
            token: "t",
            ttl: None,
        };
        assert_eq!(renew.keys(), ["rlock:jobs", "{rlock:jobs}:state"]);
        assert_eq!(renew.args().get("ttl"), None, "the TTL the lock was given");
        let renew = Renew {
            ttl: Some(Duration::from_secs(5)),
            ..renew
        };
        assert_eq!(renew.args().get("ttl"), Some("5000"));
        assert_eq!(renew.args().get("token"), Some("t"));
        assert_eq!(
            renew.decode(&reply("renewed", &[])),
            Err(Refusal::Missing("ttl")),
            "a renewal without its lease is no renewal"
        );
        assert!(is_renewed(&Value::Array(reply("renewed", &[("ttl", 9)]))));
        assert!(!is_renewed(&Value::Array(reply("other", &[("pttl", 9)]))));
    }

    #[test]
    fn leave_and_fence_answer_by_word() {
        let key = LockKey::new("rlock:", "jobs").unwrap();
        let leave = Leave {
            key: &key,
            token: "t",
            upto: 7,
        };
        assert_eq!(leave.args().get("channel"), Some("{rlock:jobs}:wake"));
        assert_eq!(leave.args().get("upto"), Some("7"));
        assert_eq!(leave.decode(&reply("released", &[])), Ok(Left::GaveBack));
        assert_eq!(leave.decode(&reply("left", &[])), Ok(Left::Left));
        assert_eq!(leave.decode(&[Value::Int(1)]), Err(Refusal::Unexpected));
        let fence = Fence {
            key: &key,
            token: "t",
            floor: 42,
        };
        assert_eq!(fence.args().get("floor"), Some("42"));
        assert_eq!(fence.keys().len(), 2);
        assert_eq!(fence.decode(&reply("raised", &[])), Ok(true));
        assert_eq!(fence.decode(&reply("kept", &[])), Ok(false));
    }
}
