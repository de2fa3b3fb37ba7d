//! The lease arithmetic: when a lease must be assumed gone, and the timing of renewals. Both the
//! grant (Redlock's validity) and the watchdog (the deadline) count by it, and the lease's
//! timeline (when the command is signalled and killed) is made here, once, for the supervisor
//! and the guardian alike.

use std::time::{Duration, Instant};

use super::error::Error;

/// Clock drift allowance of the contract: 1% of the TTL plus 2 ms.
pub fn drift(ttl: Duration) -> Duration {
    #[cfg(feature = "sim-seams")]
    if super::planted::on(super::planted::Bug::NoDrift) {
        return Duration::ZERO;
    }
    ttl / 100 + Duration::from_millis(2)
}

/// When a lease whose renewal was *sent* at `sent` must be assumed gone.
pub fn deadline(sent: Instant, ttl: Duration) -> Instant {
    sent + ttl.saturating_sub(drift(ttl))
}

/// The least time a lease with the default timing leaves between the first renewal being due and
/// the lost-signal (less when --op-timeout is shorter): one renewal's round trip on a busy host,
/// with rlock's own start (guardian, command) before it.
const RENEWAL_ROOM: Duration = Duration::from_millis(50);

/// How long before the lease's end SIGKILL goes: room for the kill itself to land, which on
/// a busy host takes the guardian's wake-up (it must be scheduled among everything else that
/// runs) and, without a cgroup, a walk of /proc before the last signal leaves. A tenth of the
/// TTL, at least 50 ms, and never more than half the grace, so that the command keeps at least
/// half of it to end by itself.
pub fn kill_margin(ttl: Duration, grace: Duration) -> Duration {
    (ttl / 10).max(Duration::from_millis(50)).min(grace / 2)
}

/// One lease's moments, made once from when its grant (or a renewal) was sent: when the
/// lost-signal goes should no renewal come, and when SIGKILL does. rlock's supervisor and the
/// guardian are both handed these instants and only count down to them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeline {
    /// When the lease must be assumed gone: `deadline`.
    pub ends: Instant,
    /// The lost-signal: `grace` before the end (or at the end, should the clock not reach
    /// back that far).
    pub signal_at: Instant,
    /// SIGKILL: `kill_margin` before the end, and never before the lost-signal.
    pub kill_at: Instant,
}

/// The command's time limit (`--timeout`), as moments: the lost-signal at the limit, SIGKILL
/// `grace` after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub signal_at: Instant,
    pub kill_at: Instant,
}

/// The timing of one lease.
#[derive(Debug, Clone, Copy)]
pub struct Lease {
    pub ttl: Duration,
    pub renew_every: Duration,
    /// Time between the lost-signal and SIGKILL.
    pub grace: Duration,
    /// The per-renewal timeout: a frozen server must not hold a renewal up for long.
    pub op_timeout: Duration,
}

impl Lease {
    /// Defaults of the contract (renew every TTL/3, grace TTL/4), checked for sense.
    pub fn new(
        ttl: Duration,
        renew_every: Option<Duration>,
        grace: Option<Duration>,
        op_timeout: Duration,
    ) -> Result<Self, Error> {
        let defaults = renew_every.is_none() && grace.is_none();
        let renew_every = renew_every.unwrap_or(ttl / 3);
        let grace = grace.unwrap_or(ttl / 4);
        let usable = ttl.saturating_sub(drift(ttl));
        // Neither given: the TTL alone is at fault, and the message says so rather than blame
        // options left at their defaults. It must leave a renewal room to be sent and answered
        // between the moment the first is due and the lost-signal.
        let room = op_timeout.min(RENEWAL_ROOM);
        let fits = |ttl: Duration| {
            let usable = ttl.saturating_sub(drift(ttl));
            usable.saturating_sub(ttl / 4) >= ttl / 3 + room
        };
        if defaults && !fits(ttl) {
            let least = (1..)
                .map(Duration::from_millis)
                .find(|t| fits(*t))
                .unwrap_or(ttl);
            return Err(Error::Usage(format!(
                "--ttl {} is too short for exec: less the drift allowance (1% and 2ms) and the --grace, it leaves less than {} (--op-timeout, at most {}) for a renewal after the first is due, so the lock would be lost; give --ttl {} or more (seconds, in practice)",
                crate::lock::human_duration(ttl),
                crate::lock::human_duration(room),
                crate::lock::human_duration(RENEWAL_ROOM),
                crate::lock::human_duration(least)
            )));
        }
        if grace >= usable {
            return Err(Error::Usage(format!(
                "--grace {} leaves no lease: it must be shorter than --ttl {} minus 1% and 2ms",
                crate::lock::human_duration(grace),
                crate::lock::human_duration(ttl)
            )));
        }
        if renew_every >= usable - grace {
            return Err(Error::Usage(format!(
                "--renew-every {} is too slow for --ttl {}: renewals must come before the lease ends minus --grace ({})",
                crate::lock::human_duration(renew_every),
                crate::lock::human_duration(ttl),
                crate::lock::human_duration(grace)
            )));
        }
        #[cfg(feature = "sim-seams")]
        let renew_every = match super::planted::on(super::planted::Bug::SlowRenewal) {
            true => ttl + ttl / 10,
            false => renew_every,
        };
        Ok(Lease {
            ttl,
            renew_every,
            grace,
            op_timeout,
        })
    }

