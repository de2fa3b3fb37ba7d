//! The lock protocol: which keys a lock uses, what the scripts say, and how a waiter waits.
//!
//! Every Redis command rlock sends is in the `.lua` files beside this one. A lock named KEY is:
//! - `PREFIX+KEY`, a string holding the owner token, with the lease as its PTTL (so other clients'
//!   `SET NX PX` locks on the same key exclude and are excluded by rlock);
//! - `{PREFIX+KEY}:state`, a hash: the fencing counter, who holds the lock (host, pid, user,
//!   command, since), its TTL, and the leases of waiting rlock processes;
//! - `{PREFIX+KEY}:q`, a sorted set of waiting tokens, oldest first (deleted when empty);
//! - `{PREFIX+KEY}:history`, a stream of the runs on record (`history.rs`), capped and expiring;
//! - `{PREFIX+KEY}:wake`, a pub/sub channel on which a release names the next waiter (or `*`,
//!   anyone, when no rlock process waits in line).
//!
//! The `{…}` hash tag puts them all in one Redis Cluster slot with the lock key.
//!
//! The rooms: `key.rs` names the keys, `call/` is one typed call per script (its keys, its
//! arguments by name, its reply decoded by name with `reply.rs`), `locker.rs` is the deployment
//! (fan-out to every node, the Redlock majority), `lease.rs` the lease arithmetic, `display.rs`
//! the text, `error.rs` the layer's errors (fields; their words and exit codes are `exit`'s),
//! `observe.rs` what the layers report as they work. The operations sit on the `Locker`:
//! `exclusive.rs` (one try at taking, release), `redlock.rs` (the renewal; one vote per server, a
//! release by majority, a renewal that repairs a master restarted empty), `read.rs` (inspect,
//! list), `wait.rs` (waiting without polling), `history.rs` (the runs on record).
//!
//! A semaphore (`--limit N`) or shared lock (`--shared`) is the same protocol with another value
//! at the lock key: a sorted set of holders (`multi.lua`). The scripts branch on the key's type,
//! so acquire, release, renew and the waiting line serve every kind, and a `Sharing` says which
//! kind an acquire asks for.

mod call;
mod display;
mod error;
mod exclusive;
mod history;
mod key;
mod lease;
mod locker;
mod observe;
mod once;
#[cfg(feature = "sim-seams")]
mod planted;
mod read;
mod redlock;
mod reply;
mod running;
#[cfg(feature = "sim-seams")]
#[doc(hidden)]
pub mod seams;
mod wait;

#[cfg(test)]
mod test_request;

use std::time::{Duration, Instant};

use crate::identity::Identity;

pub use crate::output::{human_duration, human_ms};
pub use call::acquire::ACQUIRE;
pub use call::inspect::{INSPECT, LockInfo};
pub use call::release::RELEASE;
pub use call::renew::{FENCE, LEAVE, RENEW};
pub use error::{About, Error, Interruption, Refused, RenewError, Seen, Waited};
pub use history::{HISTORY, RECORD};
pub use history::{HoldRecord, Keep, LastRun, RunRecord};
pub use key::LockKey;
pub use lease::{Lease, Limit, Timeline, deadline, drift};
pub use locker::Locker;
pub use observe::{Note, Observer, Silent};
pub use once::{Look, ONCE, Window, WindowDone};
pub use reply::{Crowd, Holder, HolderLease, HolderPid, KeyType};
pub use running::AtGrant;
pub use wait::{Hooks, Interrupt, WaitPolicy};

/// How often a waiter checks a lock that has no expiry (another client's `SET` without `PX`):
/// it cannot hear such a lock go, only find it gone. A lock with a lease is checked when its
/// lease would end, which a waiter cannot hear either: at most once per two thirds of the
/// holder's lease, since the holder renews every third.
pub const CHECK_WITHOUT_EXPIRY: Duration = Duration::from_secs(5);

