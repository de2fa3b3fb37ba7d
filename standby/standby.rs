//! The guardian's stand-by: what a cgroup's guardian runs for as long as rlock lives.
//!
//! Most guardians never act: rlock says farewell and they leave. The work a guardian may have
//! to do (kill everything in the cgroup, again until it is empty, and remove it;
//! `src/supervise/guardian/watch.rs`) needs rlock's own code, and rlock's executable costs
//! what any program linked with the C library costs to start: on a virtual machine, where
//! every `cpuid` instruction is a trip to the hypervisor, about as much as the whole
//! `rlock exec -- true` gains over its rivals. So the guardian starts as this program, a few
//! hundred bytes with no C library, built by `build.rs` and kept inside rlock's executable. It
//! names itself `rl-guardian` and reads the request pipe. rlock's farewell (`DONE`) ends it;
//! the pipe's end of file without it is rlock's death: it kills everything in the cgroup at
//! once (`cgroup.kill`), and becomes the guardian that finishes the work: it runs rlock's
//! executable, which it was given open (an update on disk cannot swap it), as `rl-guardian`
//! with the same environment.
//!
//! Its environment, set by rlock: `RLOCK_GUARDIAN_OF=FD:DIR` (the request pipe and the
//! cgroup, which rlock's executable reads when it takes over) and `RLOCK_GUARDIAN_EXE=FD`
//! (rlock's executable). x86-64 Linux only, as the way of starting it (`watch.rs`).

#![no_std]
#![no_main]

use core::arch::{asm, global_asm};

/// rlock's farewell, as `src/supervise/guardian/protocol.rs` encodes it: a 12-byte record
/// whose first four bytes are the tag.
const DONE: u32 = 8;
const NAME: &[u8] = b"rl-guardian\0";

const READ: usize = 0;
const WRITE: usize = 1;
const OPEN: usize = 2;
const CLOSE: usize = 3;
const NANOSLEEP: usize = 35;
const OPENAT: usize = 257;
const O_WRONLY: usize = 0o1;
const O_DIRECTORY: usize = 0o200000;
const O_CLOEXEC: usize = 0o2000000;
const EXECVE: usize = 59;
const PRCTL: usize = 157;
const EXIT_GROUP: usize = 231;
const PR_SET_NAME: usize = 15;
const EINTR: isize = 4;

// The kernel starts the program with the stack pointer at argc, followed by argv, a null,
// the environment and a null.
global_asm!(
    ".globl _start",
    "_start:",
    "mov rdi, rsp",
    "and rsp, -16",
    "call {standby}",
    "ud2",
    standby = sym standby,
);

/// The whole program.
///
/// # Safety
/// `sp` is the stack the kernel set up for a new program.
unsafe extern "C" fn standby(sp: *const usize) -> ! {
    // SAFETY: the layout of a new program's stack (see `_start`).
    let (argv, envp) = unsafe {
        let argc = *sp;
        let argv = sp.add(1).cast::<*const u8>();
        (argv, argv.add(argc + 1))
    };
    sys(PRCTL, PR_SET_NAME, NAME.as_ptr() as usize, 0);
    // SAFETY: `envp` is the environment's null-terminated list of C strings.
    let (requests, exe) = unsafe {
        (
            number_in(envp, b"RLOCK_GUARDIAN_OF="),
            number_in(envp, b"RLOCK_GUARDIAN_EXE="),
        )
    };
    let (Some(requests), Some(exe)) = (requests, exe) else {
        exit(2);
    };
    let mut msg = [0u8; 12];
    loop {
        let n = sys(READ, requests, msg.as_mut_ptr() as usize, msg.len());
        if n == 12 && u32::from_ne_bytes([msg[0], msg[1], msg[2], msg[3]]) == DONE {
            exit(0);
        }
        if n == 0 || (n < 0 && n != -EINTR) {
            break;
        }
    }
    // rlock died. First everything in the cgroup is killed at once (Linux 5.14's cgroup.kill),
    // needing nothing but two descriptors; then rlock's executable takes over, under the same
    // name and environment, to kill again until the cgroup is empty (or, before 5.14, to freeze
    // it and kill each process) and to remove it. The path through /proc names the process
    // after the descriptor's number, not `rlock`, until it names itself `rl-guardian`.
    // SAFETY: `envp` is the environment's null-terminated list of C strings.
    if let Some(dir) = unsafe { cgroup_in(envp) } {
        kill_cgroup(dir);
    }
    let mut path = *b"/proc/self/fd/\0\0\0\0\0\0\0\0\0\0\0";
    write_number(&mut path[14..25], exe);
    // SAFETY: `argv` has at least the program's name, which rlock set to `rl-guardian`.
    let args = [unsafe { *argv }, core::ptr::null()];
    // A lack of memory or processes passes: it tries again, after 10 ms, 20 ms, ... then every
    // second, for about a minute and a half.
    let mut pause_ms = 10;
    for _ in 0..100 {
        sys(
            EXECVE,
            path.as_ptr() as usize,
            args.as_ptr() as usize,
            envp as usize,
        );
        let pause = [pause_ms / 1000, (pause_ms % 1000) * 1_000_000];
        sys(NANOSLEEP, pause.as_ptr() as usize, 0, 0);
        pause_ms = (pause_ms * 2).min(1000);
    }
    exit(127);
}

