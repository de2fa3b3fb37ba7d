//! What the server under test can do, for the few tests that need what another server may lack:
//! they skip on such a server only, saying why, and never on the default `redis-server`.

use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::spawn::{SERVER_SETTING, redis_server_bin, redis_version};

/// Whether the suite runs against the server `RLOCK_TEST_REDIS_SERVER` names rather than the
/// default `redis-server`: only then may a test that needs a feature the server lacks skip.
pub(crate) fn other_server() -> bool {
    std::env::var_os(SERVER_SETTING).is_some_and(|v| !v.is_empty())
}

/// Whether the server was built with TLS. Asked of the binary, not assumed: started with a TLS
/// port and no certificate, a server stops at once, and what it says tells (Redis 7: "No
/// tls-cert-file configured!"; built without TLS, Valkey: "Failed finding TLS support", Redis
/// 6: "Bad directive" for the option itself).
pub(crate) fn server_has_tls() -> bool {
    static TLS: OnceLock<bool> = OnceLock::new();
    *TLS.get_or_init(|| {
        let out = Command::new(redis_server_bin())
            .args(["--port", "0", "--tls-port", "1", "--save", ""])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", redis_server_bin().display()));
        let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
        !(text.contains("Failed finding TLS support") || text.contains("Bad directive"))
    })
}

/// For a test that needs TLS: whether it may go on. Against the default server, always (a
/// server without TLS fails the test, never skips it); against another server built without
/// TLS, the test says why and is skipped.
pub fn tls_or_skip() -> bool {
    if server_has_tls() || !other_server() {
        return true;
    }
    skip(&format!(
        "{} was built without TLS",
        redis_server_bin().display()
    ));
    false
}

/// For a test that needs `RedisCluster::start_behind_proxies`: whether it may go on. Before
/// Redis 7, `redis-cli --cluster create` waits forever for nodes that announce other ports than
/// the ones it was given, so against such a server (only when it is not the default one) the
/// test says why and is skipped.
pub fn proxied_cluster_or_skip() -> bool {
    if redis_version().0 >= 7 || !other_server() {
        return true;
    }
    skip("before Redis 7, a cluster cannot be created behind proxies");
    false
}

/// For a test that watches a server count its TRYAGAIN replies (`INFO errorstats`): whether it
/// may go on. Before Redis 7 a cluster's redirections (TRYAGAIN, ASK) are not counted there, so
/// against such a server (only when it is not the default one) the test says why and is skipped.
pub fn tryagain_counted_or_skip() -> bool {
    if redis_version().0 >= 7 || !other_server() {
        return true;
    }
    skip("before Redis 7, INFO errorstats does not count a cluster's TRYAGAIN replies");
    false
}

fn skip(why: &str) {
    let test = std::thread::current()
        .name()
        .unwrap_or("this test")
        .to_string();
    eprintln!("skipped {test}: {why}");
}
