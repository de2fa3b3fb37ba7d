//! The exit-code table of the contract, and the one user-facing error type (`Failure`) that
//! maps onto it, in one place. It sits at the top: the layers below return their own errors
//! (`backend::SetupError`, `lock::Error`, `supervise::LaunchError`), which reach `Failure`
//! only through `From`, and never know of it.

mod lines;
mod redis;

use std::process::ExitCode;
use std::time::Duration;

use nix::sys::signal::Signal;

pub use lines::LostHow;

use crate::backend::{Class, Fault, NodeError, SetupError};
use crate::lock::{About, Holder, Interruption, Refused, Seen, Waited};
use crate::supervise::LaunchError;

/// Exit codes that rlock itself chooses (a child's own status passes through unchanged).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Ok = 0,
    NotHeld = 1,
    Usage = 2,
    NotALock = 65,
    Unavailable = 69,
    Internal = 70,
    Busy = 75,
    Lost = 76,
    NotPermitted = 77,
    Config = 78,
    /// A newer run displaced this one (`--newest`, `--cancel-running`).
    Superseded = 79,
    TimedOut = 124,
    CannotRun = 126,
    NotFound = 127,
}

/// How rlock ends: with an exit code, or by dying of a signal as its command did (Ctrl-C), so
/// that the shell that ran rlock stops its loop or script as it does when a command of its own
/// is interrupted. `main` carries it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(u8),
    Signal(Signal),
}

impl From<Code> for ExitCode {
    fn from(code: Code) -> Self {
        ExitCode::from(code as u8)
    }
}

/// An expected way for rlock to fail: the one user-facing error type, made by the command layer
/// or from the errors of the layers below. The message is the whole line printed after
/// `rlock: `. (No field is a `source`: the line is the message alone, never a chain.)
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    #[error("{0}")]
    Usage(String),
    /// A Redis endpoint failed a request about `about`: the fault, decided once where the
    /// error came in (backend/error.rs), and the node it came from. The exit code follows the
    /// fault (`fault_code`); the words are backend/error.rs's.
    #[error("{}", redis::line(.error, .about))]
    Redis { about: About, error: NodeError },
    /// Too few of a Redlock's masters answered a request about `about`, for these reasons.
    #[error(
        "no quorum for {about}: {} of {nodes} Redis nodes unavailable ({}); a majority must answer",
        .errors.len(),
        .errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    NoQuorum {
        about: About,
        nodes: usize,
        errors: Vec<NodeError>,
    },
    /// Redlock: the command ended and too few masters answered its release to tell whether a
    /// majority released (what they said): the lock may stay until its lease ends.
    #[error(
        "{0}; the lock was not released on a majority of masters: where it was not, it stays until its lease ends"
    )]
    Unreleased(Box<Failure>),
    /// The command ended and Redis refused its release (the ACL): the lock may stay held until
    /// its lease ends, at most `ttl` after its last renewal.
    #[error("{}", lines::release_refused(.error, *.ttl))]
    ReleaseRefused { error: Box<Failure>, ttl: Duration },
    /// A wait for the lock ended while Redis was out: what the last try said, how long the
    /// wait lasted and for how long of it Redis had been out.
    #[error("{}", lines::outage(.last, *.waited, *.down_for))]
    Outage {
        last: Box<Failure>,
        waited: Duration,
        down_for: Duration,
    },
    /// A run that never reached Redis stopped trying to, after `tried_for` (--connect-timeout):
    /// the last try's failure names the address.
    #[error("{}", lines::never_reached(.last, *.tried_for))]
    NeverReached {
        last: Box<Failure>,
        tried_for: Duration,
    },
    /// Not acquired in time: what the last try found. It exits 75, or what `-E` says: the
    /// code is chosen at the top (`exit_code`), where `-E` is known.
    #[error("{}", lines::busy(.about, .seen, *.waited))]
    Busy {
        about: About,
        seen: Seen,
        waited: Waited,
    },
    /// The lock was lost while the command ran, or before it started.
    #[error("{}", lines::lost(.about, .how))]
    Lost { about: About, how: LostHow },
    /// The command ran until its time limit (`--timeout`) and was stopped; the lock was given
    /// back. It exits 124, as `timeout` does.
    #[error("{}", lines::timed_out(.about, *.limit, *.signal))]
    TimedOut {
        about: About,
        limit: Duration,
        signal: Signal,
    },
    /// A newer run that asked for `--newest` too displaced this waiter, or (`running`,
    /// `--cancel-running`) stopped this run's command, whose `signal` it got; the lock was
    /// handed on. It exits 79.
    #[error("{}", lines::superseded(.about, .by, *.running))]
    Superseded {
        about: About,
        by: Box<Holder>,
        running: Option<Signal>,
    },
    /// The token does not own the lock. (Credentials Redis refused are a `Redis` fault.)
    #[error("{}", lines::refused(.about, *.refused))]
    NotPermitted { about: About, refused: Refused },
    /// Malformed URL, unreadable TLS or password file.
    #[error("{0}")]
    Config(String),
    /// Interrupted by a signal before the command ran: exits 128+N.
    #[error("{}", lines::interrupted(.about, *.signal, *.when))]
    Interrupted {
        about: About,
        signal: Signal,
        when: Interruption,
    },
    /// Something went wrong in rlock itself (70).
    #[error("{0}")]
    Internal(String),
    /// The command could not be run (126) or was not found (127).
    #[error("{message}")]
    CannotRun { message: String, code: Code },
}

