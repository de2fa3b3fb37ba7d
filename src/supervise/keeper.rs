//! The lease keeper: the one object that keeps a granted lock alive while the command runs. It
//! owns the renewal thread (started only when the first renewal is due, so that a short
//! command runs with no thread at all), the channel of its reports, the pipe that wakes the
//! supervisor when one comes, and the end of the renewals once the lock is given up for lost;
//! and it knows the lease's deadline and when the first renewal is due. In the spirit of etcd's
//! `concurrency.Session` (its `Done()` channel) and consul's lock (its lost channel): the
//! supervisor waits on the keeper's reports as on any other event, and tells it only to start
//! and to stop.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::Scope;

use nix::fcntl::OFlag;
use nix::sys::signal::Signal;

use super::Enforce;
use crate::backend::Subscriber;
use crate::lock::{Grant, Lease, Locker, Timeline};
use crate::watchdog::{self, Report};

/// What the supervisor asks of the lease: to start renewing it (the first renewal is due), and
/// to stop (the lock is given up for lost). The supervisor's tests give it a closure.
pub(super) trait Keeper {
    /// An error means no renewal will be made: the lease runs out as if each had failed.
    fn start(&mut self) -> io::Result<()>;
    fn stop(&mut self);
}

/// What the supervisor asks of a closure standing in for the keeper.
pub enum Renewal {
    Start,
    Stop,
}

impl<F: FnMut(Renewal) -> io::Result<()>> Keeper for F {
    fn start(&mut self) -> io::Result<()> {
        self(Renewal::Start)
    }

    fn stop(&mut self) {
        let _ = self(Renewal::Stop);
    }
}

/// The lease of one granted lock, kept by a renewal thread of the scope `'s`.
pub struct LeaseKeeper<'s, 'e> {
    pub(super) renewer: Renewer<'s, 'e>,
    pub(super) reports: ReportReceiver,
}

impl<'s, 'e> LeaseKeeper<'s, 'e> {
    /// A keeper of `grant` for `lease`, renewing it from a thread of `scope` when `renews` (a
    /// lock an enclosing `rlock exec` holds is that one's to renew, and to enforce), its reports
    /// coming through `channel` (`Reports::new`, made before the command starts: a run that
    /// cannot have one fails before it begins).
    pub fn new(
        scope: &'s Scope<'s, 'e>,
        locker: &'e Locker,
        grant: &'e Grant,
        lease: Lease,
        renews: bool,
        channel: Reports,
    ) -> Self {
        let Reports { tx, rx } = channel;
        let (stop_tx, stop_rx) = mpsc::channel();
        LeaseKeeper {
            renewer: Renewer {
                scope,
                locker,
                grant,
                lease,
                renews,
                thread: None,
                waiting: Some((stop_tx, stop_rx, tx)),
                hearing: None,
            },
            reports: rx,
        }
    }

    /// `--cancel-running`: a thread of the scope hears on `subs`, the holder's wake channel, that
    /// a newer run asked it to stop (`watchdog::hear_newer`), until the keeper stops. Started
    /// once the command runs: no other thread may exist when the guardian is forked.
    pub fn hear_newer(&mut self, subs: Vec<Subscriber>) -> io::Result<()> {
        let r = &mut self.renewer;
        let Some((_, _, report_tx)) = &r.waiting else {
            return Ok(());
        };
        let report_tx = report_tx.try_clone()?;
        let (stop_rx, stop_tx) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let (locker, grant, lease) = (r.locker, r.grant, r.lease);
        std::thread::Builder::new()
            .name("newer".into())
            .spawn_scoped(r.scope, move || {
                watchdog::hear_newer(locker, grant, lease, subs, stop_rx, |r| report_tx.send(r));
            })?;
        r.hearing = Some(stop_tx);
        Ok(())
    }

