//! The exclusive lock: one holder at a time. Its operations on a `Locker`: one try at taking it
//! (with Redlock's majority and validity check), giving up a place in line, release and forced
//! release. The renewal is `redlock.rs`'s (on one Redis it is one script call; the rest is the
//! majority's); waiting is `wait.rs`; reading is `read.rs`.

use std::time::{Duration, Instant};

use crate::clock::Job;

use super::call;
use super::call::acquire::Acquire;
use super::call::acquire::Attempt;
use super::call::release::{Release, ReleaseReply};
use super::call::renew::{Fence, Leave};
use super::error::{About, Error, Refused};
use super::history::{HoldRecord, Keep, Record, RunRecord};
use super::key::LockKey;
use super::lease::deadline;
use super::locker::{Locker, Quorum, no_quorum};
use super::redlock::release_verdict;
use super::reply::{Holder, KeyType, Refusal, millis};
use super::{Grant, Released, Request, Ttl};
use crate::backend::{Fault, Node, NodeError};

/// What one node said to an acquire.
type NodeAttempt = Result<Attempt, NodeError>;

impl Locker {
    /// One try at taking the lock; with `join_queue`, a busy try keeps a place in line. A try
    /// that got no usable answer fails; `Error::is_transient` says whether time may cure it
    /// (an outage, which a waiter rides out) or not (a refusal, a key that is not a lock, a URL
    /// that does not resolve).
    ///
    /// `within`: what is left of a bounded wait. The try, and the give-back after a try whose
    /// reply never came, each end within it (at most --op-timeout each).
    pub(crate) fn attempt(
        &self,
        req: &Request,
        join_queue: bool,
        within: Option<Duration>,
    ) -> Result<Attempt, Error> {
        let began = self.now();
        let (key, token, ttl) = (req.key, req.token, req.ttl);
        // What is left of the wait, after what this try has taken so far.
        let left = || within.map(|w| w.saturating_sub(self.now() - began));
        // Redlock: one vote per server, whatever names reach it, and never a replica's
        // (redlock.rs).
        let identified = match self.is_quorum() {
            true => self.identify(capped(self.node_timeout(ttl), left()))?,
            false => Vec::new(),
        };
        let timeout = capped(self.node_timeout(ttl), left());
        // A Redlock waiter does not queue: queues on independent masters could disagree on
        // who is first. It waits for the release's "anyone" wake-up instead.
        let call = Acquire::new(req, join_queue && !self.is_quorum(), self.now());
        // exec's run goes on record with the try that is granted (one server: `running.rs`).
        let record = req.record.filter(|_| !self.is_quorum());
        let results = self.on_each(|i, n| match (identified.get(i), record) {
            (Some(Err(e)), _) => Err(e.clone()),
            (_, Some(record)) => record.try_on(n, &call, timeout),
            (_, None) => call::run(n, &call, timeout),
        });
        if !self.is_quorum() {
            let mut result = results.into_iter().next().expect("one node");
            if let Err(e) = &mut result
                && matches!(
                    e.kind,
                    Fault::Timeout
                        | Fault::Io
                        | Fault::Replicas
                        | Fault::Denied
                        | Fault::WrongMode
                        | Fault::BadReply
                        | Fault::NotRedis
                )
            {
                // Sent, and no reply (a timeout, or the connection broke), or a reply that
                // cannot be believed (not RESP, not acquire.lua's, a fence or TTL no script
                // gives): the grant may have happened. Or granted, and too few replicas have
                // it (or the ACL refused the WAIT after it, or the server has no WAIT): a
                // failover could lose it. Give it back so it does not sit out its whole TTL. (A
                // script the ACL refused, or one answered with MOVED, the other wrong mode,
                // wrote nothing: the give-back finds nothing to give.)
                let given_back = !planted_no_give_back()
                    && self
                        .leave_within(key, token, capped(self.op_timeout, left()))
                        .is_ok();
                if matches!(e.kind, Fault::Replicas | Fault::WrongMode | Fault::BadReply)
                    && given_back
                {
                    e.detail.push_str("; the grant was given back");
                }
            }
            return result.map_err(|e| Error::redis(key, e));
        }
        // A master that did not say who it is was sent no grant: nothing to give back there.
        let asked: Vec<bool> = identified.iter().map(Result::is_ok).collect();
        // A master that has run for less than the holder's lease may have restarted empty
        // under it (`votes`).
        let uptimes: Vec<Option<Duration>> = identified
            .iter()
            .map(|id| id.as_ref().ok().map(|id| id.uptime))
            .collect();
        let give_back = capped(self.node_timeout(ttl), left());
        let attempt = self.combine_attempts(req, call.sent, results, (&asked, &uptimes), give_back);
        if let Ok(Attempt::Granted(_)) = &attempt {
            self.remember_grant(req);
        }
        attempt
    }

