//! Waiting for a lock without polling.
//!
//! A waiter subscribes to a wake channel of its own *before* each attempt that takes a place in
//! line, so a handoff that happens between a failed attempt and the wait is never missed, and
//! every waiter in line listens: a handoff passes by a waiter nobody listens for (dead, or gone
//! without a word), so a waiter that fails or dies leaves no hole in the line. A failed attempt
//! puts the waiter in line (a sorted set, oldest first) and returns the holder's PTTL. The
//! waiter then sleeps until a release hands it the lock ("go"), the holder's lease would end, or
//! the waiter ahead of it has had its chance to claim a lock handed to it (a release tells the
//! second in line when that chance ends), whichever is first. Waiting costs Redis nothing while
//! the holder's lease is alive, apart from one check when the lease would end (at most once per
//! two thirds of the lease, since the holder renews every third); there are no heartbeats. Each
//! handoff wakes one waiter and warns one more, however long the line; a lost message costs
//! latency (at most the holder's lease), never liveness.
//!
//! A wait rides out an outage: Redis unreachable, timing out, or answering that it cannot serve
//! now (LOADING, READONLY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN, no master named by the Sentinels,
//! a grant too few replicas acknowledged, as after a failover) means "not yet", like a busy
//! lock. The waiter tries again with backoff (at most 1 s apart, with jitter) until its wait
//! ends, saying once when the outage began and once when it ended. A run that has never reached
//! Redis rides an outage out only for the locker's `first_contact` (a typo in a port must not
//! hang a cron job), then gives up (69); so does a single try (`-n`), which is about the lock,
//! not the server. A full server (maxclients) is there, and is waited
//! for as long as the wait lasts, told with -v only, as a busy lock is; a waiter that it leaves
//! without a wake channel waits out of line, its other connection closed.
//!
//! The waiter is generic over its tries (`Tries`: one try at the lock, and the line, the wake
//! channel and the first contact around it): `Locker::acquire` gives it a request's tries on the
//! deployment; its unit tests give it listed answers. It reads the time, sleeps (`poll`) and
//! draws its jitter by the tries' `Clock` (the locker's: the machine's, or the simulation's,
//! which runs this very waiter). What the waiter tells while it waits is `progress.rs`.

use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use self::asking::{Asking, Tries};
use self::once::try_once;
use self::progress::Progress;
use self::sleep::{Slept, jitter, sleep, sleep_or_report};
use super::call::acquire::Attempt;
use super::error::{About, Error, Interruption, Seen, Waited};
use super::observe::{Note, Observer};
use super::{CHECK_WITHOUT_EXPIRY, Grant, LockKey, Locker, Request};
use crate::backend::Subscriber;
use crate::clock::Clock;

/// How long to wait for a busy lock.
#[derive(Debug, Clone)]
pub struct WaitPolicy {
    /// None: wait as long as it takes.
    pub wait: Option<Duration>,
    pub no_wait: bool,
}

/// What ends a wait besides Redis: signals, read from a file descriptor (a signalfd) that the
/// waiter's `poll` watches beside its subscriptions, so that a sleeping waiter wakes for a
/// signal at once and for nothing else.
pub trait Interrupt {
    /// Readable when a signal may be there to `take`; None when there is nothing to watch.
    fn fd(&self) -> Option<BorrowedFd<'_>>;
    /// The number of a signal that should end the wait, if one came (without blocking).
    fn take(&self) -> Option<Signal>;
}

/// Who hears of a wait besides its caller: what interrupts it, and who is told what happens.
#[derive(Clone, Copy)]
pub struct Hooks<'a> {
    pub interrupt: &'a dyn Interrupt,
    pub observer: &'a dyn Observer,
}

/// The longest pause between two tries while Redis is out.
pub(super) const OUTAGE_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// How late after a claim window's end a waiter tries: enough for the window to be over by the
/// server's clock.
const CLAIM_SLACK: Duration = Duration::from_millis(5);

/// `attempt()`, with the observer's `while_trying` work done while Redis answers.
fn trying<T>(observer: &dyn Observer, attempt: impl FnOnce() -> T) -> T {
    match observer.while_trying() {
        Some(work) => crate::backend::meanwhile(work, attempt),
        None => attempt(),
    }
}

/// An outage that a waiter rides out.
struct Outage {
    since: Instant,
    /// What the last try said.
    last: Error,
    /// The pause before the next try, doubled after each (up to OUTAGE_BACKOFF_MAX).
    backoff: Duration,
    /// Redis is there and full (maxclients) all along so far: a wait like a busy lock's, told
    /// with -v only.
    full: bool,
}

