//! What may be a Redlock member: independent masters only, each counted once, as each says
//! itself. A member that answers but is no usable Redis (a web server, a TLS/plain mismatch, a
//! Sentinel, a node of a Cluster), a replica, one server under two names (also as the
//! documented ACL user, with `+info`) and a user that may not say which server it is (no
//! `+info`) are refused with 78 before anything is written. A final release that reaches only a
//! minority exits 69.

use super::scale_out_mistakes::web_server;
use super::*;

/// Keys in the server's database.
fn dbsize(node: &RedisServer) -> i64 {
    match node.cmd(&["DBSIZE"]) {
        redis::Value::Int(n) => n,
        other => panic!("DBSIZE: {other:?}"),
    }
}

/// Redlock over `good` and `bad` is refused: 78 within `within`, one line holding every one of
/// `needles`, nothing written on the good masters.
fn refused(good: &[&RedisServer], bad: &str, within: Duration, needles: &[&str]) {
    let mut cmd = rlock();
    for g in good {
        cmd.arg("-u").arg(url_of(g.port()));
    }
    cmd.arg("-u").arg(bad);
    let started = Instant::now();
    let (out, _) = crate::common::basic::run_within(
        cmd.args(["exec", "-k", KEY, "--", "true"]),
        Duration::from_secs(15),
    );
    let took = started.elapsed();
    assert_eq!(out.code, 78, "{bad}: {out}");
    assert_eq!(out.stderr.lines().count(), 1, "one line: {out}");
    for needle in needles {
        assert!(out.stderr.contains(needle), "'{needle}' missing: {out}");
    }
    assert!(took < within, "{bad}: refused after {took:?}: {out}");
    for g in good {
        assert_eq!(dbsize(g), 0, "nothing written beside {bad}");
    }
}

#[test]
fn redlock_members_that_are_no_usable_redis_are_78_within_a_second() {
    let nodes = start_nodes(2);
    let good = [&nodes[0], &nodes[1]];
    let second = Duration::from_secs(1);
    refused(
        &good,
        &web_server(),
        second,
        &["HTTP/1.1 400", "Redlock needs Redis masters"],
    );
    // A TLS/plain mismatch, where the server has TLS (a server built without it skips this part).
    if crate::common::tls_or_skip() {
        let certs = TestCerts::new();
        let tls = TlsServer::start(&certs, "no");
        refused(
            &good,
            &format!("redis://127.0.0.1:{}", tls.tls_port),
            second,
            &["answers in TLS", "rediss://"],
        );
        refused(
            &good,
            &format!("rediss://127.0.0.1:{}", tls.server.port()),
            second,
            &["does not speak TLS", "redis://"],
        );
    }
    let cluster = RedisCluster::start();
    refused(
        &good,
        &format!("redis://127.0.0.1:{}", cluster.node(0).port()),
        second,
        &["node of a Redis Cluster", "add --cluster"],
    );
    drop(cluster);
    let set = Sentinels::start("members");
    refused(&good, &set.urls()[0], second, &["Sentinel"]);
}

#[test]
fn redlock_a_replica_member_is_78_naming_its_master() {
    let nodes = start_nodes(2);
    let master = RedisServer::start();
    let mut replica =
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    replica.join(Deployment::Redlock);
    // Writable or not, a replica loses its master's locks with it.
    for read_only in ["yes", "no"] {
        replica.cmd(&["CONFIG", "SET", "replica-read-only", read_only]);
        refused(
            &[&nodes[0], &nodes[1]],
            &url_of(replica.port()),
            Duration::from_secs(5),
            &["is a replica of", &format!("127.0.0.1:{}", master.port())],
        );
    }
}

