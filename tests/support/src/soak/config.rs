//! What a soak runs, for how long and with which faults (`Config`, `Until`), and its subjects:
//! the binary, Redis, the link to it (`Target`, `Link`).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// When the run ends.
#[derive(Debug, Clone, Copy)]
pub enum Until {
    /// No new command starts after this much wall time.
    Wall(Duration),
    /// No new command starts once this many have been granted (exit 0 or 76).
    Grants(usize),
}

/// What to run, and which faults to inject.
#[derive(Debug, Clone)]
pub struct Config {
    /// Loops running `rlock exec` one after the other.
    pub workers: usize,
    pub until: Until,
    /// `--ttl` of every exec.
    pub ttl: Duration,
    /// Heartbeats of an ordinary command (~20 ms each).
    pub short_beats: u32,
    /// Heartbeats of a long command, which outlives the TTL (so it renews, and a freeze can
    /// make it lose the lock while it runs).
    pub long_beats: u32,
    /// Every `long_every`-th command of each loop is a long one.
    pub long_every: u32,
    /// Pause between two faults, drawn from this range.
    pub gap: (Duration, Duration),
    /// Length of an ordinary freeze, drawn from this range; an aimed freeze (one in three
    /// faults' rotation) takes the upper bound and starts just after a long command did.
    pub freeze: (Duration, Duration),
    /// Length of an ordinary blackhole of the holders' link (only with `Target::link`), drawn
    /// from this range; an aimed one takes the upper bound and starts just after a long command
    /// did.
    pub cut: (Duration, Duration),
    /// No more faults than this (0: none at all).
    pub max_faults: usize,
    /// Seed of the fault schedule's random numbers (printed in the report).
    pub seed: u64,
    /// `--limit N` on every exec (a semaphore): at most N sections at once, instead of one.
    pub limit: Option<u32>,
}

impl Config {
    /// About `secs` seconds for the test suite: four loops, `--ttl 1s`.
    pub fn short(secs: u64) -> Config {
        Config {
            workers: 4,
            until: Until::Wall(Duration::from_secs(secs)),
            ttl: Duration::from_secs(1),
            short_beats: 3,
            long_beats: 50,
            long_every: 8,
            gap: (Duration::from_millis(800), Duration::from_millis(2200)),
            freeze: (Duration::from_millis(200), Duration::from_millis(1500)),
            cut: (Duration::from_millis(200), Duration::from_millis(1500)),
            max_faults: 10_000,
            seed: seed_from_clock(),
            limit: None,
        }
    }

    /// `grants` contended grants for the benchmark: the same, with long commands rarer.
    pub fn long(grants: usize) -> Config {
        Config {
            until: Until::Grants(grants),
            long_every: 25,
            ..Config::short(0)
        }
    }
}

fn seed_from_clock() -> u64 {
    let ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    ns ^ u64::from(std::process::id()) << 32
}

/// A switch on the link between the rlock processes and Redis: `true` blackholes it (both
/// directions: requests are read and dropped, no reply comes), `false` heals it. The caller
/// builds it, from a fault proxy say, so that this file needs no proxy of its own.
#[derive(Clone)]
pub struct Link(pub Arc<dyn Fn(bool) + Send + Sync>);

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Link(..)")
    }
}

/// Where the engine finds its subjects.
#[derive(Debug, Clone)]
pub struct Target {
    /// The `rlock` binary.
    pub rlock: PathBuf,
    /// The Redis port on 127.0.0.1; the engine's own fault commands go there.
    pub port: u16,
    /// The port rlock is pointed at, when it is not `port`: a proxy in front of Redis.
    pub rlock_port: Option<u16>,
    /// The switch of rlock's link to Redis: with it, blackholes join the fault rotation.
    pub link: Option<Link>,
    /// Redlock: the ports of the other masters (on 127.0.0.1) rlock is pointed at besides the
    /// first (empty: one Redis). The engine's own faults stay on `port`.
    pub more_ports: Vec<u16>,
    /// The `redis-server` process, frozen and thawed by the engine.
    pub redis_pid: i32,
    /// Where the heartbeat log and the loops' stderr go.
    pub dir: PathBuf,
}
