//! inspect.lua as a typed call: a lock read without changing it.

use redis::Value;

use super::super::key::LockKey;
use super::super::reply::{Holder, HolderLease, KeyType, Refusal, Reply, holder_leases, waiters};
use super::{Args, Call, sources};
use crate::backend::Script;

/// Long for a semaphore of many holders, or a long line of waiters.
pub static INSPECT: Script = Script::new("inspect", sources::INSPECT).long_reply();

/// inspect.lua on `key`.
pub(in crate::lock) struct Inspect<'a> {
    pub key: &'a LockKey,
}

/// A lock as `inspect` reports it: inspect.lua's reply and its key.
#[derive(Debug, Clone)]
pub struct LockInfo {
    pub name: String,
    pub redis_key: String,
    /// What Redis holds at the key: nothing (free), a string (a lock), a hash (e.g. Redisson's)
    /// or another type.
    pub kind: KeyType,
    pub pttl: i64,
    pub now_ms: i64,
    pub token: Option<String>,
    pub fence: Option<i64>,
    pub ttl_ms: Option<i64>,
    pub holder: Holder,
    /// When the holder of a lock last renewed it (or took it), server ms; for a semaphore or
    /// shared lock each of `holders` has its own.
    pub renewed_ms: Option<i64>,
    pub waiters: i64,
    /// Who waits in line, first first (up to inspect.lua's LINE_MAX): `since_ms` is when each
    /// joined the line.
    pub line: Vec<Holder>,
    /// A lock granted with --hold-at-least whose holder has released it: nobody else gets it
    /// before this time (server ms), when it expires.
    pub held_until_ms: Option<i64>,
    /// A semaphore (`Some(N)`) or shared lock (`Some(0)`); None for a lock with one holder.
    pub limit: Option<i64>,
    /// Every holder of a semaphore or shared lock, the first lease to end first.
    pub holders: Vec<HolderLease>,
}

impl LockInfo {
    pub fn held(&self) -> bool {
        self.kind != KeyType::None
    }

    /// Written by rlock (not by another client).
    pub fn ours(&self) -> bool {
        self.holder.host.is_some()
    }
}

impl Call for Inspect<'_> {
    type Reply = LockInfo;

    fn script(&self) -> &'static Script {
        &INSPECT
    }

    fn keys(&self) -> Vec<&str> {
        self.key.keys().to_vec()
    }

    fn args(&self) -> Args {
        Args::new()
    }

    fn decode(&self, r: &[Value]) -> Result<LockInfo, Refusal> {
        let reply = Reply::parse(r)?;
        let f = &reply.fields;
        let mode = f.text("mode");
        let kind = match KeyType::parse(&reply.word) {
            // A sorted set rlock did not write.
            KeyType::Holders if mode.is_none() => KeyType::Other("zset".into()),
            kind => kind,
        };
        let limit = match mode.as_deref() {
            None => None,
            Some("shared") => Some(0),
            Some(_) => Some(f.need_int("limit")?),
        };
        let holders = holder_leases(f.list("holders"))?;
        let holder = f.holder();
        Ok(LockInfo {
            name: self.key.name.clone(),
            redis_key: self.key.redis_key.clone(),
            kind,
            pttl: f.need_int("pttl")?,
            now_ms: f.need_int("now")?,
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
            waiters: f.need_int("waiters")?,
            line: waiters(f.list("line"))?,
            held_until_ms: f.int("hold_until").filter(|_| f.int("released").is_some()),
            limit,
            holders,
        })
    }
}
