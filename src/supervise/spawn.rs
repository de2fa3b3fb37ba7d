//! Starting the command (from the guardian, `guardian.rs`). Every `unsafe` block of starting
//! the command is in this file.
//!
//! Two invariants make the blocks below sound, and `exec` keeps them:
//! - **No signal handlers are installed.** rlock blocks the signals it acts on and reads them
//!   from a signalfd (`crate::signals`); no code of rlock's ever runs in signal context, so a
//!   child sharing rlock's memory cannot be entered by a handler.
//! - **No other thread exists at spawn.** The command is spawned, and the guardian forked,
//!   before the renewal thread starts (it starts when the first renewal is due), and Redlock's
//!   per-node threads are scoped and joined before. So no lock (malloc's, stdio's) can be held
//!   by another thread at the fork or in the vfork child.

use std::ffi::{CString, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

use nix::sched::CloneFlags;
use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal, sigprocmask};
use nix::sys::wait::waitpid;
use nix::unistd::{Pid, getpid, getppid, setpgid};

use super::terminal::Terminal;
use crate::exit::{Code, Failure};

/// What the vfork child execs, built before it runs: it may not allocate.
pub(super) struct Prepared {
    /// Owners of the strings the pointer arrays point into.
    _strings: (Vec<CString>, Vec<CString>),
    /// Null-terminated arrays of pointers into those strings, for execvpe.
    argp: Vec<*const nix::libc::c_char>,
    envp: Vec<*const nix::libc::c_char>,
}

