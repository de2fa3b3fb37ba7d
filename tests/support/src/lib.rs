//! The shared harness of rlock's tests (`tests/rlock`) and its benchmark (`benches/compare`):
//! real `redis-server` processes on free loopback ports (one server, a Cluster, Sentinels, TLS),
//! the fault proxy, the `rlock` binary with a clean environment, deadline-based waiting, a
//! deterministic generator and the soak engine. A dev-only crate of the workspace (as cargo keeps
//! its own `cargo-test-support`), never published.
//!
//! Every helper panics with a message that says what went wrong (and, for a server that will not
//! come up, its log): a test that cannot set itself up fails, it never skips.

pub mod acl;
mod background;
pub mod basic;
mod binary;
mod certs;
mod cli;
mod cluster;
mod features;
pub mod liar;
mod limits;
pub mod managed;
pub mod network;
pub mod peak;
pub mod procfs;
mod proxy;
mod rng;
mod sentinel;
mod server;
pub mod soak;
mod spawn;
mod tls;
mod wait;

/// Set-ups with many processes whose timing matters (a Sentinel failover, a Cluster with
/// replicas, a soak) hold this while they live, so that no two of them run at once: on a
/// 2-core machine two failovers side by side can take longer than a test allows.
static HEAVY: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Waits until no other heavy set-up runs, and keeps them out until the guard is dropped.
pub fn heavy() -> std::sync::MutexGuard<'static, ()> {
    HEAVY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How many times a test that repeats a race runs: `default` in the suite (CI's budget), or
/// `RLOCK_TEST_RUNS` when set, for the long count an issue's "20 of 20" asks for by hand.
pub fn runs(default: usize) -> usize {
    std::env::var("RLOCK_TEST_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

// The paths the tests (`common::RedisServer`, …) and the benchmark use.
pub use self::{
    background::Background,
    binary::{Drain, Output, drain, rlock, rlock_as_default, rlock_at, rlock_bin, run},
    certs::TestCerts,
    cli::redis_cli_bin,
    cluster::{PROXIED_NODE_TIMEOUT, RedisCluster},
    features::{proxied_cluster_or_skip, tls_or_skip, tryagain_counted_or_skip},
    network::Rtt,
    proxy::{Dir, Mode, Proxy},
    rng::Rng,
    sentinel::{LoneSentinel, Sentinels},
    server::RedisServer,
    spawn::{free_port, redis_version},
    tls::TlsServer,
    wait::{pid_alive, wait_for_file, wait_until, wait_until_every},
};
