//! release.lua as a typed call: an owner's release, or a forced one, that may record the hold it
//! ends in the lock's history.

use redis::Value;

use super::super::history::HoldRecord;
use super::super::key::LockKey;
use super::super::reply::{Holder, HolderLease, KeyType, Refusal, Reply, holder_leases};
use super::{Args, Call, sources};
use crate::backend::Script;

pub static RELEASE: Script = Script::new("release", sources::RELEASE);

/// release.lua for `token` (empty when forced), recording the hold it ends when `record` says so.
pub(in crate::lock) struct Release<'a> {
    pub key: &'a LockKey,
    pub token: &'a str,
    pub force: bool,
    pub record: Option<&'a HoldRecord>,
}

/// release.lua's answer, and why the hold it ended is not on record (its "unrecorded" field: the
/// ACL, a history key of another type, a full server), when it was to be and is not.
#[derive(Debug)]
pub(in crate::lock) struct Said {
    pub reply: ReleaseReply,
    pub unrecorded: Option<String>,
}

/// What release.lua did.
#[derive(Debug)]
pub(in crate::lock) enum ReleaseReply {
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

impl Call for Release<'_> {
    type Reply = Said;

    fn script(&self) -> &'static Script {
        &RELEASE
    }

    /// The lock's keys, and its history when the release records the hold it ends.
    fn keys(&self) -> Vec<&str> {
        let mut keys = self.key.keys().to_vec();
        if self.record.is_some() {
            keys.push(&self.key.history);
        }
        keys
    }

    fn args(&self) -> Args {
        let args = Args::new()
            .with("token", self.token)
            .with("channel", &self.key.channel)
            .with("force", if self.force { "1" } else { "0" });
        match self.record {
            Some(record) => record.args(args),
            None => args,
        }
    }

    fn decode(&self, reply: &[Value]) -> Result<Said, Refusal> {
        let reply = Reply::parse(reply)?;
        let f = &reply.fields;
        let said = match reply.word.as_str() {
            "released" => ReleaseReply::Released,
            "already" => ReleaseReply::Already,
            "expired" => ReleaseReply::Expired,
            "other" => ReleaseReply::Other,
            "free" => ReleaseReply::Free,
            "broken" => ReleaseReply::Broken {
                kind: KeyType::parse(&f.need_text("type")?),
                value: f.text("value"),
                holder: f.holder(),
                now_ms: f.need_int("now")?,
            },
            "brokenall" => ReleaseReply::BrokenAll {
                now_ms: f.need_int("now")?,
                holders: holder_leases(f.list("holders"))?,
            },
            "wrongtype" => return Err(reply.wrong_type()),
            _ => return Err(Refusal::Unexpected),
        };
        Ok(Said {
            reply: said,
            unrecorded: f.text("unrecorded"),
        })
    }
}
