//! The renewal, and what a Redlock quorum needs beyond asking every master at once:
//! - **one server, one vote**: before every grant each master says which server it is (its
//!   `run_id`, from the plain INFO command, never from a script) and what it is; two URLs that
//!   reach the same server, a replica, a Cluster node, a Sentinel, something that is no usable
//!   Redis, or a user or service that will not say (INFO refused) are refused (78) before
//!   anything is written;
//! - **no vote from a master that may have forgotten**: a master that has run for less than
//!   the longest lease any master reports does not count toward a grant where another master
//!   says someone else holds the lock (`exclusive.rs`, `votes`): it may have restarted empty
//!   under that holder;
//! - **a release by majority**: it succeeds only where a majority released (or had already);
//! - **a renewal that repairs, at once**: when a majority renewed, a master that does not have
//!   the key (slow at the grant, restarted empty) gets the lock written again, and while one
//!   misses it the renewals come early, so that the lock rests on a bare majority as briefly as
//!   the masters allow.
//!
//! Why `run_id` within one round is enough: it is random, new at every start of the server, and
//! the same whichever name reached it. Asked of every master in the same round, just before the
//! grant is sent, two names of one server answer the same id (a restart in between gives both
//! names the new one, as both reach the same process). A master that does not say who it is in
//! time gets no grant that round: it cannot vote.

use std::collections::HashMap;
use std::time::Duration;

use super::call::acquire::{Acquire, Attempt};
use super::call::release::ReleaseReply;
use super::call::renew::Renew;
use super::call::{self, IDENTITY_SECTIONS, ServerId};
use super::error::{About, Error, Refused};
use super::key::LockKey;
use super::locker::{Locker, Quorum, Relock, no_quorum};
use super::{NotOwner, Released, Renewed, Request};
use crate::backend::{Fault, NodeError};

