//! The exclusive lock: one holder at a time. Its operations on a `Locker`: one try at taking it
//! (with Redlock's majority and validity check), giving up a place in line, release, forced
//! release and renewal. Waiting is `wait.rs`; reading is `read.rs`.

use std::time::{Duration, Instant};

use super::key::LockKey;
use super::lease::drift;
use super::locker::{Locker, Quorum, eval_as, no_quorum};
use super::reply::{Crowd, Holder, KeyType, Refusal, ReleaseReply};
use super::scripts::{ACQUIRE, FENCE, LEAVE, RELEASE, RENEW};
use super::{CHECK_WITHOUT_EXPIRY, Grant, NotOwner, Released, Renewed, Request};
use crate::backend::{Fault, Node, NodeError};
use crate::exit::{About, Failure, Refused};

/// One try at taking the lock: acquire.lua's reply, decoded in reply.rs.
#[derive(Debug)]
pub(super) enum Attempt {
    Granted(Grant),
    Busy {
        pttl: i64,
        now_ms: i64,
        holder: Holder,
        crowd: Option<Crowd>,
        /// The waiter's place in line (1 first), when it waits in line.
        place: Option<i64>,
    },
    Queued {
        wait_ms: i64,
    },
}

/// What one node said to an acquire.
type NodeAttempt = Result<Attempt, NodeError>;

impl Locker {
    /// One try at taking the lock; with `join_queue`, a busy try keeps a place in line. A try
    /// that got no usable answer fails; `Failure::is_transient` says whether time may cure it
    /// (an outage, which a waiter rides out) or not (a refusal, a key that is not a lock, a URL
    /// that does not resolve).
    pub(super) fn attempt(&self, req: &Request, join_queue: bool) -> Result<Attempt, Failure> {
        let Request {
            key,
            token,
            ttl,
            sharing,
            who,
        } = *req;
        let (mode, limit) = sharing.script_args();
        let ttl_ms = ttl.as_millis().max(1).to_string();
        let check = CHECK_WITHOUT_EXPIRY.as_millis().to_string();
        let pid = who.pid.to_string();
        // A Redlock waiter does not queue: queues on independent masters could disagree on
        // who is first. It waits for the release's "anyone" wake-up instead.
        let join = join_queue && !self.is_quorum();
        let args = [
            token,
            &ttl_ms,
            if join { "1" } else { "0" },
            &check,
            &key.channel,
            &who.host,
            &pid,
            &who.user,
            &who.command,
            mode,
            &limit,
            &who.pidns,
        ];
        let timeout = self.node_timeout(ttl);
        let sent = Instant::now();
        let results = self.on_all(|n| attempt_on(n, req, &args, timeout, sent));
        if !self.is_quorum() {
            let mut result = results.into_iter().next().expect("one node");
            if let Err(e) = &mut result
                && matches!(
                    e.kind,
                    Fault::Timeout | Fault::Io | Fault::Replicas | Fault::Denied
                )
            {
                // Sent, and no reply (a timeout, or the connection broke): the grant may have
                // happened. Or granted, and too few replicas have it (or the ACL refused the
                // WAIT after it): a failover could lose it. Give it back so it does not sit out
                // its whole TTL. (A script the ACL refused wrote nothing: the give-back finds
                // nothing to give.)
                let given_back = self.leave(key, token).is_ok();
                if e.kind == Fault::Replicas && given_back {
                    e.detail.push_str("; the grant was given back");
                }
            }
            return result.map_err(|e| e.into_failure(&key.name));
        }
        self.combine_attempts(key, token, ttl, sent, results)
    }

    /// Redlock: a grant needs a majority of nodes *and* time left of the TTL after the
    /// round trip (validity = TTL − elapsed − drift). Anything less is given back on every
    /// node, including those that did not answer.
    fn combine_attempts(
        &self,
        key: &LockKey,
        token: &str,
        ttl: Duration,
        sent: Instant,
        results: Vec<NodeAttempt>,
    ) -> Result<Attempt, Failure> {
        let timeout = self.node_timeout(ttl);
        if let Some(fence) = majority_fence(self.quorum(), &results)
            && let Some(validity) = validity(ttl, sent.elapsed())
        {
            self.raise_fences(key, token, fence, &results, timeout);
            return Ok(Attempt::Granted(Grant {
                key: key.clone(),
                token: token.to_string(),
                fence,
                ttl: validity,
                sent,
            }));
        }
        // No grant: give back what was granted, everywhere, each node within its timeout.
        self.on_all(|n| n.eval(&LEAVE, &key.keys(), &[token, &key.channel], timeout));
        no_grant(self.quorum(), key, results)
    }

