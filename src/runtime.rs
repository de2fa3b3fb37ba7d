//! What rlock keeps of Rust's own start-up, which it skips (`#![no_main]` in `main.rs`).
//!
//! Before `main`, Rust's runtime reads `/proc/self/maps` to find the main thread's stack guard,
//! sets up an alternate signal stack and a SIGSEGV handler to report stack overflows, checks the
//! three standard descriptors, and ignores SIGPIPE; after it, it flushes stdout. Counted, that
//! was as much as a tenth of an uncontended `exec -- true`. rlock does the parts it needs here:
//! the descriptors, SIGPIPE and the flush. (A stack overflow, which rlock's bounded recursion
//! does not risk, would end it by SIGSEGV without Rust's one-line message.)

use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};

/// The standard descriptors (bit 0 stdin, 1 stdout, 2 stderr) that were closed when rlock
/// started, and that it opened on /dev/null.
static CLOSED: AtomicU8 = AtomicU8::new(0);

/// True when descriptor `fd` (0, 1 or 2) was closed when rlock started (`rlock acquire >&-`):
/// what is written to it now goes to /dev/null.
pub fn was_closed(fd: u8) -> bool {
    fd < 8 && CLOSED.load(Ordering::Relaxed) & (1 << fd) != 0
}

/// Run first thing in `main`.
pub fn start() {
    open_closed_standard_descriptors();
    // A reader that went away (`rlock inspect | head`) is an error to handle (EPIPE), not death.
    // SAFETY: SIG_IGN is no handler: nothing runs in signal context.
    unsafe {
        let _ = nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGPIPE,
            nix::sys::signal::SigHandler::SigIgn,
        );
    }
}

/// A closed standard descriptor is opened on /dev/null, so that the first socket or pipe rlock
/// opens does not become its stdout (or stdin, or stderr); as Rust's start-up does, rlock aborts
/// when it cannot be.
fn open_closed_standard_descriptors() {
    use nix::libc;
    let mut fds = [0, 1, 2].map(|fd| libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    });
    // SAFETY: `fds` is an array of three initialised pollfd, and a zero timeout returns at once.
    let polled = unsafe { libc::poll(fds.as_mut_ptr(), 3, 0) } >= 0;
    for pfd in fds {
        let closed = if polled {
            pfd.revents & libc::POLLNVAL != 0
        } else {
            // poll can fail (no memory, or a descriptor limit below 3): ask each one.
            // SAFETY: F_GETFD reads a descriptor's flags and changes nothing.
            let flags = unsafe { libc::fcntl(pfd.fd, libc::F_GETFD) };
            flags == -1 && nix::errno::Errno::last() == nix::errno::Errno::EBADF
        };
        if closed {
            CLOSED.fetch_or(1 << pfd.fd, Ordering::Relaxed);
            // The lowest free descriptor: the closed one, as they are looked at in order.
            match nix::fcntl::open(
                "/dev/null",
                nix::fcntl::OFlag::O_RDWR,
                nix::sys::stat::Mode::empty(),
            ) {
                Ok(fd) => std::mem::forget::<std::os::fd::OwnedFd>(fd),
                Err(_) => std::process::abort(),
            }
        }
    }
}

/// Run last: what is left in stdout's buffer goes out.
pub fn finish() {
    let _ = std::io::stdout().flush();
}
