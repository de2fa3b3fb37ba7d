//! The guardian's messages: fixed 12-byte records (a tag and two numbers), well under
//! PIPE_BUF, so each is written and read whole. Events go up to rlock; requests come down: a
//! signal for everything the command started, the lost-signal, the lease's moments (at the
//! grant and after each renewal) and the time limit's, as exact instants, and rlock's farewell.
//! A pipe only rlock and the guardian hold, in two processes that are not dumpable: no other
//! process of the user can open it through /proc (root can; rlock believes no message of the
//! guardian's "nothing left" without looking itself, `confirm.rs`).

use std::os::fd::OwnedFd;

use nix::errno::Errno;
use nix::sys::signal::Signal;
use nix::unistd::Pid;

/// What the guardian tells rlock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// The command runs, with this pid (its process group's id too); in the cgroup or not.
    Started {
        pid: Pid,
        in_cgroup: bool,
    },
    /// The command could not be exec'd: this errno.
    NotStarted(Errno),
    /// The command stopped, by this signal.
    Stopped(Signal),
    Continued,
    /// The command ended: its status as a shell reports it, and the signal that killed it.
    Exited(u8, Option<Signal>),
    /// The command has ended and nothing it started runs any more.
    Empty,
    /// rlock's request number N to signal everything the command started is done: every
    /// process got the signal (for SIGSTOP: every process has stopped, or the guardian gave up
    /// waiting), or the guardian is killing everything already.
    Signalled(i32),
    /// The guardian sent this signal (the lost-signal, or SIGKILL) to everything below on its
    /// own clock: at the lease's moment (`limit` false) or the time limit's. rlock may have taken
    /// a renewal that came too late to reach the guardian: its own moments then say nothing
    /// happened, and without this word the command's death would pass for its own.
    OwnClock {
        signal: Signal,
        limit: bool,
    },
}

const STARTED: i32 = 1;
const NOT_STARTED: i32 = 2;
const STOPPED: i32 = 3;
const CONTINUED: i32 = 4;
const EXITED: i32 = 5;
const EMPTY: i32 = 6;
const SIGNALLED: i32 = 9;
const OWN_CLOCK: i32 = 15;
/// A request: this signal to every process the command started (and the request's number,
/// which `Event::Signalled` gives back once it is done).
pub(super) const SIGNAL: i32 = 7;
/// rlock is done and alive: it reaps the guardian and removes the cgroup itself. The request
/// pipe's end of file without it means rlock died (its descriptors close before the kernel
/// gives its children another parent, so the guardian's parent cannot tell it in time).
pub(super) const DONE: i32 = 8;
/// The lost-signal, which the lease's moments and the time limit's send: once, at the start.
pub(super) const LOST_SIGNAL: i32 = 10;
/// The lease's moments (at the grant, and after every successful renewal), as
/// `Lease::timeline` made them: when the lost-signal goes, and when SIGKILL does. Sent together,
/// in one write.
pub(super) const SIGNAL_AT: i32 = 11;
pub(super) const KILL_AT: i32 = 13;
/// The command's time limit (`--timeout`), as `Lease::limit` made it: the lost-signal at it,
/// SIGKILL at its kill moment. Sent once, together.
pub(super) const LIMIT_AT: i32 = 12;
/// The command may start: the first request, followed by this many bytes of the variables to
/// add to its environment (`NAME=VALUE`, each ended by a NUL byte).
pub(super) const START: i32 = 15;
pub(super) const LIMIT_KILL_AT: i32 = 14;

/// The moment moments are counted from: taken before the guardian is forked, so that both
/// sides hold the same one (`Instant` has no number of its own to send).
static BASE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// `BASE`, taken now if it was not yet.
pub(super) fn base() -> std::time::Instant {
    *BASE.get_or_init(std::time::Instant::now)
}

/// The request `tag` for the moment `at`: its signed nanoseconds from `base`, high and low 32
/// bits. Nanoseconds are what `Instant` holds, so the guardian gets the very instant rlock
/// counts down to, with no rounding either way (and a moment before `base`, a grant that came
/// late, stays before it).
pub(super) fn moment(tag: i32, at: std::time::Instant) -> [u8; 12] {
    let base = base();
    let ns = match at.checked_duration_since(base) {
        Some(after) => i64::try_from(after.as_nanos()).unwrap_or(i64::MAX),
        None => -i64::try_from((base - at).as_nanos()).unwrap_or(i64::MAX),
    };
    encode(tag, (ns >> 32) as i32, ns as u32 as i32)
}

/// The moment a `moment` request's two numbers say.
pub(super) fn moment_of(high: i32, low: i32) -> std::time::Instant {
    let ns = (i64::from(high) << 32) | i64::from(low as u32);
    let base = base();
    let off = std::time::Duration::from_nanos(ns.unsigned_abs());
    match ns >= 0 {
        true => base.checked_add(off).unwrap_or(base),
        false => base.checked_sub(off).unwrap_or(base),
    }
}

pub(super) fn encode(tag: i32, a: i32, b: i32) -> [u8; 12] {
    let mut out = [0u8; 12];
    out[..4].copy_from_slice(&tag.to_ne_bytes());
    out[4..8].copy_from_slice(&a.to_ne_bytes());
    out[8..].copy_from_slice(&b.to_ne_bytes());
    out
}

