//! The guardian that only watches (the cgroup way, `own.rs`): it waits for rlock's farewell,
//! and should rlock die first, stops everything in the cgroup and removes it.
//!
//! **It shares rlock's memory.** It is started as `posix_spawn` starts a child, with
//! `CLONE_VM`, but runs on: nothing of rlock's memory is copied for it (the page tables), and
//! rlock writes its own pages afterwards without a copy-on-write fault for each (a fork cost
//! rlock about 0.1 ms, in its own time). The price is that it may touch nothing rlock may be
//! using meanwhile: not the allocator, not `errno` or anything else of the thread-local block
//! it shares with rlock's main thread, not the C library's system call wrappers (which write
//! `errno`, and check the thread's cancellation state). So it lives on a stack of its own, reads
//! only what `Plan` prepared before it started (never freed: it may outlive rlock, whose memory
//! then stays with it), and makes its few system calls itself (`sys`). Should rlock die, its
//! memory stays as it was: nothing of it is torn down while the guardian still uses it.

use std::ffi::{CString, c_void};
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::NAME;
use super::protocol::DONE;
use crate::supervise::contain::Cgroup;
use crate::supervise::spawn::{CLONE_VM, CloneArgs, clone3_on_stack};

/// What the guardian reads, prepared before it starts.
struct Plan {
    /// Its end of the request pipe.
    requests: i32,
    /// rlock's end, which the guardian's copy of the descriptor table closes.
    rlocks_end: i32,
    kill: CString,
    events: CString,
    dir: CString,
}

/// The guardian's stack (a few hundred bytes are used), a multiple of 16.
const STACK: usize = 136 * 1024;

