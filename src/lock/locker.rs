//! The deployment a lock lives on: one logical Redis (single, Cluster, Sentinel) or a Redlock
//! quorum of independent masters, with what every kind of lock needs of it: running a script on
//! every node (in parallel), counting a majority, and subscribing to a wake channel.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::Sharing;
use super::error::{About, Error};
use super::key::LockKey;
use crate::backend::{Fault, Node, NodeError, Subscriber};
use crate::clock::{self, Clock, Job};
use crate::identity::Identity;

/// The lock operations on one deployment. The operations themselves live beside this file, one
/// file per kind of lock (`exclusive.rs`, ...), all built on `on_all` and `Quorum`.
pub struct Locker {
    pub(super) nodes: Vec<Box<dyn Node>>,
    pub(super) op_timeout: Duration,
    /// How long a wait that has had no answer from Redis yet keeps trying (--connect-timeout).
    first_contact: Duration,
    /// Redlock: the last grant's token and acquire arguments, with which a renewal writes the
    /// lock again on a master that lost it (see `redlock.rs`).
    pub(super) relock: Mutex<Option<Relock>>,
    /// Redlock: which masters miss this process's lock, as the last grant or renewal found
    /// (see `redlock.rs`: a renewal comes early while some master misses it).
    missing: Mutex<Vec<bool>>,
    /// The clock every lease and try counts by, and the threads of a fan-out (the machine's;
    /// a simulation's in tests/sim).
    clock: Arc<dyn Clock>,
}

/// What a renewal needs to write a lock again where it is gone: the grant's request (its key
/// aside, which the renewal names). See `redlock.rs`.
#[derive(Debug, Clone)]
pub(super) struct Relock {
    pub token: String,
    pub ttl: Duration,
    pub sharing: Sharing,
    pub who: Identity,
}

/// How long a run that has never reached Redis keeps trying, unless told otherwise.
pub const FIRST_CONTACT: Duration = Duration::from_secs(30);

/// How many of the nodes must agree: all of one, or a majority of a Redlock's masters.
#[derive(Debug, Clone, Copy)]
pub(super) struct Quorum {
    nodes: usize,
}

impl Quorum {
    /// Of `nodes` nodes.
    pub const fn of(nodes: usize) -> Self {
        Quorum { nodes }
    }

    /// How many nodes there are.
    pub fn nodes(self) -> usize {
        self.nodes
    }

    /// How many nodes make a majority.
    pub fn needed(self) -> usize {
        self.nodes / 2 + 1
    }

    /// `count` nodes agreeing are enough.
    pub fn reached_by(self, count: usize) -> bool {
        count >= self.needed()
    }

    /// With `failed` nodes out, the others can no longer make a majority.
    pub fn lost_with(self, failed: usize) -> bool {
        failed > self.nodes - self.needed()
    }
}

impl Locker {
    pub fn new(nodes: Vec<Box<dyn Node>>, op_timeout: Duration) -> Self {
        assert!(!nodes.is_empty(), "a Locker needs at least one node");
        Locker {
            nodes,
            op_timeout,
            first_contact: FIRST_CONTACT,
            relock: Mutex::new(None),
            missing: Mutex::new(Vec::new()),
            clock: Arc::new(clock::System),
        }
    }

