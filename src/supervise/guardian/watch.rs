//! The guardian that only watches (the cgroup way, `own.rs`): it waits for rlock's farewell,
//! and should rlock die first, stops everything in the cgroup and removes it.
//!
//! **A process of its own, started without a fork.** It must outlive whatever ends rlock: a
//! SIGKILL, and also the OOM killer or a core dump, which end every process that shares rlock's
//! memory. So it is a program run anew, with nothing of rlock's memory. Getting there costs
//! rlock one `clone3` with `CLONE_VM` and no wait: a short-lived child on a stack of its own, in
//! rlock's memory, that only points its standard descriptors at /dev/null, keeps the request
//! pipe (and rlock's executable) open across the exec, and execs; the exec and the new
//! process's start-up run beside rlock, not in its time (a fork would copy rlock's page tables,
//! and then cost rlock a copy-on-write fault for every page it writes; it was about a tenth of
//! a millisecond). Until it has exec'd, the child may touch nothing rlock may be using: not the
//! allocator, not `errno` (the thread-local block it shares with rlock's main thread), not the
//! C library's system call wrappers. It reads only what `Plan` prepared (never freed) and makes
//! its few system calls itself (`sys`).
//!
//! **The program is the stand-by, until rlock dies.** The child execs the stand-by
//! (`standby/standby.rs`, carried in rlock's executable and written to a memory file), which
//! starts in microseconds and only reads the request pipe: rlock's farewell ends it. Should the
//! stand-by not run here (no memory files, or none that may be run), the child execs rlock's own
//! executable instead (`/proc/self/exe`, as `rl-guardian`), which reads the pipe the same way.
//! Either way, end of file without the farewell is rlock's death, and rlock's executable as the
//! guardian (`watch`, called by `main` before anything else; the stand-by execs it) kills the
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

/// clone3's "and a pidfd for it" (Linux 5.2).
const CLONE_PIDFD: u64 = nix::libc::CLONE_PIDFD as u64;

/// The environment that makes rlock's executable the guardian of the cgroup it names (with the
/// program name `rl-guardian`): `FD:DIR`, the request pipe's descriptor and the cgroup.
const ASKED: &str = "RLOCK_GUARDIAN_OF";

/// The environment that gives the stand-by rlock's executable, open: `FD`.
const EXE: &str = "RLOCK_GUARDIAN_EXE";

/// Where the guardian's program is: rlock's own executable, as the kernel has it open (also
/// after it was replaced or removed on disk).
const SELF: &std::ffi::CStr = c"/proc/self/exe";

/// The stand-by (`standby/standby.rs`, built by `build.rs`); empty where it is not built.
const STANDBY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/standby"));

/// What the child reads before it execs, prepared before it starts.
struct Plan {
    /// Its end of the request pipe, kept open across the exec.
    requests: i32,
    /// rlock's executable, kept open across the exec for the stand-by (-1: none).
    exe: i32,
    /// The writing end of the pipe that says how the exec went: closed by a successful exec
    /// (close-on-exec), the exec's error number written to it otherwise.
    status: i32,
    /// The stand-by's program (empty: rlock's executable is run at once).
    standby: &'static [u8],
    argv: [*const c_char; 2],
    envp: [*const c_char; 3],
}

/// The child's stack (a few hundred bytes are used), a multiple of 16.
const STACK: usize = 136 * 1024;

/// Whether the guardian can be started this way: rlock's executable can be run again.
pub(super) fn can_start() -> bool {
    nix::unistd::access(SELF, nix::unistd::AccessFlags::X_OK).is_ok()
}

/// The guardian, once started: its pid and pidfd (none where clone3 gave none), the request
/// pipe's writing end, and the reading end of the pipe that says whether its exec went well
/// (`exec_went`).
pub(super) struct Started {
    pub pid: Pid,
    pub pidfd: Option<OwnedFd>,
    pub requests: OwnedFd,
    pub status: OwnedFd,
}

