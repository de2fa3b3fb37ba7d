//! The raw pair the first table puts beside rlock: `redis-cli SET key token NX PX` to take,
//! `redis-cli EVAL` of a compare-and-delete to give back, and a shell loop to wait.

use std::process::Command;

use crate::process::{fail, output, quiet};

/// Compare-and-delete, as every Redis lock client writes it.
pub const CAD: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";

/// The conventional shell waiter for a raw redis-cli lock: retry every 100 ms.
pub const POLL_LOOP: &str =
    r#"until [ "$(redis-cli -p "$1" SET "$2" "$3" NX PX 60000)" = OK ]; do sleep 0.1; done"#;

/// One take-run-give-back with the raw pair: redis-cli SET NX PX, `true`, redis-cli EVAL.
/// Returns false (having done nothing) when the key is taken.
pub fn pair(port: &str, key: &str, token: &str) -> bool {
    let set = output(
        Command::new("redis-cli").args(["-p", port, "SET", key, token, "NX", "PX", "30000"]),
    );
    if set.trim() != "OK" {
        return false;
    }
    quiet(&mut Command::new("true"));
    let del = output(Command::new("redis-cli").args(["-p", port, "EVAL", CAD, "1", key, token]));
    if del.trim() != "1" {
        fail(&format!("the compare-and-delete answered {del:?}"));
    }
    true
}

/// Takes `key` for a holder named "holder" for 60 s, as the raw pair's waiters find it.
pub fn hold(conn: &mut redis::Connection, key: &str) {
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("holder")
        .arg("PX")
        .arg(60000)
        .query(conn)
        .expect("SET");
}

/// Deletes `key`, whoever holds it.
pub fn clear(conn: &mut redis::Connection, key: &str) {
    let _: () = redis::cmd("DEL").arg(key).query(conn).expect("DEL");
}
