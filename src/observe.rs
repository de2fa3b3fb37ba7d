//! What the lock and supervision layers report while they work. They never write to the
//! terminal themselves: they tell an `Observer`, which the command layer owns and which
//! decides what, if anything, the user sees (`-q`, `-v`).

use std::time::Duration;

use crate::exit::Failure;
use crate::watchdog::RenewError;

/// Something that happened that a user may want to hear of.
#[derive(Debug)]
pub enum Note<'a> {
    /// The lock was found busy and the wait begins (said once per wait).
    WaitBegins { key: &'a str },
    /// A waiter got no answer that time may cure: Redis is out, and the wait rides it out.
    OutageBegan { key: &'a str, failure: &'a Failure },
    /// Redis answers a waiter again after an outage of `after`.
    OutageEnded { key: &'a str, after: Duration },
    /// A renewal failed; it is retried while the lease lasts.
    RenewalFailed { error: &'a RenewError },
}

/// Hears what happens.
pub trait Observer {
    fn observe(&self, note: Note<'_>);
}

/// Hears nothing.
pub struct Silent;

impl Observer for Silent {
    fn observe(&self, _: Note<'_>) {}
}
