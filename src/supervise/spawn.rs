//! Starting the guardian (a fork of rlock, born in the command's cgroup when there is one) and,
//! from the guardian, the command. Every `unsafe` block of starting a process is in this file,
//! two of them:
//!
//! - **The guardian's fork** (`fork_guardian`): born in the cgroup by `clone3` with
//!   `CLONE_INTO_CGROUP`, which neither glibc nor nix wraps.
//! - **The command's start** (`start`), as `posix_spawn` makes it: a child that shares the
//!   guardian's memory until its exec (`clone` with `CLONE_VM | CLONE_VFORK`). Not
//!   `std::process::Command`: two things only the child itself can do before its exec (SIGKILL on
//!   its parent's death, `PR_SET_PDEATHSIG`, which no spawn attribute sets; the terminal's
//!   foreground for its group from its first instruction, as a shell's job has it) need
//!   `pre_exec`, and with `pre_exec` Command forks: the guardian's page tables are copied, and
//!   every page either side writes before the exec is copied again, on every run. Measured
//!   against this start, a run of `exec -- true` took more CPU and more page faults.
//!
//! Two invariants make both sound, and `exec` keeps them:
//! - **No signal handlers are installed.** rlock blocks the signals it acts on and reads them
//!   from a signalfd (`crate::signals`); no code of rlock's ever runs in signal context, so a
//!   child sharing the guardian's memory cannot be entered by a handler.
//! - **No other thread exists at either start.** The guardian is forked before any thread of
//!   rlock's starts (the renewal thread and the run's record start after it; Redlock's
//!   per-node threads are scoped and joined before), and it has one thread. So no lock
//!   (malloc's, stdio's) can be held by another thread at the fork or in the vfork child.

use std::ffi::{CString, OsString};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::sync::atomic::{AtomicI32, Ordering};

use nix::errno::Errno;
use nix::sched::CloneFlags;
use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal, sigprocmask};
use nix::sys::wait::waitpid;
use nix::unistd::{Pid, getpid, getppid, setpgid};

use super::LaunchError;
use super::terminal::Terminal;

/// What the vfork child execs, built before it runs: it may not allocate.
pub(super) struct Prepared {
    /// Owners of the strings the pointer arrays point into.
    strings: (Vec<CString>, Vec<CString>),
    /// The program's file, found on PATH before the child runs (see `found_on_path`).
    file: Option<CString>,
    /// Null-terminated arrays of pointers into those strings, for execvpe.
    argp: Vec<*const nix::libc::c_char>,
    envp: Vec<*const nix::libc::c_char>,
}

impl Prepared {
    /// `argv` and rlock's environment, made while rlock waits for the grant; `with` adds the
    /// lock's variables. `file`: where `argv[0]` was found on PATH (`found_on_path`).
    pub(super) fn new(argv: &[OsString], file: Option<CString>) -> Result<Self, LaunchError> {
        let args = argv
            .iter()
            .map(|a| c_string(a.as_bytes().to_vec()))
            .collect::<Result<Vec<_>, _>>()?;
        let vars = std::env::vars_os()
            .map(|(name, value)| c_string([name.as_bytes(), b"=", value.as_bytes()].concat()))
            .collect::<Result<Vec<_>, _>>()?;
        let argp = pointers(&args);
        Ok(Prepared {
            file,
            strings: (args, vars),
            argp,
            envp: Vec::new(),
        })
    }

    /// With `program` looked up on PATH anew (`found_on_path`): what a lookup made before a wait
    /// found may no longer be what a shell would run.
    pub(super) fn found_again(mut self, program: &OsString) -> Self {
        self.file = found_on_path(program);
        self
    }

    /// With `env` added to the environment, replacing variables of those names.
    pub(super) fn with(mut self, env: &[(&str, String)]) -> Result<Self, LaunchError> {
        let vars = &mut self.strings.1;
        vars.retain(|var| {
            let name = var
                .as_bytes()
                .split(|&b| b == b'=')
                .next()
                .unwrap_or_default();
            !env.iter().any(|(ours, _)| name == ours.as_bytes())
        });
        for (name, value) in env {
            vars.push(c_string(format!("{name}={value}").into_bytes())?);
        }
        self.envp = pointers(vars);
        Ok(self)
    }
}

