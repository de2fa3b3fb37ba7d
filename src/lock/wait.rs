//! Waiting for a lock without polling.
//!
//! A waiter subscribes to the lock's wake channel *before* each attempt, so a release that
//! happens between a failed attempt and the wait is never missed. A failed attempt puts the
//! waiter in line (a sorted set, oldest first) and returns the holder's PTTL. The waiter then
//! sleeps until a release names it on the channel, the holder's TTL runs out, or it is time to
//! renew its place in line, whichever is first. Each release wakes only the first live waiter,
//! so many waiters cost Redis one attempt per handoff, not one each; a lost message costs
//! latency (at most the PTTL or `WAITER_REFRESH`), never liveness.

use std::time::{Duration, Instant};

use super::{Attempt, Grant, Identity, LockKey, Locker, WAITER_REFRESH, busy_message, human_ms};
use crate::exit::Failure;

/// How long to wait for a busy lock.
#[derive(Debug, Clone, Copy)]
pub struct WaitPolicy {
    /// None: wait as long as it takes.
    pub wait: Option<Duration>,
    pub no_wait: bool,
    /// Exit code for "busy" (75 unless `-E`).
    pub busy_code: u8,
}

/// Polled between short sleeps: the number of a signal that should end the wait.
pub type Interrupt<'a> = &'a dyn Fn() -> Option<i32>;

/// How often a sleeping waiter looks at `Interrupt` (a local check, not a Redis command).
const SLICE: Duration = Duration::from_millis(50);

enum Slept {
    Woken,
    TimedOut,
    SubscriberBroken,
    Interrupted(i32),
}

impl Locker {
    /// Takes the lock, waiting as `policy` says.
    pub fn acquire(
        &self,
        key: &LockKey,
        token: &str,
        ttl: Duration,
        who: &Identity,
        policy: WaitPolicy,
        interrupt: Interrupt,
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
            return match self.attempt(key, token, ttl, false, who)? {
                Attempt::Granted {
                    fence,
                    ttl_ms,
                    sent,
                } => Ok(grant(fence, ttl_ms, sent)),
                Attempt::Busy {
                    pttl,
                    now_ms,
                    holder,
                } => Err(busy(format!(
                    "{}; not waiting (-n)",
                    busy_message(key, pttl, now_ms, &holder)
                ))),
                Attempt::Queued { .. } => Err(busy(format!(
                    "lock '{}' is being handed to a process waiting for it; not waiting (-n)",
                    key.name
                ))),
            };
        }

        let start = Instant::now();
        let deadline = policy.wait.map(|w| start + w);
        // Whatever happens from here on, a waiter that gives up leaves nothing behind.
        let give_up = |failure: Failure| {
            let _ = self.leave(key, token);
            failure
        };
        loop {
            let mut conn = self
                .node()
                .subscriber(&key.redis_key, self.op_timeout())
                .ok();
            let mut pubsub = conn.as_mut().map(|c| c.as_pubsub());
            if let Some(p) = pubsub.as_mut()
                && p.subscribe(&key.channel).is_err()
            {
                pubsub = None;
            }
            loop {
                if let Some(signal) = interrupt() {
                    return Err(give_up(interrupted(key, signal)));
                }
                let (sleep_for, why) = match self.attempt(key, token, ttl, true, who) {
                    Err(e) => return Err(give_up(e)),
                    Ok(Attempt::Granted {
                        fence,
                        ttl_ms,
                        sent,
                    }) => {
                        return Ok(grant(fence, ttl_ms, sent));
                    }
                    Ok(Attempt::Busy {
                        pttl,
                        now_ms,
                        holder,
                    }) => (
                        if pttl >= 0 {
                            Duration::from_millis(pttl as u64 + 1)
                        } else {
                            WAITER_REFRESH
                        },
                        busy_message(key, pttl, now_ms, &holder),
                    ),
                    Ok(Attempt::Queued { wait_ms }) => (
                        Duration::from_millis(wait_ms.max(0) as u64 + 1),
                        format!(
                            "lock '{}' is being handed to processes that waited longer",
                            key.name
                        ),
                    ),
                };
                let mut until = Instant::now() + sleep_for.min(WAITER_REFRESH);
                if let Some(deadline) = deadline {
                    if Instant::now() >= deadline {
                        let waited = human_ms(start.elapsed().as_millis() as i64);
                        return Err(give_up(busy(format!("{why}; gave up after {waited}"))));
                    }
                    until = until.min(deadline);
                }
                match sleep(pubsub.as_mut(), until, token, interrupt) {
                    Slept::Woken | Slept::TimedOut => {}
                    Slept::Interrupted(signal) => {
                        return Err(give_up(interrupted(key, signal)));
                    }
                    Slept::SubscriberBroken => break,
                }
            }
        }
    }
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

/// Sleeps until `until`, a wake-up naming `token`, or a signal.
fn sleep(
    mut pubsub: Option<&mut redis::PubSub<'_>>,
    until: Instant,
    token: &str,
    interrupt: Interrupt,
) -> Slept {
    loop {
        if let Some(signal) = interrupt() {
            return Slept::Interrupted(signal);
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Slept::TimedOut;
        }
        let slice = left.min(SLICE).max(Duration::from_millis(1));
        match pubsub.as_deref_mut() {
            None => std::thread::sleep(slice),
            Some(p) => {
                let _ = p.set_read_timeout(Some(slice));
                match p.get_message() {
                    Ok(msg) => {
                        if msg.get_payload_bytes() == token.as_bytes() {
                            return Slept::Woken;
                        }
                    }
                    Err(e) if e.is_timeout() => {}
                    Err(_) => return Slept::SubscriberBroken,
                }
            }
        }
    }
}
