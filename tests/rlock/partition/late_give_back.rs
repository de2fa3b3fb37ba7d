//! A give-back that arrives late. A waiter's try whose reply does not come within --op-timeout
//! may have been granted, so rlock gives it back (on a new connection: the first is dropped),
//! then tries again (on yet another). Requests on different connections may run in any order
//! (a large one is read in pieces, a link delays one and not the next): here the proxy holds
//! the give-back of one try until after the next try was granted and reported held. The late
//! give-back must leave that grant alone, or the lock is free while rlock says it is held. Both
//! orders of the two tries: the late try's own grant came first (its reply was lost) and the
//! next try found the lock already its own, or the next try's grant came first.

use super::*;
use crate::common::basic::{acquire, q, release};

const KEY: &str = "late";

/// W's --op-timeout: long enough that no try of W times out on a loaded machine unless the
/// proxy holds it back (a round trip through the proxy can take some 400 ms there).
const W_OP_TIMEOUT: Duration = Duration::from_secs(1);

/// How late the proxy lets through what it holds back: well past W's --op-timeout, so that
/// W's next try is granted and reported before a held-back give-back reaches Redis, however
/// slowly the test and W take their turns.
const LATE: Mode = Mode::Delay {
    base: W_OP_TIMEOUT.saturating_mul(3),
    jitter: Duration::ZERO,
};

/// The lock held directly for `ttl`, and W (with `extra`) waiting for it through a proxy, with
/// --op-timeout `W_OP_TIMEOUT`, asleep in line: the proxy, the holder's token, W, and W's
/// directory.
fn waiting_behind(
    server: &RedisServer,
    ttl: &str,
    extra: &[&str],
) -> (Proxy, String, Bg, tempfile::TempDir) {
    let proxy = Proxy::start(server.port());
    let dir = tempfile::tempdir().expect("temp dir");
    let holder = acquire(server, KEY, &["--ttl", ttl]);
    let mut w = rlock();
    let op_timeout = format!("{}ms", W_OP_TIMEOUT.as_millis());
    w.args(["-u", &proxy.url(), "--op-timeout", &op_timeout])
        .args(["acquire", "-w", "30s", "-k", KEY])
        .args(extra);
    let mut w = Bg::spawn("W", dir.path(), &mut w);
    asleep_in_line(server, &proxy, &mut w);
    (proxy, holder, w, dir)
}

/// Waits until W, a waiter through `proxy`, sleeps in line: its try was busy, it subscribed to
/// its wake-up (a second connection), and the try made after subscribing was answered too:
/// three replies passed on.
fn asleep_in_line(server: &RedisServer, proxy: &Proxy, w: &mut Bg) {
    w.wait_for("W to wait in line", Duration::from_secs(10), || {
        matches!(
            server.try_cmd(&["ZCARD", "{rlock:late}:q"]),
            Ok(redis::Value::Int(1))
        ) && proxy.senders() == 2
            && proxy.pieces(Dir::ToClient) >= 3
    });
}

/// Once W's give-back is on its way (held back by the proxy), lets the link pass, so that W's next
/// try is answered at once: W's output, once its delayed requests have all reached Redis.
fn after_the_give_back(proxy: &Proxy, w: &mut Bg) -> crate::common::Output {
    // The give-back goes out on a connection of its own, then W pauses 50 ms or more.
    w.wait_for("W's give-back", Duration::from_secs(10), || {
        proxy.senders() == 3
    });
    proxy.set(Mode::Pass);
    let (out, _) = w.finish(Duration::from_secs(10));
    assert_eq!(out.code, 0, "W: {out}");
    wait_until(
        "W's delayed requests to reach Redis",
        Duration::from_secs(10),
        || proxy.open_connections() == 0,
    );
    assert_eq!(
        proxy.senders(),
        4,
        "W's connections: its first (the try that timed out), its wake-up, the give-back, the \
         next try"
    );
    out
}