impl Locker {
    /// Takes the lock (or a slot of it) that `req` asks for, waiting as `policy` says.
    pub fn acquire(&self, req: &Request, policy: WaitPolicy, hooks: Hooks) -> Result<Grant, Error> {
        let tries = Asking { locker: self, req };
        wait_for(&tries, req.key, req.token, policy, hooks)
    }
}

/// Takes the lock `key` by `tries` for `token`, waiting as `policy` says.
pub(super) fn wait_for<T: Tries>(
    tries: &T,
    key: &LockKey,
    token: &str,
    policy: WaitPolicy,
    hooks: Hooks,
) -> Result<Grant, Error> {
    if policy.no_wait || policy.wait == Some(Duration::ZERO) {
        return try_once(tries, key, hooks);
    }
    let clock = tries.clock();
    let start = clock.now();
    let waiter = Waiter {
        tries,
        clock,
        key,
        token,
        hooks,
        start,
        // A wait too long for the clock to add is as good as waiting forever.
        deadline: policy
            .wait
            .and_then(|w| start.checked_add(w))
            .filter(|_| !planted_no_deadline()),
        outage: None,
        progress: Progress::new(start),
        subs: Vec::new(),
        subscribed: false,
        heard: false,
        last_busy: None,
    };
    waiter.wait()
}

/// A wait for a lock: its tries, how long it may last, the outage it is riding out, and its
/// subscriptions to the wake channel.
struct Waiter<'a, T> {
    tries: &'a T,
    clock: &'a dyn Clock,
    key: &'a LockKey,
    token: &'a str,
    hooks: Hooks<'a>,
    start: Instant,
    /// None: as long as it takes.
    deadline: Option<Instant>,
    outage: Option<Outage>,
    progress: Progress,
    subs: Vec<Subscriber>,
    /// Subscribed since the lock was last found busy (the first try needs no subscription:
    /// an uncontended lock costs one round trip). Only a subscribed waiter takes a place in
    /// line: a handoff skips a waiter nobody listens for (dead, or never subscribed), so a
    /// place is only as good as the wake channel beside it.
    subscribed: bool,
    /// Some try has been answered (`first_contact` no longer applies).
    heard: bool,
    /// What the last try found, when it found the lock busy and no outage came since: a wait
    /// that ends now ends busy, whatever it would have tried next.
    last_busy: Option<Seen>,
}

/// What one try and the sleep after it came to.
enum Step {
    Granted(Grant),
    GaveUp(Error),
    /// Try again.
    Again,
}