/// Writes "1" to the `cgroup.kill` of the cgroup `dir` (a C string), if it has one.
fn kill_cgroup(dir: *const u8) {
    let dir = sys(OPEN, dir as usize, O_DIRECTORY | O_CLOEXEC, 0);
    if dir < 0 {
        return;
    }
    let kill = sys(
        OPENAT,
        dir as usize,
        c"cgroup.kill".as_ptr() as usize,
        O_WRONLY | O_CLOEXEC,
    );
    if kill >= 0 {
        sys(WRITE, kill as usize, b"1".as_ptr() as usize, 1);
        sys(CLOSE, kill as usize, 0, 0);
    }
    sys(CLOSE, dir as usize, 0, 0);
}

/// The cgroup named by `RLOCK_GUARDIAN_OF=FD:DIR`: DIR, a C string (the rest of the variable).
///
/// # Safety
/// `envp` is a null-terminated list of C strings.
unsafe fn cgroup_in(envp: *const *const u8) -> Option<*const u8> {
    // SAFETY: as the caller promises; the value is read no further than its NUL.
    unsafe {
        let mut s = value_in(envp, b"RLOCK_GUARDIAN_OF=")?;
        while *s != b':' {
            if *s == 0 {
                return None;
            }
            s = s.add(1);
        }
        Some(s.add(1))
    }
}

/// The value of the environment variable `name` (given with its `=`), a C string.
///
/// # Safety
/// `envp` is a null-terminated list of C strings.
unsafe fn value_in(mut envp: *const *const u8, name: &[u8]) -> Option<*const u8> {
    // SAFETY: as the caller promises, every pointer up to the null is a C string, read no
    // further than its terminating NUL (a name byte never matches it).
    unsafe {
        while !(*envp).is_null() {
            let mut s = *envp;
            let mut matched = 0;
            while matched < name.len() && *s == name[matched] {
                s = s.add(1);
                matched += 1;
            }
            if matched == name.len() {
                return Some(s);
            }
            envp = envp.add(1);
        }
    }
    None
}

/// The decimal number at the start of the value of the environment variable `name` (given
/// with its `=`), if there is one.
///
/// # Safety
/// `envp` is a null-terminated list of C strings.
unsafe fn number_in(envp: *const *const u8, name: &[u8]) -> Option<usize> {
    // SAFETY: as the caller promises; the digits are read no further than the value's NUL.
    unsafe {
        let mut s = value_in(envp, name)?;
        let mut n: usize = 0;
        let mut digits = 0;
        while (*s).is_ascii_digit() && digits < 9 {
            n = n * 10 + usize::from(*s - b'0');
            s = s.add(1);
            digits += 1;
        }
        (digits > 0).then_some(n)
    }
}

/// Writes `n` in decimal at the start of `out`, which the caller left zeroed after it.
fn write_number(out: &mut [u8], mut n: usize) {
    let mut digits = [0u8; 10];
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 || len == digits.len() {
            break;
        }
    }
    for (i, slot) in out.iter_mut().take(len).enumerate() {
        *slot = digits[len - 1 - i];
    }
}

fn exit(code: usize) -> ! {
    loop {
        sys(EXIT_GROUP, code, 0, 0);
    }
}

/// A system call: its result, or minus the error number.
fn sys(nr: usize, a: usize, b: usize, c: usize) -> isize {
    let ret: isize;
    // SAFETY: every call above passes pointers to memory that outlives it; `syscall`
    // clobbers rcx and r11.
    unsafe {
        asm!(
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

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    exit(127)
}
