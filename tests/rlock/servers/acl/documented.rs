//! The ACL lines of docs/connecting.md, each used as written (the password aside): every one a
//! working user on the deployment it is for, and a user without the history's rights locking,
//! running and releasing as before.

use super::*;
use crate::common::acl::Deployment;

/// Runs docs/connecting.md's `line` on `server` as written, the password aside (SECRET).
fn apply_documented(server: &RedisServer, line: &str) {
    let line = line.replace(">PASSWORD", &format!(">{SECRET}"));
    let args: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(server.cmd(&args), redis::Value::Okay, "{line}");
}

#[test]
fn acl_every_documented_line_is_a_working_user() {
    let lines = documented_acl_lines();
    assert_eq!(lines.len(), 6, "the lines of the ACL section: {lines:#?}");
    for (line, history) in [
        (documented_acl(AclLine::History), true),
        (documented_acl(AclLine::LockOnly), false),
    ] {
        let server = RedisServer::start();
        apply_documented(&server, &line);
        let mut session = Session {
            server: &server,
            user: acl_user_of(&line),
            outputs: Vec::new(),
            history,
        };
        if let Err(e) = session.lifecycle() {
            panic!("{line}\n{e}\nACL LOG: {:?}", acl_denials(&server, "locker"));
        }
        let denials = acl_denials(&server, "locker");
        if history {
            assert_eq!(denials, Vec::<String>::new(), "{line}");
        } else {
            // What was refused is the history, and nothing else.
            assert!(
                denials.iter().all(|d| d.contains(":history")),
                "{line}: {denials:?}"
            );
        }
    }
    // The additions, each after the first line, on the deployment it is for.
    let cluster = RedisCluster::start();
    let addition = &Deployment::Cluster.addition();
    for node in cluster.nodes() {
        apply_documented(node, &documented_acl(AclLine::History));
        apply_documented(node, addition);
    }
    for name in ["a", "b", "c", "d"] {
        let out = run(clustered_as(&cluster, "locker").args(["exec", "-k", name, "--", "true"]));
        assert_eq!(out.code, 0, "{addition}: {out}");
    }
    for node in cluster.nodes() {
        assert_eq!(acl_denials(node, "locker"), Vec::<String>::new());
    }
    // --replicas, against a real replica.
    let addition = &Deployment::Replicas.addition();
    let master = RedisServer::start();
    let _replica = super::replicas::replica_of(&master);
    apply_documented(&master, &documented_acl(AclLine::History));
    apply_documented(&master, addition);
    let out =
        run(as_user(&master, "locker").args(["exec", "--replicas", "1", "-k", KEY, "--", "true"]));
    assert_eq!(out.code, 0, "{addition}: {out}");
    assert_eq!(acl_denials(&master, "locker"), Vec::<String>::new());
    // Redlock: three masters, each with the first line and the addition.
    let addition = &Deployment::Redlock.addition();
    let masters: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    for m in &masters {
        apply_documented(m, &documented_acl(AclLine::History));
        apply_documented(m, addition);
    }
    let mut redlock = rlock();
    for m in &masters {
        redlock
            .arg("-u")
            .arg(format!("redis://locker:{SECRET}@127.0.0.1:{}", m.port()));
    }
    let out = run(redlock.args(["exec", "-k", KEY, "--", "true"]));
    assert_eq!(out.code, 0, "{addition}: {out}");
    for m in &masters {
        assert_eq!(acl_denials(m, "locker"), Vec::<String>::new(), "{addition}");
    }
    // Behind Sentinels, on both servers (a failover promotes the replica): the right to ask the
    // master its role. The Sentinels have no users; the master's login is --user and the password.
    let addition = &Deployment::Sentinel.addition();
    let set = Sentinels::start("locks");
    for i in 0..2 {
        apply_documented(set.server(i), &documented_acl(AclLine::History));
        apply_documented(set.server(i), addition);
        // What locks is the user: the default one may not run rlock's scripts here.
        set.server(i)
            .cmd(&["ACL", "SETUSER", "default", "-eval", "-evalsha"]);
    }
    let mut behind = rlock();
    behind
        .args(["--sentinel", set.name(), "--user", "locker"])
        .env("RLOCK_PASSWORD", SECRET);
    for url in set.urls() {
        behind.arg("--url").arg(url);
    }
    let out = run(behind.args(["exec", "-k", KEY, "--", "true"]));
    assert_eq!(out.code, 0, "{addition}: {out}");
    assert!(!set.server(0).exists(LOCK), "{addition}: released");
    for i in 0..2 {
        assert_eq!(
            acl_denials(set.server(i), "locker"),
            Vec::<String>::new(),
            "{addition}"
        );
    }
}

