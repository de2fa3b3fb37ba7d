//! What the lock and supervision layers report while they work. They never write to the
//! terminal themselves: they tell an `Observer`, which the command layer owns and which
//! decides what, if anything, the user sees (`-q`, `-v`). It lives with the lock, whose wait
//! says most of it; the supervisor, above, tells it of a failed renewal.

use std::time::Duration;

use super::error::{Error, RenewError, Seen};

/// Something that happened that a user may want to hear of.
#[derive(Debug)]
pub enum Note<'a> {
    /// The lock was found busy and the wait begins (said once per wait): what the try saw (who
    /// holds the lock), and the waiter's place in line (1 first; None where there is no line).
    WaitBegins {
        key: &'a str,
        seen: &'a Seen,
        place: Option<i64>,
    },
    /// The wait goes on, told only to an observer that `hears_progress`: at its 10th and 30th
    /// second, then once a minute, and when a try finds a new holder (`new_holder`). What the
    /// last try saw, aged to now: the waiter asks Redis nothing for this line.
    StillWaiting {
        key: &'a str,
        waited: Duration,
        seen: &'a Seen,
        place: Option<i64>,
        new_holder: bool,
    },
    /// A waiter got no answer that time may cure: Redis is out, and the wait rides it out. A
    /// run that has not reached Redis yet rides it out for `first_contact` at most.
    OutageBegan {
        key: &'a str,
        failure: &'a Error,
        first_contact: Option<Duration>,
    },
    /// Redis answers a waiter again after an outage of `after`.
    OutageEnded { key: &'a str, after: Duration },
    /// The server refused a waiter's connection for having as many clients as it allows
    /// (maxclients): the waiter waits for room as for a busy lock, and tries again with backoff.
    ServerFull { key: &'a str, failure: &'a Error },
    /// The server had room for the waiter again after `after`.
    RoomAgain { key: &'a str, after: Duration },
    /// A renewal failed; it is retried while the lease lasts.
    RenewalFailed { error: &'a RenewError },
    /// A renewal succeeded `late` after it was due, with `left` of the lease it extended still
    /// to run.
    RenewedLate { late: Duration, left: Duration },
    /// Redlock: the lock is now on `held` of `of` masters.
    Spread { held: usize, of: usize },
}

/// Hears what happens.
pub trait Observer {
    fn observe(&self, note: Note<'_>);

    /// Whether it wants `Note::StillWaiting` (`-v`): a waiter wakes for them only then.
    fn hears_progress(&self) -> bool {
        false
    }

    /// Work to do while Redis answers a try of a wait for the lock (`backend::meanwhile`), ready
    /// for a grant: `exec` makes the command's guardian then. None by default.
    fn while_trying(&self) -> Option<Box<dyn FnOnce()>> {
        None
    }
}

/// Hears nothing.
pub struct Silent;

impl Observer for Silent {
    fn observe(&self, _: Note<'_>) {}
}
