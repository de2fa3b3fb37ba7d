//! The child as a job: the supervisor that passes signals on to the command's process group,
//! stops everything the command started before the lease can run out, stops what the command
//! left running, and reports how the run ended. Every `kill` rlock sends is in this module.

mod contain;
mod deadlines;
mod guardian;
mod live;
mod machine;
mod spawn;
mod terminal;

use std::io;
use std::os::fd::OwnedFd;
use std::sync::mpsc::{Receiver, Sender};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::sys::signal::Signal;

pub use contain::{Cgroup, CgroupSoon, Mode as Containment};
pub use guardian::{Guardian, Launched, launch};
pub use spawn::runnable;
pub use terminal::Terminal;

use crate::observe::Observer;
use crate::signals::Signals;
use crate::watchdog::{Loss, Report};

/// How long rlock waits, after the final SIGKILL, for what it killed to be gone: a process
/// that SIGKILL cannot end at once (stuck in the kernel) runs no code of its own meanwhile.
pub const AFTER_KILL: Duration = Duration::from_secs(2);

/// Makes rlock the reaper of the orphans of its guardian, should the guardian be killed: they
/// stay below rlock, which then stops them itself.
pub fn adopt_orphans() {
    let _ = nix::sys::prctl::set_child_subreaper(true);
}

/// Reports from the renewal thread, which also wake the supervisor from its wait.
pub struct ReportSender {
    tx: Sender<Report>,
    wake: OwnedFd,
}

impl ReportSender {
    pub fn send(&self, report: Report) {
        if self.tx.send(report).is_ok() {
            // A full pipe already holds a wake-up.
            let _ = nix::unistd::write(&self.wake, b"r");
        }
    }
}

/// The receiving end of `reports`.
pub struct ReportReceiver {
    rx: Receiver<Report>,
    wake: OwnedFd,
}

/// A channel for the renewal thread's reports.
pub fn reports() -> io::Result<(ReportSender, ReportReceiver)> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (read_end, write_end) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK)?;
    Ok((
        ReportSender {
            tx,
            wake: write_end,
        },
        ReportReceiver { rx, wake: read_end },
    ))
}

/// What the supervisor needs to know to enforce the lease.
pub struct Enforce {
    /// When the lease must be assumed gone; None when another rlock enforces it (a nested
    /// exec inside `rlock exec`).
    pub deadline: Option<Instant>,
    /// When the first renewal is due: the renewal thread is started then, so that a short
    /// command runs with no thread at all. None when nothing is to be renewed.
    pub renew_at: Option<Instant>,
    pub grace: Duration,
    pub lost_signal: Signal,
}

/// How the child's run ended.
pub struct Outcome {
    /// The child's status as a shell reports it (code, or 128+N for signal N).
    pub code: u8,
    /// The signal that killed the child, if one did.
    pub signal: Option<Signal>,
    /// Why the lock was lost, if it was.
    pub lost: Option<Loss>,
    /// Something the command started was still there `AFTER_KILL` after its SIGKILL: the lock
    /// must not be released.
    pub leftovers: bool,
}

/// What the supervisor asks of the renewal thread.
pub enum Renewal {
    Start,
    Stop,
}

/// Runs the command (started by `guardian`) to its end under the lease, passing signals on
/// and stopping everything it started before the lease can run out; see `Supervisor::run`.
pub fn supervise<R: FnMut(Renewal) -> io::Result<()>>(
    guardian: &mut Guardian,
    signals: &Signals,
    reports: &ReportReceiver,
    enforce: Enforce,
    terminal: Option<Terminal>,
    observer: &dyn Observer,
    renewal: R,
) -> Outcome {
    let world = live::Live {
        pgid: guardian.pgid(),
        inbox: live::Inbox {
            guardian,
            guardian_gone: false,
            leader_ended: false,
            signals,
            reports,
            pending: std::collections::VecDeque::new(),
        },
        terminal,
    };
    machine::Supervisor::new(world, enforce, observer, renewal).run()
}