fn c_string(bytes: Vec<u8>) -> Result<CString, LaunchError> {
    CString::new(bytes).map_err(|_| LaunchError::Usage("the command has a NUL byte in it".into()))
}

/// A null-terminated array of pointers into `strings`, for execvpe.
fn pointers(strings: &[CString]) -> Vec<*const nix::libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// The file execvp would run for a bare `program`: the first executable file of that name in a
/// directory of PATH. Looked up before the child runs (by the guardian, while rlock waits for
/// the grant), so that the child execs it at once: execvp tries each directory of PATH in turn,
/// and each exec that fails costs about what this whole lookup does. None for a path (it has a slash), without PATH, or when nothing is found: then
/// the child searches as execvp does, and says why it could not run.
pub(super) fn found_on_path(program: &OsString) -> Option<CString> {
    use nix::unistd::{AccessFlags, access};
    let bytes = program.as_bytes();
    if bytes.is_empty() || bytes.contains(&b'/') {
        return None;
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file() && access(p.as_path(), AccessFlags::X_OK).is_ok())
        .and_then(|p| CString::new(p.into_os_string().into_vec()).ok())
}

/// Starts `argv` directly (no shell, searching PATH) as the leader of a new process group, with
/// the terminal's foreground when rlock had it, SIGKILL on its parent's death, no blocked
/// signals, SIGPIPE as usual, and rlock's environment plus `env`, in its parent's cgroup. Ok
/// with its pid once it has exec'd; or the error of its exec (or of the clone).
///
/// The child shares its parent's memory until it execs (vfork): the page tables are not copied,
/// and no page has to be copied on write afterwards. So the child only makes async-signal-safe
/// system calls on memory prepared before, and reports a failed exec through `exec_errno`.
///
/// Must be called from a thread that lives as long as its process: the parent-death signal
/// fires when the *thread* that forked the child exits.
pub(super) fn start(prepared: &Prepared, terminal: Option<Terminal>) -> Result<Pid, io::Error> {
    let (argp, envp) = (&prepared.argp, &prepared.envp);
    let parent = getpid();
    // Resolved here: the child may not touch Rust's standard handles (they allocate on first use).
    let tty = terminal.map(Terminal::raw_fd);
    let exec_errno = AtomicI32::new(0);
    // The child's stack: its own frames, and glibc's execvpe builds a path (and for a script
    // with no #!, a new argument list) on it. Above malloc's mmap threshold (128 KiB), so that
    // it comes as fresh zero pages, of which the child touches a few, rather than as heap that
    // must be cleared.
    let mut stack = vec![0u8; 256 * 1024 + 8 * argp.len()];
    // SAFETY: CLONE_VM | CLONE_VFORK: the child runs the closure on `stack` in the guardian's
    // memory while the guardian is suspended, until it execs or exits; by the invariants at the
    // top of this file no handler and no other thread can observe the shared memory meanwhile.
    // The child makes only async-signal-safe system calls, on memory prepared above, and leaves
    // by its exec or `_exit`, running nothing of rlock's (no destructor, no atexit handler):
    // - setpgid, and tcsetpgrp on the terminal's descriptor (0, 1 or 2, open for the life of
    //   the process) with SIGTTOU blocked, an error (no terminal any more) ignored;
    // - the parent-death signal, and kill(getpid()) if the parent died before it was armed
    //   (not raise(): raise signals the thread glibc believes it is, and the guardian, a child
    //   of a raw clone3, still carries its parent's thread id there);
    // - SIGPIPE back to SIG_DFL (Rust's runtime ignores it; SIG_DFL is no handler, and the
    //   child has a signal table of its own: no CLONE_SIGHAND), and no blocked signal;
    // - execvpe with null-terminated arrays pointing into strings that outlive the child's use
    //   of them (the parent waits, suspended, until the exec). The file found on PATH first
    //   (execvpe does not search a name with a slash, and still runs a script without #! by
    //   /bin/sh); should it have gone meanwhile, the search as execvp makes it, which also gives
    //   the error to report.
    let pid = unsafe {
        let child = Box::new(|| -> isize {
            let _ = setpgid(Pid::from_raw(0), Pid::from_raw(0));
            if let Some(fd) = tty {
                let mut ttou = SigSet::empty();
                ttou.add(Signal::SIGTTOU);
                let _ = sigprocmask(SigmaskHow::SIG_BLOCK, Some(&ttou), None);
                nix::libc::tcsetpgrp(fd, getpid().as_raw());
            }
            let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
            if getppid() != parent {
                let _ = nix::sys::signal::kill(getpid(), Signal::SIGKILL);
            }
            let _ = nix::sys::signal::signal(Signal::SIGPIPE, SigHandler::SigDfl);
            let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None);
            if let Some(file) = &prepared.file {
                nix::libc::execvpe(file.as_ptr(), argp.as_ptr(), envp.as_ptr());
            }
            nix::libc::execvpe(argp[0], argp.as_ptr(), envp.as_ptr());
            exec_errno.store(Errno::last_raw(), Ordering::Relaxed);
            nix::libc::_exit(127)
        });
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

/// clone3's arguments (`struct clone_args`, as far as `cgroup`: CLONE_ARGS_SIZE_VER2).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    pub flags: u64,
    pub pidfd: u64,
    pub child_tid: u64,
    pub parent_tid: u64,
    pub exit_signal: u64,
    pub stack: u64,
    pub stack_size: u64,
    pub tls: u64,
    pub set_tid: u64,
    pub set_tid_size: u64,
    pub cgroup: u64,
}

