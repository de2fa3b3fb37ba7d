//! The seams of the deterministic simulation (tests/sim, the crate rlock-sim), with the feature
//! `sim-seams` only: what it drives that is not the library's public API. Everything else it
//! uses is public (`Locker`, `Node`, `Clock`, `watchdog::renew_loop`, ...).
//!
//! The simulation's clients take the lock one try at a time, as `wait.rs` does (so the
//! simulator, not a waiter's sleep, decides when the next try goes), and its `planted_` tests
//! plant known bugs of the client side, per thread, which it must then find.

use std::time::Duration;

use super::{Error, LockKey, Locker, Request};

pub use super::call::acquire::Attempt;
pub use super::planted::{Bug, on as planted, plant};

/// One try at taking the lock, and its give-back if its reply never came
/// (`Locker::attempt`, the try every wait makes).
pub fn attempt(
    locker: &Locker,
    req: &Request,
    join_queue: bool,
    within: Option<Duration>,
) -> Result<Attempt, Error> {
    locker.attempt(req, join_queue, within)
}

/// The lock's wake channel, which the simulation's clients listen on through the world rather
/// than a subscriber's connection.
pub fn channel(key: &LockKey) -> &str {
    &key.channel
}