    /// Keeps the nodes' counters in step, so that the next grant's fence (the highest counter
    /// of its majority, which overlaps this one) is higher than this one's `fence`: raises the
    /// granting nodes that are behind (they just answered; usually none is).
    fn raise_fences(
        &self,
        key: &LockKey,
        token: &str,
        fence: i64,
        results: &[NodeAttempt],
        timeout: Duration,
    ) {
        let floor = fence.to_string();
        std::thread::scope(|s| {
            for (node, result) in self.nodes.iter().zip(results) {
                if let Ok(Attempt::Granted(mine)) = result
                    && mine.fence < fence
                {
                    let (floor, keys) = (&floor, key.keys_for(&FENCE));
                    s.spawn(move || node.eval(&FENCE, &keys, &[token, floor], timeout));
                }
            }
        });
    }

    /// Leaves the wait queue, giving back a grant that raced with giving up. Best effort.
    pub fn leave(&self, key: &LockKey, token: &str) -> Result<(), Failure> {
        let results =
            self.on_all(|n| n.eval(&LEAVE, &key.keys(), &[token, &key.channel], self.op_timeout));
        match results.into_iter().find_map(Result::err) {
            Some(e) if !self.is_quorum() => Err(e.into_failure(&key.name)),
            _ => Ok(()),
        }
    }

    /// Releases the lock if `token` owns it. A retried release of the same token succeeds.
    pub fn release(&self, key: &LockKey, token: &str) -> Result<Released, Failure> {
        let args = [token, key.channel.as_str(), "0"];
        let results = self.on_all(|n| {
            eval_as(
                n,
                &RELEASE,
                key,
                &args,
                self.op_timeout,
                ReleaseReply::decode,
            )
        });
        let said = |what: fn(&ReleaseReply) -> bool| {
            results
                .iter()
                .filter(|r| r.as_ref().is_ok_and(what))
                .count()
        };
        if said(|r| matches!(r, ReleaseReply::Released | ReleaseReply::Already)) > 0 {
            return Ok(Released::Done);
        }
        if let Some(e) = results.iter().find_map(|r| r.as_ref().err()) {
            let answered = results.iter().filter(|r| r.is_ok()).count();
            if e.kind == Fault::WrongType || answered == 0 || !self.is_quorum() {
                return Err(e.clone().into_failure(&key.name));
            }
        }
        if said(|r| matches!(r, ReleaseReply::Other)) > 0 {
            return Err(Failure::NotPermitted {
                about: About::Lock(key.name.clone()),
                refused: Refused::ReleaseHeldByOther,
            });
        }
        Err(Failure::NotPermitted {
            about: About::Lock(key.name.clone()),
            refused: Refused::ReleaseNotHeld,
        })
    }

    /// Breaks the lock whoever holds it.
    pub fn force_release(&self, key: &LockKey) -> Result<Released, Failure> {
        let args = ["", key.channel.as_str(), "1"];
        let results = self.on_all(|n| {
            eval_as(n, &RELEASE, key, &args, self.op_timeout, |r| {
                ReleaseReply::decode(r).and_then(broken_holder)
            })
        });
        if let Some(who) = results
            .iter()
            .find_map(|r| r.as_ref().ok().cloned().flatten())
        {
            return Ok(Released::Broken(Some(who)));
        }
        match results.into_iter().find_map(Result::err) {
            Some(e) => Err(e.into_failure(&key.name)),
            None => Ok(Released::Broken(None)),
        }
    }

