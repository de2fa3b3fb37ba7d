//! Reading locks without changing them: one lock (`inspect -k`), every lock under a prefix
//! (`inspect`), and whether an inherited token still owns its lock (nested rlock).

use std::time::{Duration, Instant};

use super::call;
use super::call::inspect::{Inspect, LockInfo};
use super::error::{About, Error};
use super::key::{LockKey, scan_pattern};
use super::locker::{Locker, no_quorum};
use super::reply::{Holder, KeyType};
use super::{Grant, Ttl};
use crate::backend::NodeError;

impl Locker {
    /// Reads one lock. In Redlock mode it is held when a majority holds the same token.
    pub fn inspect(&self, key: &LockKey) -> Result<LockInfo, Error> {
        let inspect = Inspect { key };
        let results = self.on_all(|n| call::run(n, &inspect, self.op_timeout));
        if !self.is_quorum() {
            let result = results.into_iter().next().expect("one node");
            return result.map_err(|e| Error::redis(key, e));
        }
        let infos: Vec<LockInfo> = results
            .iter()
            .filter_map(|r| r.as_ref().ok().cloned())
            .collect();
        if !self.quorum().reached_by(infos.len()) {
            let errors: Vec<NodeError> = results.into_iter().filter_map(Result::err).collect();
            return Err(no_quorum(About::from(key), self.nodes.len(), errors));
        }
        for info in infos.iter().filter(|i| i.held()) {
            let same: Vec<&LockInfo> = infos
                .iter()
                .filter(|i| i.kind == info.kind && i.token == info.token)
                .collect();
            if self.quorum().reached_by(same.len()) {
                let mut out = info.clone();
                out.fence = same.iter().filter_map(|i| i.fence).max();
                out.pttl = same.iter().map(|i| i.pttl).min().unwrap_or(info.pttl);
                return Ok(out);
            }
        }
        let mut free = infos.into_iter().next().expect("a majority answered");
        free.kind = KeyType::None;
        free.pttl = -2;
        free.token = None;
        free.holder = Holder::default();
        free.renewed_ms = None;
        free.held_until_ms = None;
        Ok(free)
    }

    /// Every lock under `prefix` (SCAN, never KEYS), rlock's helper keys left out.
    pub fn list(&self, prefix: &str) -> Result<Vec<LockInfo>, Error> {
        let pattern = scan_pattern(prefix);
        let results = self.on_all(|n| n.scan(&pattern, self.op_timeout));
        let mut keys: Vec<String> = Vec::new();
        let mut errors = Vec::new();
        for r in results {
            match r {
                Ok(k) => keys.extend(k),
                Err(e) => errors.push(e),
            }
        }
        if !errors.is_empty() && (!self.is_quorum() || self.quorum().lost_with(errors.len())) {
            let about = About::Locks(prefix.to_string());
            return Err(if self.is_quorum() {
                no_quorum(about, self.nodes.len(), errors)
            } else {
                Error::redis(about, errors.remove(0))
            });
        }
        keys.sort();
        keys.dedup();
        let mut out = Vec::new();
        for redis_key in keys {
            if LockKey::is_helper(&redis_key) {
                continue;
            }
            let key = LockKey::listed(prefix, &redis_key[prefix.len()..]);
            let info = self.inspect(&key)?;
            // With no prefix every key of the database matches: show only what looks like a
            // lock (rlock's, or a string or hash that expires).
            let lock_like = !prefix.is_empty()
                || info.ours()
                || (matches!(info.kind, KeyType::String | KeyType::Hash) && info.pttl >= 0);
            if info.held() && lock_like {
                out.push(info);
            }
        }
        Ok(out)
    }

    /// The lock `token` holds on `key`, if it does: a nested rlock inside `rlock exec`.
    pub fn owned(&self, key: &LockKey, token: &str) -> Result<Option<Grant>, Error> {
        let mut info = self.inspect(key)?;
        if let Some(mine) = info.holders.iter().find(|h| h.token == token) {
            // One holder of a semaphore or shared lock: a nested rlock takes no second slot.
            info.pttl = mine.ends_ms - info.now_ms;
            info.ttl_ms = mine.ttl_ms;
            info.fence = mine.fence;
        } else if info.kind != KeyType::String || info.token.as_deref() != Some(token) {
            return Ok(None);
        }
        // The lease it was given, and a send time such that send + lease is when it ends.
        let left = Duration::from_millis(info.pttl.max(0) as u64);
        let lease = info
            .ttl_ms
            .filter(|t| *t > 0)
            .map_or(left, |t| Duration::from_millis(t as u64))
            .max(left);
        let now = Instant::now();
        Ok(Some(Grant {
            key: key.clone(),
            token: token.to_string(),
            fence: info.fence.unwrap_or(0),
            ttl: Ttl::Inferred(lease),
            sent: now.checked_sub(lease - left).unwrap_or(now),
        }))
    }
}
