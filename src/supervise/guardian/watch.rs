//! The guardian that only watches (the cgroup way, `own.rs`): it waits for rlock's farewell,
//! and should rlock die first, stops everything in the cgroup and removes it.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::unistd::{Pid, setpgid};

use super::NAME;
use super::protocol::{DONE, decode};
use crate::supervise::contain::Cgroup;

/// The watching guardian's life: its own name and process group (every signal rlock acts on
/// stays blocked, as rlock's mask is inherited: only SIGKILL ends it); then a blocking read of
/// `requests`. rlock's farewell ends it; end of file without one is rlock's death: then it
/// kills the cgroup, again every 100 ms for as long as anything is in it (`cgroup.kill` also
/// reaches what forks meanwhile, so one round is the rule), removes it and leaves. Never returns.
pub(super) fn watch(cgroup: &Cgroup, requests: OwnedFd) -> ! {
    let _ = nix::sys::prctl::set_name(NAME);
    let _ = setpgid(Pid::from_raw(0), Pid::from_raw(0));
    loop {
        let mut buf = [0u8; 12];
        match nix::unistd::read(&requests, &mut buf) {
            Ok(12) if decode(&buf).0 == DONE => leave(),
            Ok(0) => break,
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => break,
        }
    }
    'kill: loop {
        cgroup.signal(Signal::SIGKILL);
        let round = Instant::now() + Duration::from_millis(100);
        while Instant::now() < round {
            if !cgroup.populated() {
                break 'kill;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    cgroup.remove();
    leave()
}

fn leave() -> ! {
    // SAFETY: leaving without running anything of rlock's (no atexit, no destructors).
    unsafe { nix::libc::_exit(0) }
}
