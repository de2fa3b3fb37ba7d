//! Waiting for a lock without polling.
//!
//! A waiter subscribes to a wake channel of its own *before* each attempt, so a handoff that
//! happens between a failed attempt and the wait is never missed. A failed attempt puts the
//! waiter in line (a sorted set, oldest first) and returns the holder's PTTL. The waiter then
//! sleeps until a release hands it the lock ("go"), the holder's lease would end, or the waiter
//! ahead of it has had its chance to claim a lock handed to it (a release tells the second in
//! line when that chance ends), whichever is first. Waiting costs Redis nothing while the
//! holder's lease is alive, apart from one check when the lease would end (at most once per two
//! thirds of the lease, since the holder renews every third); there are no heartbeats. Each
//! handoff wakes one waiter and warns one more, however long the line; a lost message costs
//! latency (at most the holder's lease), never liveness.
//!
//! A wait rides out an outage: Redis unreachable, timing out, or answering that it cannot serve
//! now (LOADING, READONLY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN, no master named by the Sentinels)
//! means "not yet", like a busy lock. The waiter tries again with backoff (at most 1 s apart,
//! with jitter) until its wait ends, saying once when the outage began and once when it ended.

use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::display::{busy_message, human_ms};
use super::exclusive::{Attempt, Unanswered};
use super::{CHECK_WITHOUT_EXPIRY, Grant, LockKey, Locker, Sharing};
use crate::backend::Subscriber;
use crate::exit::Failure;
use crate::identity::Identity;

/// How long to wait for a busy lock.
#[derive(Debug, Clone)]
pub struct WaitPolicy {
    /// None: wait as long as it takes.
    pub wait: Option<Duration>,
    pub no_wait: bool,
    /// Exit code for "busy" (75 unless `-E`).
    pub busy_code: u8,
    /// No line on stderr when an outage begins and ends (`-q`).
    pub quiet: bool,
    /// A line for stderr when the lock is found busy and the wait begins (unless `quiet`).
    pub when_waiting: Option<String>,
}

/// The longest pause between two tries while Redis is out.
const OUTAGE_BACKOFF_MAX: Duration = Duration::from_secs(1);

/// An outage that a waiter rides out.
struct Outage {
    since: Instant,
    /// What the last try said.
    last: Failure,
    /// The pause before the next try, doubled after each (up to OUTAGE_BACKOFF_MAX).
    backoff: Duration,
}

/// How long a waiter waits, and what it says meanwhile.
struct Patience {
    start: Instant,
    /// None: as long as it takes.
    deadline: Option<Instant>,
    policy: WaitPolicy,
    outage: Option<Outage>,
}

impl Patience {
    /// A try got no answer that time may cure: the outage begins, or goes on. Returns when to
    /// try next.
    fn outage(&mut self, key: &LockKey, failure: Failure) -> Instant {
        let outage = match self.outage.take() {
            Some(mut o) => {
                o.last = failure;
                o.backoff = (o.backoff * 2).min(OUTAGE_BACKOFF_MAX);
                o
            }
            None => {
                if !self.policy.quiet {
                    eprintln!(
                        "rlock: {failure}; still waiting for lock '{}', trying again at most 1s apart",
                        key.name
                    );
                }
                Outage {
                    since: Instant::now(),
                    last: failure,
                    backoff: Duration::from_millis(50),
                }
            }
        };
        // Jitter, so that the waiters of a key do not all come back at once.
        let pause = outage.backoff.mul_f64(0.75) + jitter().min(outage.backoff / 4);
        self.outage = Some(outage);
        Instant::now() + pause
    }

    /// A try got an answer: an outage under way is over.
    fn answered(&mut self, key: &LockKey) {
        if let Some(o) = self.outage.take()
            && !self.policy.quiet
        {
            eprintln!(
                "rlock: Redis answers again after {}; still waiting for lock '{}'",
                human_ms(o.since.elapsed().as_millis() as i64),
                key.name
            );
        }
    }

    /// The failure of a wait that ends now: busy (`why`), or unavailable during an outage.
    fn gave_up(&mut self, why: String) -> Failure {
        let waited = human_ms(self.start.elapsed().as_millis() as i64);
        match self.outage.take() {
            Some(o) => Failure::Unavailable(format!(
                "{}; gave up after {waited}, Redis unavailable for the last {}",
                o.last,
                human_ms(o.since.elapsed().as_millis() as i64)
            )),
            None => Failure::Busy {
                message: format!("{why}; gave up after {waited}"),
                code: self.policy.busy_code,
            },
        }
    }
}

/// What ends a wait besides Redis: signals, read from a file descriptor (a signalfd) that the
/// waiter's `poll` watches beside its subscriptions, so that a sleeping waiter wakes for a
/// signal at once and for nothing else.
pub trait Interrupt {
    /// Readable when a signal may be there to `take`; None when there is nothing to watch.
    fn fd(&self) -> Option<BorrowedFd<'_>>;
    /// The number of a signal that should end the wait, if one came (without blocking).
    fn take(&self) -> Option<i32>;
}

