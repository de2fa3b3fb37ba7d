//! The seams of the deterministic simulation (tests/sim, the crate rlock-sim), with the feature
//! `sim-seams` only: what it drives that is not the library's public API. Everything else it
//! uses is public: its clients wait with `Locker::acquire` (the real waiter) on a `Locker` whose
//! `Clock` is the simulation's (the waiter's time, sleep and jitter) and whose `Node`s are too
//! (their requests, and their subscribers: `backend::Subscriber::over`, also with this feature
//! only, subscribes on a socket pair whose other end the simulation plays the server on), and
//! hold with `watchdog::renew_loop`.
//!
//! Its `planted_` tests plant known bugs of the client side, per thread, which it must then find.

pub use super::planted::{Bug, on as planted, plant};
