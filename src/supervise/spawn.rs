//! Starting the command, and the guardian that kills its group if rlock dies. Every `unsafe`
//! block of process creation is in this file.
//!
//! Two invariants make the blocks below sound, and `exec` keeps them:
//! - **No signal handlers are installed.** rlock blocks the signals it acts on and reads them
//!   from a signalfd (`crate::signals`); no code of rlock's ever runs in signal context, so a
//!   child sharing rlock's memory cannot be entered by a handler.
//! - **No other thread exists at spawn.** The command is spawned, and the guardian started,
//!   before the renewal thread starts (it starts when the first renewal is due), and Redlock's
//!   per-node threads are scoped and joined before. So no lock (malloc's, stdio's) can be held
//!   by another thread at the fork or in the vfork child.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::sched::CloneFlags;
use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, Signal, sigprocmask};
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

/// What the guardian is handed: where it hears from rlock, and what to kill.
struct Watch {
    read_end: RawFd,
    write_end: RawFd,
    pgid: nix::libc::pid_t,
}

/// The guardian's stack. It is never given back: the guardian may outlive rlock.
const GUARDIAN_STACK: usize = 64 * 1024;

impl Guardian {
    /// Starts a small process that waits on a pipe: a byte means "done, stand down"; end of
    /// file (rlock died) means SIGKILL to the group `pgid`. Every signal is blocked in it and it
    /// lives in a process group of its own, so nothing meant for rlock stops it.
    ///
    /// It shares rlock's memory (`clone` with CLONE_VM, as the command's vfork does, but
    /// without waiting for an exec that never comes): a `fork` would copy rlock's page tables,
    /// and every page rlock writes afterwards would have to be copied first, which cost more
    /// than everything else this process does between the grant and the command's start. (One
    /// limit: on Linux before 5.16, rlock dumping core would end every process sharing its
    /// memory, the guardian too; the command itself still gets its parent-death signal.)
    pub fn arm(pgid: Pid) -> Option<Guardian> {
        let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok()?;
        // SAFETY: a fresh private anonymous mapping, checked below; never unmapped.
        let stack = unsafe {
            nix::libc::mmap(
                std::ptr::null_mut(),
                GUARDIAN_STACK,
                nix::libc::PROT_READ | nix::libc::PROT_WRITE,
                nix::libc::MAP_PRIVATE | nix::libc::MAP_ANONYMOUS | nix::libc::MAP_STACK,
                -1,
                0,
            )
        };
        if stack == nix::libc::MAP_FAILED {
            return None;
        }
        // Leaked with the stack: the guardian reads it whenever it starts.
        let watch: &'static mut Watch = Box::leak(Box::new(Watch {
            read_end: read_end.as_raw_fd(),
            write_end: write_end.as_raw_fd(),
            pgid: pgid.as_raw(),
        }));
        // The guardian starts with every signal blocked (a clone inherits the caller's mask).
        let mut old = SigSet::empty();
        let _ = sigprocmask(
            SigmaskHow::SIG_SETMASK,
            Some(&SigSet::all()),
            Some(&mut old),
        );
        // SAFETY: `guard` runs on its own stack (the top of the mapping above, 16-byte
        // aligned) with a copy of rlock's descriptors and signal dispositions, in rlock's
        // memory. It touches only `watch` (leaked: it lives as long as the memory) and its own
        // frame, and makes only raw system calls through rustix, which on Linux never write
        // errno: nothing it does can be seen by rlock's threads, and no lock of rlock's can be
        // held against it (it takes none).
        let pid = unsafe {
            nix::libc::clone(
                guard,
                stack.cast::<u8>().add(GUARDIAN_STACK).cast(),
                nix::libc::CLONE_VM | Signal::SIGCHLD as i32,
                std::ptr::from_mut(watch).cast(),
            )
        };
        let _ = sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
        drop(read_end);
        if pid <= 0 {
            return None;
        }
        // Also from here, so that it leads its group whichever runs first.
        let _ = setpgid(Pid::from_raw(pid), Pid::from_raw(pid));
        Some(Guardian { goodbye: write_end })
    }

    /// The child is gone and the lock dealt with: the guardian leaves the group alone.
    pub fn stand_down(self) {
        let _ = nix::unistd::write(&self.goodbye, b"x");
    }
}

/// The guardian: a group of its own, rlock's end of the pipe closed (so that rlock's death is
/// end of file), then a wait for a byte or that end of file. Raw system calls only (see `arm`).
extern "C" fn guard(watch: *mut nix::libc::c_void) -> nix::libc::c_int {
    // SAFETY: `arm` passes a leaked `Watch`, never written after the clone.
    let watch = unsafe { &*watch.cast::<Watch>() };
    let _ = rustix::process::setpgid(None, None);
    // SAFETY: this process's copy of the write end, which nothing else here uses.
    unsafe { rustix::io::close(watch.write_end) };
    // SAFETY: this process's copy of the read end, open until it exits.
    let read_end = unsafe { BorrowedFd::borrow_raw(watch.read_end) };
    let mut byte = [0u8; 1];
    loop {
        match rustix::io::read(read_end, &mut byte) {
            Ok(0) => {
                if let Some(pgid) = rustix::process::Pid::from_raw(watch.pgid) {
                    let _ =
                        rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
                }
                return 0;
            }
            Err(rustix::io::Errno::INTR) => continue,
            _ => return 0,
        }
    }
}
