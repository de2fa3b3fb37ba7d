//! A network between rlock and the servers the harness starts: a round trip of its own, with
//! jitter, made by a fault proxy in `Mode::Delay` in front of a server. Users' Redis is on
//! another host, zone or region, not on loopback; a test that passes only at loopback speed
//! proves little about a lock across zones.
//!
//! A test asks for it by `RedisServer::start_across(rtt)`; a whole module run asks for it by
//! `RLOCK_TEST_RTT` (`10ms`, or `10ms+4ms` for up to 4 ms of jitter per round trip; without a
//! `+`, a fifth of the round trip), which puts every `RedisServer` behind such a proxy. The URLs
//! the tests give rlock (`RedisServer::url`, `rlock_at`, `acl::suite_url`) then name the proxy;
//! the harness's own connections (`RedisServer::conn`, `cmd`, …) and the servers' links to each
//! other (replication, Sentinels, Cluster buses) stay on loopback, so setting a test up costs no
//! round trips and what a test checks in Redis is read at once.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::proxy::{Mode, Proxy};

/// A round trip and its jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rtt {
    /// The round trip's fixed part: half of it each way.
    pub base: Duration,
    /// Up to this much more per round trip (half of it each way), different for every piece.
    pub jitter: Duration,
}

impl Rtt {
    /// `ms` milliseconds per round trip, with up to a fifth of that as jitter.
    pub fn ms(ms: u64) -> Rtt {
        let base = Duration::from_millis(ms);
        Rtt {
            base,
            jitter: base / 5,
        }
    }

    /// What `RLOCK_TEST_RTT` asks of every server the harness starts; None when it is unset or
    /// empty. Panics on a value it cannot read, naming it: a typo must not run the suite on
    /// loopback unnoticed.
    pub fn from_env() -> Option<Rtt> {
        static FROM_ENV: OnceLock<Option<Rtt>> = OnceLock::new();
        *FROM_ENV.get_or_init(|| {
            let text = std::env::var("RLOCK_TEST_RTT").ok()?;
            let text = text.trim();
            if text.is_empty() {
                return None;
            }
            Some(Rtt::parse(text).unwrap_or_else(|| {
                panic!("RLOCK_TEST_RTT={text:?}: expected a round trip such as 10ms or 10ms+4ms")
            }))
        })
    }

    /// `10ms`, `10ms+4ms`, `1.5ms`, `0.04s`.
    pub fn parse(text: &str) -> Option<Rtt> {
        let (base, jitter) = match text.split_once('+') {
            Some((base, jitter)) => (duration(base)?, Some(duration(jitter)?)),
            None => (duration(text)?, None),
        };
        Some(Rtt {
            base,
            jitter: jitter.unwrap_or(base / 5),
        })
    }

    /// The slowest round trip this network makes.
    pub fn worst(&self) -> Duration {
        self.base + self.jitter
    }

    /// The proxy mode of each direction.
    pub fn mode(&self) -> Mode {
        Mode::Delay {
            base: self.base / 2,
            jitter: self.jitter / 2,
        }
    }

    /// A proxy in front of the server on `port`, delaying both ways.
    pub fn proxy(&self, port: u16) -> Proxy {
        let proxy = Proxy::start(port);
        proxy.set(self.mode());
        proxy
    }
}

impl fmt::Display for Rtt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}+{:?}", self.base, self.jitter)
    }
}

fn duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (number, unit) = text.split_at(text.find(|c: char| c.is_ascii_alphabetic())?);
    let number: f64 = number.parse().ok().filter(|n: &f64| *n >= 0.0)?;
    let secs = match unit {
        "ms" => number / 1000.0,
        "s" => number,
        "us" => number / 1_000_000.0,
        _ => return None,
    };
    Duration::try_from_secs_f64(secs).ok()
}

/// Server port → the port of the proxy in front of it, for every server behind a network now.
fn fronts() -> &'static Mutex<HashMap<u16, u16>> {
    static FRONTS: OnceLock<Mutex<HashMap<u16, u16>>> = OnceLock::new();
    FRONTS.get_or_init(Default::default)
}

/// The server on `port` is reached by clients through the proxy on `front`.
pub(crate) fn put_behind(port: u16, front: u16) {
    fronts().lock().unwrap().insert(port, front);
}

/// The server on `port` is gone: its port may be another's soon.
pub(crate) fn forget(port: u16) {
    fronts().lock().unwrap().remove(&port);
}

/// The port a client reaches the server on `port` by: its proxy's when it is behind a network.
pub fn client_port(port: u16) -> u16 {
    fronts().lock().unwrap().get(&port).copied().unwrap_or(port)
}
