//! What a waiter waits on (`Tries`), and the tries of a wait as rlock makes them: on a
//! `Locker`, for one request.

use std::time::Duration;

use crate::backend::Subscriber;
use crate::clock::Clock;
use crate::lock::call::acquire::Attempt;
use crate::lock::error::Error;
use crate::lock::exclusive::capped;
use crate::lock::{Locker, Request};

/// What a waiter waits on: one try at the lock, and what a wait needs around its tries. The
/// waiter is generic over it: `Asking` is the real one (a request on a `Locker`); a unit test
/// may give its own.
pub(in crate::lock) trait Tries {
    /// One try at the lock; with `join`, a busy try keeps a place in line. `within`: the time
    /// the try (and its give-back) end within, besides --op-timeout (the waiter's `budget`:
    /// what is left of a bounded wait, or nothing more for a Redis that answers).
    fn attempt(&self, join: bool, within: Option<Duration>) -> Result<Attempt, Error>;
    /// Leaves the line, giving back a grant that raced with giving up; best effort, `within`
    /// what is left of a bounded wait.
    fn leave(&self, within: Option<Duration>);
    /// Connections subscribed to the waiter's wake channel, each made within `within` (what
    /// is left of a bounded wait) and --op-timeout; with one Redis, the failure when there is
    /// none.
    fn subscribe(&self, within: Option<Duration>) -> Result<Vec<Subscriber>, Error>;
    /// Closes the connections kept for the next try (which connects again): a waiter that
    /// cannot have its wake channel (a full server) makes room for another client meanwhile.
    fn hang_up(&self);
    /// True when waiters race each other on several masters (Redlock), and must be spread out.
    fn races(&self) -> bool;
    /// How long a wait that has had no answer from Redis yet keeps trying.
    fn first_contact(&self) -> Duration;
    /// The clock the wait counts, sleeps and jitters by (the locker's).
    fn clock(&self) -> &dyn Clock;
}

/// The tries of `req` on `locker`.
pub(super) struct Asking<'a> {
    pub(super) locker: &'a Locker,
    pub(super) req: &'a Request<'a>,
}

impl Tries for Asking<'_> {
    fn attempt(&self, join: bool, within: Option<Duration>) -> Result<Attempt, Error> {
        self.locker.attempt(self.req, join, within)
    }

    fn leave(&self, within: Option<Duration>) {
        let timeout = capped(self.locker.op_timeout(), within);
        let _ = self
            .locker
            .leave_within(self.req.key, self.req.token, timeout);
    }

    fn subscribe(&self, within: Option<Duration>) -> Result<Vec<Subscriber>, Error> {
        let timeout = capped(self.locker.op_timeout(), within);
        self.locker
            .subscribers(self.req.key, self.req.token, timeout)
            .map_err(|e| Error::redis(self.req.key, e))
    }

    fn hang_up(&self) {
        self.locker.hang_up();
    }

    fn races(&self) -> bool {
        self.locker.is_quorum()
    }

    fn first_contact(&self) -> Duration {
        self.locker.first_contact()
    }

    fn clock(&self) -> &dyn Clock {
        self.locker.clock()
    }
}
