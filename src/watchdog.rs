//! The renewal thread and the lease deadline. No process code here: the watchdog only says
//! when the lease ends; `supervise` decides what that means for the child.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::backend::Fault;
use crate::lock::{Grant, Locker, Renewed};

/// Clock drift allowance of the contract: 1% of the TTL plus 2 ms.
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// When a lease whose renewal was *sent* at `sent` must be assumed gone.
pub fn deadline(sent: Instant, ttl: Duration) -> Instant {
    sent + ttl.saturating_sub(drift(ttl))
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
    ) -> Result<Self, String> {
        let renew_every = renew_every.unwrap_or(ttl / 3);
        let grace = grace.unwrap_or(ttl / 4);
        let usable = ttl.saturating_sub(drift(ttl));
        if grace >= usable {
            return Err(format!(
                "--grace {} leaves no lease: it must be shorter than --ttl {} minus 1% and 2ms",
                humantime::format_duration(grace),
                humantime::format_duration(ttl)
            ));
        }
        if renew_every >= usable - grace {
            return Err(format!(
                "--renew-every {} is too slow for --ttl {}: renewals must come before the lease ends minus --grace ({})",
                humantime::format_duration(renew_every),
                humantime::format_duration(ttl),
                humantime::format_duration(grace)
            ));
        }
        Ok(Lease {
            ttl,
            renew_every,
            grace,
            op_timeout,
        })
    }

    /// After a failed renewal, try again soon.
    pub fn retry_every(&self) -> Duration {
        (self.renew_every / 4).clamp(Duration::from_millis(10), Duration::from_secs(1))
    }

    /// A renewal waits at most this long for its reply: short enough that a stalled server
    /// leaves room for several tries before the deadline (a retry comes a quarter of
    /// --renew-every after a failure).
    pub fn renew_timeout(&self) -> Duration {
        self.op_timeout
            .min(self.renew_every / 2)
            .max(Duration::from_millis(5))
    }
}

/// What the renewal thread tells the supervisor.
#[derive(Debug)]
pub enum Report {
    /// A renewal sent at some instant succeeded: the lease now ends at `deadline`.
    Renewed { deadline: Instant },
    /// Redis says the token no longer owns the lock.
    Lost(String),
    /// A renewal failed (timeout, connection): it will be retried.
    Failed(String),
}

/// Renews `grant` every `lease.renew_every`, the first time `lease.renew_every` after the grant
/// was sent (at once if the thread starts later than that), until `stop` is dropped or the lock
/// is lost.
pub fn renew_loop(
    locker: &Locker,
    grant: &Grant,
    lease: Lease,
    stop: Receiver<()>,
    report: impl Fn(Report),
) {
    let mut wait = (grant.sent + lease.renew_every).saturating_duration_since(Instant::now());
    loop {
        match stop.recv_timeout(wait) {
            Err(RecvTimeoutError::Timeout) => {}
            _ => return,
        }
        let sent = Instant::now();
        match locker.renew(
            &grant.key,
            &grant.token,
            Some(lease.ttl),
            lease.renew_timeout(),
        ) {
            Ok(Renewed::Yes(_)) => {
                report(Report::Renewed {
                    deadline: deadline(sent, lease.ttl),
                });
                wait = lease.renew_every;
            }
            Ok(Renewed::NotOwner(why)) => {
                report(Report::Lost(format!(
                    "Redis says the token no longer owns it ({why})"
                )));
                return;
            }
            Err(e) if e.kind == Fault::WrongType => {
                report(Report::Lost(format!("the key was replaced: {}", e.detail)));
                return;
            }
            Err(e) => {
                report(Report::Failed(e.to_string()));
                wait = lease.retry_every();
            }
        }
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
    }
}