    /// Redlock: a grant needs a majority of nodes *and* time left of the TTL after the
    /// round trip (validity = TTL − elapsed − drift). Anything less is given back on every
    /// node that was `asked`, including those that did not answer, each within `give_back`.
    fn combine_attempts(
        &self,
        req: &Request,
        sent: Instant,
        results: Vec<NodeAttempt>,
        (asked, uptimes): (&[bool], &[Option<Duration>]),
        give_back: Duration,
    ) -> Result<Attempt, Error> {
        let (key, token, ttl) = (req.key, req.token, req.ttl);
        let timeout = self.node_timeout(ttl);
        let votes = votes(&results, uptimes);
        if let Some(fence) = majority_fence(self.quorum(), &results, &votes)
            && let Some(validity) = validity(ttl, sent, self.now())
        {
            self.raise_fences(key, token, fence, &results, timeout);
            self.set_missing(
                results
                    .iter()
                    .map(|r| !matches!(r, Ok(Attempt::Granted(_))))
                    .collect(),
            );
            return Ok(Attempt::Granted(Grant {
                key: key.clone(),
                token: token.to_string(),
                fence,
                ttl: Ttl::Validity(validity),
                sent,
            }));
        }
        // No grant: give back what was granted, everywhere it was asked.
        let leave = Leave::new(key, token);
        self.on_each(|i, n| {
            if asked[i] {
                let _ = call::run(n, &leave, give_back);
            }
        });
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
        let raise = &Fence {
            key,
            token,
            floor: fence,
        };
        let raising: Vec<Job<'_>> = self
            .nodes
            .iter()
            .zip(results)
            .filter(
                |(_, result)| matches!(result, Ok(Attempt::Granted(mine)) if mine.fence < fence),
            )
            .map(|(node, _)| -> Job<'_> {
                Box::new(move || {
                    let _ = call::run(node.as_ref(), raise, timeout);
                })
            })
            .collect();
        if !raising.is_empty() {
            self.clock().fan_out(raising);
        }
    }

    /// Leaves the wait queue, giving back a grant that raced with giving up. Best effort.
    pub fn leave(&self, key: &LockKey, token: &str) -> Result<(), Error> {
        self.leave_within(key, token, self.op_timeout)
    }

    /// As `leave`, each node within `timeout`.
    pub(super) fn leave_within(
        &self,
        key: &LockKey,
        token: &str,
        timeout: Duration,
    ) -> Result<(), Error> {
        let leave = Leave::new(key, token);
        let results = self.on_all(|n| call::run(n, &leave, timeout));
        match results.into_iter().find_map(Result::err) {
            Some(e) if !self.is_quorum() => Err(Error::redis(key, e)),
            _ => Ok(()),
        }
    }

    /// Releases the lock if `token` owns it. A retried release of the same token succeeds.
    pub fn release(&self, key: &LockKey, token: &str) -> Result<Released, Error> {
        self.release_recording(key, token, None).0
    }

    /// As `release`; with `record`, the hold that ends is recorded in the lock's history, by a
    /// script of its own after the release (record.lua): released, or lost when the token's
    /// lease ran out first (an exec's run, `HoldRecord::run_end`, only when the release gives
    /// the lock back). Also why the record was not written, on each node that did not write it:
    /// that changes nothing else.
    pub fn release_recording(
        &self,
        key: &LockKey,
        token: &str,
        record: Option<&HoldRecord>,
    ) -> (Result<Released, Error>, Vec<String>) {
        let (results, unrecorded) = self.run_release(key, token, false, record, Ok);
        (self.release_outcome(key, results), unrecorded)
    }

    /// release.lua on every node, its replies decoded with `decode`, then on each node what its
    /// release said the history should keep (record.lua: a refused history write never changes
    /// the release's answer); and why the hold was not recorded, where it was to be and was not.
    fn run_release<T>(
        &self,
        key: &LockKey,
        token: &str,
        force: bool,
        record: Option<&HoldRecord>,
        decode: impl Fn(ReleaseReply) -> Result<T, Refusal> + Sync,
    ) -> (Vec<Result<T, NodeError>>, Vec<String>)
    where
        T: Send,
    {
        // exec's run, known before the release, goes in the same round trip (one server).
        let run = record
            .and_then(|r| {
                r.run_end
                    .as_ref()
                    .map(|run| (r.keep, run, r.running_id.as_deref()))
            })
            .filter(|_| !self.is_quorum());
        let release = Release {
            key,
            token,
            force,
            record: if run.is_some() { None } else { record },
        };
        let results = self.on_all(|n| {
            if let Some((keep, run, running_id)) = run {
                return self.release_with_run(n, &release, (keep, running_id), run, &decode);
            }
            let (reply, history, unrecorded) =
                call::run_as(n, &release, self.op_timeout, |said| {
                    Ok((decode(said.reply)?, said.history, said.unrecorded))
                })?;
            let mut note = unrecorded.map(|why| format!("{}: {why}", n.name()));
            if let Some(record) = record.filter(|_| !history.is_empty()) {
                let call = Record {
                    key,
                    keep: record.keep,
                    entries: &history,
                    released_by: None,
                    granted_to: None,
                    running_id: None,
                };
                if let Err(e) = call::run(n, &call, self.op_timeout) {
                    note = Some(e.to_string());
                }
            }
            Ok((reply, note))
        });
        let mut notes = Vec::new();
        let results = results
            .into_iter()
            .map(|r| {
                r.map(|(reply, note)| {
                    notes.extend(note);
                    reply
                })
            })
            .collect();
        (results, notes)
    }

    /// `release` on node `n` and, sent with it, exec's `run` for the history should that release
    /// give the lock back (record.lua checks the state), in place of its entry `running` (the
    /// one at `running_id` when the grant's write said where): one round trip. Should another client's
    /// command have come between the two (the run skipped though the lock was given back), the
    /// run is recorded on its own after. What keeps it from the history is the note.
    fn release_with_run<T>(
        &self,
        n: &dyn Node,
        release: &Release<'_>,
        (keep, running_id): (Keep, Option<&str>),
        run: &RunRecord,
        decode: &(impl Fn(ReleaseReply) -> Result<T, Refusal> + Sync),
    ) -> Result<(T, Option<String>), NodeError> {
        let entries = run.entries();
        let mut record = Record {
            key: release.key,
            keep,
            entries: &entries,
            released_by: Some(release.token),
            granted_to: None,
            running_id,
        };
        let (reply, gave_back, recorded) =
            call::run_then(n, release, &record, self.op_timeout, |said| {
                let gave_back =
                    matches!(said.reply, ReleaseReply::Released | ReleaseReply::Already);
                Ok((decode(said.reply)?, gave_back))
            })
            .map(|((reply, gave_back), recorded)| (reply, gave_back, recorded))?;
        let note = match recorded {
            Ok(Some(_)) => None,
            Ok(None) if gave_back => {
                record.released_by = None;
                call::run(n, &record, self.op_timeout)
                    .err()
                    .map(|e| e.to_string())
            }
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        };
        Ok((reply, note))
    }

    /// What the owner's release did, from what each node said.
    fn release_outcome(
        &self,
        key: &LockKey,
        results: Vec<Result<ReleaseReply, NodeError>>,
    ) -> Result<Released, Error> {
        if self.is_quorum() {
            return release_verdict(self.quorum(), key, results);
        }
        match results.into_iter().next().expect("one node") {
            Ok(ReleaseReply::Released | ReleaseReply::Already) => Ok(Released::Done),
            Err(e) => Err(Error::redis(key, e)),
            Ok(ReleaseReply::Other) => Err(Error::NotPermitted {
                about: About::from(key),
                refused: Refused::ReleaseHeldByOther,
            }),
            Ok(_) => Err(Error::NotPermitted {
                about: About::from(key),
                refused: Refused::ReleaseNotHeld,
            }),
        }
    }

    /// Breaks the lock whoever holds it.
    pub fn force_release(&self, key: &LockKey) -> Result<Released, Error> {
        self.force_release_recording(key, None).0
    }

    /// As `force_release`; with `record`, each hold it breaks (that rlock has a record of) is
    /// recorded in the lock's history as broken, by `record.by`. Also why the record was not
    /// written, on each node that did not write it: that changes nothing else.
    pub fn force_release_recording(
        &self,
        key: &LockKey,
        record: Option<&HoldRecord>,
    ) -> (Result<Released, Error>, Vec<String>) {
        let (results, unrecorded) = self.run_release(key, "", true, record, broken_holder);
        (force_outcome(key, results), unrecorded)
    }
}

