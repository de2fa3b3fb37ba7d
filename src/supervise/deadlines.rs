//! When the supervisor acts on the command's group, as arithmetic on the monotonic clock and
//! nothing else (no process is touched here): the lease's moments as its timeline gives them
//! (the lost-signal, then SIGKILL), and the earlier SIGKILL once the lock is known lost or the
//! command's leader has ended with members of its group still running. The command's time limit
//! (`--timeout`) signals at the limit and kills `grace` after it, while the lock is still held
//! and renewed. The moments themselves are made once, by `Lease::timeline` and `Lease::limit`:
//! here they are only compared with the clock.

use std::time::{Duration, Instant};

use crate::lock::{Limit, Timeline};

/// The supervisor's deadlines for one run.
#[derive(Debug, Clone, Copy)]
pub struct Deadlines {
    /// The lease's moments, as the renewals have moved them; None when another rlock enforces
    /// the lease (a nested exec inside `rlock exec`).
    lease: Option<Timeline>,
    grace: Duration,
    /// When SIGKILL goes to the group: the lease's kill moment, or sooner.
    kill_at: Option<Instant>,
    /// The lock is given up for lost (its lease ran out, or Redis said so): renewals that come
    /// after change nothing.
    lost: bool,
    /// The lost-signal has gone to the group.
    signalled: bool,
    /// SIGKILL has gone to the group.
    killed: bool,
    /// The command's time limit (`--timeout`), if it has one.
    time_limit: Option<Limit>,
    /// The time limit has come.
    timed_out: bool,
}

/// What is due at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// The lease has come to its lost-signal and no renewal came: the lock is given up for lost
    /// now, and the lost-signal goes (said once).
    pub runs_out: bool,
    /// SIGKILL goes now (said once).
    pub kill: bool,
    /// The command's time limit has come: the lost-signal goes, and SIGKILL at the limit's
    /// kill moment (said once).
    pub times_out: bool,
}

impl Deadlines {
    pub fn new(lease: Option<Timeline>, grace: Duration) -> Self {
        Deadlines {
            lease,
            grace,
            kill_at: lease.map(|t| t.kill_at),
            lost: false,
            signalled: false,
            killed: false,
            time_limit: None,
            timed_out: false,
        }
    }

    /// The command's time is up at `limit` (`--timeout`).
    pub fn with_time_limit(mut self, limit: Option<Limit>) -> Self {
        self.time_limit = limit;
        self
    }

    /// When the command's time is up, unless it has come.
    pub fn time_limit(&self) -> Option<Instant> {
        self.time_limit
            .filter(|_| !self.timed_out)
            .map(|l| l.signal_at)
    }

    /// When the lease runs out for the supervisor, unless a renewal moves it first.
    pub fn signal_at(&self) -> Option<Instant> {
        self.lease.filter(|_| !self.lost).map(|t| t.signal_at)
    }

    /// The lease's moments, as the renewals have moved them.
    pub fn lease(&self) -> Option<Timeline> {
        self.lease
    }

    /// When SIGKILL goes, unless it has gone.
    pub fn kill_at(&self) -> Option<Instant> {
        self.kill_at.filter(|_| !self.killed)
    }

    /// The next moment something is due.
    pub fn next(&self) -> Option<Instant> {
        [self.signal_at(), self.kill_at(), self.time_limit()]
            .into_iter()
            .flatten()
            .min()
    }

    /// What is due at `now`, each thing said once.
    pub fn due(&mut self, now: Instant) -> Due {
        let runs_out = self.signal_at().is_some_and(|at| now >= at);
        self.lost |= runs_out;
        let times_out = self.time_limit().is_some_and(|at| now >= at);
        if let Some(limit) = self.time_limit.filter(|_| times_out) {
            self.timed_out = true;
            let then = limit.kill_at;
            self.kill_at = Some(self.kill_at.map_or(then, |k| k.min(then)));
        }
        let kill = self.kill_at().is_some_and(|at| now >= at);
        self.killed |= kill;
        Due {
            runs_out,
            kill,
            times_out,
        }
    }