/// Starts the guardian of `cgroup`.
pub(super) fn start(cgroup: &Cgroup) -> Result<Started, Errno> {
    let (req_read, req_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let (status_read, status_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    // Without rlock's executable open, the stand-by could not take over: not started.
    let exe = match STANDBY.is_empty() {
        true => None,
        false => nix::fcntl::open(
            SELF,
            OFlag::O_PATH | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .ok(),
    };
    let mut asked = format!("{ASKED}={}:", req_read.as_raw_fd()).into_bytes();
    asked.extend_from_slice(cgroup.dir().as_os_str().as_bytes());
    let exe_fd = exe.as_ref().map_or(-1, AsRawFd::as_raw_fd);
    // Never freed: the child may read them after this function has returned.
    let leak = |var: Vec<u8>| -> Result<*const c_char, Errno> {
        let var = CString::new(var).map_err(|_| Errno::EINVAL)?;
        Ok(Box::leak(var.into_boxed_c_str()).as_ptr())
    };
    let envp = [
        leak(asked)?,
        leak(format!("{EXE}={exe_fd}").into_bytes())?,
        std::ptr::null(),
    ];
    let plan: &'static Plan = Box::leak(Box::new(Plan {
        requests: req_read.as_raw_fd(),
        exe: exe_fd,
        status: status_write.as_raw_fd(),
        standby: if exe.is_some() { STANDBY } else { &[] },
        argv: [NAME.as_ptr(), std::ptr::null()],
        envp,
    }));
    // Above malloc's mmap threshold (128 KiB), so fresh zero pages, of which the child touches
    // one or two; never freed (as `plan`).
    let stack: &'static mut [u8] = Box::leak(vec![0u8; STACK].into_boxed_slice());
    let mut pidfd: i32 = -1;
    let args = CloneArgs {
        flags: CLONE_VM | CLONE_PIDFD,
        pidfd: &raw mut pidfd as u64,
        exit_signal: Signal::SIGCHLD as u64,
        stack: stack.as_mut_ptr() as u64,
        stack_size: STACK as u64,
        ..CloneArgs::default()
    };
    let arg = (plan as *const Plan).cast::<c_void>();
    // SAFETY: the stack is the child's alone; `become_guardian` touches only `plan`, its own
    // stack and its own system calls (see the top of this file), and then execs.
    let pid = unsafe { clone3_on_stack(&args, become_guardian, arg) }?;
    // SAFETY: CLONE_PIDFD gave this new descriptor (close-on-exec) to this process alone; a
    // clone3 done by something that ignores the flag (a sandbox's) leaves -1.
    let pidfd = (pidfd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(pidfd) });
    // Out of rlock's process group at once (the child does it too, first thing): a signal to
    // rlock's job must not reach it in the moment before it runs.
    let _ = nix::unistd::setpgid(pid, pid);
    // The child has its own copy of the descriptor table (no CLONE_FILES), with these ends.
    drop(req_read);
    drop(status_write);
    drop(exe);
    Ok(Started {
        pid,
        pidfd,
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
/// command have, not when the guardian has), the request pipe (and rlock's executable) kept
/// open, and the exec: of the stand-by, from a memory file, or else of rlock's executable.
/// Every signal rlock acts on stays blocked, as rlock's mask is inherited across the exec: only
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
    if !plan.standby.is_empty() {
        sys(nr::FCNTL, plan.exe as usize, F_SETFD, 0);
        run_standby(plan);
    }
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

/// Execs the stand-by from a memory file; returns if it cannot (memory files refused, or not
/// to be run: `vm.memfd_noexec`, a security policy).
fn run_standby(plan: &Plan) {
    let name = NAME.as_ptr() as usize;
    let mut file = sys(nr::MEMFD_CREATE, name, MFD_CLOEXEC | MFD_EXEC, 0);
    if file == -(Errno::EINVAL as isize) {
        // A kernel before 6.3, which runs any memory file.
        file = sys(nr::MEMFD_CREATE, name, MFD_CLOEXEC, 0);
    }
    if file < 0 {
        return;
    }
    let mut left = plan.standby;
    while !left.is_empty() {
        let n = sys(nr::WRITE, file as usize, left.as_ptr() as usize, left.len());
        match usize::try_from(n) {
            Ok(n) if n > 0 => left = left.get(n..).unwrap_or_default(),
            _ if n == -(Errno::EINTR as isize) => {}
            _ => return,
        }
    }
    sys5(
        nr::EXECVEAT,
        [
            file as usize,
            c"".as_ptr() as usize,
            plan.argv.as_ptr() as usize,
            plan.envp.as_ptr() as usize,
            AT_EMPTY_PATH,
        ],
    );
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
const MFD_CLOEXEC: usize = nix::libc::MFD_CLOEXEC as usize;
/// memfd_create's "may be run" (Linux 6.3).
const MFD_EXEC: usize = nix::libc::MFD_EXEC as usize;
const AT_EMPTY_PATH: usize = nix::libc::AT_EMPTY_PATH as usize;

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
    pub const MEMFD_CREATE: i64 = 319;
    pub const EXECVEAT: i64 = 322;
}

/// A system call made directly, without the C library (no `errno`, no cancellation check):
/// the result, or minus the error number.
fn sys(nr: i64, a: usize, b: usize, c: usize) -> isize {
    sys5(nr, [a, b, c, 0, 0])
}

/// `sys` with up to five arguments.
#[cfg(target_arch = "x86_64")]
fn sys5(nr: i64, args: [usize; 5]) -> isize {
    let ret: isize;
    // SAFETY: the calls above pass pointers to memory that lives as long as the call (the
    // child's stack, the leaked plan, static strings); `syscall` clobbers rcx and r11.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") nr as isize => ret,
            in("rdi") args[0],
            in("rsi") args[1],
            in("rdx") args[2],
            in("r10") args[3],
            in("r8") args[4],
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

#[cfg(not(target_arch = "x86_64"))]
fn sys5(_: i64, _: [usize; 5]) -> isize {
    -(Errno::ENOSYS as isize)
}

#[cfg(test)]
mod tests {
    use super::super::protocol::DONE;

    /// The stand-by reads rlock's farewell as protocol.rs writes it.
    #[test]
    fn the_stand_by_knows_the_farewell() {
        let standby = include_str!("../../../standby/standby.rs");
        assert!(
            standby.contains(&format!("const DONE: u32 = {DONE};")),
            "standby/standby.rs's DONE is not protocol.rs's ({DONE})"
        );
    }
}