    /// What the supervisor enforces: the grant's `timeline` (the one the guardian was told at
    /// its launch; None when another rlock enforces the lease), when the first renewal is due
    /// (at once when a Redlock master misses the lock), and the signals before it ends.
    pub fn enforce(&self, lost_signal: Signal, timeline: Option<Timeline>) -> Enforce {
        let r = &self.renewer;
        Enforce {
            lease: timeline.filter(|_| r.renews),
            // Redlock: a master that missed the grant gets it from the first renewal, at once.
            renew_at: r.renews.then(|| match r.locker.missing_some() {
                true => r.grant.sent,
                false => r.grant.sent + r.lease.renew_every,
            }),
            grace: r.lease.grace,
            lost_signal,
            time_limit: None,
        }
    }
}

/// The renewal thread, once started, and what starting it takes.
pub(super) struct Renewer<'s, 'e> {
    scope: &'s Scope<'s, 'e>,
    locker: &'e Locker,
    grant: &'e Grant,
    lease: Lease,
    renews: bool,
    /// The thread's stop: dropped, it ends the thread (at its next wait).
    thread: Option<Sender<()>>,
    /// What the thread takes when it starts.
    waiting: Option<(Sender<()>, Receiver<()>, ReportSender)>,
    /// `--cancel-running`: closed, it ends the thread that hears a newer run's word.
    hearing: Option<OwnedFd>,
}

impl Keeper for Renewer<'_, '_> {
    fn start(&mut self) -> io::Result<()> {
        let Some((stop_tx, stop_rx, report_tx)) = self.waiting.take() else {
            return Ok(());
        };
        let (locker, grant, lease) = (self.locker, self.grant, self.lease);
        std::thread::Builder::new()
            .name("renew".into())
            .spawn_scoped(self.scope, move || {
                watchdog::renew_loop(locker, grant, lease, stop_rx, |r| report_tx.send(r));
            })?;
        self.thread = Some(stop_tx);
        Ok(())
    }

    fn stop(&mut self) {
        self.thread = None;
        self.waiting = None;
        self.hearing = None;
    }
}

/// Reports from the renewal thread, which also wake the supervisor from its wait.
pub(super) struct ReportSender {
    tx: Sender<Report>,
    wake: OwnedFd,
}

impl ReportSender {
    fn try_clone(&self) -> io::Result<ReportSender> {
        Ok(ReportSender {
            tx: self.tx.clone(),
            wake: self.wake.try_clone()?,
        })
    }

    pub fn send(&self, report: Report) {
        if self.tx.send(report).is_ok() {
            // A full pipe already holds a wake-up.
            let _ = nix::unistd::write(&self.wake, b"r");
        }
    }
}

/// The receiving end of the reports.
pub(super) struct ReportReceiver {
    pub(super) rx: Receiver<Report>,
    /// Readable when a report came.
    pub(super) wake: OwnedFd,
}

/// The channel of the renewal thread's reports, with the pipe that wakes the supervisor.
pub struct Reports {
    tx: ReportSender,
    rx: ReportReceiver,
}

impl Reports {
    pub fn new() -> io::Result<Reports> {
        let (tx, rx) = mpsc::channel();
        let (read_end, write_end) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
        Ok(Reports {
            tx: ReportSender {
                tx,
                wake: write_end,
            },
            rx: ReportReceiver { rx, wake: read_end },
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn a_report_wakes_the_receiver_and_reads_back() {
        let Reports { tx, rx } = Reports::new().unwrap();
        let lease = Lease::new(Duration::from_secs(30), None, None, Duration::from_secs(2));
        tx.send(Report::Renewed {
            lease: lease.unwrap().timeline(Instant::now()),
        });
        let mut buf = [0u8; 8];
        assert_eq!(nix::unistd::read(&rx.wake, &mut buf).unwrap(), 1);
        assert!(matches!(rx.rx.try_recv(), Ok(Report::Renewed { .. })));
    }

    #[test]
    fn a_stopped_keeper_lets_the_receiver_know_no_report_will_come() {
        let Reports { tx, rx } = Reports::new().unwrap();
        drop(tx);
        assert!(matches!(
            rx.rx.try_recv(),
            Err(mpsc::TryRecvError::Disconnected)
        ));
    }
}
