//! The lock layer's own errors: what went wrong with a request about a lock, said as fields.
//!
//! `Error` is not an `std::error::Error`, and has no words: they are `exit`'s, which turns an
//! `Error` into the one user-facing `Failure` (with its exit code) through `From`. So a lock
//! error cannot reach the user, or anyhow's catch-all 70, without passing the exit-code table.

use std::io;
use std::time::Duration;

use nix::sys::signal::Signal;

use super::{Crowd, Holder, LockKey, NotOwner};
use crate::backend::{Class, Fault, NodeError};

/// Why a request about a lock failed.
#[derive(Debug, Clone)]
pub enum Error {
    /// The request cannot be made as asked: an empty key, a lease with no room to renew.
    Usage(String),
    /// The deployment cannot do what a lock needs (two Redlock URLs reach one server, a replica
    /// or something else than a master among them), found before anything is written.
    Config(String),
    /// A Redis endpoint failed a request about `about`.
    Redis { about: About, error: NodeError },
    /// Too few of a Redlock's masters answered a request about `about`, for these reasons.
    NoQuorum {
        about: About,
        nodes: usize,
        errors: Vec<NodeError>,
    },
    /// A wait for the lock ended while Redis was out: what the last try said, how long the
    /// wait lasted and for how long of it Redis had been out.
    Outage {
        last: Box<Error>,
        waited: Duration,
        down_for: Duration,
    },
    /// A run that never reached Redis stopped trying to, after `tried_for` (--connect-timeout).
    NeverReached {
        last: Box<Error>,
        tried_for: Duration,
    },
    /// Not acquired in time: what the last try found.
    Busy {
        about: About,
        seen: Seen,
        waited: Waited,
    },
    /// The token does not own the lock.
    NotPermitted { about: About, refused: Refused },
    /// A signal ended the wait (or came between the grant and the command's start).
    Interrupted {
        about: About,
        signal: Signal,
        when: Interruption,
    },
    /// A newer run that asked for `--newest` too displaced this waiter: who it is.
    Superseded { about: About, by: Box<Holder> },
}

impl Error {
    /// A Redis endpoint's `error` on a request about `about` (a lock, or a listing).
    pub fn redis(about: impl Into<About>, error: NodeError) -> Self {
        Error::Redis {
            about: about.into(),
            error,
        }
    }

    /// A failure that time may cure: Redis unreachable, timing out or not serving now, on the
    /// one node or on too many of a Redlock's (which a waiter rides out).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Redis { error, .. } => error.is_transient(),
            Error::NoQuorum { errors, .. } => errors.iter().all(NodeError::is_transient),
            _ => false,
        }
    }

    /// A grant that too few replicas acknowledged (`--replicas`), on the one node or on any of
    /// a Redlock's that failed: waited out like an outage (a failover's new master gets its
    /// replicas back), but not by a single try, which concerns the lock.
    pub fn is_short_of_replicas(&self) -> bool {
        match self {
            Error::Redis { error, .. } => error.kind == Fault::Replicas,
            Error::NoQuorum { errors, .. } => errors.iter().any(|e| e.kind == Fault::Replicas),
            _ => false,
        }
    }

    /// A server that is there and has no room for another client (maxclients), on the one node
    /// or on any of a Redlock's that failed: waited on like a busy lock, also by a run that has
    /// had no other answer yet.
    pub fn is_full(&self) -> bool {
        match self {
            Error::Redis { error, .. } => error.kind == Fault::Full,
            Error::NoQuorum { errors, .. } => errors.iter().any(|e| e.kind == Fault::Full),
            _ => false,
        }
    }

    /// Refused at login (a wrong password, none given, none to be had from --password-command):
    /// the try never ran on that connection.
    pub fn is_login_refused(&self) -> bool {
        matches!(self, Error::Redis { error, .. }
            if matches!(error.kind, Fault::Auth | Fault::NoPassword | Fault::Credential))
    }

    /// Redis could not serve the request (exit 69): no usable answer came, or the answer was
    /// an error of the server's own.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Redis { error, .. } => error.kind.class() == Class::Unavailable,
            Error::NoQuorum { .. } | Error::Outage { .. } | Error::NeverReached { .. } => true,
            _ => false,
        }
    }
}

/// What a request to Redis was about, as messages name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum About {
    /// The lock of this name.
    Lock(String),
    /// Every lock under this prefix (a listing).
    Locks(String),
}

/// A request about this lock.
impl From<&LockKey> for About {
    fn from(key: &LockKey) -> Self {
        About::Lock(key.name.clone())
    }
}

/// What the last try at a busy lock found.
#[derive(Debug, Clone)]
pub enum Seen {
    /// Held: the lease's time left (PTTL: -1 never expires, below that just released), the
    /// server's clock, who holds it, and for a semaphore or shared lock how many do.
    Held {
        pttl: i64,
        now_ms: i64,
        holder: Box<Holder>,
        crowd: Option<Crowd>,
    },
    /// Being handed to a process ahead in line.
    Handed,
}

/// How long a busy request waited before it gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// Not at all (`-n`, or `--wait 0`).
    NotAtAll,
    For(Duration),
}

/// What a token was refused, not owning the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// A release found the lock held by another token.
    ReleaseHeldByOther,
    /// A release found the lock free: it expired or was broken before.
    ReleaseNotHeld,
    /// A renewal found the token no longer owns the lock.
    Renew(NotOwner),
}

/// When a signal ended rlock before its command ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interruption {
    /// While waiting for the lock: nothing was left in Redis.
    Waiting,
    /// Between the grant and the start of the command: the lock was released.
    BeforeStart,
}

/// Why a renewal did not happen; it is retried while the lease lasts.
#[derive(Debug)]
pub enum RenewError {
    /// A Redis endpoint failed it (in Redlock mode, the first of the masters that did).
    Node(NodeError),
    /// The renewal thread could not be started.
    NoThread(io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Fault;

    fn on_node(kind: Fault) -> Error {
        let error = NodeError {
            kind,
            node: "redis://h:6379".into(),
            detail: "said no".into(),
        };
        Error::redis(About::Lock("jobs".into()), error)
    }

    #[test]
    fn an_outage_is_waited_out_and_a_bad_address_is_not() {
        assert!(on_node(Fault::Connect).is_transient());
        assert!(on_node(Fault::Connect).is_unavailable());
        // Unavailable (69), and no wait cures it.
        assert!(!on_node(Fault::Unresolved).is_transient());
        assert!(on_node(Fault::Unresolved).is_unavailable());
        assert!(!on_node(Fault::Auth).is_unavailable());
        let busy = Error::Busy {
            about: About::Lock("jobs".into()),
            seen: Seen::Handed,
            waited: Waited::NotAtAll,
        };
        assert!(!busy.is_transient() && !busy.is_unavailable());
        let outage = Error::Outage {
            last: Box::new(on_node(Fault::Timeout)),
            waited: Duration::from_secs(1),
            down_for: Duration::from_secs(1),
        };
        assert!(outage.is_unavailable() && !outage.is_transient());
    }
}
