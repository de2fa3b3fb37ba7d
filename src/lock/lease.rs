//! The lease arithmetic: when a lease must be assumed gone, and the timing of renewals. Both the
//! grant (Redlock's validity) and the watchdog (the deadline) count by it.

use std::time::{Duration, Instant};

use super::error::Error;

/// Clock drift allowance of the contract: 1% of the TTL plus 2 ms.
pub fn drift(ttl: Duration) -> Duration {
    #[cfg(test)]
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
        Ok(Lease {
            ttl,
            renew_every,
            grace,
            op_timeout,
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
        let signal_at = deadline(last_sent, self.ttl)
            .checked_sub(self.grace)
            .unwrap_or(last_sent);
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
