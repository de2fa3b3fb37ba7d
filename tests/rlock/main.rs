//! The integration tests: one binary of modules named for what they prove, against real
//! `redis-server` processes the tests start on free ports. `tests/README.md` maps each guarantee
//! of the README and docs/ to the tests that prove it.
//!
//! `cargo test --locked` runs everything; `cargo test --test rlock waiting::` runs one module.

// The harness (`tests/support`, the rlock-test-support crate), by the name its modules had when
// it lived here: `crate::common::RedisServer`, `crate::common::basic::…`.
use rlock_test_support as common;

mod cli_and_help;
mod connection_errors;
mod docs;
mod exec_and_signals;
mod history;
mod hostile;
mod inspect;
mod layers;
mod locking;
mod network;
mod outages;
mod packaging;
mod partition;
mod secrets;
mod servers;
mod sharing;
mod soak;
mod soak_redlock;
mod waiting;
