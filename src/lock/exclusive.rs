//! The exclusive lock: one holder at a time. Its operations on a `Locker`: one try at taking it
//! (with Redlock's majority and validity check), giving up a place in line, release, forced
//! release and renewal. Waiting is `wait.rs`; reading is `read.rs`.

use std::time::{Duration, Instant};

use super::key::LockKey;
use super::lease::drift;
use super::locker::{Locker, eval_on, no_quorum, unexpected, wrong_type};
use super::reply::{AcquireReply, Crowd, Holder, KeyType, ReleaseReply, RenewReply};
use super::scripts::{ACQUIRE, FENCE, LEAVE, RELEASE, RENEW};
use super::{CHECK_WITHOUT_EXPIRY, Grant, Released, Renewed, Request};
use crate::backend::{Fault, Node, NodeError};
use crate::exit::Failure;

/// One try at taking the lock.
#[derive(Debug)]
pub(super) enum Attempt {
    Granted(Grant),
    Busy {
        pttl: i64,
        now_ms: i64,
        holder: Holder,
        crowd: Option<Crowd>,
    },
    Queued {
        wait_ms: i64,
    },
}

/// What one node said to an acquire.
type NodeAttempt = Result<Attempt, NodeError>;

/// An attempt that got no usable answer: why, and whether time may cure it (an outage, which a
/// waiter rides out) or not (a refusal, a key that is not a lock, a URL that does not resolve).
#[derive(Debug)]
pub(super) struct Unanswered {
    pub failure: Failure,
    pub transient: bool,
}

impl Unanswered {
    fn from_node(e: NodeError, key: &LockKey) -> Self {
        Unanswered {
            transient: e.is_transient(),
            failure: e.into_failure(&key.name),
        }
    }
}

impl Locker {
    /// One try at taking the lock; with `join_queue`, a busy try keeps a place in line.
    pub(super) fn attempt(&self, req: &Request, join_queue: bool) -> Result<Attempt, Unanswered> {
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
            return result.map_err(|e| Unanswered::from_node(e, key));
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
    ) -> Result<Attempt, Unanswered> {
        let n = self.nodes.len();
        let timeout = self.node_timeout(ttl);
        let fences: Vec<i64> = results
            .iter()
            .filter_map(|r| match r {
                Ok(Attempt::Granted(grant)) => Some(grant.fence),
                _ => None,
            })
            .collect();
        let validity = ttl
            .checked_sub(sent.elapsed())
            .and_then(|v| v.checked_sub(drift(ttl)));
        if self.quorum().reached_by(fences.len())
            && let Some(validity) = validity
        {
            let fence = fences.iter().copied().max().unwrap_or(0);
            // Keep the nodes' counters in step, so that the next grant's fence (the highest
            // counter of its majority, which overlaps this one) is higher than this one: raise
            // the granting nodes that are behind (they just answered; usually none is).
            let floor = fence.to_string();
            std::thread::scope(|s| {
                for (node, result) in self.nodes.iter().zip(&results) {
                    if let Ok(Attempt::Granted(mine)) = result
                        && mine.fence < fence
                    {
                        let (floor, keys) = (&floor, key.keys_for(&FENCE));
                        s.spawn(move || node.eval(&FENCE, &keys, &[token, floor], timeout));
                    }
                }
            });
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

        let mut busy: Option<Attempt> = None;
        let mut errors: Vec<NodeError> = Vec::new();
        for r in results {
            match r {
                Ok(a @ Attempt::Busy { .. }) => {
                    let shorter = match (&busy, &a) {
                        (Some(Attempt::Busy { pttl: old, .. }), Attempt::Busy { pttl, .. }) => {
                            *pttl >= 0 && (*old < 0 || pttl < old)
                        }
                        _ => true,
                    };
                    if shorter {
                        busy = Some(a);
                    }
                }
                Ok(_) => {}
                Err(e) => errors.push(e),
            }
        }
        if let Some(e) = errors.iter().find(|e| e.kind == Fault::WrongType) {
            return Err(Unanswered::from_node(e.clone(), key));
        }
        if self.quorum().lost_with(errors.len()) {
            return Err(Unanswered {
                transient: errors.iter().all(NodeError::is_transient),
                failure: no_quorum(&format!("lock '{}'", key.name), n, &errors),
            });
        }
        Ok(busy.unwrap_or(Attempt::Busy {
            // Granted by a majority but too slowly: try again soon.
            pttl: 0,
            now_ms: 0,
            holder: Holder::default(),
            crowd: None,
        }))
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
            let reply = eval_on(n, &RELEASE, key, &args, self.op_timeout)?;
            match ReleaseReply::decode(&reply) {
                Some(ReleaseReply::WrongType(kind)) => Err(wrong_type(n, &kind)),
                Some(said) => Ok(said),
                None => Err(unexpected(n, "release", &reply)),
            }
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
            return Err(Failure::NotPermitted(format!(
                "lock '{}' is held by another owner, not by this token; nothing was changed (use --force to break it)",
                key.name
            )));
        }
        Err(Failure::NotPermitted(format!(
            "lock '{}' is not held by this token: it expired or was broken before the release; nothing was changed",
            key.name
        )))
    }