    /// The lease's moments when the request that won or renewed it was sent at `sent`.
    pub fn timeline(&self, sent: Instant) -> Timeline {
        let ends = deadline(sent, self.ttl);
        let signal_at = ends.checked_sub(self.grace).unwrap_or(ends);
        #[cfg(feature = "sim-seams")]
        let ends_for_kill = match super::planted::on(super::planted::Bug::KillWithoutDrift) {
            true => ends + drift(self.ttl),
            false => ends,
        };
        #[cfg(not(feature = "sim-seams"))]
        let ends_for_kill = ends;
        let kill_at = ends_for_kill
            .checked_sub(kill_margin(self.ttl, self.grace))
            .unwrap_or(ends)
            .max(signal_at);
        Timeline {
            ends,
            signal_at,
            kill_at,
        }
    }

    /// The moments of a time limit of `limit` counted from `start` (the command's start); None
    /// when the clock cannot reach that far.
    pub fn limit(&self, start: Instant, limit: Duration) -> Option<Limit> {
        let signal_at = start.checked_add(limit)?;
        Some(Limit {
            signal_at,
            kill_at: signal_at.checked_add(self.grace).unwrap_or(signal_at),
        })
    }

    /// Redlock: while some master misses the lock, renew this often (which writes it there).
    pub fn push_every(&self) -> Duration {
        (self.renew_every / 20).clamp(Duration::from_millis(10), Duration::from_millis(250))
    }

