//! Shared harness for the integration tests: real `redis-server` processes on free loopback
//! ports, the `rlock` binary with a clean environment, and deadline-based waiting.
//!
//! Every helper panics with a message that says what went wrong (and, for a server that will not
//! come up, its log): a test that cannot set itself up fails, it never skips.
//!
//! Each test binary compiles this module on its own and uses only part of it: unused helpers
//! are expected there, hence `allow(dead_code)` here and on the re-exports below.
#![allow(dead_code)]

mod background;
mod binary;
mod cli;
mod cluster;
mod limits;
mod proxy;
mod sentinel;
mod server;
mod spawn;
mod tls;
mod wait;

// The paths the tests use (`common::RedisServer`, …). One `use`, so that one `allow` covers
// every name a test binary leaves unused.
#[allow(unused_imports)]
pub use self::{
    background::Background,
    binary::{Drain, Output, drain, rlock, rlock_at, run},
    cli::redis_cli_bin,
    cluster::RedisCluster,
    limits::{CONN_TIMEOUT, READY_TIMEOUT, RUN_TIMEOUT},
    proxy::{Dir, Mode, Proxy},
    sentinel::Sentinels,
    server::RedisServer,
    spawn::redis_version,
    tls::{TestCerts, TlsServer},
    wait::{pid_alive, wait_for_file, wait_until},
};
