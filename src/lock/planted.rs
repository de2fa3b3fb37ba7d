//! Known bugs, planted on purpose by the simulation's `planted_` tests (tests/sim), each of
//! which the simulation must find. Built with the feature `sim-seams` only (`seams.rs`), and per
//! thread: the simulation sets the switch on the threads it runs a client on, so no other test
//! sees a bug.

use std::cell::Cell;

/// A bug of the client side that a test can plant. (The bugs of the scripts are planted by the
/// simulation in the script text it runs.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bug {
    /// The lease deadline without the drift allowance (`lease::drift` is zero).
    NoDrift,
    /// Redlock counts a server named twice twice (`Locker::identify` lets it through).
    CountTwice,
    /// A try whose reply never came is not given back (`Locker::attempt`, one Redis).
    NoGiveBack,
    /// Renewals fall due only after the lease has ended (`Lease::new`'s interval).
    SlowRenewal,
    /// Redlock counts the vote of a master that may have restarted empty under the holder
    /// (`exclusive::votes` without the restart rule).
    NoRestartRule,
    /// The lease's SIGKILL moment counted back from the TTL, without the drift allowance
    /// (`Lease::timeline`'s `kill_at`; its end and lost-signal keep it).
    KillWithoutDrift,
    /// The renewal thread never hears its stop (`watchdog::renew_loop`): it renews the lease for
    /// ever after the command ended, and rlock, which waits for it, never ends.
    DeafRenewals,
    /// The waiter ignores its `-w` deadline and waits as long as it takes (`wait_for`).
    NoDeadline,
}

thread_local! {
    static PLANTED: Cell<Option<Bug>> = const { Cell::new(None) };
}

/// Plants `bug` (or none) on this thread.
pub fn plant(bug: Option<Bug>) {
    PLANTED.with(|p| p.set(bug));
}

/// The bug planted on this thread, if any.
pub fn which() -> Option<Bug> {
    PLANTED.with(Cell::get)
}

/// Whether `bug` is planted on this thread.
pub fn on(bug: Bug) -> bool {
    which() == Some(bug)
}
