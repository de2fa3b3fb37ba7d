//! The tries of a wait, as rlock makes them: on a `Locker`, for one request.

use std::time::Duration;

use super::Tries;
use crate::backend::Subscriber;
use crate::lock::call::acquire::Attempt;
use crate::lock::error::Error;
use crate::lock::exclusive::capped;
use crate::lock::{Locker, Request};

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
}