/// Starts the guardian watching `cgroup`; returns its pid and the request pipe's writing end.
pub(super) fn start(cgroup: &Cgroup) -> Result<(Pid, OwnedFd), Errno> {
    let (req_read, req_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
    let path = |name: &str| {
        let p = cgroup.dir().join(name);
        CString::new(p.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)
    };
    let plan = Plan {
        requests: req_read.as_raw_fd(),
        rlocks_end: req_write.as_raw_fd(),
        kill: path("cgroup.kill")?,
        events: path("cgroup.events")?,
        dir: CString::new(cgroup.dir().as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?,
    };
    // Never freed: the guardian may read them after rlock is gone.
    let plan: &'static Plan = Box::leak(Box::new(plan));
    // Above malloc's mmap threshold (128 KiB), so fresh zero pages, of which the guardian
    // touches one or two; never freed (as `plan`).
    let stack: &'static mut [u8] = Box::leak(vec![0u8; STACK].into_boxed_slice());
    let args = CloneArgs {
        flags: CLONE_VM,
        exit_signal: Signal::SIGCHLD as u64,
        stack: stack.as_mut_ptr() as u64,
        stack_size: STACK as u64,
        ..CloneArgs::default()
    };
    let arg = (plan as *const Plan).cast::<c_void>();
    // SAFETY: the stack is the guardian's alone; `guard` touches only `plan`, its own stack and
    // its own system calls (see the top of this file).
    let pid = unsafe { clone3_on_stack(&args, guard, arg) }?;
    // The guardian has its own copy of the descriptor table (no CLONE_FILES), with this end.
    let _ = req_read.into_raw_fd();
    // SAFETY: `plan.requests` is `req_read`'s descriptor, open in this process and no longer
    // owned by anything here.
    unsafe { nix::libc::close(plan.requests) };
    Ok((pid, req_write))
}

/// The guardian's life: its own name and process group (every signal rlock acts on stays
/// blocked, as rlock's mask is inherited: only SIGKILL ends it); then a blocking read of the
/// request pipe. rlock's farewell ends it; end of file without one is rlock's death: then it
/// kills the cgroup, again every 100 ms for as long as anything is in it (`cgroup.kill` also
/// reaches what forks meanwhile, so one round is the rule), removes it and leaves.
extern "C" fn guard(plan: *const c_void) -> ! {
    // SAFETY: `start` passes its leaked `Plan`.
    let plan = unsafe { &*plan.cast::<Plan>() };
    sys(nr::CLOSE, plan.rlocks_end as usize, 0, 0);
    sys(nr::PRCTL, PR_SET_NAME, NAME.as_ptr() as usize, 0);
    sys(nr::SETPGID, 0, 0, 0);
    let mut msg = [0u8; 12];
    loop {
        let n = sys(
            nr::READ,
            plan.requests as usize,
            msg.as_mut_ptr() as usize,
            12,
        );
        match n {
            12 if i32::from_ne_bytes([msg[0], msg[1], msg[2], msg[3]]) == DONE => leave(),
            0 => break,
            n if n < 0 && n != -(Errno::EINTR as isize) => break,
            _ => {}
        }
    }
    'kill: loop {
        write_one(&plan.kill);
        for _ in 0..50 {
            if !populated(&plan.events) {
                break 'kill;
            }
            nap(2_000_000);
        }
    }
    // An rmdir can fail for a moment after the last process ended (EBUSY).
    for _ in 0..200 {
        if sys(nr::RMDIR, plan.dir.as_ptr() as usize, 0, 0) != -(Errno::EBUSY as isize) {
            break;
        }
        nap(5_000_000);
    }
    leave()
}

/// "1" written to the file at `path` (cgroup.kill).
fn write_one(path: &CString) {
    let fd = sys(
        nr::OPENAT,
        AT_FDCWD,
        path.as_ptr() as usize,
        O_WRONLY_CLOEXEC,
    );
    if fd >= 0 {
        sys(nr::WRITE, fd as usize, b"1".as_ptr() as usize, 1);
        sys(nr::CLOSE, fd as usize, 0, 0);
    }
}

/// Whether cgroup.events (at `path`) says `populated 1`; false when it cannot be read.
fn populated(path: &CString) -> bool {
    let fd = sys(
        nr::OPENAT,
        AT_FDCWD,
        path.as_ptr() as usize,
        O_RDONLY_CLOEXEC,
    );
    if fd < 0 {
        return false;
    }
    let mut buf = [0u8; 256];
    let n = sys(nr::READ, fd as usize, buf.as_mut_ptr() as usize, buf.len());
    sys(nr::CLOSE, fd as usize, 0, 0);
    let n = usize::try_from(n).unwrap_or(0).min(buf.len());
    buf[..n].windows(11).any(|w| w == b"populated 1")
}

/// Sleeps `ns` nanoseconds (under a second).
fn nap(ns: i64) {
    let ts = nix::libc::timespec {
        tv_sec: 0,
        tv_nsec: ns,
    };
    sys(nr::NANOSLEEP, &ts as *const _ as usize, 0, 0);
}

fn leave() -> ! {
    loop {
        sys(nr::EXIT_GROUP, 0, 0, 0);
    }
}

const PR_SET_NAME: usize = 15;
const AT_FDCWD: usize = -100isize as usize;
const O_WRONLY_CLOEXEC: usize = (nix::libc::O_WRONLY | nix::libc::O_CLOEXEC) as usize;
const O_RDONLY_CLOEXEC: usize = (nix::libc::O_RDONLY | nix::libc::O_CLOEXEC) as usize;

/// The system calls the guardian makes (x86-64 numbers; `own.rs` uses this way nowhere else).
mod nr {
    pub const READ: i64 = 0;
    pub const WRITE: i64 = 1;
    pub const CLOSE: i64 = 3;
    pub const NANOSLEEP: i64 = 35;
    pub const RMDIR: i64 = 84;
    pub const SETPGID: i64 = 109;
    pub const PRCTL: i64 = 157;
    pub const EXIT_GROUP: i64 = 231;
    pub const OPENAT: i64 = 257;
}

/// A system call made directly, without the C library (no `errno`, no cancellation check):
/// the result, or minus the error number.
#[cfg(target_arch = "x86_64")]
fn sys(nr: i64, a: usize, b: usize, c: usize) -> isize {
    let ret: isize;
    // SAFETY: the calls above pass pointers to memory that lives as long as the call (the
    // guardian's stack, the leaked plan, static strings); `syscall` clobbers rcx and r11.
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
