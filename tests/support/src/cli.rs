//! `redis-cli`, and replies read as maps.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::limits::CONN_TIMEOUT;
use crate::spawn::{connect, executable};

/// The client executable: `RLOCK_TEST_REDIS_CLI` (a path, or a name on PATH), or `redis-cli`
/// from PATH; panics (never skips) when there is none.
pub fn redis_cli_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        executable(
            "RLOCK_TEST_REDIS_CLI",
            "redis-cli",
            "redis-cli not found: install it with `apt-get install -y redis-tools`",
        )
    })
}

/// `INFO section` of the server on `port` as `field → value`.
pub(crate) fn info_on(port: u16, section: &str) -> redis::RedisResult<HashMap<String, String>> {
    let text: String =
        redis::cmd("INFO")
            .arg(section)
            .query(&mut connect(port, None, CONN_TIMEOUT)?)?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect())
}
