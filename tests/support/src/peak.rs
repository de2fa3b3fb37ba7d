//! Running a command to its end with its peak memory measured: its own high-water mark
//! (`VmHWM` in /proc/PID/status), read every few milliseconds while it runs.
//!
//! Not the kernel's `ru_maxrss` from `wait4`: that also counts the memory the child had before
//! its exec, which for a child spawned by the (large) test process is the test process's own.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::binary::{Output, drain};
use crate::limits::RUN_TIMEOUT;

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

/// Runs `cmd` to completion (stdin from /dev/null, output captured) and measures it. Panics,
/// after SIGKILL, if it runs longer than `RUN_TIMEOUT`.
pub fn run_measured(cmd: &mut Command) -> Measured {
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {:?}: {e}", cmd.get_program()));
    let (out_buf, out_thread) = drain(child.stdout.take().expect("piped stdout"));
    let (err_buf, err_thread) = drain(child.stderr.take().expect("piped stderr"));
    let mut peak_kib = 0;
    let status = loop {
        // Before the exit is looked for: the last look is at most one pause before the end.
        if let Some(kib) = high_water(child.id()) {
            peak_kib = peak_kib.max(kib);
        }
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break status;
        }
        if started.elapsed() > RUN_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{:?} ran longer than {RUN_TIMEOUT:?}", cmd.get_program());
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let took = started.elapsed();
    let _ = out_thread.join();
    let _ = err_thread.join();
    let text = |buf: &std::sync::Arc<std::sync::Mutex<Vec<u8>>>| {
        String::from_utf8_lossy(&buf.lock().unwrap()).into_owned()
    };
    use std::os::unix::process::ExitStatusExt;
    Measured {
        out: Output {
            code: status
                .code()
                .or(status.signal().map(|s| -s))
                .expect("exit code or signal"),
            stdout: text(&out_buf),
            stderr: text(&err_buf),
        },
        took,
        peak_kib,
    }
}