/// W (with `extra`) waits through the proxy for a lock held directly by an exclusive holder;
/// the proxy then delays what W sends by `LATE`, and the release hands the lock to W: W's try
/// times out, its give-back goes out (delayed), and once the proxy has read that, the link
/// passes again, so W's next try is granted at once, before the give-back reaches Redis. Returns W's output once the delayed requests have all reached Redis.
fn late_give_back(server: &RedisServer, extra: &[&str]) -> crate::common::Output {
    let (proxy, holder, mut w, _dir) = waiting_behind(server, "60s", extra);
    proxy.set_dir(Dir::ToServer, LATE);
    release(server, KEY, &holder);
    // W's try (on its first connection) times out after its --op-timeout.
    after_the_give_back(&proxy, &mut w)
}

/// Asserts that the lock is held by the token W printed: the string's value, or a holder of a
/// shared lock.
fn assert_held_by(server: &RedisServer, out: &crate::common::Output) {
    let token = out.stdout.trim();
    let held = match q::<String>(server, &["TYPE", "rlock:late"]).as_str() {
        "string" => q::<Option<String>>(server, &["GET", "rlock:late"]).as_deref() == Some(token),
        "zset" => q::<Option<String>>(server, &["ZSCORE", "rlock:late", token]).is_some(),
        _ => false,
    };
    assert!(held, "the lock rlock reported held is held: {out}");
}

#[test]
fn a_late_give_back_leaves_a_later_grant_held() {
    let server = RedisServer::start();
    let out = late_give_back(&server, &[]);
    assert_held_by(&server, &out);
}

#[test]
fn a_late_give_back_leaves_a_later_shared_grant_held() {
    // A shared lock's holders are a sorted set (leave.lua's other branch).
    let server = RedisServer::start();
    let out = late_give_back(&server, &["--shared"]);
    assert_held_by(&server, &out);
}

/// The other order: W's try (with `extra`) is granted at once but its reply is held back, so
/// that it times out; its give-back is held back too; the next try finds the lock already its
/// own, and is answered. With `lose_state`, the lock's state (where the grant's try is kept) is
/// deleted behind rlock's back right after the first grant.
fn confirmed_late(server: &RedisServer, extra: &[&str], lose_state: bool) -> crate::common::Output {
    let (proxy, holder, mut w, _dir) = waiting_behind(server, "1500ms", extra);
    // The holder's lease runs out (nobody is woken): W tries then, and is granted at once.
    proxy.set_dir(Dir::ToClient, LATE);
    w.wait_for("W's grant", Duration::from_secs(10), || match q::<String>(
        server,
        &["TYPE", "rlock:late"],
    )
    .as_str()
    {
        "string" => q::<Option<String>>(server, &["GET", "rlock:late"]) != Some(holder.clone()),
        "zset" => true,
        _ => false,
    });
    proxy.set_dir(Dir::ToServer, LATE);
    if lose_state {
        let _: i64 = q(server, &["DEL", "{rlock:late}:state"]);
    }
    after_the_give_back(&proxy, &mut w)
}

#[test]
fn a_late_give_back_leaves_a_grant_the_next_try_confirmed_held() {
    let server = RedisServer::start();
    let out = confirmed_late(&server, &[], false);
    assert_held_by(&server, &out);
}

#[test]
fn a_late_give_back_leaves_a_shared_grant_the_next_try_confirmed_held() {
    let server = RedisServer::start();
    let out = confirmed_late(&server, &["--shared"], false);
    assert_held_by(&server, &out);
}

#[test]
fn a_grant_confirmed_after_its_state_was_lost_keeps_a_state_that_expires() {
    // The confirming try writes the state anew (the try that confirmed the grant): it expires,
    // as every key rlock writes does, and the late give-back still leaves the lock held.
    let server = RedisServer::start();
    let out = confirmed_late(&server, &[], true);
    assert_held_by(&server, &out);
    let left: i64 = q(&server, &["PTTL", "{rlock:late}:state"]);
    assert!(left > 0, "the state made anew expires (PTTL {left}): {out}");
}