/// A server that listens on 127.0.0.1, ::1 and a unix socket, with the documented lock user.
fn on_every_address(dir: &Path, commands: &[&str]) -> (RedisServer, String) {
    let socket = dir.join("redis.sock").display().to_string();
    let server = RedisServer::start_with(&[
        "--bind",
        "127.0.0.1",
        "-::1",
        "--unixsocket",
        &socket,
        "--unixsocketperm",
        "700",
    ]);
    set_user(&server, "locker", &LOCK_PATTERNS, commands);
    (server, socket)
}

/// Redlock as the ACL user `locker` over `urls`.
fn as_locker(urls: &[String]) -> Command {
    let mut cmd = rlock();
    cmd.env("RLOCK_PASSWORD", SECRET).args(["--user", "locker"]);
    for u in urls {
        cmd.arg("-u").arg(u);
    }
    cmd
}

#[test]
fn redlock_as_the_documented_acl_user_one_server_under_any_name_is_78() {
    let dir = tempdir();
    let (a, socket) = on_every_address(dir.path(), &redlock_commands());
    let others = [RedisServer::start(), RedisServer::start()];
    for o in &others {
        set_user(o, "locker", &LOCK_PATTERNS, &redlock_commands());
    }
    let p = a.port();
    let proxy = crate::common::Proxy::start(p);
    let aliases = [
        format!("redis://localhost:{p}"),
        format!("redis://[::1]:{p}"),
        format!("unix://{socket}"),
        proxy.url(),
    ];
    for alias in &aliases {
        let out = run(as_locker(&[a.url(), alias.clone(), others[0].url()])
            .args(["exec", "-k", KEY, "--", "true"]));
        assert_eq!(out.code, 78, "{alias} names the first server again: {out}");
        assert!(
            out.stderr.contains("same Redis server") && out.stderr.lines().count() == 1,
            "{out}"
        );
        assert_eq!((dbsize(&a), dbsize(&others[0])), (0, 0), "{alias}");
    }
    // Three servers, one of them named through the proxy: a lock as usual, as that user.
    let out = run(as_locker(&[proxy.url(), others[0].url(), others[1].url()])
        .args(["exec", "-k", KEY, "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    // Without +info a master cannot say which server it is: refused, naming the right, never a
    // comparison of URLs.
    set_user(&a, "locker", &LOCK_PATTERNS, &LOCK_COMMANDS);
    let keys = dbsize(&a);
    for alias in &aliases {
        let out = run(as_locker(&[a.url(), alias.clone(), others[0].url()])
            .args(["exec", "-k", KEY, "--", "true"]));
        assert_eq!(out.code, 78, "{out}");
        assert!(out.stderr.contains("+info"), "{out}");
        assert_eq!(dbsize(&a), keys, "nothing written");
    }
}

#[test]
fn redlock_a_final_release_that_reaches_a_minority_is_69() {
    let nodes = start_nodes(3);
    let dir = tempdir();
    let d = dir.path();
    // A long lease: no renewal comes before the command ends.
    let mut a = Bg::spawn_group(
        "a",
        d,
        redlock(&nodes)
            .args(["exec", "-k", KEY, "--ttl", "30s", "--"])
            .args(["sh", "-c", r#"echo "$RLOCK_TOKEN" > "$D/token"; while [ ! -e "$D/stop" ]; do sleep 0.02; done"#]),
    );
    let token = wait_for_file(d.join("token"), SOON).trim().to_string();
    nodes[1].freeze();
    nodes[2].freeze();
    touch(d.join("stop"));
    let (out, _) = a.finish(FINISH);
    nodes[1].thaw();
    nodes[2].thaw();
    assert_eq!(
        out.code, 69,
        "the release reached one master of three: {out}"
    );
    assert!(
        out.stderr.contains("not released on a majority"),
        "says what is true: {out}"
    );
    assert_eq!(nodes[0].get(LOCK), None, "released where it could be");
    // The others keep it until its lease ends (or a queued release ran when thawed).
    for n in &nodes[1..] {
        let left = n.get(LOCK);
        assert!(left.is_none() || left.as_deref() == Some(token.as_str()));
    }
}
