//! The harness's time limits and retry counts, shared by every part of it.

use std::time::Duration;

/// How long a server may take to answer its first PING.
pub(crate) const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Connect, read and write timeout of the harness's own connections.
pub(crate) const CONN_TIMEOUT: Duration = Duration::from_secs(5);
/// Hard limit for one `run` of the binary under test.
pub(crate) const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// Fresh ports tried by `RedisServer::start_with` before giving up.
pub(crate) const START_ATTEMPTS: usize = 5;
/// Pause between polls in every wait loop.
pub(crate) const POLL: Duration = Duration::from_millis(10);
