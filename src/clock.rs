//! The time and the concurrency the lock code runs in: the machine's, or a simulation's.
//!
//! Every reading of the clock by the lock protocol's client side (a try's send time, Redlock's
//! validity, the renewal thread's schedule and the lease deadline it reports, a waiter's
//! deadline), every wait of the renewal thread and of a waiter (its sleep between tries and the
//! jitter in it) and every fan-out to a deployment's nodes goes through a `Clock`. rlock
//! runs on `System`; the deterministic simulation of the protocol (tests/sim) runs the same
//! code on a clock of its own, which decides what time it is and which thread runs when.

use std::os::fd::BorrowedFd;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

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

    /// Waits until one of `fds` is readable (something arrived, or the connection ended) or
    /// `timeout` (rounded up to whole milliseconds) is over; a signal may end it sooner. What
    /// arrived is the caller's to read: a waiter sleeps so, on its subscriptions and its signal
    /// descriptor.
    fn poll(&self, fds: &[BorrowedFd<'_>], timeout: Duration);

    /// A pause shorter than `below`, different in every process: the jitter that keeps waiters
    /// apart.
    fn jitter(&self, below: Duration) -> Duration;
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

    fn poll(&self, fds: &[BorrowedFd<'_>], timeout: Duration) {
        let mut fds: Vec<PollFd<'_>> = fds
            .iter()
            .map(|fd| PollFd::new(*fd, PollFlags::POLLIN))
            .collect();
        let ms = timeout.as_nanos().div_ceil(1_000_000);
        let timeout = PollTimeout::try_from(ms).unwrap_or(PollTimeout::MAX);
        // EINTR (a stop and continue) only means: look again, which the caller does.
        let _ = poll(&mut fds, timeout);
    }

    fn jitter(&self, below: Duration) -> Duration {
        let bytes = uuid::Uuid::new_v4().into_bytes();
        let below = below.as_micros().max(1) as u64;
        Duration::from_micros(u64::from(u16::from_le_bytes([bytes[0], bytes[1]])) % below)
    }
}
