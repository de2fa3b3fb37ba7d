//! release.lua as a typed call: an owner's release, or a forced one, that may say what the
//! lock's history should keep of the hold it ends (record.lua then writes it, in a call of its
//! own: the release touches the lock's own keys only).

use redis::Value;

use super::super::history::{Entries, HoldRecord};
use super::super::key::LockKey;
use super::super::reply::{Holder, HolderLease, KeyType, Refusal, Reply, holder_leases};
use super::{Args, Call, sources};
use crate::backend::Script;

pub static RELEASE: Script = Script::new("release", sources::RELEASE);

/// release.lua for `token` (empty when forced), saying what to record of the hold it ends when
/// `record` says so.
pub(in crate::lock) struct Release<'a> {
    pub key: &'a LockKey,
    pub token: &'a str,
    pub force: bool,
    pub record: Option<&'a HoldRecord>,
}

/// release.lua's answer; what the history should keep of the holds it ended (its "history"
/// field); and why a hold it ended cannot be on record (its "unrecorded" field: the ACL or a
/// full server refused the mark that records a lost hold once).
#[derive(Debug)]
pub(in crate::lock) struct Said {
    pub reply: ReleaseReply,
    pub history: Entries,
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

    /// The lock's keys, never its history.
    fn keys(&self) -> Vec<&str> {
        self.key.keys().to_vec()
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
        // What the history should keep never decides the release's answer.
        let history = f
            .text("history")
            .and_then(|json| Entries::parse(&json))
            .unwrap_or_default();
        Ok(Said {
            reply: said,
            history,
            unrecorded: f.text("unrecorded"),
        })
    }
}
