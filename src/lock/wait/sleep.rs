//! A waiter's sleep: one `poll` over its subscriptions and the signal descriptor, until a
//! wake-up, a signal or the time it may sleep; and the jitter that keeps waiters' pauses apart.
//! Both by the locker's `Clock` (the machine's, or the simulation's).

use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::{CLAIM_SLACK, Interrupt};
use crate::backend::Subscriber;
use crate::clock::Clock;

/// How a sleep ended.
pub(super) enum Slept {
    Woken,
    TimedOut,
    /// A progress line is due before the sleep should end.
    Report,
    SubscriberBroken,
    Interrupted(Signal),
}

/// Sleeps until `until`, a wake-up ("go" on the waiter's own channel, "*" on the shared one;
/// "x", a newer run may have displaced it, which its next try reads from Redis), or a signal. A number of milliseconds on the waiter's channel says when the waiter ahead of it
/// loses its chance to claim the lock: the sleep ends then, if not before.
///
/// The waiter sleeps in one `poll` over its subscriptions and the signal descriptor, with the
/// time left as the timeout: it wakes when something arrives, a signal comes or the time is
/// up, and for nothing else.
pub(super) fn sleep(
    clock: &dyn Clock,
    subs: &mut [Subscriber],
    until: Instant,
    token: &str,
    interrupt: &dyn Interrupt,
) -> Slept {
    sleep_or_report(clock, subs, until, None, token, interrupt)
}

/// As `sleep`, and ending with `Slept::Report` at `report`, if that comes first.
pub(super) fn sleep_or_report(
    clock: &dyn Clock,
    subs: &mut [Subscriber],
    mut until: Instant,
    report: Option<Instant>,
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
                if [&b"go"[..], b"*", b"x", token.as_bytes()].contains(&payload.as_slice()) {
                    return Slept::Woken;
                }
                if let Some(ms) = std::str::from_utf8(&payload)
                    .ok()
                    .and_then(|p| p.parse::<u64>().ok())
                {
                    let then = clock.now() + Duration::from_millis(ms) + CLAIM_SLACK;
                    until = until.min(then);
                }
            }
        }
        let now = clock.now();
        if now >= until {
            return Slept::TimedOut;
        }
        let wake = report.map_or(until, |r| r.min(until));
        let left = wake.saturating_duration_since(now);
        if left.is_zero() {
            return Slept::Report;
        }
        let mut fds: Vec<BorrowedFd<'_>> = subs.iter().map(AsFd::as_fd).collect();
        fds.extend(interrupt.fd());
        // Rounded up to whole milliseconds (by the clock), so that the sleep never ends before
        // `until`; it ends early only for something to read, which the loop reads first.
        clock.poll(&fds, left);
    }
}

/// Up to 20 ms, different in every process.
pub(super) fn jitter(clock: &dyn Clock) -> Duration {
    clock.jitter(Duration::from_millis(20))
}