/// How late after a claim window's end a waiter tries: enough for the window to be over by the
/// server's clock.
const CLAIM_SLACK: Duration = Duration::from_millis(5);

enum Slept {
    Woken,
    TimedOut,
    SubscriberBroken,
    Interrupted(i32),
}

impl Locker {
    /// Takes the lock (or a slot of it, as `sharing` says), waiting as `policy` says.
    #[allow(clippy::too_many_arguments)]
    pub fn acquire(
        &self,
        key: &LockKey,
        token: &str,
        ttl: Duration,
        sharing: Sharing,
        who: &Identity,
        policy: WaitPolicy,
        interrupt: &dyn Interrupt,
    ) -> Result<Grant, Failure> {
        let grant = |fence: i64, ttl_ms: i64, sent: Instant| Grant {
            key: key.clone(),
            token: token.to_string(),
            fence,
            ttl: Duration::from_millis(ttl_ms.max(0) as u64),
            sent,
        };
        let busy = |detail: String| Failure::Busy {
            message: detail,
            code: policy.busy_code,
        };

        if policy.no_wait || policy.wait == Some(Duration::ZERO) {
            // A signal that came during the request is answered once it returns (signals are not
            // let interrupt rlock's system calls): a failure then reports the signal.
            let attempt = self
                .attempt(key, token, ttl, sharing, false, who)
                .map_err(|e| {
                    interrupt
                        .take()
                        .map_or(e.failure, |sig| interrupted(key, sig))
                })?;
            return match attempt {
                Attempt::Granted {
                    fence,
                    ttl_ms,
                    sent,
                } => Ok(grant(fence, ttl_ms, sent)),
                Attempt::Busy {
                    pttl,
                    now_ms,
                    holder,
                    crowd,
                } => Err(busy(format!(
                    "{}; not waiting (-n)",
                    busy_message(key, pttl, now_ms, &holder, crowd)
                ))),
                Attempt::Queued { .. } => Err(busy(format!(
                    "lock '{}' is being handed to a process waiting for it; not waiting (-n)",
                    key.name
                ))),
            };
        }

        let start = Instant::now();
        let mut patience = Patience {
            start,
            // A wait too long for the clock to add is as good as waiting forever.
            deadline: policy.wait.and_then(|w| start.checked_add(w)),
            policy,
            outage: None,
        };
        // The first try needs no subscription: an uncontended lock costs one round trip. Once
        // the lock is found busy, subscribe and try again (a release may have come in between).
        let mut subscribed = false;
        loop {
            let mut subs = if subscribed {
                self.subscribers(key, token)
            } else {
                Vec::new()
            };
            let round = self.wait_round(
                key,
                (token, ttl, sharing),
                who,
                &mut subs,
                subscribed,
                &mut patience,
                interrupt,
            );
            // Closing the connections unsubscribes.
            drop(subs);
            match round {
                Round::Done(Ok((fence, ttl_ms, sent))) => return Ok(grant(fence, ttl_ms, sent)),
                Round::Done(Err(failure)) => {
                    // A waiter that gives up leaves nothing behind. (When Redis did not answer,
                    // the failed attempt has already tried that; once is enough.)
                    if !matches!(failure, Failure::Unavailable(_)) {
                        let _ = self.leave(key, token);
                    }
                    return Err(failure);
                }
                Round::Subscribe => {
                    subscribed = true;
                    if let Some(line) = &patience.policy.when_waiting
                        && !patience.policy.quiet
                    {
                        eprintln!("rlock: {line}");
                    }
                }
                Round::Resubscribe => {}
            }
        }
    }