    /// Extends the lock if `token` owns it; `ttl` None keeps the TTL it was given. In Redlock
    /// mode a majority must renew; the lock is lost once a majority can no longer renew it.
    pub fn renew(
        &self,
        key: &LockKey,
        token: &str,
        ttl: Option<Duration>,
        timeout: Duration,
    ) -> Result<Renewed, Failure> {
        let ttl_ms = ttl
            .map(|t| t.as_millis().max(1).to_string())
            .unwrap_or_default();
        let timeout = ttl.map_or(timeout, |t| timeout.min(self.node_timeout(t)));
        let results = self.on_all(|n| {
            eval_as(
                n,
                &RENEW,
                key,
                &[token, &ttl_ms],
                timeout,
                Renewed::from_reply,
            )
        });
        if !self.is_quorum() {
            let result = results.into_iter().next().expect("one node");
            return result.map_err(|e| e.into_failure(&key.name));
        }
        let renewed: Vec<Duration> = results
            .iter()
            .filter_map(|r| match r {
                Ok(Renewed::Yes(d)) => Some(*d),
                _ => None,
            })
            .collect();
        if self.quorum().reached_by(renewed.len()) {
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
        Err(error.into_failure(&key.name))
    }
}

fn attempt_on(
    node: &dyn Node,
    req: &Request,
    args: &[&str],
    timeout: Duration,
    sent: Instant,
) -> NodeAttempt {
    eval_as(node, &ACQUIRE, req.key, args, timeout, |r| {
        Attempt::from_reply(r, req, sent)
    })
}

/// Who a forced release broke, as text; None when nobody held the lock.
fn broken_holder(said: ReleaseReply) -> Result<Option<String>, Refusal> {
    Ok(match said {
        ReleaseReply::Free => None,
        ReleaseReply::Broken {
            kind,
            value,
            holder,
            now_ms,
        } => Some(if holder.host.is_some() {
            holder.describe(now_ms)
        } else if kind == KeyType::Hash {
            "another client (a hash, e.g. Redisson)".into()
        } else {
            format!("another client (token {})", value.unwrap_or_default())
        }),
        ReleaseReply::BrokenAll { now_ms, holders } => Some(
            holders
                .iter()
                .map(|h| h.holder.describe(now_ms))
                .collect::<Vec<_>>()
                .join(", "),
        ),
        // Answers to an owner's release, not to a forced one.
        _ => return Err(Refusal::Unexpected),
    })
}

/// The fence of a Redlock grant, when a majority of the nodes granted: the highest of theirs.
fn majority_fence(quorum: Quorum, results: &[NodeAttempt]) -> Option<i64> {
    let fences: Vec<i64> = results
        .iter()
        .filter_map(|r| match r {
            Ok(Attempt::Granted(grant)) => Some(grant.fence),
            _ => None,
        })
        .collect();
    quorum
        .reached_by(fences.len())
        .then(|| fences.into_iter().max().unwrap_or(0))
}

/// What a Redlock grant of `ttl` asked for `elapsed` ago can count on: TTL − elapsed − drift,
/// or None when nothing is left.
fn validity(ttl: Duration, elapsed: Duration) -> Option<Duration> {
    ttl.checked_sub(elapsed)
        .and_then(|v| v.checked_sub(drift(ttl)))
}

/// A Redlock try that won no grant: a key that is not a lock on any node; no usable answer
/// when too few nodes answered; else busy, as the answer whose lease ends soonest says (or
/// with nothing to say when a majority granted, but too slowly: try again soon).
fn no_grant(quorum: Quorum, key: &LockKey, results: Vec<NodeAttempt>) -> Result<Attempt, Failure> {
    let mut busy = Vec::new();
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(a @ Attempt::Busy { .. }) => busy.push(a),
            Ok(_) => {}
            Err(e) => errors.push(e),
        }
    }
    if let Some(e) = errors.iter().find(|e| e.kind == Fault::WrongType) {
        return Err(e.clone().into_failure(&key.name));
    }
    if quorum.lost_with(errors.len()) {
        return Err(no_quorum(
            About::Lock(key.name.clone()),
            quorum.nodes(),
            errors,
        ));
    }
    // The first of the busy answers with the shortest lease left (one that never expires, or
    // has just gone, only when no other says when).
    let soonest = busy.into_iter().min_by_key(|a| match a {
        Attempt::Busy { pttl, .. } if *pttl >= 0 => (false, *pttl),
        _ => (true, 0),
    });
    Ok(soonest.unwrap_or(Attempt::Busy {
        pttl: 0,
        now_ms: 0,
        holder: Holder::default(),
        crowd: None,
        place: None,
    }))
}

#[cfg(test)]
mod tests;
