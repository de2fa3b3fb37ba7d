//! The exit-code table of the contract, and the typed failures that map onto it, in one place.

use std::process::ExitCode;

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
    CannotRun = 126,
    NotFound = 127,
}

/// How rlock ends: with an exit code, or by dying of a signal as its command did (Ctrl-C), so
/// that the shell that ran rlock stops its loop or script as it does when a command of its own
/// is interrupted. `main` carries it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    Code(u8),
    Signal(nix::sys::signal::Signal),
}

impl From<Code> for ExitCode {
    fn from(code: Code) -> Self {
        ExitCode::from(code as u8)
    }
}

/// An expected way for rlock to fail. The message is the whole line printed after `rlock: `.
#[derive(Debug, thiserror::Error)]
pub enum Failure {
    #[error("{0}")]
    Usage(String),
    /// The key holds something that is not a lock (e.g. a list); nothing was changed.
    #[error("{0}")]
    NotALock(String),
    /// Cannot connect, timed out, no quorum.
    #[error("{0}")]
    Unavailable(String),
    /// Not acquired in time; `code` is 75 unless `-E` said otherwise.
    #[error("{message}")]
    Busy { message: String, code: u8 },
    /// The lock was lost while the child ran.
    #[error("{0}")]
    Lost(String),
    /// The token does not own the lock, or Redis refused the credentials.
    #[error("{0}")]
    NotPermitted(String),
    /// Malformed URL, unreadable TLS or password file.
    #[error("{0}")]
    Config(String),
    /// Interrupted by a signal while waiting: exits 128+N.
    #[error("{message}")]
    Interrupted {
        message: String,
        signal: nix::sys::signal::Signal,
    },
    /// Something went wrong in rlock itself (70).
    #[error("{0}")]
    Internal(String),
    /// The command could not be run (126) or was not found (127).
    #[error("{message}")]
    CannotRun { message: String, code: Code },
}

impl Failure {
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Usage(_) => Code::Usage as u8,
            Failure::NotALock(_) => Code::NotALock as u8,
            Failure::Unavailable(_) => Code::Unavailable as u8,
            Failure::Busy { code, .. } => *code,
            Failure::Lost(_) => Code::Lost as u8,
            Failure::NotPermitted(_) => Code::NotPermitted as u8,
            Failure::Config(_) => Code::Config as u8,
            Failure::Interrupted { signal, .. } => 128u8.saturating_add(*signal as u8),
            Failure::CannotRun { code, .. } => *code as u8,
            Failure::Internal(_) => Code::Internal as u8,
        }
    }
}

/// Maps any error to its exit code: typed failures by the table, anything else is internal (70).
pub fn code_of(err: &anyhow::Error) -> u8 {
    match err.downcast_ref::<Failure>() {
        Some(f) => f.exit_code(),
        None if is_broken_pipe(err) => Code::Ok as u8,
        None => Code::Internal as u8,
    }
}

/// The signal an expected failure means rlock should die of, after its message: a wait ended by
/// Ctrl-C dies of SIGINT, as an interrupted command does. (Other signals exit 128+N.)
pub fn dies_of(err: &anyhow::Error) -> Option<nix::sys::signal::Signal> {
    match err.downcast_ref::<Failure>() {
        Some(Failure::Interrupted { signal, .. })
            if *signal == nix::sys::signal::Signal::SIGINT =>
        {
            Some(*signal)
        }
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
