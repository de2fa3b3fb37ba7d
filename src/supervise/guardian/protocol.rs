//! The guardian's messages: fixed 12-byte records (a tag and two numbers), well under
//! PIPE_BUF, so each is written and read whole. Events go up to rlock; requests come down: a
//! signal for everything the command started, the lease (its lost-signal and grace, and each
//! new deadline), the command's time limit, and rlock's farewell.

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
}

const STARTED: i32 = 1;
const NOT_STARTED: i32 = 2;
const STOPPED: i32 = 3;
const CONTINUED: i32 = 4;
const EXITED: i32 = 5;
const EMPTY: i32 = 6;
const SIGNALLED: i32 = 9;
/// A request: this signal to every process the command started (and the request's number,
/// which `Event::Signalled` gives back once it is done).
pub(super) const SIGNAL: i32 = 7;
/// rlock is done and alive: it reaps the guardian and removes the cgroup itself. The request
/// pipe's end of file without it means rlock died (its descriptors close before the kernel
/// gives its children another parent, so the guardian's parent cannot tell it in time).
pub(super) const DONE: i32 = 8;
/// The lease's lost-signal and its grace in milliseconds: sent once, before the first deadline.
pub(super) const LEASE: i32 = 10;
/// The lease's deadline (at the grant, and after every successful renewal), on the monotonic
/// milliseconds after `base`: the high and the low 32 bits.
pub(super) const DEADLINE: i32 = 11;
/// The command's time limit (`--timeout`), as `DEADLINE` says a moment: the lost-signal at it,
/// SIGKILL the lease's grace after it. Sent once, after `LEASE`.
pub(super) const TIME_LIMIT: i32 = 12;

/// The moment deadlines are counted from: taken before the guardian is forked, so that both
/// sides hold the same one (`Instant` has no number of its own to send).
static BASE: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// `BASE`, taken now if it was not yet.
pub(super) fn base() -> std::time::Instant {
    *BASE.get_or_init(std::time::Instant::now)
}

/// The deadline request for `at`.
pub(super) fn deadline(at: std::time::Instant) -> [u8; 12] {
    // Rounded down: a deadline told a little early is safe, a little late is not.
    moment(DEADLINE, at.saturating_duration_since(base()).as_millis())
}

/// The time limit request for `at`.
pub(super) fn time_limit(at: std::time::Instant) -> [u8; 12] {
    // Rounded up: the guardian stops the command at rlock's limit or after it, never before,
    // so that rlock, if it is running, sees its limit come before the command's end.
    let ms = at
        .saturating_duration_since(base())
        .as_nanos()
        .div_ceil(1_000_000);
    moment(TIME_LIMIT, ms)
}

/// A request for a moment `ms` after `base`: its high and low 32 bits.
fn moment(tag: i32, ms: u128) -> [u8; 12] {
    let ms = u64::try_from(ms).unwrap_or(u64::MAX);
    encode(tag, (ms >> 32) as i32, ms as u32 as i32)
}

/// The moment a `DEADLINE` or `TIME_LIMIT` request's two numbers say.
pub(super) fn moment_of(high: i32, low: i32) -> std::time::Instant {
    let ms = (u64::from(high as u32) << 32) | u64::from(low as u32);
    base() + std::time::Duration::from_millis(ms)
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The deadline is told rounded down (early is safe), the time limit rounded up (the
    /// guardian must not stop the command before rlock's own limit, or rlock would see the
    /// command die of its signal instead of a timeout, 124).
    #[test]
    fn a_deadline_is_told_early_and_a_time_limit_late_never_the_other_way() {
        let at = base() + Duration::from_micros(1_500);
        let (tag, high, low) = decode(&deadline(at));
        assert_eq!(tag, DEADLINE);
        assert_eq!(moment_of(high, low), base() + Duration::from_millis(1));
        let (tag, high, low) = decode(&time_limit(at));
        assert_eq!(tag, TIME_LIMIT);
        assert_eq!(moment_of(high, low), base() + Duration::from_millis(2));
        // A whole millisecond is told as it is, either way.
        let at = base() + Duration::from_millis(5_000_000_000);
        let (_, high, low) = decode(&time_limit(at));
        assert_eq!(moment_of(high, low), at, "past 32 bits of milliseconds");
        let (_, high, low) = decode(&deadline(at));
        assert_eq!(moment_of(high, low), at);
    }
}