impl<T: Tries> Waiter<'_, T> {
    fn wait(mut self) -> Result<Grant, Error> {
        loop {
            match self.step() {
                Step::Granted(grant) => return Ok(grant),
                Step::GaveUp(failure) => {
                    // A waiter that gives up leaves nothing behind. (When Redis did not
                    // answer, the failed attempt has already tried that; once is enough.)
                    // Within --op-timeout, as a try, when Redis answers (`budget`): across a
                    // network, what is left of the wait may be too little to send it at all
                    // (through Sentinels, whose question comes first). A deployment refused as
                    // it is (Redlock's members, before anything is written) has nothing to
                    // leave, and may not even answer. Nor has a waiter refused at login before
                    // any answer (a second run of a failing --password-command would only delay
                    // its line). A waiter displaced by a newer run is out of the line already.
                    if !failure.is_unavailable()
                        && !matches!(failure, Error::Config(_) | Error::Superseded { .. })
                        && (self.heard || !failure.is_login_refused())
                    {
                        self.tries.leave(self.budget());
                    }
                    return Err(failure);
                }
                Step::Again => {}
            }
        }
    }

    /// One try, and the sleep its answer calls for.
    fn step(&mut self) -> Step {
        let key = self.key;
        if let Some(signal) = self.hooks.interrupt.take() {
            return Step::GaveUp(interrupted(key, signal));
        }
        if self.ended()
            && let Some(seen) = self.last_busy.take()
        {
            // The wait ended with the lock busy, as Redis said last: a try now could only be
            // cut short by the deadline, which would read as an outage.
            return Step::GaveUp(self.busy(seen));
        }
        // Counted from the try's start: a try that fails may have taken --op-timeout.
        let tried = self.now();
        // Work for a grant only where one may come: not on the retries of an outage (or of a
        // full server), which may come in their hundreds.
        let attempt = match self.outage {
            None => trying(self.hooks.observer, || {
                self.tries.attempt(self.subscribed, self.budget())
            }),
            Some(_) => self.tries.attempt(self.subscribed, self.budget()),
        };
        if let Some(signal) = self.hooks.interrupt.take() {
            // (A grant that raced with the signal is given back by `wait`'s leave.)
            return Step::GaveUp(interrupted(key, signal));
        }
        match attempt {
            Err(failure) if failure.is_transient() => {
                // A full server is there: it is waited for as long as the wait lasts.
                self.heard |= failure.is_full();
                self.ride_out(failure, tried)
            }
            Err(failure) => Step::GaveUp(failure),
            Ok(answer) => {
                self.answered();
                self.after(answer)
            }
        }
    }

    /// What a try that got an answer leads to: the grant, or a sleep until the lock may be
    /// free. The first busy answer subscribes, and tries again at once, now taking a place in
    /// line (a release may have come in between).
    fn after(&mut self, answer: Attempt) -> Step {
        let key = self.key;
        let (sleep_for, seen, place) = match answer {
            Attempt::Granted(grant) => return Step::Granted(grant),
            Attempt::Busy {
                pttl,
                now_ms,
                holder,
                crowd,
                place,
                ..
            } => (
                if pttl >= 0 {
                    Duration::from_millis(pttl as u64 + 1)
                } else {
                    CHECK_WITHOUT_EXPIRY
                },
                Seen::Held {
                    pttl,
                    now_ms,
                    holder: Box::new(holder),
                    crowd,
                },
                place,
            ),
            Attempt::Queued { wait_ms } => (
                Duration::from_millis(wait_ms.max(0) as u64) + CLAIM_SLACK,
                Seen::Handed,
                None,
            ),
            Attempt::Superseded { by } => return Step::GaveUp(superseded(key, by)),
        };
        self.last_busy = Some(seen.clone());
        let mut until = self.now() + sleep_for;
        if self.tries.races() {
            // Redlock waiters race each other on every node: spread them out so that they do
            // not split the votes in lockstep.
            until += jitter(self.clock);
        }
        if let Some(deadline) = self.deadline {
            if self.ended() {
                return Step::GaveUp(self.busy(seen));
            }
            until = until.min(deadline);
        }
        if !self.subscribed {
            // What the wait is about is said once the waiter is in line, with its place.
            return self.subscribe();
        }
        let now = self.now();
        self.progress
            .busy(&key.name, seen, place, self.hooks.observer, now);
        match self.sleep(until) {
            Slept::Woken | Slept::TimedOut | Slept::Report => Step::Again,
            Slept::Interrupted(signal) => Step::GaveUp(interrupted(key, signal)),
            Slept::SubscriberBroken => {
                // Closing the broken connections unsubscribes; a release may have been missed
                // meanwhile, so subscribe and try again at once.
                self.subs.clear();
                self.subscribed = false;
                Step::Again
            }
        }
    }

    /// Subscribes to the wake channel, and tries again at once (in line, this time). A wake
    /// channel that cannot be had now (a full server, an outage) is waited for as an outage,
    /// out of line and with no connection kept meanwhile; one that cannot be had at all (no
    /// pub/sub) leaves the waiter to try again when the lease it was told of ends.
    fn subscribe(&mut self) -> Step {
        match self.tries.subscribe(self.left()) {
            Ok(subs) => self.subs = subs,
            Err(failure) if failure.is_transient() => {
                if self.ended()
                    && let Some(seen) = self.last_busy.take()
                {
                    // Cut short by the wait's end, after a busy answer: busy, not an outage.
                    return Step::GaveUp(self.busy(seen));
                }
                self.tries.hang_up();
                return self.ride_out(failure, self.now());
            }
            Err(_) => self.subs.clear(),
        }
        self.subscribed = true;
        Step::Again
    }

    /// A try got no answer that time may cure: the outage begins or goes on, and the next try
    /// comes after a backoff (or the wait ends at its deadline).
    fn ride_out(&mut self, failure: Error, tried: Instant) -> Step {
        let key = &self.key.name;
        let full = failure.is_full();
        self.last_busy = None;
        let outage = match self.outage.take() {
            Some(mut o) => {
                if o.full && !full {
                    // A full server that went out: an outage after all, said as one.
                    o.full = false;
                    self.began(&failure);
                }
                o.last = failure;
                o.backoff = (o.backoff * 2).min(OUTAGE_BACKOFF_MAX);
                o
            }
            None => {
                if full {
                    self.hooks.observer.observe(Note::ServerFull {
                        key,
                        failure: &failure,
                    });
                } else {
                    self.began(&failure);
                }
                Outage {
                    // Down all along when no try has been answered yet.
                    since: if self.heard { tried } else { self.start },
                    last: failure,
                    backoff: Duration::from_millis(50),
                    full,
                }
            }
        };
        // Jitter, so that the waiters of a key do not all come back at once.
        let pause = outage.backoff.mul_f64(0.75) + jitter(self.clock).min(outage.backoff / 4);
        let now = self.now();
        if self.deadline.is_some_and(|deadline| now >= deadline) {
            return Step::GaveUp(Error::Outage {
                last: Box::new(outage.last),
                waited: self.since(self.start),
                down_for: self.since(outage.since),
            });
        }
        let first_contact = self.first_contact_ends();
        if first_contact.is_some_and(|end| now >= end) {
            return Step::GaveUp(Error::NeverReached {
                last: Box::new(outage.last),
                tried_for: self.since(self.start),
            });
        }
        self.outage = Some(outage);
        let next = now + pause;
        let until = [self.deadline, first_contact]
            .into_iter()
            .flatten()
            .fold(next, Instant::min);
        // No subscription while Redis is out: the backoff is the poll's timeout.
        match sleep(self.clock, &mut [], until, self.token, self.hooks.interrupt) {
            Slept::Interrupted(signal) => Step::GaveUp(interrupted(self.key, signal)),
            _ => Step::Again,
        }
    }

    /// Tells that an outage began, which `failure` shows.
    fn began(&self, failure: &Error) {
        self.hooks.observer.observe(Note::OutageBegan {
            key: &self.key.name,
            failure,
            first_contact: (!self.heard).then(|| self.tries.first_contact()),
        });
    }

    /// When a run that has not reached Redis yet stops trying to.
    fn first_contact_ends(&self) -> Option<Instant> {
        if self.heard {
            return None;
        }
        self.start.checked_add(self.tries.first_contact())
    }

    /// What a try, or the give-back of a waiter that gives up, may take now. A request to a
    /// Redis that answers is not cut by the wait's end: it finishes within --op-timeout, however
    /// far away Redis is, and its answer counts (a grant is kept, a busy lock is busy, the line
    /// is left for sure). A Redis not heard from yet, or out, has what is left of the wait: a
    /// port that answers nothing does not hold the wait up.
    fn budget(&self) -> Option<Duration> {
        match self.heard && self.outage.is_none() {
            true => None,
            false => self.left(),
        }
    }

    /// A bounded wait has come to its end.
    fn ended(&self) -> bool {
        self.deadline.is_some_and(|d| self.now() >= d)
    }

    /// What is left of a bounded wait.
    fn left(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(self.now()))
    }

    /// A try got an answer: an outage under way is over.
    fn answered(&mut self) {
        self.heard = true;
        if let Some(o) = self.outage.take() {
            let (key, after) = (&self.key.name, self.since(o.since));
            self.hooks.observer.observe(match o.full {
                true => Note::RoomAgain { key, after },
                false => Note::OutageEnded { key, after },
            });
        }
    }

    /// The failure of a wait that ends now with the lock busy, as the last try `seen` it.
    fn busy(&self, seen: Seen) -> Error {
        Error::Busy {
            about: About::from(self.key),
            seen,
            waited: Waited::For(self.since(self.start)),
        }
    }

    /// Sleeps as the free function does, waking on the way only to tell how the wait goes
    /// (which asks Redis nothing).
    fn sleep(&mut self, until: Instant) -> Slept {
        loop {
            let report = self.progress.due(self.hooks.observer);
            let slept = sleep_or_report(
                self.clock,
                &mut self.subs,
                until,
                report,
                self.token,
                self.hooks.interrupt,
            );
            match slept {
                Slept::Report => {
                    let now = self.now();
                    self.progress
                        .tell(&self.key.name, false, self.hooks.observer, now);
                }
                slept => return slept,
            }
        }
    }
}

impl<T> Waiter<'_, T> {
    /// Now, by the locker's clock.
    fn now(&self) -> Instant {
        self.clock.now()
    }

    /// How long ago `then` was, by the locker's clock.
    fn since(&self, then: Instant) -> Duration {
        self.now().saturating_duration_since(then)
    }
}

/// Whether the simulation planted a waiter that ignores its `-w` (always false in the binary).
fn planted_no_deadline() -> bool {
    #[cfg(feature = "sim-seams")]
    if super::planted::on(super::planted::Bug::NoDeadline) {
        return true;
    }
    false
}

pub(super) fn interrupted(key: &LockKey, signal: Signal) -> Error {
    Error::Interrupted {
        about: About::from(key),
        signal,
        when: Interruption::Waiting,
    }
}

/// The failure of a waiter that a newer run `by` displaced (`--newest`).
pub(super) fn superseded(key: &LockKey, by: crate::lock::Holder) -> Error {
    Error::Superseded {
        about: About::from(key),
        by: Box::new(by),
    }
}

mod asking;
mod once;
mod progress;
mod sleep;
#[cfg(test)]
mod tests;