    /// The same, counting time and running fan-outs by `clock`.
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        Locker { clock, ..self }
    }

    /// The clock this locker counts by.
    pub fn clock(&self) -> &dyn Clock {
        self.clock.as_ref()
    }

    /// Now, by this locker's clock.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// The same, trying for `first_contact` at most to reach Redis a first time.
    pub fn with_first_contact(self, first_contact: Duration) -> Self {
        Locker {
            first_contact,
            ..self
        }
    }

    pub fn op_timeout(&self) -> Duration {
        self.op_timeout
    }

    pub fn first_contact(&self) -> Duration {
        self.first_contact
    }

    /// True in Redlock mode (several independent masters).
    pub fn is_quorum(&self) -> bool {
        self.nodes.len() > 1
    }

    /// Redlock: on how many of how many masters the lock taken or renewed last is.
    pub fn holding(&self) -> Option<(usize, usize)> {
        let missing = self.missing();
        let of = self.nodes.len();
        self.is_quorum()
            .then(|| (of - missing.iter().filter(|m| **m).count(), of))
    }

    /// Redlock: some master misses the lock taken or renewed last.
    pub fn missing_some(&self) -> bool {
        self.missing().contains(&true)
    }

    /// Redlock: per master, whether it misses the lock (none known when nothing was taken).
    pub(super) fn missing(&self) -> Vec<bool> {
        self.missing
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub(super) fn set_missing(&self, missing: Vec<bool>) {
        *self.missing.lock().unwrap_or_else(|p| p.into_inner()) = missing;
    }

    pub(super) fn quorum(&self) -> Quorum {
        Quorum::of(self.nodes.len())
    }

    /// The timeout of one request: --op-timeout, and in Redlock mode also well under the TTL,
    /// so that one dead node cannot use up the validity of a grant.
    pub fn node_timeout(&self, ttl: Duration) -> Duration {
        if self.is_quorum() {
            self.op_timeout.min(ttl / 10).max(Duration::from_millis(5))
        } else {
            self.op_timeout
        }
    }

    /// Runs `f` on every node, in parallel when there are several.
    pub(super) fn on_all<T: Send>(&self, f: impl Fn(&dyn Node) -> T + Sync) -> Vec<T> {
        self.on_each(|_, n| f(n))
    }

    /// As `on_all`, telling `f` which node (its place in the URLs) it runs on.
    pub(super) fn on_each<T: Send>(&self, f: impl Fn(usize, &dyn Node) -> T + Sync) -> Vec<T> {
        if self.nodes.len() == 1 {
            return vec![f(0, self.nodes[0].as_ref())];
        }
        let f = &f;
        let mut out: Vec<Option<T>> = self.nodes.iter().map(|_| None).collect();
        let jobs: Vec<Job<'_>> = out
            .iter_mut()
            .zip(&self.nodes)
            .enumerate()
            .map(|(i, (slot, n))| -> Job<'_> { Box::new(move || *slot = Some(f(i, n.as_ref()))) })
            .collect();
        self.clock.fan_out(jobs);
        out.into_iter()
            .map(|slot| slot.expect("every node's job ran"))
            .collect()
    }

    /// Connections subscribed to the waiter `token`'s wake channel: one per node that answers
    /// (in parallel, each within --op-timeout). A waiter in line (one Redis) is woken on a
    /// channel of its own, so that a handoff wakes exactly one process; a Redlock waiter, which
    /// does not queue, on the lock's shared channel. Each connection is made within `timeout`.
    /// With one Redis, the failure when there is no subscription: a waiter keeps a place in line
    /// only while it can hear its wake-up.
    pub fn subscribers(
        &self,
        key: &LockKey,
        token: &str,
        timeout: Duration,
    ) -> Result<Vec<Subscriber>, NodeError> {
        if !self.is_quorum() {
            let channel = format!("{}:{token}", key.channel);
            let node = &self.nodes[0];
            return Ok(vec![node.subscriber(&key.redis_key, &channel, timeout)?]);
        }
        let channel = &key.channel;
        Ok(self
            .on_all(|n| n.subscriber(&key.redis_key, channel, timeout).ok())
            .into_iter()
            .flatten()
            .collect())
    }

    /// Closes the connections kept for the next request (`Node::hang_up`).
    pub fn hang_up(&self) {
        for node in &self.nodes {
            node.hang_up();
        }
    }
}

/// A Redlock request about `about` that too few of its `n` masters answered: the first refusal
/// among their errors (a wrong password, the ACL, TLS, a node of a Redis Cluster), which no wait
/// cures, else no quorum.
pub(super) fn no_quorum(about: About, n: usize, errors: Vec<NodeError>) -> Error {
    if let Some(refused) = errors.iter().position(|e| {
        matches!(
            e.kind,
            Fault::Auth
                | Fault::NoPassword
                | Fault::Credential
                | Fault::Denied
                | Fault::Tls(_)
                | Fault::WrongMode
        )
    }) {
        let mut errors = errors;
        return Error::redis(about, errors.swap_remove(refused));
    }
    Error::NoQuorum {
        about,
        nodes: n,
        errors,
    }
}
