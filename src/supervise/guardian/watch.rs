//! The guardian that only watches (the cgroup way, `own.rs`): it waits for rlock's farewell,
//! and should rlock die first, stops everything in the cgroup and removes it.
//!
//! **A process of its own, started without a fork.** It must outlive whatever ends rlock: a
//! SIGKILL, and also the OOM killer or a core dump, which end every process that shares rlock's
//! memory. So it is rlock's own executable run anew (`/proc/self/exe`, as `rl-guardian`), with
//! nothing of rlock's memory. Getting there costs rlock one `clone3` with `CLONE_VM` and no
//! wait: a short-lived child on a stack of its own, in rlock's memory, that only points its
//! standard descriptors at /dev/null, keeps the request pipe open across the exec, and execs;
//! the exec and the new process's start-up run beside rlock, not in its time (a fork would copy
//! rlock's page tables, and then cost rlock a copy-on-write fault for every page it writes; it
//! was about a tenth of a millisecond). Until it has exec'd, the child may touch nothing rlock
//! may be using: not the allocator, not `errno` (the thread-local block it shares with rlock's
//! main thread), not the C library's system call wrappers. It reads only what `Plan` prepared
//! (never freed) and makes its few system calls itself (`sys`).
//!
//! Once running, the guardian (`watch`, called by `main` before anything else) reads the request
//! pipe: rlock's farewell (`DONE`) ends it; end of file without it is rlock's death: it kills the
//! cgroup (`cgroup.kill`, or a freeze and SIGKILL to each process on kernels before 5.14), again
//! until nothing is left in it, removes it and leaves.

use std::ffi::{CString, OsString, c_char, c_void};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::NAME;
use super::protocol::{DONE, decode};
use crate::supervise::contain::Cgroup;
use crate::supervise::spawn::{CLONE_VM, CloneArgs, clone3_on_stack};

/// The environment that makes rlock's executable the guardian of the cgroup it names (with the
/// program name `rl-guardian`): `FD:DIR`, the request pipe's descriptor and the cgroup.
const ASKED: &str = "RLOCK_GUARDIAN_OF";

/// Where the guardian's program is: rlock's own executable, as the kernel has it open (also
/// after it was replaced or removed on disk).
const SELF: &std::ffi::CStr = c"/proc/self/exe";

/// What the child reads before it execs, prepared before it starts.
struct Plan {
    /// Its end of the request pipe, kept open across the exec.
    requests: i32,
    /// The writing end of the pipe that says how the exec went: closed by a successful exec
    /// (close-on-exec), the exec's error number written to it otherwise.
    status: i32,
    argv: [*const c_char; 2],
    envp: [*const c_char; 2],
}

/// The child's stack (a few hundred bytes are used), a multiple of 16.
const STACK: usize = 136 * 1024;

/// Whether the guardian can be started this way: rlock's executable can be run again.
pub(super) fn can_start() -> bool {
    nix::unistd::access(SELF, nix::unistd::AccessFlags::X_OK).is_ok()
}

/// The guardian, once started: its pid, the request pipe's writing end, and the reading end of
/// the pipe that says whether its exec went well (`Started::exec_went`).
pub(super) struct Started {
    pub pid: Pid,
    pub requests: OwnedFd,
    pub status: OwnedFd,
}