    /// Attempts and sleeps until granted, given up, or the subscription needs (re)making.
    #[allow(clippy::too_many_arguments)]
    fn wait_round(
        &self,
        key: &LockKey,
        (token, ttl, sharing): (&str, Duration, Sharing),
        who: &Identity,
        subs: &mut [Subscriber],
        subscribed: bool,
        patience: &mut Patience,
        interrupt: &dyn Interrupt,
    ) -> Round {
        loop {
            if let Some(signal) = interrupt.take() {
                return Round::Done(Err(interrupted(key, signal)));
            }
            let attempt = self.attempt(key, token, ttl, sharing, true, who);
            if let Some(signal) = interrupt.take() {
                // (A grant that raced with the signal is given back by the caller's leave.)
                return Round::Done(Err(interrupted(key, signal)));
            }
            let answer = match attempt {
                Err(Unanswered {
                    failure,
                    transient: true,
                }) => {
                    let next = patience.outage(key, failure);
                    if let Some(deadline) = patience.deadline
                        && Instant::now() >= deadline
                    {
                        return Round::Done(Err(patience.gave_up(String::new())));
                    }
                    let until = patience.deadline.map_or(next, |d| next.min(d));
                    if let Slept::Interrupted(signal) = sleep(&mut [], until, token, interrupt) {
                        return Round::Done(Err(interrupted(key, signal)));
                    }
                    continue;
                }
                Err(Unanswered { failure, .. }) => return Round::Done(Err(failure)),
                Ok(answer) => {
                    patience.answered(key);
                    answer
                }
            };
            let (sleep_for, why) = match answer {
                Attempt::Granted {
                    fence,
                    ttl_ms,
                    sent,
                } => return Round::Done(Ok((fence, ttl_ms, sent))),
                Attempt::Busy {
                    pttl,
                    now_ms,
                    holder,
                    crowd,
                } => (
                    if pttl >= 0 {
                        Duration::from_millis(pttl as u64 + 1)
                    } else {
                        CHECK_WITHOUT_EXPIRY
                    },
                    busy_message(key, pttl, now_ms, &holder, crowd),
                ),
                Attempt::Queued { wait_ms } => (
                    Duration::from_millis(wait_ms.max(0) as u64) + CLAIM_SLACK,
                    format!(
                        "lock '{}' is being handed to processes that waited longer",
                        key.name
                    ),
                ),
            };
            let mut until = Instant::now() + sleep_for;
            if self.is_quorum() {
                // Redlock waiters race each other on every node: spread them out so that they
                // do not split the votes in lockstep.
                until += jitter();
            }
            if let Some(deadline) = patience.deadline {
                if Instant::now() >= deadline {
                    return Round::Done(Err(patience.gave_up(why)));
                }
                until = until.min(deadline);
            }
            if !subscribed {
                return Round::Subscribe;
            }
            match sleep(subs, until, token, interrupt) {
                Slept::Woken | Slept::TimedOut => {}
                Slept::Interrupted(signal) => {
                    return Round::Done(Err(interrupted(key, signal)));
                }
                Slept::SubscriberBroken => return Round::Resubscribe,
            }
        }
    }
}

/// How one round of waiting ended.
enum Round {
    /// Granted (fence, ttl ms, send time), or given up.
    Done(Result<(i64, i64, Instant), Failure>),
    /// Found busy before subscribing: subscribe, then try again at once.
    Subscribe,
    /// The subscription broke: make it again.
    Resubscribe,
}

fn interrupted(key: &LockKey, signal: i32) -> Failure {
    let name = nix::sys::signal::Signal::try_from(signal)
        .map(|s| s.as_str().to_string())
        .unwrap_or_else(|_| format!("signal {signal}"));
    Failure::Interrupted {
        message: format!(
            "interrupted by {name} while waiting for lock '{}'",
            key.name
        ),
        signal,
    }
}

/// Up to 20 ms, different in every process.
fn jitter() -> Duration {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    Duration::from_micros(u64::from(u16::from_le_bytes([bytes[0], bytes[1]])) % 20_000)
}

/// Sleeps until `until`, a wake-up ("go" on the waiter's own channel, "*" on the shared one), or
/// a signal. A number of milliseconds on the waiter's channel says when the waiter ahead of it
/// loses its chance to claim the lock: the sleep ends then, if not before.
///
/// The waiter sleeps in one `poll` over its subscriptions and the signal descriptor, with the
/// time left as the timeout: it wakes when something arrives, a signal comes or the time is
/// up, and for nothing else.
fn sleep(
    subs: &mut [Subscriber],
    mut until: Instant,
    token: &str,
    interrupt: &dyn Interrupt,
) -> Slept {
    loop {
        if let Some(signal) = interrupt.take() {
            return Slept::Interrupted(signal);
        }
        // What has arrived: at a wake-up, or already read with a subscription's confirmation.
        for sub in subs.iter_mut() {
            let Ok(payloads) = sub.messages() else {
                return Slept::SubscriberBroken;
            };
            for payload in payloads {
                if payload == b"go" || payload == b"*" || payload == token.as_bytes() {
                    return Slept::Woken;
                }
                if let Some(ms) = std::str::from_utf8(&payload)
                    .ok()
                    .and_then(|p| p.parse::<u64>().ok())
                {
                    let then = Instant::now() + Duration::from_millis(ms) + CLAIM_SLACK;
                    until = until.min(then);
                }
            }
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Slept::TimedOut;
        }
        let mut fds: Vec<PollFd<'_>> = subs
            .iter()
            .map(|s| PollFd::new(s.as_fd(), PollFlags::POLLIN))
            .collect();
        fds.extend(interrupt.fd().map(|fd| PollFd::new(fd, PollFlags::POLLIN)));
        // Rounded up to whole milliseconds, so that the sleep never ends before `until`.
        let ms = left.as_nanos().div_ceil(1_000_000);
        let timeout = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
        // EINTR (a stop and continue) only means: look again.
        let _ = poll(&mut fds, timeout);
    }
}
