//! Where the lock lives: one Redis now, several kinds of deployment behind one small trait.
//!
//! A [`Node`] runs a Lua script on whatever Redis owns the lock's keys, lists keys, and opens a
//! connection to subscribe to wake-ups on. Everything else (what the scripts say, quorum logic)
//! lives in `crate::lock`.

mod cluster;
mod error;
mod files;
mod password;
mod probe;
mod sentinel;
mod settings;
mod single;
mod slot;
mod subscriber;

use std::time::Duration;

pub use cluster::Cluster;
pub use error::{Class, Fault, NodeError, SetupError, TlsRefusal};
pub use password::{Password, PasswordError};
pub use sentinel::Sentinel;
pub use settings::{Settings, TlsFiles, split_urls, with_addr};
pub use single::{OVER_LIMIT, Single, meanwhile};
pub use slot::{hash_tag, key_slot};
pub use subscriber::Subscriber;

/// Which replies of a script are a write that must reach --replicas replicas.
pub type ReplyTest = fn(&redis::Value) -> bool;

/// One Lua script, known by its source and its SHA1 (both put together by build.rs).
pub struct Script {
    pub name: &'static str,
    pub source: &'static str,
    pub sha: &'static str,
    /// Always send the whole script (EVAL): for requests whose reply may never be read (a
    /// give-back after a timeout), where EVALSHA's NOSCRIPT could not be answered with EVAL.
    pub always_eval: bool,
    /// With --replicas: what the write is called in messages ("grant"), and the replies after
    /// which it must reach the replicas (WAIT) before it counts. None: the script's writes need
    /// no replica.
    pub replicated: Option<(&'static str, ReplyTest)>,
    /// Its reply may be long (a history): read within larger limits than every other's.
    pub long_reply: bool,
}

impl Script {
    pub const fn new(name: &'static str, (source, sha): (&'static str, &'static str)) -> Self {
        Script {
            name,
            source,
            sha,
            always_eval: false,
            replicated: None,
            long_reply: false,
        }
    }

    /// A script whose `write` (a grant, a renewal) must reach --replicas replicas, after the
    /// replies for which `when` holds.
    pub const fn replicated(self, write: &'static str, when: ReplyTest) -> Self {
        Script {
            replicated: Some((write, when)),
            ..self
        }
    }

    /// A script whose reply may be long (see `long_reply`).
    pub const fn long_reply(self) -> Self {
        Script {
            long_reply: true,
            ..self
        }
    }

    /// A script always sent whole (see `always_eval`).
    pub const fn sent_whole(name: &'static str, script: (&'static str, &'static str)) -> Self {
        Script {
            always_eval: true,
            ..Script::new(name, script)
        }
    }
}

/// One script call: the script, its keys and its arguments.
#[derive(Clone, Copy)]
pub struct Eval<'a> {
    pub script: &'a Script,
    pub keys: &'a [&'a str],
    pub args: &'a [&'a str],
}

/// What `Node::eval_then` answers: the first script's reply, and the second's on its own.
pub type Replies = (redis::Value, Result<redis::Value, NodeError>);

/// A Redis deployment that runs the lock scripts.
pub trait Node: Send + Sync {
    /// Runs `script` (EVALSHA, falling back to EVAL on NOSCRIPT) with a reply expected within
    /// `timeout`.
    fn eval(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
        timeout: Duration,
    ) -> Result<redis::Value, NodeError>;

    /// `first`, then `second`: one round trip where the deployment can send both at once (a
    /// single server runs a client's pipelined commands in order, before another client's). The
    /// first's reply, as `eval` gives it, and the second's on its own: its failure is no
    /// failure of the first. The default sends one after the other.
    fn eval_then(
        &self,
        first: Eval<'_>,
        second: Eval<'_>,
        timeout: Duration,
    ) -> Result<Replies, NodeError> {
        let value = self.eval(first.script, first.keys, first.args, timeout)?;
        Ok((
            value,
            self.eval(second.script, second.keys, second.args, timeout),
        ))
    }

    /// INFO, one text per section of `sections`, asked with the plain command in one round
    /// trip (never from a script: services refuse INFO there, and scripts without keys). Only a
    /// single server says what it is; the default answers that this deployment does not.
    fn info(&self, sections: &[&str], timeout: Duration) -> Result<Vec<String>, NodeError> {
        let _ = (sections, timeout);
        Err(NodeError {
            kind: Fault::Other,
            node: self.name().into(),
            detail: "INFO is asked of one server, not of a deployment".into(),
        })
    }

    /// Every key matching `pattern` (SCAN, never KEYS).
    fn scan(&self, pattern: &str, timeout: Duration) -> Result<Vec<String>, NodeError>;

    /// A new connection to the server that owns `key`, subscribed to `channel`.
    fn subscriber(
        &self,
        key: &str,
        channel: &str,
        timeout: Duration,
    ) -> Result<Subscriber, NodeError>;

    /// The endpoint, passwords redacted, for messages.
    fn name(&self) -> &str;

    /// Closes the connection kept for the next request, if any: a waiter that cannot have its
    /// wake channel (a full server) gives its place to another client while it waits. The next
    /// request connects again.
    fn hang_up(&self) {}
}
