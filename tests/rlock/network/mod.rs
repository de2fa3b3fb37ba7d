//! Across a network: rlock and its Redis on two hosts, a round trip of 10 or 40 ms with jitter
//! between them (the harness's delaying proxy, `common::network`), not loopback. A busy lock
//! waited on is busy (75) whatever the round trip, in every mode; a Redis that does not answer
//! is unavailable (69); every wait ends within its `-w`, one round trip and `--op-timeout`; a
//! TLS handshake to a port that never answers ends with the wait.
//!
//! Each wait runs a few times here; `RLOCK_TEST_NETWORK_RUNS=20` runs it 20 times, for the
//! figures of docs/waiting.md ("Across a network").

mod busy;
mod round_trips;
mod tls;

use crate::common::{Output, Rtt};
use std::process::Command;
use std::time::{Duration, Instant};

/// The lock every test uses, and the Redis names rlock gives it (see `src/lock/mod.rs`).
const KEY: &str = "k";
const LOCK: &str = "rlock:k";
const QUEUE: &str = "{rlock:k}:q";

/// `--op-timeout` of every waiter: what a try in flight when its wait ends may still take.
const OP_TIMEOUT: Duration = Duration::from_secs(1);

/// What a run costs besides its wait and its requests, on a loaded 2-core machine: starting
/// the process, reading its options, tearing it down.
const STARTUP: Duration = Duration::from_millis(1500);

/// How many times each wait is run.
fn runs() -> usize {
    std::env::var("RLOCK_TEST_NETWORK_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2)
}

/// The round trips the tests run at: a zone apart, and a region apart.
const ZONE: u64 = 10;
const REGION: u64 = 40;

/// One kind of wait on the held lock `KEY`, and how long it may last.
#[derive(Debug, Clone, Copy)]
enum Wait {
    /// `acquire -w 1s`.
    Acquire1s,
    /// `exec -w 2s -- true`.
    Exec2s,
    /// `exec -n -- true`: one try.
    ExecOnce,
}

const WAITS: [Wait; 3] = [Wait::Acquire1s, Wait::Exec2s, Wait::ExecOnce];

impl Wait {
    fn args(self) -> Vec<&'static str> {
        let op = ["--op-timeout", "1s"];
        let rest: &[&str] = match self {
            Wait::Acquire1s => &["acquire", "-k", KEY, "--ttl", "30s", "-w", "1s"],
            Wait::Exec2s => &["exec", "-k", KEY, "-w", "2s", "--", "true"],
            Wait::ExecOnce => &["exec", "-k", KEY, "-n", "--", "true"],
        };
        op.iter().chain(rest).copied().collect()
    }

    /// How long it waits for a busy lock.
    fn wait(self) -> Duration {
        match self {
            Wait::Acquire1s => Duration::from_secs(1),
            Wait::Exec2s => Duration::from_secs(2),
            Wait::ExecOnce => Duration::ZERO,
        }
    }

    /// The latest it may end: its wait, one round trip and --op-timeout (the try in flight
    /// when the wait ends finishes), and the cost of a run.
    fn bound(self, rtt: Rtt) -> Duration {
        self.wait() + rtt.worst() + OP_TIMEOUT + STARTUP
    }
}

/// Runs `cmd` with `wait`'s options to its end; returns what it left and how long it took.
/// Fails the test when it outlives its bound by far (a hung run).
fn timed(mut cmd: Command, wait: Wait) -> (Output, Duration) {
    cmd.args(wait.args());
    let started = Instant::now();
    let out = crate::common::run(&mut cmd);
    (out, started.elapsed())
}

/// `wait` on a lock held all along ends busy (75) within its bound, every one of `runs()` times;
/// `cmd` makes an rlock of the deployment under test.
fn busy_every_time(rtt: Rtt, cmd: impl Fn() -> Command) {
    for wait in WAITS {
        for run in 0..runs() {
            let (out, took) = timed(cmd(), wait);
            assert_eq!(
                out.code, 75,
                "{wait:?} on a held lock at a round trip of {rtt}, run {run}: busy, not \
                 {}\n{out}",
                out.code
            );
            assert!(
                out.stderr.contains(&format!("'{KEY}'")),
                "names the lock: {out}"
            );
            assert!(
                took >= wait.wait() && took <= wait.bound(rtt),
                "{wait:?} at {rtt} took {took:?} (bound {:?})",
                wait.bound(rtt)
            );
        }
    }
}

/// `wait` against a deployment that answers nothing ends unavailable (69) within its bound.
fn unavailable_every_time(rtt: Rtt, cmd: impl Fn() -> Command) {
    for wait in [Wait::Acquire1s, Wait::Exec2s] {
        let (out, took) = timed(cmd(), wait);
        assert_eq!(
            out.code, 69,
            "{wait:?} against a Redis that answers nothing, at {rtt}: unavailable\n{out}"
        );
        assert!(
            took <= wait.bound(rtt),
            "{wait:?} against a silent Redis at {rtt} took {took:?} (bound {:?})",
            wait.bound(rtt)
        );
    }
}
