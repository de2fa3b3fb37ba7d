//! What a Redlock quorum needs beyond asking every master at once:
//! - **one server, one vote**: before every grant each master says which server it is (its
//!   `run_id`), and two URLs that reach the same server are refused (78) before anything is
//!   written;
//! - **a release by majority**: it succeeds only where a majority released (or had already);
//! - **a renewal that repairs**: when a majority renewed, a master that no longer has the key
//!   (restarted empty) gets the lock written again, so that one empty restart does not leave the
//!   lock on a bare majority for the rest of the hold.
//!
//! Why `run_id` within one round is enough: it is random, new at every start of the server, and
//! the same whichever name reached it. Asked of every master in the same round, just before the
//! grant is sent, two names of one server answer the same id (a restart in between gives both
//! names the new one, as both reach the same process). A master that does not say who it is in
//! time gets no grant that round: it cannot vote.

use std::collections::HashMap;
use std::time::Duration;

use super::call::acquire::Acquire;
use super::call::release::ReleaseReply;
use super::call::{self, Identify};
use super::error::{About, Error, Refused};
use super::key::LockKey;
use super::locker::{Locker, Quorum, Relock, no_quorum};
use super::{NotOwner, Released, Renewed, Request};
use crate::backend::{Fault, NodeError};

impl Locker {
    /// Asks every master which server it is, in parallel, each within `timeout`. Two that are
    /// one server: 78, before anything is written. Otherwise, per node, None when it may be
    /// asked to grant, or the error that stands for its vote (it did not say who it is).
    ///
    /// A server whose ACL user may not run INFO keeps its identity to itself: only its address
    /// was compared (see `Settings::check_independent`).
    pub(super) fn identify(&self, timeout: Duration) -> Result<Vec<Option<NodeError>>, Error> {
        let said = self.on_all(|n| match call::run(n, &Identify, timeout) {
            Ok(id) => Ok(id),
            // Before Redis 7 a refused INFO is an error, even from a script.
            Err(e) if e.kind == Fault::Denied => Ok(None),
            Err(e) => Err(e),
        });
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for (i, id) in said.iter().enumerate() {
            if let Ok(Some(id)) = id
                && let Some(first) = seen.insert(id, i)
            {
                return Err(Error::Config(format!(
                    "'{}' and '{}' are the same Redis server (it gives both the same run_id): Redlock needs independent masters, one vote each",
                    self.nodes[first].name(),
                    self.nodes[i].name()
                )));
            }
        }
        Ok(said.into_iter().map(Result::err).collect())
    }

    /// Remembers a Redlock grant's request, for `repair`.
    pub(super) fn remember_grant(&self, req: &Request) {
        let relock = Relock {
            token: req.token.to_string(),
            ttl: req.ttl,
            sharing: req.sharing,
            who: req.who.clone(),
        };
        *self.relock.lock().unwrap_or_else(|p| p.into_inner()) = Some(relock);
    }

    /// After a renewal that a majority granted: writes the lock again (acquire.lua, with the
    /// grant's request, the lease `ttl` when given) on the masters that said it
    /// is gone. Safe because the lease holds on a majority at this moment, so no other holder
    /// has one, and acquire.lua writes only where the key is free. Best effort: a master that
    /// refuses or does not answer is left as it is. Only the process that took the lock knows
    /// its arguments (`rlock exec`); a `rlock renew` repairs nothing.
    pub(super) fn repair(
        &self,
        key: &LockKey,
        token: &str,
        ttl: Option<Duration>,
        results: &[Result<Renewed, NodeError>],
        timeout: Duration,
    ) {
        let gone = |i: usize| matches!(results[i], Ok(Renewed::NotOwner(NotOwner::Gone)));
        if !(0..results.len()).any(gone) {
            return;
        }
        let Some(relock) = self
            .relock
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        else {
            return;
        };
        if relock.token != token {
            return;
        }
        let req = Request {
            key,
            token,
            ttl: ttl.unwrap_or(relock.ttl),
            sharing: relock.sharing,
            who: &relock.who,
            // A master that missed the grant is not held past the release: the majority is.
            hold: None,
        };
        // A Redlock grant never waits in line.
        let acquire = Acquire::new(&req, false);
        self.on_each(|i, n| {
            if gone(i) {
                let _ = call::run(n, &acquire, timeout);
            }
        });
    }
}

/// A Redlock release's outcome from what each master said: done where a majority released
/// (or had already); not permitted where so many said otherwise (free, expired, another's)
/// that no majority can have released; else unknown, as too few answered (69).
pub(super) fn release_verdict(
    quorum: Quorum,
    key: &LockKey,
    results: Vec<Result<ReleaseReply, NodeError>>,
) -> Result<Released, Error> {
    let about = || About::from(key);
    let mut done = 0;
    let mut refused = 0;
    let mut other = false;
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(ReleaseReply::Released | ReleaseReply::Already) => done += 1,
            Ok(reply) => {
                other |= matches!(reply, ReleaseReply::Other);
                refused += 1;
            }
            Err(e) if e.kind == Fault::WrongType => return Err(Error::redis(key, e)),
            Err(e) => errors.push(e),
        }
    }
    if quorum.reached_by(done) {
        return Ok(Released::Done);
    }
    if quorum.lost_with(refused) {
        return Err(Error::NotPermitted {
            about: about(),
            refused: if other {
                Refused::ReleaseHeldByOther
            } else {
                Refused::ReleaseNotHeld
            },
        });
    }
    Err(no_quorum(about(), quorum.nodes(), errors))
}