/// What a forced release did, from what each node said.
fn force_outcome(
    key: &LockKey,
    results: Vec<Result<Option<String>, NodeError>>,
) -> Result<Released, Error> {
    if let Some(who) = results
        .iter()
        .find_map(|r| r.as_ref().ok().cloned().flatten())
    {
        return Ok(Released::Broken(Some(who)));
    }
    match results.into_iter().find_map(Result::err) {
        Some(e) => Err(Error::redis(key, e)),
        None => Ok(Released::Broken(None)),
    }
}

/// `timeout`, no longer than `within` when given (and never zero, which a socket refuses).
pub(super) fn capped(timeout: Duration, within: Option<Duration>) -> Duration {
    within
        .map_or(timeout, |w| timeout.min(w))
        .max(Duration::from_millis(1))
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

/// Which nodes' grants count: all, unless a node answered that another holder has the lock;
/// then none that has been up (`uptimes`) for less than the longest lease any node reports,
/// which may have restarted empty under that holder. The holder's lease, not the asker's TTL:
/// holders of one key may ask for different TTLs (see docs/safety.md, "Redlock").
fn votes(results: &[NodeAttempt], uptimes: &[Option<Duration>]) -> Vec<bool> {
    #[cfg(feature = "sim-seams")]
    if super::planted::on(super::planted::Bug::NoRestartRule) {
        return vec![true; results.len()];
    }
    let longest = longest_lease(results);
    (0..results.len())
        .map(|i| match (longest, uptimes.get(i).copied().flatten()) {
            (Some(lease), Some(up)) => up >= lease,
            _ => true,
        })
        .collect()
}

/// Whether the simulation planted a try that is never given back (always false in the binary).
fn planted_no_give_back() -> bool {
    #[cfg(feature = "sim-seams")]
    if super::planted::on(super::planted::Bug::NoGiveBack) {
        return true;
    }
    false
}

/// The longest lease the busy answers report, each the longer of the holder's remaining PTTL
/// and the lease its grant or last renewal asked for (a lock without expiry: without end);
/// None when no node says the lock is held.
fn longest_lease(results: &[NodeAttempt]) -> Option<Duration> {
    results
        .iter()
        .filter_map(|r| match r {
            Ok(Attempt::Busy { pttl: -1, .. }) => Some(Duration::MAX),
            Ok(Attempt::Busy { pttl, lease_ms, .. }) => {
                Some(millis((*pttl).max(lease_ms.unwrap_or(0))))
            }
            _ => None,
        })
        .max()
}

/// The fence of a Redlock grant, when a majority of the nodes granted and their `votes` count:
/// the highest of theirs.
fn majority_fence(quorum: Quorum, results: &[NodeAttempt], votes: &[bool]) -> Option<i64> {
    let fences: Vec<i64> = results
        .iter()
        .zip(votes)
        .filter_map(|(r, counts)| match r {
            Ok(Attempt::Granted(grant)) if *counts => Some(grant.fence),
            _ => None,
        })
        .collect();
    quorum
        .reached_by(fences.len())
        .then(|| fences.into_iter().max().unwrap_or(0))
}

/// What a Redlock grant of `ttl` asked for at `sent` can count on at `now`, or None when
/// nothing is left: the time to the lease's end (`deadline`, TTL − drift from the send), the
/// very moment `Lease::timeline` counts the command's signals back from, so that "how long do
/// I hold" has one answer for the grant and for exec.
fn validity(ttl: Duration, sent: Instant, now: Instant) -> Option<Duration> {
    deadline(sent, ttl).checked_duration_since(now)
}

/// A Redlock try that won no grant: a key that is not a lock on any node; no usable answer
/// when too few nodes answered; else busy, as the answer whose lease ends soonest says (or
/// with nothing to say when a majority granted, but too slowly: try again soon).
fn no_grant(quorum: Quorum, key: &LockKey, results: Vec<NodeAttempt>) -> Result<Attempt, Error> {
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
        return Err(Error::redis(key, e.clone()));
    }
    if quorum.lost_with(errors.len()) {
        return Err(no_quorum(About::from(key), quorum.nodes(), errors));
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
        lease_ms: None,
        crowd: None,
        place: None,
    }))
}

#[cfg(test)]
mod tests;