    /// A renewal succeeded: the lease's moments are now `lease`'s (never earlier than a renewal
    /// sent later said, whatever order the replies come in). SIGKILL moves with them, unless the
    /// group is already being stopped (or its time is up), whose SIGKILL keeps its earlier time.
    pub fn renewed(&mut self, lease: Timeline) {
        if self.lost {
            return;
        }
        let lease = match self.lease {
            Some(old) if old.ends >= lease.ends => old,
            _ => lease,
        };
        self.lease = Some(lease);
        self.kill_at = Some(match self.kill_at {
            Some(k) if self.signalled || self.timed_out => k.min(lease.kill_at),
            _ => lease.kill_at,
        });
    }

    /// Redis said the lock is no longer ours at `now`: SIGKILL within `grace`, even for a lease
    /// whose moments another rlock keeps.
    pub fn lock_lost(&mut self, now: Instant) {
        self.lost = true;
        let soon = now + self.grace;
        self.kill_at = Some(self.kill_at.map_or(soon, |k| k.min(soon)));
    }

    /// The leader ended at `now` and members of its group run on: they are stopped as for a
    /// lost lock, SIGKILL within `grace` (or at the lease's kill moment, if that comes first).
    pub fn group_outlives_leader(&mut self, now: Instant) {
        let soon = now + self.grace;
        self.kill_at = Some(self.kill_at.map_or(soon, |k| k.min(soon)));
    }

    /// True the first time only: the lost-signal goes to the group once.
    pub fn signal_once(&mut self) -> bool {
        !std::mem::replace(&mut self.signalled, true)
    }

    /// The lost-signal has gone to the group (from here).
    pub fn signalled(&self) -> bool {
        self.signalled
    }

    pub fn killed(&self) -> bool {
        self.killed
    }