const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// Forks the guardian, into the cgroup whose directory is open as `cgroup_dir` from its first
/// instant (`clone3` with `CLONE_INTO_CGROUP`, Linux 5.7), so that the command, which the
/// guardian starts, is born there too. Not a move into the cgroup after the start: moving a
/// process (writing `cgroup.procs`) waits for an RCU grace period on most kernels. Where clone3
/// cannot (an older kernel, a cgroup it may not start a process in), a plain fork, and the
/// guardian is in no cgroup; or, when `required` (`--contain cgroup`), clone3's error and no
/// fork at all.
///
/// The child drops `parents_own` (what only the parent may hold: its ends of the pipes) and
/// runs `guardian` (told whether it was born in the cgroup), which never returns; the parent
/// drops `guardian` (and so the child's ends it holds) and gets the child's pid, whether it was
/// born in the cgroup, and `parents_own` back. No other thread may exist (see the top of this
/// file; checked in debug builds): the child's copy of the memory must hold no lock another
/// thread had taken. After clone3, glibc in the child still takes itself for the parent's
/// thread (its cached thread id is not updated): `guardian` must not use `raise` or
/// `pthread_kill`.
pub(super) fn fork_guardian<P>(
    cgroup_dir: Option<i32>,
    required: bool,
    parents_own: P,
    guardian: impl FnOnce(bool) -> std::convert::Infallible,
) -> Result<(Pid, bool, P), Errno> {
    debug_assert!(
        one_thread_soon(),
        "the guardian is forked while another thread runs"
    );
    let forked = fork(cgroup_dir, required)?;
    match forked {
        Forked::Child { in_cgroup } => {
            drop(parents_own);
            // An uninhabited value: the guardian never returns.
            #[allow(unreachable_code)]
            match guardian(in_cgroup) {}
        }
        Forked::Parent { child, in_cgroup } => Ok((child, in_cgroup, parents_own)),
    }
}

