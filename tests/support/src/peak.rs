//! Running a command to its end with its peak memory measured: the kernel's own count of the
//! child's largest resident set (`ru_maxrss` from `wait4`), taken as it is reaped, so nothing
//! between two looks is missed.

use std::io;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::binary::{Output, drain};
use crate::limits::{POLL, RUN_TIMEOUT};

/// How a measured run went.
pub struct Measured {
    pub out: Output,
    /// From the spawn to the exit seen.
    pub took: Duration,
    /// The child's peak resident set, in KiB.
    pub peak_kib: u64,
}

/// Runs `cmd` to completion (stdin from /dev/null, output captured) and measures it. Panics,
/// after SIGKILL, if it runs longer than `RUN_TIMEOUT`.
pub fn run_measured(cmd: &mut Command) -> Measured {
    let started = Instant::now();
    // Reaped by `wait4` below, which std's `wait` cannot do with the child's peak memory.
    #[allow(clippy::zombie_processes)]
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {:?}: {e}", cmd.get_program()));
    let (out_buf, out_thread) = drain(child.stdout.take().expect("piped stdout"));
    let (err_buf, err_thread) = drain(child.stderr.take().expect("piped stderr"));
    let pid = child.id() as libc::pid_t;
    let (status, usage) = loop {
        let mut status = 0;
        // SAFETY: an all-zero rusage is a valid value of the plain C struct.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `pid` is this process's own unreaped child (std never waits for it: `child`
        // is only dropped), and both pointers are to live locals.
        let reaped = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        match reaped {
            0 => {}
            r if r == pid => break (status, usage),
            _ => panic!("wait4 for {pid}: {}", io::Error::last_os_error()),
        }
        if started.elapsed() > RUN_TIMEOUT {
            let _ = child.kill();
            panic!("{:?} ran longer than {RUN_TIMEOUT:?}", cmd.get_program());
        }
        std::thread::sleep(POLL.min(Duration::from_millis(5)));
    };
    let took = started.elapsed();
    let _ = out_thread.join();
    let _ = err_thread.join();
    let text = |buf: &std::sync::Arc<std::sync::Mutex<Vec<u8>>>| {
        String::from_utf8_lossy(&buf.lock().unwrap()).into_owned()
    };
    let code = match libc::WIFEXITED(status) {
        true => libc::WEXITSTATUS(status),
        false => -libc::WTERMSIG(status),
    };
    Measured {
        out: Output {
            code,
            stdout: text(&out_buf),
            stderr: text(&err_buf),
        },
        took,
        peak_kib: u64::try_from(usage.ru_maxrss).unwrap_or(0),
    }
}