    /// After a failed renewal, try again soon.
    pub fn retry_every(&self) -> Duration {
        (self.renew_every / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }

    /// How long a renewal sent at `now` waits for its reply, when the last renewal that
    /// succeeded was sent at `last_sent`: --op-timeout, as for every request, but never past
    /// the moment the lost-signal would go (deadline − grace), when a late reply could no
    /// longer help. (A slow link must not be cut shorter than the user's --op-timeout: a
    /// renewal whose reply takes 400 ms needs a timeout above 400 ms to succeed at all.)
    pub fn renew_timeout(&self, last_sent: Instant, now: Instant) -> Duration {
        let signal_at = self.timeline(last_sent).signal_at;
        self.op_timeout
            .min(signal_at.saturating_duration_since(now))
            .max(Duration::from_millis(5))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadline_allows_for_drift() {
        let t0 = Instant::now();
        let ttl = Duration::from_secs(1);
        assert_eq!(deadline(t0, ttl) - t0, Duration::from_millis(988));
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The lease's moments, made once from the send: the end is the TTL less the drift, the
    /// lost-signal `grace` before it, SIGKILL the kill margin before it.
    #[test]
    fn a_timeline_counts_every_moment_from_the_send() {
        let t0 = Instant::now();
        let l = Lease::new(ms(30_000), None, None, ms(2_000)).unwrap();
        let t = l.timeline(t0);
        assert_eq!(t.ends - t0, ms(30_000 - 302));
        assert_eq!(t.ends, deadline(t0, l.ttl));
        assert_eq!(t.signal_at - t0, ms(30_000 - 302 - 7_500));
        assert_eq!(t.ends - t.kill_at, ms(3_000), "a tenth of the TTL");
        // A later send moves every moment by as much.
        let later = l.timeline(t0 + ms(10_000));
        assert_eq!(later.signal_at - t.signal_at, ms(10_000));
        assert_eq!(later.kill_at - t.kill_at, ms(10_000));
    }

    /// SIGKILL leaves room for the kill to land before the end: at least 50 ms, a tenth of the
    /// TTL, but never more than half the grace (the command keeps the rest of it).
    #[test]
    fn the_kill_margin_is_a_tenth_of_the_ttl_within_bounds() {
        assert_eq!(kill_margin(ms(30_000), ms(7_500)), ms(3_000));
        assert_eq!(kill_margin(ms(2_000), ms(500)), ms(200));
        assert_eq!(kill_margin(ms(400), ms(100)), ms(50), "at least 50 ms");
        assert_eq!(
            kill_margin(ms(30_000), ms(1_000)),
            ms(500),
            "half the grace"
        );
        assert_eq!(kill_margin(ms(30), ms(6)), ms(3));
        let t0 = Instant::now();
        for (ttl, grace) in [(5, 1), (30, 6), (1_000, 250), (60_000, 15_000)] {
            let l = Lease::new(ms(ttl), None, Some(ms(grace)), ms(2_000)).unwrap();
            let t = l.timeline(t0);
            assert!(
                t.signal_at < t.kill_at && t.kill_at < t.ends,
                "{ttl}: {t:?}"
            );
            assert!(t.kill_at - t.signal_at >= ms(grace) / 2, "{ttl}: {t:?}");
        }
    }

    /// A grace longer than the clock reaches back signals at the end; the kill is never
    /// before the signal.
    #[test]
    fn a_timeline_never_reaches_before_the_clock() {
        let t0 = Instant::now();
        let l = Lease {
            ttl: ms(1_000),
            renew_every: ms(300),
            grace: Duration::MAX,
            op_timeout: ms(2_000),
        };
        let t = l.timeline(t0);
        assert_eq!(t.signal_at, t.ends);
        assert_eq!(t.kill_at, t.ends);
    }

    /// The time limit: the lost-signal at it, SIGKILL `grace` later; nothing past the clock.
    #[test]
    fn a_time_limit_signals_at_it_and_kills_grace_later() {
        let t0 = Instant::now();
        let l = Lease::new(ms(30_000), None, Some(ms(2_000)), ms(2_000)).unwrap();
        let limit = l.limit(t0, ms(5_000)).unwrap();
        assert_eq!(limit.signal_at - t0, ms(5_000));
        assert_eq!(limit.kill_at - t0, ms(7_000));
        assert_eq!(l.limit(t0, Duration::MAX), None);
    }

    #[test]
    fn lease_defaults_and_checks() {
        let op = Duration::from_secs(2);
        let l = Lease::new(Duration::from_secs(30), None, None, op).unwrap();
        assert_eq!(l.renew_every, Duration::from_secs(10));
        assert_eq!(l.grace, Duration::from_millis(7500));
        assert_eq!(l.retry_every(), Duration::from_secs(1));
        assert!(
            Lease::new(
                Duration::from_secs(1),
                None,
                Some(Duration::from_secs(1)),
                op
            )
            .is_err()
        );
        assert!(
            Lease::new(
                Duration::from_secs(10),
                Some(Duration::from_secs(9)),
                None,
                op
            )
            .is_err()
        );
        // A renewal waits --op-timeout, or less when the lost-signal would come first.
        let t0 = Instant::now();
        assert_eq!(l.renew_timeout(t0, t0 + l.renew_every), op);
        let late = t0 + Duration::from_millis(22_000);
        assert_eq!(
            l.renew_timeout(t0, late),
            Duration::from_millis(30_000 - 302 - 7_500 - 22_000)
        );
        assert_eq!(
            l.renew_timeout(t0, t0 + Duration::from_secs(29)),
            Duration::from_millis(5)
        );
        // Too short a TTL, with the defaults: the TTL is named, not --grace.
        let usage = |ttl| match Lease::new(ttl, None, None, op) {
            Err(Error::Usage(line)) => line,
            other => panic!("{other:?}"),
        };
        let e = usage(Duration::from_millis(1));
        assert!(e.starts_with("--ttl 1ms is too short for exec"), "{e}");
        let e = usage(Duration::from_millis(4));
        assert!(e.starts_with("--ttl 4ms is too short"), "{e}");
        // One renewal's room (50 ms) after the first is due, before the lost-signal.
        let e = usage(Duration::from_millis(127));
        assert!(
            e.contains("less than 50ms") && e.contains("--ttl 128ms or more"),
            "{e}"
        );
        assert!(Lease::new(Duration::from_millis(128), None, None, op).is_ok());
        // A shorter --op-timeout is the room a renewal needs.
        let quick = Duration::from_millis(10);
        assert!(Lease::new(Duration::from_millis(30), None, None, quick).is_ok());
        assert!(Lease::new(Duration::from_millis(29), None, None, quick).is_err());
    }

    #[test]
    fn a_redlock_master_that_misses_the_lock_is_pushed_well_within_a_renewal_interval() {
        let op = Duration::from_secs(2);
        let push = |ttl_ms| {
            Lease::new(Duration::from_millis(ttl_ms), None, None, op)
                .unwrap()
                .push_every()
        };
        // TTL/60, between 10 ms and 250 ms.
        assert_eq!(push(6_000), Duration::from_millis(100));
        assert_eq!(push(30_000), Duration::from_millis(250));
        assert_eq!(push(300), Duration::from_millis(10));
    }

    #[test]
    fn with_the_defaults_a_lease_survives_two_missed_renewals() {
        // Renewed every TTL/3; the lost-signal goes at the deadline (TTL less the drift) less
        // the grace (TTL/4): after the renewals due at TTL/3 and 2·TTL/3 have both failed.
        let ttl = Duration::from_secs(30);
        let l = Lease::new(ttl, None, None, Duration::from_secs(2)).unwrap();
        let t0 = Instant::now();
        let signal_at = deadline(t0, ttl) - l.grace;
        assert_eq!(signal_at - t0, Duration::from_millis(30_000 - 302 - 7_500));
        assert!(t0 + l.renew_every * 2 < signal_at);
        assert!(t0 + l.renew_every * 3 > signal_at);
        // And a failed renewal is retried (every second here) in the time left after the
        // second: at least twice more before the signal.
        assert_eq!(l.retry_every(), Duration::from_secs(1));
        assert!(l.retry_every() * 2 < signal_at - (t0 + l.renew_every * 2));
    }
}