/// The kind of lock asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sharing {
    /// One holder at a time (also `--limit 1`).
    Exclusive,
    /// Up to N holders at once (`--limit N`, N > 1): a counting semaphore.
    Limit(u32),
    /// Any number of shared holders, and none while an exclusive holder has the key (`--shared`).
    Shared,
}

impl Sharing {
    /// From `--limit` and `--shared` (which clap keeps apart).
    pub fn from_args(limit: Option<u32>, shared: bool) -> Self {
        match (limit, shared) {
            (_, true) => Sharing::Shared,
            (Some(n), false) if n > 1 => Sharing::Limit(n),
            _ => Sharing::Exclusive,
        }
    }
}

/// What a process asks for when it takes a lock: the lock (or a slot of it, as `sharing` says)
/// for `token`, with a lease of `ttl`, held by `who`.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub key: &'a LockKey,
    pub token: &'a str,
    pub ttl: Duration,
    pub sharing: Sharing,
    pub who: &'a Identity,
    /// Nobody else gets the lock until this long after the grant, by the server's clock, even
    /// once it is released (`--hold-at-least`).
    pub hold: Option<Duration>,
    /// Newest wins (`--newest`, `--cancel-running`); exclusive locks only.
    pub newest: Newest,
    /// `exec`'s run, on record from its grant: its entry goes with each try (`running.rs`).
    pub record: Option<&'a AtGrant>,
}

/// Who a newer run displaces (`--newest`): nobody, the waiters that asked for it too, or those
/// and a holder that asked for `Running` too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Newest {
    Off,
    Waiters,
    Running,
}

/// A lock held by this process.
#[derive(Debug, Clone)]
pub struct Grant {
    pub key: LockKey,
    pub token: String,
    pub fence: i64,
    /// How long the lease is, in the one of its three meanings this grant has.
    pub ttl: Ttl,
    /// When the request that won the lock was sent: the first lease is measured from here.
    pub sent: Instant,
}

/// A grant's lease, which means one of three things, by where the grant came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ttl {
    /// One Redis: the TTL asked for (--ttl), as the server granted it.
    Asked(Duration),
    /// Redlock: what the grant can count on, the TTL asked for less the round trip and the
    /// drift allowance (TTL − elapsed − drift).
    Validity(Duration),
    /// A lock this process tree already held (nested rlock, found by its token): the lease its
    /// holder gave it as Redis keeps it, or at least what is left of it; zero when Redis says
    /// neither.
    Inferred(Duration),
}

impl Ttl {
    /// How long, whichever it means.
    pub fn length(self) -> Duration {
        match self {
            Ttl::Asked(d) | Ttl::Validity(d) | Ttl::Inferred(d) => d,
        }
    }
}

/// The outcome of a release.
#[derive(Debug)]
pub enum Released {
    /// The token owned the lock and it is gone (or it had released it before).
    Done,
    /// Forced: who held it, as text, or None if it was free.
    Broken(Option<String>),
}

/// The outcome of a renewal.
#[derive(Debug, PartialEq, Eq)]
pub enum Renewed {
    /// Extended for this long.
    Yes(Duration),
    /// Extended for this long, and a newer run `by` asked this holder, whose grant asked for
    /// `--cancel-running`, to stop (`Newest::Running`).
    Superseded { ttl: Duration, by: Box<Holder> },
    /// The token no longer owns the lock: free, or someone else's.
    NotOwner(NotOwner),
}

/// Why a renewal found that the token no longer owns the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotOwner {
    /// The key is gone: its lease ran out, or someone deleted it.
    Gone,
    /// The key is gone: a forced release (`rlock release --force`) broke it.
    Broken,
    /// Another token holds the lock.
    Taken,
    /// A majority of a Redlock's masters hold it no longer (for either reason).
    NoMajority,
}

impl std::fmt::Display for NotOwner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            NotOwner::Gone => "it expired or was deleted",
            NotOwner::Broken => "it was broken by 'rlock release --force'",
            NotOwner::Taken => "another owner holds it",
            NotOwner::NoMajority => "a majority of the Redlock nodes no longer hold it",
        })
    }
}