/// The three ways an ACL keeps a user out of the history: its key and channels (the documented
/// lock-only line), its command (the first line, less `+xadd`), both.
fn users_without_history(server: &RedisServer) -> Vec<&'static str> {
    apply_documented(
        server,
        &documented_acl(AclLine::LockOnly).replace("SETUSER locker", "SETUSER keys"),
    );
    apply_documented(
        server,
        &documented_acl(AclLine::History)
            .replace("SETUSER locker", "SETUSER commands")
            .replace(" +xadd", ""),
    );
    apply_documented(
        server,
        &documented_acl(AclLine::LockOnly)
            .replace("SETUSER locker", "SETUSER channels")
            .replace("&{rlock:*}:wake*", "&{rlock:*}:wake &{rlock:*}:wake:*"),
    );
    vec!["keys", "commands", "channels"]
}

#[test]
fn acl_a_user_without_history_rights_locks_runs_and_releases_as_before() {
    let server = RedisServer::start();
    for user in users_without_history(&server) {
        for (script, code) in [("exit 0", 0), ("exit 5", 5)] {
            let out =
                run(as_user(&server, user)
                    .args(["-v", "exec", "-k", KEY, "--", "sh", "-c", script]));
            assert_eq!(out.code, code, "{user}: {out}");
            // The lock is free at once: nobody waits for its TTL.
            assert!(
                !server.exists(LOCK),
                "{user}: the lock is still held: {out}"
            );
            let refused: Vec<&str> = out
                .stderr
                .lines()
                .filter(|l| l.contains("not recorded in the history"))
                .collect();
            assert_eq!(refused.len(), 1, "{user}: one -v line: {out}");
            assert!(!out.stderr.contains(SECRET), "{out}");
        }
        let token = crate::common::basic::acquire(&server, KEY, &[]);
        let out = run(as_user(&server, user).args(["exec", "-n", "-k", KEY, "--", "true"]));
        assert_eq!(out.code, 75, "{user}: {out}");
        crate::common::basic::release(&server, KEY, &token);
        // A hold of its own, released: 0, and the lock free.
        let out = run(as_user(&server, user).args(["acquire", "--json", "-k", KEY]));
        assert_eq!(out.code, 0, "{user}: {out}");
        let token = token_of(&out);
        let out = run(as_user(&server, user).args(["release", "-k", KEY, "--token", &token]));
        assert_eq!(out.code, 0, "{user}: {out}");
        assert!(!server.exists(LOCK), "{user}");
        let out = run(as_user(&server, user).args(["acquire", "-k", KEY]));
        assert_eq!(out.code, 0, "{user}: {out}");
        let out = run(as_user(&server, user).args(["release", "-k", KEY, "--force"]));
        assert_eq!(out.code, 0, "{user}: {out}");
        assert!(!server.exists(LOCK), "{user}");
    }
    // Nothing of theirs reached the history: only the default user's holds are on record.
    let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
        .arg("{rlock:k}:history")
        .arg("-")
        .arg("+")
        .query(&mut server.conn())
        .expect("XRANGE");
    let outcomes: Vec<&str> = entries
        .iter()
        .filter_map(|(_, f)| {
            f.windows(2)
                .find(|w| w[0] == "outcome")
                .map(|w| w[1].as_str())
        })
        .collect();
    assert_eq!(outcomes, ["released"; 3], "{entries:?}");
}
