//! The faults a run can meet, and which of them a mode's fault model plans (`faults.rs` plans
//! them for a seed, and makes them happen).

use super::Micros;

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    Freeze(usize),
    Thaw(usize),
    Crash(usize),
    /// Someone deletes the lock's key behind rlock's back (`DEL`, `rlock release --force`).
    Delete(usize),
    /// FLUSHALL on node N's master: it forgets everything, and says nothing.
    Flush(usize),
    /// Node N's master loses the lock's record (`:state`, with its fence counter): evicted,
    /// deleted by hand.
    LoseState(usize),
    /// A crashed server starts again, with its data (`keep`) or empty.
    Restart {
        server: usize,
        keep: bool,
    },
    Cut {
        client: usize,
        server: usize,
    },
    Heal {
        client: usize,
        server: usize,
    },
    Slow {
        client: usize,
        server: usize,
        extra: Micros,
    },
    Pause {
        client: usize,
        until: Micros,
    },
    Resume(usize),
    /// Node `node`'s master crashes and its replica becomes the master, with what it has.
    Failover(usize),
    /// A replica's link to its master is cut (or mended): it falls behind.
    Replication {
        replica: usize,
        cut: bool,
    },
    /// The old master comes back as a replica of the new one (empty, then synced).
    Rejoin {
        server: usize,
        master: usize,
    },
}

/// Which faults a run may plan: the fault model of a mode, or more.
#[derive(Debug, Clone, Copy, Default)]
pub struct Model {
    pub freezes: bool,
    /// Restarts that keep the data (persistence).
    pub restarts: bool,
    /// Empty restarts: at most this many in one run, never two within three TTLs.
    pub empty_restarts: u32,
    pub partitions: bool,
    pub slow_links: bool,
    /// The lock's key deleted behind rlock's back (one Redis).
    pub deletes: bool,
    pub pauses: bool,
    pub failovers: bool,
    /// Client 0 never reaches the last server: its grants miss that master.
    pub missed_master: bool,
    /// Redlock: a master a grant reached restarts empty soon after, while the grant misses
    /// another (`live.rs`), one restart every three TTLs at most.
    pub restarts_in_window: bool,
    /// FLUSHALL on a master, and its lock's record (`:state`) deleted.
    pub flushes: bool,
    pub lost_state: bool,
}