/// Starts the guardian of `cgroup`.
pub(super) fn start(cgroup: &Cgroup) -> Result<Started, Errno> {
    let (req_read, req_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let (status_read, status_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let mut env = format!("{ASKED}={}:", req_read.as_raw_fd()).into_bytes();
    env.extend_from_slice(cgroup.dir().as_os_str().as_bytes());
    let env = CString::new(env).map_err(|_| Errno::EINVAL)?;
    // Never freed: the child may read them after this function has returned.
    let env: &'static std::ffi::CStr = Box::leak(env.into_boxed_c_str());
    let plan: &'static Plan = Box::leak(Box::new(Plan {
        requests: req_read.as_raw_fd(),
        status: status_write.as_raw_fd(),
        argv: [NAME.as_ptr(), std::ptr::null()],
        envp: [env.as_ptr(), std::ptr::null()],
    }));
    // Above malloc's mmap threshold (128 KiB), so fresh zero pages, of which the child touches
    // one or two; never freed (as `plan`).
    let stack: &'static mut [u8] = Box::leak(vec![0u8; STACK].into_boxed_slice());
    let args = CloneArgs {
        flags: CLONE_VM,
        exit_signal: Signal::SIGCHLD as u64,
        stack: stack.as_mut_ptr() as u64,
        stack_size: STACK as u64,
        ..CloneArgs::default()
    };
    let arg = (plan as *const Plan).cast::<c_void>();
    // SAFETY: the stack is the child's alone; `become_guardian` touches only `plan`, its own
    // stack and its own system calls (see the top of this file), and then execs.
    let pid = unsafe { clone3_on_stack(&args, become_guardian, arg) }?;
    // Out of rlock's process group at once (the child does it too, first thing): a signal to
    // rlock's job must not reach it in the moment before it runs.
    let _ = nix::unistd::setpgid(pid, pid);
    // The child has its own copy of the descriptor table (no CLONE_FILES), with these ends.
    drop(req_read);
    drop(status_write);
    Ok(Started {
        pid,
        requests: req_write,
        status: status_read,
    })
}

/// Waits (a second at most) for the guardian's exec: Ok once it went well (the status pipe's
/// end of file), else its error number (ETIMEDOUT when it did not come in time).
pub(super) fn exec_went(status: &OwnedFd) -> Result<(), Errno> {
    use nix::poll::{PollFd, PollFlags, PollTimeout};
    let until = Instant::now() + Duration::from_secs(1);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let left = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(status.as_fd(), PollFlags::POLLIN)];
        match nix::poll::poll(&mut fds, left) {
            Ok(0) => return Err(Errno::ETIMEDOUT),
            Ok(_) => break,
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    let mut errno = [0u8; 4];
    match nix::unistd::read(status, &mut errno) {
        Ok(0) => Ok(()),
        Ok(4) => Err(Errno::from_raw(i32::from_ne_bytes(errno))),
        Ok(_) => Err(Errno::EIO),
        Err(e) => Err(e),
    }
}

/// The child's whole life: a process group of its own (Ctrl-C at the terminal is not for it),
/// /dev/null for its standard descriptors (a `$(rlock exec ...)` ends when rlock and its
/// command have, not when the guardian has), the request pipe kept open, and the exec. Every
/// signal rlock acts on stays blocked, as rlock's mask is inherited across the exec: only
/// SIGKILL ends the guardian.
extern "C" fn become_guardian(plan: *const c_void) -> ! {
    // SAFETY: `start` passes its leaked `Plan`.
    let plan = unsafe { &*plan.cast::<Plan>() };
    sys(nr::SETPGID, 0, 0, 0);
    // Its name at once, not only after the exec (`killall rlock` meanwhile must miss it).
    sys(nr::PRCTL, PR_SET_NAME, NAME.as_ptr() as usize, 0);
    let null = sys(nr::OPEN, c"/dev/null".as_ptr() as usize, O_RDWR, 0);
    if null >= 0 {
        for fd in 0..3 {
            sys(nr::DUP2, null as usize, fd, 0);
        }
        if null > 2 {
            sys(nr::CLOSE, null as usize, 0, 0);
        }
    }
    sys(nr::FCNTL, plan.requests as usize, F_SETFD, 0);
    let failed = sys(
        nr::EXECVE,
        SELF.as_ptr() as usize,
        plan.argv.as_ptr() as usize,
        plan.envp.as_ptr() as usize,
    );
    let errno = i32::try_from(-failed).unwrap_or(Errno::EINVAL as i32);
    sys(
        nr::WRITE,
        plan.status as usize,
        &errno as *const i32 as usize,
        4,
    );
    loop {
        sys(nr::EXIT_GROUP, 127, 0, 0);
    }
}