    /// The command's time limit came.
    pub fn timed_out(&self) -> bool {
        self.timed_out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRACE: Duration = Duration::from_secs(2);

    /// A lease that ends at `end`: the lost-signal `GRACE` before, SIGKILL at the end (the
    /// timeline's own margin is `Lease::timeline`'s, tested there).
    fn lease(end: Instant) -> Option<Timeline> {
        Some(Timeline {
            ends: end,
            signal_at: end.checked_sub(GRACE).unwrap_or(end),
            kill_at: end,
        })
    }

    fn limit(at: Instant) -> Option<Limit> {
        Some(Limit {
            signal_at: at,
            kill_at: at + GRACE,
        })
    }

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    const NOTHING: Due = Due {
        runs_out: false,
        kill: false,
        times_out: false,
    };

    #[test]
    fn the_lost_signal_goes_grace_before_the_deadline_and_sigkill_at_it() {
        let t0 = Instant::now();
        let mut d = Deadlines::new(lease(t0 + secs(10)), GRACE);
        assert_eq!(d.signal_at(), Some(t0 + secs(8)));
        assert_eq!(d.kill_at(), Some(t0 + secs(10)));
        assert_eq!(d.next(), Some(t0 + secs(8)));
        assert_eq!(d.due(t0 + secs(7)), NOTHING);
        assert_eq!(
            d.due(t0 + secs(8)),
            Due {
                runs_out: true,
                kill: false,
                times_out: false,
            }
        );
        // Said once; the lost lock's deadline no longer moves, and SIGKILL is next.
        assert_eq!(d.due(t0 + secs(9)), NOTHING);
        assert_eq!(d.signal_at(), None);
        assert_eq!(d.next(), Some(t0 + secs(10)));
        d.renewed(lease(t0 + secs(30)).unwrap());
        assert_eq!(
            d.kill_at(),
            Some(t0 + secs(10)),
            "a late renewal saves nothing"
        );
        assert_eq!(
            d.due(t0 + secs(10)),
            Due {
                runs_out: false,
                kill: true,
                times_out: false,
            }
        );
        assert_eq!((d.due(t0 + secs(11)), d.next()), (NOTHING, None));
    }

    #[test]
    fn a_renewal_moves_both_and_never_back() {
        let t0 = Instant::now();
        let mut d = Deadlines::new(lease(t0 + secs(10)), GRACE);
        d.renewed(lease(t0 + secs(20)).unwrap());
        assert_eq!(
            (d.signal_at(), d.kill_at()),
            (Some(t0 + secs(18)), Some(t0 + secs(20)))
        );
        // The reply to an earlier renewal, come late.
        d.renewed(lease(t0 + secs(15)).unwrap());
        assert_eq!(
            (d.signal_at(), d.kill_at()),
            (Some(t0 + secs(18)), Some(t0 + secs(20)))
        );
        assert_eq!(d.due(t0 + secs(17)), NOTHING);
    }

    #[test]
    fn a_rlock_stopped_past_its_deadline_signals_then_kills_at_once() {
        let t0 = Instant::now();
        let mut d = Deadlines::new(lease(t0 + secs(10)), GRACE);
        assert_eq!(
            d.due(t0 + secs(60)),
            Due {
                runs_out: true,
                kill: true,
                times_out: false,
            }
        );
        assert!(d.killed());
    }

    #[test]
    fn a_lock_redis_says_is_lost_is_killed_within_grace() {
        let t0 = Instant::now();
        let mut d = Deadlines::new(lease(t0 + secs(30)), GRACE);
        d.lock_lost(t0 + secs(5));
        assert_eq!(
            d.signal_at(),
            None,
            "the lost-signal went when Redis said so"
        );
        assert_eq!(d.kill_at(), Some(t0 + secs(7)));
        // A deadline sooner than that stands.
        let mut d = Deadlines::new(lease(t0 + secs(6)), GRACE);
        d.lock_lost(t0 + secs(5));
        assert_eq!(d.kill_at(), Some(t0 + secs(6)));
        // A nested exec enforces no lease of its own, but a lost lock all the same.
        let mut d = Deadlines::new(None, GRACE);
        assert_eq!((d.next(), d.due(t0 + secs(3600))), (None, NOTHING));
        d.lock_lost(t0 + secs(5));
        assert_eq!(d.next(), Some(t0 + secs(7)));
        assert!(d.due(t0 + secs(7)).kill);
    }

    #[test]
    fn a_group_left_running_is_killed_within_grace_and_renewals_do_not_put_that_off() {
        let t0 = Instant::now();
        let mut d = Deadlines::new(lease(t0 + secs(30)), GRACE);
        d.group_outlives_leader(t0 + secs(5));
        assert!(d.signal_once(), "the lost-signal goes");
        assert!(!d.signal_once(), "once");
        assert_eq!(d.kill_at(), Some(t0 + secs(7)));
        d.renewed(lease(t0 + secs(40)).unwrap());
        assert_eq!(d.kill_at(), Some(t0 + secs(7)));
        // The lease is still renewed meanwhile: its own signal time moves on.
        assert_eq!(d.signal_at(), Some(t0 + secs(38)));
        // Just before the deadline: SIGKILL then, not `grace` later.
        let mut d = Deadlines::new(lease(t0 + secs(6)), GRACE);
        d.group_outlives_leader(t0 + secs(5));
        assert_eq!(d.kill_at(), Some(t0 + secs(6)));
    }

    #[test]
    fn a_time_limit_signals_at_the_limit_and_kills_grace_later_while_the_lease_goes_on() {
        let t0 = Instant::now();
        let mut d =
            Deadlines::new(lease(t0 + secs(30)), GRACE).with_time_limit(limit(t0 + secs(5)));
        assert_eq!(d.next(), Some(t0 + secs(5)));
        assert_eq!(d.due(t0 + secs(4)), NOTHING);
        assert_eq!(
            d.due(t0 + secs(5)),
            Due {
                runs_out: false,
                kill: false,
                times_out: true,
            }
        );
        assert!(d.timed_out());
        assert_eq!(d.kill_at(), Some(t0 + secs(7)));
        // The lease is renewed meanwhile; SIGKILL keeps its time, the limit is said once.
        d.renewed(lease(t0 + secs(40)).unwrap());
        assert!(d.signal_once());
        d.renewed(lease(t0 + secs(41)).unwrap());
        assert_eq!(d.kill_at(), Some(t0 + secs(7)));
        assert_eq!(d.signal_at(), Some(t0 + secs(39)));
        assert_eq!(d.due(t0 + secs(6)), NOTHING);
        assert!(d.due(t0 + secs(7)).kill);

        // A lease that ends sooner than the limit still rules.
        let mut d = Deadlines::new(lease(t0 + secs(4)), GRACE).with_time_limit(limit(t0 + secs(5)));
        assert!(d.due(t0 + secs(2)).runs_out);
        assert_eq!(d.kill_at(), Some(t0 + secs(4)));

        // A rlock stopped past its limit and the grace signals and kills at once.
        let mut d = Deadlines::new(None, GRACE).with_time_limit(limit(t0 + secs(1)));
        let due = d.due(t0 + secs(60));
        assert!(due.times_out && due.kill, "{due:?}");
    }
}
