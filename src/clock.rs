//! The time and the concurrency the lock code runs in: the machine's, or a simulation's.
//!
//! Every reading of the clock by the lock protocol's client side (a try's send time, Redlock's
//! validity, the renewal thread's schedule and the lease deadline it reports), every wait of
//! the renewal thread and every fan-out to a deployment's nodes goes through a `Clock`. rlock
//! runs on `System`; the deterministic simulation of the protocol (tests/sim) runs the same
//! code on a clock of its own, which decides what time it is and which thread runs when.

use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::Instant;

/// One job of a fan-out: it runs on a thread of its own and borrows from its caller.
pub type Job<'a> = Box<dyn FnOnce() + Send + 'a>;

/// What time it is, how to wait, and how to run jobs side by side.
pub trait Clock: Send + Sync {
    /// Now, by this clock (monotonic).
    fn now(&self) -> Instant;

    /// Waits until `until` or until `stop` says stop (a message, or its sender gone): true
    /// when it said stop.
    fn wait(&self, stop: &Receiver<()>, until: Instant) -> bool;

    /// Runs `jobs` side by side and returns when every one has ended.
    fn fan_out(&self, jobs: Vec<Job<'_>>);
}

/// The machine's clock and threads.
#[derive(Debug, Clone, Copy, Default)]
pub struct System;

impl Clock for System {
    fn now(&self) -> Instant {
        Instant::now()
    }

    fn wait(&self, stop: &Receiver<()>, until: Instant) -> bool {
        !matches!(
            stop.recv_timeout(until.saturating_duration_since(Instant::now())),
            Err(RecvTimeoutError::Timeout)
        )
    }

    fn fan_out(&self, jobs: Vec<Job<'_>>) {
        std::thread::scope(|s| {
            let threads: Vec<_> = jobs.into_iter().map(|job| s.spawn(job)).collect();
            // Joined, not only waited for: a thread the scope merely waits for may still be
            // ending (freeing what it held, under the allocator's lock) when rlock forks the
            // guardian next (supervise/spawn.rs: no other thread exists at spawn).
            for thread in threads {
                thread.join().expect("a node worker panicked");
            }
        });
    }
}