impl Locker {
    /// Asks every master which server it is and what it is, in parallel, each within
    /// `timeout`. Refused (78) before anything is written: two masters that are one server, a
    /// replica, a node of a Redis Cluster, a member that answers but is no usable Redis (an
    /// HTTP server, a TLS/plain mismatch, a Sentinel), and a master whose ACL user may not say
    /// who it is (a right missing: never a silent fallback to comparing URLs). Otherwise, per
    /// node, what it said, or the error that stands for its vote (it did not answer in time).
    pub(super) fn identify(
        &self,
        timeout: Duration,
    ) -> Result<Vec<Result<ServerId, NodeError>>, Error> {
        let said = self.on_all(|n| {
            n.info(&IDENTITY_SECTIONS, timeout)
                .map(|texts| match &texts[..] {
                    [server, replication] => ServerId::from_info(server, replication),
                    _ => None,
                })
        });
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut out = Vec::with_capacity(said.len());
        for (i, id) in said.into_iter().enumerate() {
            let name = self.nodes[i].name();
            match id {
                Ok(Some(id)) => {
                    #[cfg(feature = "sim-seams")]
                    let id = match super::planted::on(super::planted::Bug::CountTwice) {
                        true => ServerId {
                            run_id: format!("{}/{i}", id.run_id),
                            ..id
                        },
                        false => id,
                    };
                    if let Some(first) = seen.insert(id.run_id.clone(), i) {
                        return Err(Error::Config(format!(
                            "'{}' and '{name}' are the same Redis server (it gives both the same run_id): Redlock needs independent masters, one vote each",
                            self.nodes[first].name(),
                        )));
                    }
                    if let Some(master) = &id.replica_of {
                        return Err(Error::Config(format!(
                            "'{name}' is a replica of {master}: Redlock needs independent masters (a replica loses its master's locks with it, or cannot take a write); name independent masters"
                        )));
                    }
                    match id.mode.as_deref() {
                        Some("cluster") => {
                            return Err(Error::Config(format!(
                                "'{name}' is a node of a Redis Cluster, which holds only its own slots' keys: Redlock needs independent masters (for a Cluster, add --cluster)"
                            )));
                        }
                        Some("sentinel") => {
                            return Err(Error::Config(format!(
                                "'{name}' is a Sentinel: Redlock needs Redis masters, named by their own URLs"
                            )));
                        }
                        _ => {}
                    }
                    out.push(Ok(id));
                }
                Ok(None) => return Err(unidentified(name)),
                Err(e) if e.kind == Fault::Denied => return Err(unidentified(name)),
                Err(e)
                    if matches!(
                        e.kind,
                        Fault::NotRedis | Fault::WrongMode | Fault::ClusterNode
                    ) =>
                {
                    return Err(Error::Config(format!("{e}: Redlock needs Redis masters")));
                }
                Err(e)
                    if e.kind == Fault::Other
                        && e.detail.to_ascii_lowercase().contains("unknown command") =>
                {
                    return Err(unidentified(name));
                }
                Err(e) => out.push(Err(e)),
            }
        }
        Ok(out)
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
    /// grant's request, the lease `ttl` when given) on the masters that said it is gone, or
    /// did not answer or were not asked (slow at the grant: the renewal comes early until every
    /// master holds the lock, see `watchdog.rs`). Safe because the lease holds on a majority at
    /// this moment, so no other holder has one, and acquire.lua writes only where the key is
    /// free (or already this token's). Best effort: a master that refuses or does not answer
    /// is left as it is. Only the process that took the lock knows its arguments (`rlock
    /// exec`); a `rlock renew` repairs nothing. Per master, whether it wrote the lock there.
    pub(super) fn repair(
        &self,
        key: &LockKey,
        token: &str,
        ttl: Option<Duration>,
        results: &[Result<Renewed, NodeError>],
        timeout: Duration,
    ) -> Vec<bool> {
        let none = vec![false; results.len()];
        let gone = |i: usize| {
            matches!(
                &results[i],
                Ok(Renewed::NotOwner(NotOwner::Gone))
                    | Err(NodeError {
                        kind: Fault::Timeout | Fault::Io | Fault::Connect | Fault::NotServing,
                        ..
                    })
            )
        };
        if !(0..results.len()).any(gone) {
            return none;
        }
        let Some(relock) = self
            .relock
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
        else {
            return none;
        };
        if relock.token != token {
            return none;
        }
        let req = Request {
            key,
            token,
            ttl: ttl.unwrap_or(relock.ttl),
            sharing: relock.sharing,
            who: &relock.who,
            // A master that missed the grant is not held past the release: the majority is.
            hold: None,
            newest: super::Newest::Off,
            record: None,
        };
        // A Redlock grant never waits in line.
        let acquire = Acquire::new(&req, false, self.now());
        self.on_each(|i, n| {
            gone(i) && matches!(call::run(n, &acquire, timeout), Ok(Attempt::Granted(_)))
        })
    }

    /// Whether this process took the lock `token` names, and so can write it again where it is
    /// missing (`repair`): only `rlock exec` can; a `rlock renew` only extends.
    pub(super) fn repairs(&self, token: &str) -> bool {
        self.relock
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .is_some_and(|r| r.token == token)
    }
}

/// The refusal of a master that will not say which server it is: the ACL user lacks +info.
fn unidentified(name: &str) -> Error {
    Error::Config(format!(
        "'{name}' will not say which server it is: INFO (server and replication) was refused, by the ACL user's rights (it needs +info) or by a service that does not offer INFO; Redlock needs it to count each server once and to refuse replicas"
    ))
}

/// A Redlock release's outcome from what each master said: done where a majority released
/// (or had already), or where the lock is gone from a majority (released on some, expired on
/// the others); not permitted where so many said otherwise (free, expired, another's)
/// that no majority can have released; else unknown, as too few answered (69).
pub(super) fn release_verdict(
    quorum: Quorum,
    key: &LockKey,
    results: Vec<Result<ReleaseReply, NodeError>>,
) -> Result<Released, Error> {
    let about = || About::from(key);
    let mut done = 0;
    let mut expired = 0;
    let mut refused = 0;
    let mut other = false;
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(ReleaseReply::Released | ReleaseReply::Already) => done += 1,
            Ok(reply) => {
                other |= matches!(reply, ReleaseReply::Other);
                expired += usize::from(matches!(reply, ReleaseReply::Expired));
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
    // Released where it still was, and expired on enough others that it is gone from a
    // majority: nobody waits for this lease any more.
    if done > 0 && quorum.reached_by(done + expired) {
        return Ok(Released::Done);
    }
    Err(no_quorum(about(), quorum.nodes(), errors))
}

impl Locker {
    /// Extends the lock if `token` owns it; `ttl` None keeps the TTL it was given. In Redlock
    /// mode a majority must renew; the lock is lost once a majority can no longer renew it. A
    /// renewal that failed is one node's error (in Redlock mode the first of them): the
    /// renewal thread retries it, and only the command layer makes a failure of it.
    pub fn renew(
        &self,
        key: &LockKey,
        token: &str,
        ttl: Option<Duration>,
        timeout: Duration,
    ) -> Result<Renewed, NodeError> {
        let timeout = ttl.map_or(timeout, |t| timeout.min(self.node_timeout(t)));
        let renew = Renew { key, token, ttl };
        if !self.is_quorum() {
            return call::run(self.nodes[0].as_ref(), &renew, timeout);
        }
        // A master that missed the lock (slow at the grant, restarted empty) is not asked to
        // renew what it does not have: it is written there once a majority renewed (`repair`).
        // Without that majority, it is asked after all: its answer may say the lock is lost.
        let skip = if self.repairs(token) {
            self.missing()
        } else {
            Vec::new()
        };
        let ask = |skipping: bool| {
            self.on_each(|i, n| match skip.get(i) {
                Some(true) if skipping => Err(NodeError {
                    kind: Fault::Connect,
                    node: n.name().to_string(),
                    detail: "does not hold the lock (it missed the grant or lost it)".into(),
                }),
                Some(false) | None if !skipping => Err(NodeError {
                    kind: Fault::Connect,
                    node: n.name().to_string(),
                    detail: "asked already".into(),
                }),
                _ => call::run(n, &renew, timeout),
            })
        };
        let yes = |results: &[Result<Renewed, NodeError>]| -> Vec<Duration> {
            results
                .iter()
                .filter_map(|r| match r {
                    Ok(Renewed::Yes(d)) => Some(*d),
                    _ => None,
                })
                .collect()
        };
        let mut results = ask(true);
        let mut renewed = yes(&results);
        if !self.quorum().reached_by(renewed.len()) && skip.contains(&true) {
            for (i, late) in ask(false).into_iter().enumerate() {
                if skip[i] {
                    results[i] = late;
                }
            }
            renewed = yes(&results);
        }
        if self.quorum().reached_by(renewed.len()) {
            let repaired = self.repair(key, token, ttl, &results, timeout);
            let missing = (0..results.len())
                .map(|i| !matches!(results[i], Ok(Renewed::Yes(_))) && !repaired[i])
                .collect();
            self.set_missing(missing);
            return Ok(Renewed::Yes(renewed.into_iter().min().unwrap_or_default()));
        }
        let not_owner = results
            .iter()
            .filter(|r| {
                matches!(r, Ok(Renewed::NotOwner(_)))
                    || matches!(r, Err(e) if e.kind == Fault::WrongType)
            })
            .count();
        if self.quorum().lost_with(not_owner) {
            return Ok(Renewed::NotOwner(NotOwner::NoMajority));
        }
        let error = results
            .into_iter()
            .find_map(Result::err)
            .unwrap_or_else(|| NodeError {
                kind: Fault::Timeout,
                node: "Redlock".into(),
                detail: "too few nodes renewed in time".into(),
            });
        Err(error)
    }
}
