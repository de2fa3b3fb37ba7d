//! Starting the command, and the guardian that kills its group if rlock dies. Every `unsafe`
//! block of process creation is in this file.
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
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::sched::CloneFlags;
use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal, killpg, sigprocmask};
use nix::sys::wait::waitpid;
use nix::unistd::{Pid, getpgrp, getpid, getppid, setpgid};

use super::terminal::Terminal;
use crate::exit::{Code, Failure};

/// Spawns `argv` directly (no shell, searching PATH) as the leader of a new process group,
/// with the terminal's foreground when rlock had it, SIGKILL on rlock's death, no blocked
/// signals, and rlock's environment plus `env`. Returns the child's pid.
///
/// The child is started as `posix_spawn` does, sharing rlock's memory until it execs (vfork):
/// rlock's page tables are not copied, and none of its pages has to be copied on write
/// afterwards. So the child only makes async-signal-safe system calls on memory prepared
/// before, and reports a failed exec through `exec_errno`.
///
/// Must be called from the thread that lives as long as rlock: the parent-death signal fires
/// when the *thread* that forked the child exits.
pub fn spawn(
    argv: &[OsString],
    env: &[(&str, String)],
    terminal: Option<Terminal>,
) -> Result<Pid, Failure> {
    let prepared = Prepared::new(argv, env)?;
    let started = start(&prepared, terminal);
    settle(started, &argv[0], terminal)
}

/// What the vfork child execs, built before it runs: it may not allocate.
struct Prepared {
    /// Owners of the strings the pointer arrays point into.
    _strings: (Vec<CString>, Vec<CString>),
    /// Null-terminated arrays of pointers into those strings, for execvpe.
    argp: Vec<*const nix::libc::c_char>,
    envp: Vec<*const nix::libc::c_char>,
}

impl Prepared {
    /// `argv`, and rlock's environment with `env` added (replacing variables of those names).
    fn new(argv: &[OsString], env: &[(&str, String)]) -> Result<Self, Failure> {
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

/// Starts the child, sharing rlock's memory until it execs: Ok with its pid once it has
/// exec'd, or the error of its exec (or of the clone).
fn start(prepared: &Prepared, terminal: Option<Terminal>) -> Result<Pid, io::Error> {
    let (argp, envp) = (&prepared.argp, &prepared.envp);
    let parent = getpid();
    // Resolved here: the child may not touch Rust's standard handles (they allocate on first use).
    let tty = terminal.map(Terminal::raw_fd);
    let exec_errno = AtomicI32::new(0);
    let child = Box::new(|| -> isize {
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
        0 => Ok(pid),
        errno => {
            let _ = waitpid(pid, None);
            Err(io::Error::from_raw_os_error(errno))
        }
    }
}

/// After the start: the child leads its group and has the terminal, or the failure to run it
/// is mapped to 126/127 (and the terminal taken back, which the child may have taken before
/// its exec failed).
fn settle(
    started: Result<Pid, io::Error>,
    program: &OsString,
    terminal: Option<Terminal>,
) -> Result<Pid, Failure> {
    let pid = match started {
        Ok(pid) => pid,
        Err(e) => {
            if let Some(t) = terminal {
                t.hand_to(getpgrp());
            }
            return Err(cannot_run(program, &e));
        }
    };
    // Also from the parent, as a shell does, so neither order of events leaves a gap.
    let _ = setpgid(pid, pid);
    if let Some(t) = terminal {
        t.hand_to(pid);
    }
    Ok(pid)
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

fn cannot_run(program: &OsString, e: &io::Error) -> Failure {
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

/// Kills the child's whole process group if rlock dies without saying goodbye (kill -9): the
/// parent-death signal reaches only the child itself, not what it started (`sh -c`'s
/// commands), which would otherwise run on with nobody renewing the lock.
pub struct Guardian {
    goodbye: OwnedFd,
}

impl Guardian {
    /// Forks a small process that waits on a pipe: a byte means "done, stand down"; end of file
    /// (rlock died) means SIGKILL to the group `pgid`. It ignores job-control and terminal
    /// signals and lives in a process group of its own, so nothing meant for rlock stops it.
    ///
    /// A forked copy, not a process sharing rlock's memory (`clone` with CLONE_VM), though that
    /// starts about 0.06 ms sooner: the kernel kills every process that shares the memory of
    /// one the OOM killer picks (and, before Linux 5.16, of one that dumps core), so the
    /// guardian would die with rlock in the very cases it is there for.
    pub fn arm(pgid: Pid) -> Option<Guardian> {
        let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok()?;
        // SAFETY: no other thread exists (see the top of this file), so the child's copy of
        // rlock's memory holds no lock another thread had taken; the child makes only
        // async-signal-safe system calls (sigaction, setpgid, close, read, kill, _exit) and
        // allocates nothing.
        match unsafe { nix::unistd::fork() }.ok()? {
            nix::unistd::ForkResult::Child => {
                for sig in [
                    Signal::SIGINT,
                    Signal::SIGTERM,
                    Signal::SIGHUP,
                    Signal::SIGQUIT,
                    Signal::SIGUSR1,
                    Signal::SIGUSR2,
                    Signal::SIGTSTP,
                    Signal::SIGTTIN,
                    Signal::SIGTTOU,
                    Signal::SIGPIPE,
                ] {
                    // SAFETY: SIG_IGN is not a handler function: nothing runs in signal context.
                    unsafe {
                        let _ = nix::sys::signal::signal(sig, SigHandler::SigIgn);
                    }
                }
                let _ = setpgid(Pid::from_raw(0), Pid::from_raw(0));
                // Our copy of the write end goes, so that rlock's death is end of file.
                drop(write_end);
                let mut byte = [0u8; 1];
                loop {
                    match nix::unistd::read(&read_end, &mut byte) {
                        Ok(0) => {
                            let _ = killpg(pgid, Signal::SIGKILL);
                            break;
                        }
                        Err(nix::errno::Errno::EINTR) => continue,
                        _ => break,
                    }
                }
                // SAFETY: leaving without running anything of the parent's (no atexit, no
                // destructors).
                unsafe { nix::libc::_exit(0) }
            }
            nix::unistd::ForkResult::Parent { .. } => {
                drop(read_end);
                Some(Guardian { goodbye: write_end })
            }
        }
    }

    /// The child is gone and the lock dealt with: the guardian leaves the group alone.
    pub fn stand_down(self) {
        let _ = nix::unistd::write(&self.goodbye, b"x");
    }
}