    /// Breaks the lock whoever holds it.
    pub fn force_release(&self, key: &LockKey) -> Result<Released, Failure> {
        let args = ["", key.channel.as_str(), "1"];
        let results = self.on_all(|n| {
            let reply = eval_on(n, &RELEASE, key, &args, self.op_timeout)?;
            match ReleaseReply::decode(&reply) {
                Some(ReleaseReply::Free) => Ok(None),
                Some(ReleaseReply::Broken {
                    kind,
                    value,
                    holder,
                    now_ms,
                }) => Ok(Some(if holder.host.is_some() {
                    holder.describe(now_ms)
                } else if kind == KeyType::Hash {
                    "another client (a hash, e.g. Redisson)".into()
                } else {
                    format!("another client (token {})", value.unwrap_or_default())
                })),
                Some(ReleaseReply::BrokenAll { now_ms, holders }) => Ok(Some(
                    holders
                        .iter()
                        .map(|h| h.holder.describe(now_ms))
                        .collect::<Vec<_>>()
                        .join(", "),
                )),
                Some(ReleaseReply::WrongType(kind)) => Err(wrong_type(n, &kind)),
                _ => Err(unexpected(n, "release", &reply)),
            }
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
    ) -> Result<Renewed, NodeError> {
        let ttl_ms = ttl
            .map(|t| t.as_millis().max(1).to_string())
            .unwrap_or_default();
        let timeout = ttl.map_or(timeout, |t| timeout.min(self.node_timeout(t)));
        let results = self.on_all(|n| {
            let reply = eval_on(n, &RENEW, key, &[token, &ttl_ms], timeout)?;
            match RenewReply::decode(&reply) {
                Some(RenewReply::Renewed { ttl_ms }) => {
                    Ok(Renewed::Yes(Duration::from_millis(ttl_ms.max(0) as u64)))
                }
                Some(RenewReply::Free) => Ok(Renewed::NotOwner("it expired or was deleted")),
                Some(RenewReply::Other) => Ok(Renewed::NotOwner("another owner holds it")),
                Some(RenewReply::WrongType(kind)) => Err(wrong_type(n, &kind)),
                None => Err(unexpected(n, "renew", &reply)),
            }
        });
        if !self.is_quorum() {
            return results.into_iter().next().expect("one node");
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
            return Ok(Renewed::NotOwner(
                "a majority of the Redlock nodes no longer hold it",
            ));
        }
        Err(results
            .into_iter()
            .find_map(Result::err)
            .unwrap_or_else(|| NodeError {
                kind: Fault::Timeout,
                node: "Redlock".into(),
                detail: "too few nodes renewed in time".into(),
            }))
    }
}

fn attempt_on(
    node: &dyn Node,
    req: &Request,
    args: &[&str],
    timeout: std::time::Duration,
    sent: Instant,
) -> NodeAttempt {
    let reply = eval_on(node, &ACQUIRE, req.key, args, timeout)?;
    match AcquireReply::decode(&reply) {
        Some(AcquireReply::Granted { fence, ttl_ms }) => Ok(Attempt::Granted(Grant {
            key: req.key.clone(),
            token: req.token.to_string(),
            fence,
            ttl: Duration::from_millis(ttl_ms.max(0) as u64),
            sent,
        })),
        Some(AcquireReply::Busy {
            pttl,
            now_ms,
            holder,
            crowd,
        }) => Ok(Attempt::Busy {
            pttl,
            now_ms,
            holder,
            crowd,
        }),
        Some(AcquireReply::Mismatch(kind)) => Err(NodeError {
            kind: Fault::Mismatch,
            node: node.name().into(),
            detail: match kind.strip_prefix("limit ") {
                Some(n) => format!("a semaphore with --limit {n}"),
                None if kind == "shared" => "a shared lock (--shared)".into(),
                None => "an exclusive lock (no --limit, or --limit 1)".into(),
            },
        }),
        Some(AcquireReply::Queued { wait_ms }) => Ok(Attempt::Queued { wait_ms }),
        Some(AcquireReply::WrongType(kind)) => Err(wrong_type(node, &kind)),
        None => Err(unexpected(node, "acquire", &reply)),
    }
}