impl Prepared {
    /// `argv`, and rlock's environment with `env` added (replacing variables of those names).
    pub(super) fn new(argv: &[OsString], env: &[(&str, String)]) -> Result<Self, Failure> {
        let c_string = |bytes: Vec<u8>| {
            CString::new(bytes)
                .map_err(|_| Failure::Usage("the command has a NUL byte in it".into()))
        };
        let args = argv
            .iter()
            .map(|a| c_string(a.as_bytes().to_vec()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut vars = Vec::new();
        for (name, value) in std::env::vars_os() {
            if !env.iter().any(|(ours, _)| name == *ours) {
                vars.push(c_string(
                    [name.as_bytes(), b"=", value.as_bytes()].concat(),
                )?);
            }
        }
        for (name, value) in env {
            vars.push(c_string(format!("{name}={value}").into_bytes())?);
        }
        let pointers = |strings: &[CString]| {
            strings
                .iter()
                .map(|s| s.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect::<Vec<*const nix::libc::c_char>>()
        };
        let (argp, envp) = (pointers(&args), pointers(&vars));
        Ok(Prepared {
            _strings: (args, vars),
            argp,
            envp,
        })
    }
}

/// Starts `argv` directly (no shell, searching PATH) as the leader of a new process group, with
/// the terminal's foreground when rlock had it, SIGKILL on its parent's death, no blocked
/// signals, rlock's environment plus `env`, and, first of all, in the cgroup whose
/// `cgroup.procs` is open as `cgroup_procs`. Ok with its pid once it has exec'd, and whether it
/// joined the cgroup; or the error of its exec (or of the clone).
///
/// The child is started as `posix_spawn` does, sharing its parent's memory until it execs
/// (vfork): the page tables are not copied, and no page has to be copied on write afterwards.
/// So the child only makes async-signal-safe system calls on memory prepared before, and
/// reports a failed exec through `exec_errno`.
///
/// Must be called from a thread that lives as long as its process: the parent-death signal
/// fires when the *thread* that forked the child exits.
pub(super) fn start(
    prepared: &Prepared,
    terminal: Option<Terminal>,
    cgroup_procs: Option<i32>,
) -> Result<(Pid, bool), io::Error> {
    let (argp, envp) = (&prepared.argp, &prepared.envp);
    let parent = getpid();
    // Resolved here: the child may not touch Rust's standard handles (they allocate on first use).
    let tty = terminal.map(Terminal::raw_fd);
    let exec_errno = AtomicI32::new(0);
    let joined = AtomicBool::new(false);
    let child = Box::new(|| -> isize {
        if let Some(fd) = cgroup_procs {
            // SAFETY: write(2) of two bytes from a static string to a descriptor the parent
            // opened and keeps open until the exec.
            let n = unsafe { nix::libc::write(fd, b"0\n".as_ptr().cast(), 2) };
            joined.store(n == 2, Ordering::Relaxed);
        }
        let _ = setpgid(Pid::from_raw(0), Pid::from_raw(0));
        if let Some(fd) = tty {
            take_terminal(fd, getpid());
        }
        let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
        if getppid() != parent {
            // rlock died before the parent-death signal was armed.
            let _ = nix::sys::signal::raise(Signal::SIGKILL);
        }
        // SAFETY: restoring the default disposition of SIGPIPE (Rust's runtime ignores it in
        // rlock; the command must get it as usual). SIG_DFL is no handler, and after CLONE_VM
        // without CLONE_SIGHAND the child has a signal table of its own.
        unsafe {
            let _ = nix::sys::signal::signal(Signal::SIGPIPE, SigHandler::SigDfl);
        }
        let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
        // SAFETY: both arrays are null-terminated and point into strings that outlive the
        // child's use of them (rlock waits, suspended by CLONE_VFORK, until the exec).
        unsafe { nix::libc::execvpe(argp[0], argp.as_ptr(), envp.as_ptr()) };
        exec_errno.store(nix::errno::Errno::last_raw(), Ordering::Relaxed);
        // SAFETY: leaving the child at once, running nothing of rlock's (no atexit handlers, no
        // destructors, no flushing of rlock's buffers).
        unsafe { nix::libc::_exit(127) }
    });
    // The child's stack: its own frames, and glibc's execvpe builds a path (and for a script
    // with no #!, a new argument list) on it. Above malloc's mmap threshold (128 KiB), so that
    // it comes as fresh zero pages, of which the child touches a few, rather than as heap that
    // must be cleared.
    let mut stack = vec![0u8; 256 * 1024 + 8 * argp.len()];
    // SAFETY: CLONE_VM | CLONE_VFORK: the child runs on `stack` in rlock's memory while rlock
    // is suspended, and only until it execs or exits; it makes only async-signal-safe calls on
    // memory prepared above, and by the invariants at the top of this file no handler and no
    // other thread can observe the shared memory meanwhile.
    let pid = unsafe {
        nix::sched::clone(
            child,
            &mut stack,
            CloneFlags::CLONE_VM | CloneFlags::CLONE_VFORK,
            Some(Signal::SIGCHLD as i32),
        )
    }?;
    match exec_errno.load(Ordering::Relaxed) {
        0 => Ok((pid, joined.load(Ordering::Relaxed))),
        errno => {
            let _ = waitpid(pid, None);
            Err(io::Error::from_raw_os_error(errno))
        }
    }
}

/// `Terminal::hand_to` for the vfork child, on a raw descriptor: async-signal-safe system
/// calls only.
fn take_terminal(fd: i32, pgrp: Pid) {
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let mut old = SigSet::empty();
    let _ = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut old));
    // SAFETY: tcsetpgrp on fd 0, 1 or 2, which stay open for the life of the process; an
    // error (no terminal any more) is harmless and ignored.
    unsafe { nix::libc::tcsetpgrp(fd, pgrp.as_raw()) };
    let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
}

/// Whether `program` could be run now, as execvp would find it: a path with a slash must be an
/// executable file; a bare name must be one in a directory of PATH. Err says why not.
pub fn runnable(program: &OsString) -> Result<(), String> {
    use nix::unistd::{AccessFlags, access};
    let name = program.to_string_lossy();
    let executable = |p: &std::path::Path| p.is_file() && access(p, AccessFlags::X_OK).is_ok();
    if program.as_bytes().contains(&b'/') {
        let path = std::path::Path::new(program);
        return match path.exists() {
            true if executable(path) => Ok(()),
            true => Err(format!("'{name}' is not executable")),
            false => Err(format!("'{name}' does not exist")),
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/bin:/bin".into());
    if std::env::split_paths(&path).any(|dir| executable(&dir.join(program))) {
        return Ok(());
    }
    let hint = if name.contains(char::is_whitespace) {
        "; rlock runs commands without a shell: use sh -c '…'"
    } else {
        ""
    };
    Err(format!("command '{name}' not found on PATH{hint}"))
}

pub(super) fn cannot_run(program: &OsString, e: &io::Error) -> Failure {
    let name = program.to_string_lossy();
    match e.kind() {
        io::ErrorKind::NotFound if name.contains(char::is_whitespace) => Failure::CannotRun {
            message: format!(
                "cannot run '{name}': command not found; rlock runs commands without a shell: use sh -c '{name}'"
            ),
            code: Code::NotFound,
        },
        io::ErrorKind::NotFound => Failure::CannotRun {
            message: format!("cannot run '{name}': command not found"),
            code: Code::NotFound,
        },
        _ => Failure::CannotRun {
            message: format!("cannot run '{name}': {e}"),
            code: Code::CannotRun,
        },
    }
}
