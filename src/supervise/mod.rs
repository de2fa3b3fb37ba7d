//! The child as a job: the supervisor that passes signals on to the command's process group,
//! stops everything the command started before the lease can run out, stops what the command
//! left running, and reports how the run ended. Every `kill` rlock sends is in this module.

mod confirm;
mod contain;
mod deadlines;
mod group;
mod guardian;
mod keeper;
mod live;
mod machine;
#[cfg(feature = "sim-seams")]
pub mod seams;
mod spawn;
mod terminal;

use live::stop_orphans;

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

pub use contain::{Cgroup, Mode as Containment};
pub use guardian::{Guardian, Launched, Standby, stand_by};
pub use keeper::{LeaseKeeper, Renewal, Reports};
pub use spawn::runnable;
pub use terminal::Terminal;

use crate::lock::{Limit, Observer, Timeline};
use crate::signals::Signals;
use crate::watchdog::Loss;

/// How long rlock waits, after the final SIGKILL, for what it killed to be gone: a process
/// that SIGKILL cannot end at once (stuck in the kernel) runs no code of its own meanwhile.
pub const AFTER_KILL: Duration = Duration::from_secs(2);

/// Makes rlock the reaper of the orphans of its guardian, should the guardian be killed: they
/// stay below rlock, which then stops them itself.
pub fn adopt_orphans() {
    let _ = nix::sys::prctl::set_child_subreaper(true);
}

/// Makes this process not dumpable (`PR_SET_DUMPABLE` 0): no process of the same user can
/// open its /proc/PID/fd or /proc/PID/mem or ptrace it (root still can). Nothing rlock reads of
/// itself in /proc needs it dumpable: a process always reads its own.
pub fn not_dumpable() {
    let _ = nix::sys::prctl::set_dumpable(false);
}

/// Why the command was not started. Its words are said where it is made; its exit code is
/// exit.rs's, which it reaches through `From` (it is no `std::error::Error`, so that it cannot
/// reach the user without its code).
#[derive(Debug)]
pub enum LaunchError {
    /// The command line cannot be given to the kernel (a NUL byte in it).
    Usage(String),
    /// The guardian could not be started, or ended before the command did.
    Internal(String),
    /// `--contain cgroup`, and the command cannot be started in a cgroup of its own.
    Config(String),
    /// The command could not be run: not found, or not executable (or another error of
    /// `execve`).
    CannotRun { message: String, not_found: bool },
}

/// What the supervisor needs to know to enforce the lease.
pub struct Enforce {
    /// The lease's moments (`Lease::timeline`), the very ones the guardian was told at its
    /// launch; None when another rlock enforces the lease (a nested exec inside `rlock exec`).
    pub lease: Option<Timeline>,
    /// When the first renewal is due: the renewal thread is started then, so that a short
    /// command runs with no thread at all. None when nothing is to be renewed.
    pub renew_at: Option<Instant>,
    pub grace: Duration,
    pub lost_signal: Signal,
    /// When the command's time is up (`--timeout`, `Lease::limit`): it is stopped as for a
    /// lost lock, the lock still held.
    pub time_limit: Option<Limit>,
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
    /// The command was stopped at its time limit (`--timeout`).
    pub timed_out: bool,
}

/// Runs the command (started by `guardian`) to its end under the lease that `keeper` keeps,
/// passing signals on and stopping everything it started before the lease can run out; see
/// `Supervisor::run`.
pub fn supervise(
    guardian: &mut Guardian,
    signals: &Signals,
    keeper: LeaseKeeper<'_, '_>,
    enforce: Enforce,
    terminal: Option<Terminal>,
    observer: &dyn Observer,
) -> Outcome {
    let LeaseKeeper { renewer, reports } = keeper;
    // The guardian has enforced the lease on its own clock since its launch, and the time limit
    // from the command's start, told here once: neither rests on rlock running.
    if let Some(limit) = enforce.time_limit {
        guardian.time_limit(limit);
    }
    let world = live::Live {
        pgid: guardian.pgid(),
        group: group::Group::open(guardian.pgid(), guardian.pid()),
        inbox: live::Inbox {
            guardian,
            guardian_gone: false,
            leader_ended: false,
            signals,
            reports: &reports,
            pending: std::collections::VecDeque::new(),
            signalled: 0,
            answer_by: None,
        },
        terminal,
    };
    let mut outcome = machine::Supervisor::new(world, enforce, observer, renewer).run();
    confirm::nothing_left(guardian, &mut outcome);
    outcome
}