/// When this process was started as a guardian (`start`), its life, which never returns; else
/// nothing. Called first thing in `main`.
pub fn watch_if_asked(args: &[OsString]) {
    if args.len() != 1 || args[0].as_bytes() != NAME.to_bytes() {
        return;
    }
    let Some(asked) = std::env::var_os(ASKED) else {
        return;
    };
    let asked = asked.as_bytes();
    let Some(colon) = asked.iter().position(|&b| b == b':') else {
        return;
    };
    let Some(fd) = std::str::from_utf8(&asked[..colon])
        .ok()
        .and_then(|fd| fd.parse::<i32>().ok())
    else {
        return;
    };
    let dir = PathBuf::from(std::ffi::OsStr::from_bytes(&asked[colon + 1..]));
    // SAFETY: PR_SET_NAME reads a NUL-terminated name of at most 16 bytes.
    unsafe { nix::libc::prctl(nix::libc::PR_SET_NAME, NAME.as_ptr()) };
    // SAFETY: `start` left this descriptor open for this process alone: the request pipe.
    let requests = unsafe { OwnedFd::from_raw_fd(fd) };
    let farewell = wait_for_farewell(&requests);
    if !farewell {
        stop_and_remove(dir);
    }
    std::process::exit(0);
}

/// Reads the request pipe until rlock's farewell (true) or its end of file (false: rlock died).
fn wait_for_farewell(requests: &OwnedFd) -> bool {
    let mut msg = [0u8; 12];
    loop {
        match nix::unistd::read(requests, &mut msg) {
            Ok(12) if decode(&msg).0 == DONE => return true,
            Ok(0) => return false,
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => return false,
        }
    }
}

/// Kills everything in the cgroup at `dir`, again every 100 ms for as long as anything is in it
/// (`cgroup.kill` also reaches what forks meanwhile, so one round is the rule), then removes it.
fn stop_and_remove(dir: PathBuf) {
    // Not opened for want of a descriptor or memory: tried again (a cgroup that is gone holds
    // nothing).
    let mut tries = 0;
    let cgroup = loop {
        match Cgroup::watched(dir.clone()) {
            Ok(cgroup) => break cgroup,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound || tries == 500 => return,
            Err(_) => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    };
    loop {
        cgroup.signal(Signal::SIGKILL);
        let until = Instant::now() + Duration::from_millis(100);
        // An unreadable cgroup.events counts as something left (killed again); a cgroup
        // removed meanwhile (by the next rlock beside it, once empty) as nothing.
        while cgroup.populated() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(2));
        }
        if !cgroup.populated() {
            break;
        }
    }
    cgroup.remove();
}

const O_RDWR: usize = (nix::libc::O_RDWR | nix::libc::O_CLOEXEC) as usize;
const PR_SET_NAME: usize = nix::libc::PR_SET_NAME as usize;
const F_SETFD: usize = nix::libc::F_SETFD as usize;

/// The system calls the child makes (x86-64 numbers; `own.rs` uses this way nowhere else).
mod nr {
    pub const OPEN: i64 = 2;
    pub const WRITE: i64 = 1;
    pub const CLOSE: i64 = 3;
    pub const DUP2: i64 = 33;
    pub const EXECVE: i64 = 59;
    pub const FCNTL: i64 = 72;
    pub const SETPGID: i64 = 109;
    pub const PRCTL: i64 = 157;
    pub const EXIT_GROUP: i64 = 231;
}

/// A system call made directly, without the C library (no `errno`, no cancellation check):
/// the result, or minus the error number.
#[cfg(target_arch = "x86_64")]
fn sys(nr: i64, a: usize, b: usize, c: usize) -> isize {
    let ret: isize;
    // SAFETY: the calls above pass pointers to memory that lives as long as the call (the
    // child's stack, the leaked plan, static strings); `syscall` clobbers rcx and r11.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") a,
            in("rsi") b,
            in("rdx") c,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

#[cfg(not(target_arch = "x86_64"))]
fn sys(_: i64, _: usize, _: usize, _: usize) -> isize {
    -(Errno::ENOSYS as isize)
}