impl From<SetupError> for Failure {
    fn from(e: SetupError) -> Self {
        match e {
            SetupError::Usage(line) => Failure::Usage(line),
            SetupError::Config(line) => Failure::Config(line),
        }
    }
}

/// A lock's failure, field for field: the lock layer says what happened, the words and the
/// code are decided here.
impl From<crate::lock::Error> for Failure {
    fn from(e: crate::lock::Error) -> Self {
        use crate::lock::Error;
        match e {
            Error::Usage(line) => Failure::Usage(line),
            Error::Config(line) => Failure::Config(line),
            Error::Redis { about, error } => Failure::Redis { about, error },
            Error::NoQuorum {
                about,
                nodes,
                errors,
            } => Failure::NoQuorum {
                about,
                nodes,
                errors,
            },
            Error::Outage {
                last,
                waited,
                down_for,
            } => Failure::Outage {
                last: Box::new(Failure::from(*last)),
                waited,
                down_for,
            },
            Error::NeverReached { last, tried_for } => Failure::NeverReached {
                last: Box::new(Failure::from(*last)),
                tried_for,
            },
            Error::Busy {
                about,
                seen,
                waited,
            } => Failure::Busy {
                about,
                seen,
                waited,
            },
            Error::NotPermitted { about, refused } => Failure::NotPermitted { about, refused },
            Error::Superseded { about, by } => Failure::Superseded {
                about,
                by,
                running: None,
            },
            Error::Interrupted {
                about,
                signal,
                when,
            } => Failure::Interrupted {
                about,
                signal,
                when,
            },
        }
    }
}

/// A command that was not started: 126 or 127 when it cannot run, else the row of its kind.
impl From<LaunchError> for Failure {
    fn from(e: LaunchError) -> Self {
        match e {
            LaunchError::Usage(line) => Failure::Usage(line),
            LaunchError::Internal(line) => Failure::Internal(line),
            LaunchError::Config(line) => Failure::Config(line),
            LaunchError::CannotRun { message, not_found } => Failure::CannotRun {
                message,
                code: if not_found {
                    Code::NotFound
                } else {
                    Code::CannotRun
                },
            },
        }
    }
}

impl Failure {
    /// A Redis endpoint's `error` on a request about `about` (a lock, or a listing).
    pub fn redis(about: impl Into<About>, error: NodeError) -> Self {
        Failure::Redis {
            about: about.into(),
            error,
        }
    }

    /// The code rlock exits with: the row of the table, with `busy` (75, or `-E`'s code) for a
    /// busy lock, 128+N for an interruption.
    pub fn exit_code(&self, busy: u8) -> u8 {
        match (self, self.code()) {
            (Failure::Busy { .. }, _) => busy,
            (Failure::Interrupted { signal, .. }, _) => 128u8.saturating_add(*signal as u8),
            (_, Some(code)) => code as u8,
            (_, None) => Code::Internal as u8,
        }
    }

    /// The row of the contract's table this failure falls in (Busy even when `-E` changes its
    /// code); None for an interruption, which exits 128+N.
    pub fn code(&self) -> Option<Code> {
        Some(match self {
            Failure::Usage(_) => Code::Usage,
            Failure::Redis { error, .. } => fault_code(error.kind),
            Failure::NoQuorum { .. } => Code::Unavailable,
            Failure::Outage { .. } => Code::Unavailable,
            Failure::Unreleased(_) => Code::Unavailable,
            Failure::ReleaseRefused { .. } => Code::NotPermitted,
            Failure::NeverReached { .. } => Code::Unavailable,
            Failure::Busy { .. } => Code::Busy,
            Failure::Lost { .. } => Code::Lost,
            Failure::TimedOut { .. } => Code::TimedOut,
            Failure::Superseded { .. } => Code::Superseded,
            Failure::NotPermitted { .. } => Code::NotPermitted,
            Failure::Config(_) => Code::Config,
            Failure::Interrupted { .. } => return None,
            Failure::CannotRun { code, .. } => *code,
            Failure::Internal(_) => Code::Internal,
        })
    }
}

/// The exit code of each fault of a Redis endpoint, by its class (every fault is given one in
/// backend/error.rs, where it is decided).
fn fault_code(kind: Fault) -> Code {
    match kind.class() {
        Class::Unavailable => Code::Unavailable,
        Class::Refused => Code::NotPermitted,
        Class::NotALock => Code::NotALock,
        Class::Config => Code::Config,
    }
}

