//! A waiter's sleep: one `poll` over its subscriptions and the signal descriptor, until a
//! wake-up, a signal or the time it may sleep; and the jitter that keeps waiters' pauses apart.

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::Signal;

use super::{CLAIM_SLACK, Interrupt};
use crate::backend::Subscriber;

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
    subs: &mut [Subscriber],
    until: Instant,
    token: &str,
    interrupt: &dyn Interrupt,
) -> Slept {
    sleep_or_report(subs, until, None, token, interrupt)
}

/// As `sleep`, and ending with `Slept::Report` at `report`, if that comes first.
pub(super) fn sleep_or_report(
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
                    let then = Instant::now() + Duration::from_millis(ms) + CLAIM_SLACK;
                    until = until.min(then);
                }
            }
        }
        let now = Instant::now();
        if now >= until {
            return Slept::TimedOut;
        }
        let wake = report.map_or(until, |r| r.min(until));
        let left = wake.saturating_duration_since(now);
        if left.is_zero() {
            return Slept::Report;
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

/// Up to 20 ms, different in every process.
pub(super) fn jitter() -> Duration {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    Duration::from_micros(u64::from(u16::from_le_bytes([bytes[0], bytes[1]])) % 20_000)
}
