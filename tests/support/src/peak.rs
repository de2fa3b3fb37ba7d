//! Running a command to its end with its peak memory measured: its own high-water mark
//! (`VmHWM` in /proc/PID/status), read every few milliseconds while it runs.
//!
//! Not the kernel's `ru_maxrss` from `wait4`: that also counts the memory the child had before
//! its exec, which for a child spawned by the (large) test process is the test process's own.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::binary::{Output, run_looking};

/// How a measured run went.
pub struct Measured {
    pub out: Output,
    /// From the spawn to the exit seen.
    pub took: Duration,
    /// The largest resident set seen, in KiB.
    pub peak_kib: u64,
}

/// The high-water mark of `pid`'s resident set in KiB; None once it has exited.
fn high_water(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find_map(|l| l.strip_prefix("VmHWM:"))?;
    line.trim().trim_end_matches("kB").trim().parse().ok()
}

/// Runs `cmd` to completion as `run` does (stdin from /dev/null, output captured, SIGKILL and
/// a panic after `RUN_TIMEOUT`) and measures it.
pub fn run_measured(cmd: &mut Command) -> Measured {
    let started = Instant::now();
    let mut peak_kib = 0;
    let (out, exited) = run_looking(cmd, Duration::from_millis(2), |pid| {
        if let Some(kib) = high_water(pid) {
            peak_kib = peak_kib.max(kib);
        }
    });
    Measured {
        out,
        took: exited - started,
        peak_kib,
    }
}