pub(super) fn decode(msg: &[u8]) -> (i32, i32, i32) {
    let word = |i: usize| i32::from_ne_bytes(msg[i..i + 4].try_into().expect("4 bytes"));
    (word(0), word(4), word(8))
}

impl Event {
    pub(super) fn encode(self) -> [u8; 12] {
        match self {
            Event::Started { pid, in_cgroup } => encode(STARTED, pid.as_raw(), in_cgroup as i32),
            Event::NotStarted(errno) => encode(NOT_STARTED, errno as i32, 0),
            Event::Stopped(sig) => encode(STOPPED, sig as i32, 0),
            Event::Continued => encode(CONTINUED, 0, 0),
            Event::Exited(code, sig) => encode(EXITED, code as i32, sig.map_or(0, |s| s as i32)),
            Event::Empty => encode(EMPTY, 0, 0),
            Event::Signalled(n) => encode(SIGNALLED, n, 0),
            Event::OwnClock { signal, limit } => encode(OWN_CLOCK, signal as i32, limit as i32),
        }
    }

    pub(super) fn decode(msg: &[u8]) -> Option<Event> {
        let (tag, a, b) = decode(msg);
        let signal = |n: i32| Signal::try_from(n).ok();
        Some(match tag {
            STARTED => Event::Started {
                pid: Pid::from_raw(a),
                in_cgroup: b != 0,
            },
            NOT_STARTED => Event::NotStarted(Errno::from_raw(a)),
            STOPPED => Event::Stopped(signal(a)?),
            CONTINUED => Event::Continued,
            EXITED => Event::Exited(a as u8, signal(b)),
            EMPTY => Event::Empty,
            SIGNALLED => Event::Signalled(a),
            OWN_CLOCK => Event::OwnClock {
                signal: signal(a)?,
                limit: b != 0,
            },
            _ => return None,
        })
    }
}

/// Events up to rlock, in one write (a few of them stay far below PIPE_BUF, so it is whole).
pub(super) fn tell(events: &OwnedFd, news: &[Event]) {
    if news.is_empty() {
        return;
    }
    let bytes: Vec<u8> = news.iter().flat_map(|e| e.encode()).collect();
    let _ = nix::unistd::write(events, &bytes);
}

/// rlock's first word to a guardian standing by.
pub(super) enum Word {
    /// Start the command, with these variables added to its environment; `look_again`: look it
    /// up on PATH again first (the lookup was made before a wait).
    Start {
        env: Vec<(String, String)>,
        look_again: bool,
    },
    /// Anything else: leave (rlock removes the cgroup).
    Dismissed,
    /// The pipe closed first: rlock is gone (killed while it waited for the lock).
    Gone,
}

/// The first word on `requests`, a blocking pipe.
pub(super) fn told_to_start(requests: &OwnedFd) -> Word {
    let mut head = [0u8; 12];
    if read_all(requests, &mut head).is_none() {
        return Word::Gone;
    }
    let (tag, len, again) = decode(&head);
    if tag != START {
        return Word::Dismissed;
    }
    let mut blob = vec![0u8; usize::try_from(len).unwrap_or(0)];
    if read_all(requests, &mut blob).is_none() {
        return Word::Gone;
    }
    let env: Option<Vec<(String, String)>> = blob
        .split(|&b| b == 0)
        .filter(|v| !v.is_empty())
        .map(|v| {
            let v = std::str::from_utf8(v).ok()?;
            let (name, value) = v.split_once('=')?;
            Some((name.to_string(), value.to_string()))
        })
        .collect();
    env.map_or(Word::Dismissed, |env| Word::Start {
        env,
        look_again: again != 0,
    })
}

/// Fills `buf` from `fd`, a blocking pipe; None at its end.
fn read_all(fd: &OwnedFd, buf: &mut [u8]) -> Option<()> {
    let mut done = 0;
    while done < buf.len() {
        match nix::unistd::read(fd, &mut buf[done..]) {
            Ok(0) => return None,
            Ok(n) => done += n,
            Err(Errno::EINTR) => {}
            Err(_) => return None,
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The guardian's word that it stopped the command on its own clock comes up whole: which
    /// signal, and whether the lease's moment or the time limit's.
    #[test]
    fn a_stop_on_the_guardians_own_clock_is_told_whole() {
        for (signal, limit) in [(Signal::SIGTERM, false), (Signal::SIGKILL, true)] {
            let told = Event::OwnClock { signal, limit };
            assert_eq!(Event::decode(&told.encode()), Some(told));
        }
    }

    /// A moment reaches the guardian as the very instant rlock holds: no rounding, before
    /// `base` as after it, past 32 bits of milliseconds.
    #[test]
    fn a_moment_is_told_exactly() {
        let base = base();
        for at in [
            base,
            base + Duration::from_nanos(1_500_001),
            base + Duration::from_millis(5_000_000_000),
            base.checked_sub(Duration::from_nanos(999)).unwrap_or(base),
        ] {
            let (tag, high, low) = decode(&moment(KILL_AT, at));
            assert_eq!(tag, KILL_AT);
            assert_eq!(moment_of(high, low), at);
        }
    }
}