/// The fork of `fork_guardian`.
fn fork(cgroup_dir: Option<i32>, required: bool) -> Result<Forked, Errno> {
    let args = cgroup_dir.map(|dir| CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: Signal::SIGCHLD as u64,
        cgroup: dir as u64,
        ..CloneArgs::default()
    });
    let clone3 = |args: &CloneArgs| {
        // SAFETY: clone3 without CLONE_VM is a fork, and so is clone with SIGCHLD alone (where
        // the kernel has no clone3, Linux 5.3): the child returns 0 here on a copy of this
        // process's memory, where `fork_guardian` runs the guardian, which never returns; no
        // other thread exists (the invariants at the top of this file), so no lock is held in
        // that copy. `args` is a `struct clone_args` of the size given, alive for the call.
        unsafe {
            match nix::libc::syscall(
                nix::libc::SYS_clone3,
                args as *const CloneArgs,
                std::mem::size_of::<CloneArgs>(),
            ) {
                -1 if args.flags == 0 && Errno::last() == Errno::ENOSYS => nix::libc::syscall(
                    nix::libc::SYS_clone,
                    nix::libc::SIGCHLD,
                    0usize,
                    0usize,
                    0usize,
                    0usize,
                ),
                pid => pid,
            }
        }
    };
    if let Some(args) = &args {
        match clone3(args) {
            0 => return Ok(Forked::Child { in_cgroup: true }),
            pid if pid > 0 => {
                return Ok(Forked::Parent {
                    child: Pid::from_raw(pid as i32),
                    in_cgroup: true,
                });
            }
            // No room for a process: a fork would fail the same way.
            _ if required || matches!(Errno::last(), Errno::EAGAIN | Errno::ENOMEM) => {
                return Err(Errno::last());
            }
            _ => {}
        }
    }
    // A plain fork.
    let pid = match clone3(&CloneArgs {
        exit_signal: Signal::SIGCHLD as u64,
        ..CloneArgs::default()
    }) {
        -1 => return Err(Errno::last()),
        pid => pid,
    };
    Ok(match pid {
        0 => Forked::Child { in_cgroup: false },
        pid => Forked::Parent {
            child: Pid::from_raw(pid as i32),
            in_cgroup: false,
        },
    })
}

/// Which side of `fork` this is, and whether the guardian was born in the cgroup.
enum Forked {
    Child { in_cgroup: bool },
    Parent { child: Pid, in_cgroup: bool },
}

/// Whether `program` could be run now, as execvp would find it: a path with a slash must be an
/// executable file; a bare name must be one in a directory of PATH. Err says why not.
pub fn runnable(program: &OsString) -> Result<(), String> {
    use nix::unistd::{AccessFlags, access};
    let name = crate::redact::mask_line(&program.to_string_lossy());
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

pub(super) fn cannot_run(program: &OsString, e: &io::Error) -> LaunchError {
    // A command line in one word (`'PGPASSWORD=x psql'`) is named with its secrets masked.
    let name = crate::redact::mask_line(&program.to_string_lossy());
    match e.kind() {
        io::ErrorKind::NotFound if name.contains(char::is_whitespace) => LaunchError::CannotRun {
            message: format!(
                "cannot run '{name}': command not found; rlock runs commands without a shell: use sh -c '{name}'"
            ),
            not_found: true,
        },
        io::ErrorKind::NotFound => LaunchError::CannotRun {
            message: format!("cannot run '{name}': command not found"),
            not_found: true,
        },
        _ => LaunchError::CannotRun {
            message: format!("cannot run '{name}': {e}"),
            not_found: false,
        },
    }
}

/// Whether this process has one thread (the check of `fork_guardian`, in debug builds). A thread
/// just joined (a Sentinel's or a fan-out's) has run its last instruction of rlock's, but the
/// kernel lists it in /proc/self/task until it has released it: a moment is allowed for that.
fn one_thread_soon() -> bool {
    let until = std::time::Instant::now() + std::time::Duration::from_millis(100);
    loop {
        let threads = std::fs::read_dir("/proc/self/task").map_or(1, |tasks| tasks.count());
        if threads <= 1 {
            return true;
        }
        if std::time::Instant::now() >= until {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}