/// Maps any error to its exit code: typed failures by the table (with `busy`, 75 or `-E`'s code,
/// for a busy lock), an I/O error of rlock's own (a write to stdout or stderr that failed, a
/// file it could not write) by its row, anything else is internal (70).
pub fn code_of(err: &anyhow::Error, busy: u8) -> u8 {
    if let Some(f) = err.downcast_ref::<Failure>() {
        return f.exit_code(busy);
    }
    match err.chain().find_map(|e| e.downcast_ref::<std::io::Error>()) {
        Some(io) if io.kind() == std::io::ErrorKind::BrokenPipe => Code::Ok as u8,
        // The table has no row of its own for a failed write or read of rlock's: it is an
        // internal error (70), named here so that it is a choice, not a fall-through.
        Some(_) => Code::Internal as u8,
        None => Code::Internal as u8,
    }
}

/// The signal an expected failure means rlock should die of, after its message: a wait ended by
/// Ctrl-C dies of SIGINT, as an interrupted command does. (Other signals exit 128+N.)
pub fn dies_of(err: &anyhow::Error) -> Option<Signal> {
    match err.downcast_ref::<Failure>() {
        Some(Failure::Interrupted { signal, .. }) if *signal == Signal::SIGINT => Some(*signal),
        _ => None,
    }
}

/// `rlock inspect | head` closing the pipe early is not an error.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on_node(kind: Fault) -> Failure {
        NodeError {
            kind,
            node: "redis://h:6379".into(),
            detail: "said no".into(),
        }
        .into_failure()
    }

    impl NodeError {
        fn into_failure(self) -> Failure {
            Failure::redis(About::Lock("jobs".into()), self)
        }
    }

    #[test]
    fn a_fault_exits_with_its_row_of_the_table() {
        assert_eq!(on_node(Fault::Timeout).exit_code(75), 69);
        assert_eq!(on_node(Fault::Other).exit_code(75), 69);
        assert_eq!(on_node(Fault::Auth).exit_code(75), 77);
        assert_eq!(on_node(Fault::Denied).exit_code(75), 77);
        assert_eq!(on_node(Fault::WrongType).exit_code(75), 65);
        assert_eq!(
            on_node(Fault::Tls(crate::backend::TlsRefusal::Untrusted)).exit_code(75),
            78
        );
        assert_eq!(on_node(Fault::Setup).exit_code(75), 78);
        assert_eq!(
            on_node(Fault::Connect).to_string(),
            "Redis unavailable for lock 'jobs': redis://h:6379: said no; check that the server is up and --url is right"
        );
    }

    #[test]
    fn busy_keeps_its_row_whatever_code_e_gives_it() {
        let busy = Failure::Busy {
            about: About::Lock("jobs".into()),
            seen: Seen::Handed,
            waited: Waited::NotAtAll,
        };
        assert_eq!(busy.exit_code(75), 75);
        assert_eq!(busy.exit_code(69), 69);
        assert_eq!(busy.code(), Some(Code::Busy));
        let interrupted = Failure::Interrupted {
            about: About::Lock("jobs".into()),
            signal: Signal::SIGTERM,
            when: Interruption::Waiting,
        };
        assert_eq!(interrupted.exit_code(69), 143);
        assert_eq!(interrupted.code(), None);
    }

    #[test]
    fn an_io_error_of_rlocks_own_has_its_row() {
        let pipe = anyhow::Error::from(std::io::Error::from(std::io::ErrorKind::BrokenPipe));
        assert_eq!(code_of(&pipe.context("writing the table"), 75), 0);
        let full = anyhow::Error::from(std::io::Error::from(std::io::ErrorKind::StorageFull));
        assert_eq!(code_of(&full, 75), Code::Internal as u8);
        let config: anyhow::Error = Failure::from(SetupError::Config("bad".into())).into();
        assert_eq!(code_of(&config, 75), 78);
    }

    #[test]
    fn a_lower_layers_error_keeps_its_row_and_its_words_through_from() {
        let cannot_run = |not_found| {
            Failure::from(LaunchError::CannotRun {
                message: "cannot run 'x': command not found".into(),
                not_found,
            })
        };
        assert_eq!(cannot_run(true).exit_code(75), 127);
        assert_eq!(cannot_run(false).exit_code(75), 126);
        assert_eq!(
            cannot_run(true).to_string(),
            "cannot run 'x': command not found"
        );
        // A wait that ended in an outage: the last try's failure is converted too.
        let node = NodeError {
            kind: Fault::Connect,
            node: "redis://h:6379".into(),
            detail: "said no".into(),
        };
        let outage = Failure::from(crate::lock::Error::Outage {
            last: Box::new(crate::lock::Error::redis(About::Lock("jobs".into()), node)),
            waited: Duration::from_secs(5),
            down_for: Duration::from_secs(5),
        });
        assert_eq!(outage.exit_code(75), 69);
        assert_eq!(
            outage.to_string(),
            "Redis unavailable for lock 'jobs': redis://h:6379: said no; check that the server is up and --url is right; gave up after 5.0s, Redis unavailable throughout"
        );
    }
}
