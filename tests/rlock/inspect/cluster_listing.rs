//! One node of a Redis Cluster is never listed as the whole cluster, and the check costs nothing
//! without a listing.

use super::*;

/// How many INFO commands the server has run (INFO commandstats; the asking INFO is counted by
/// the next one).
fn info_calls(server: &RedisServer) -> u64 {
    let text: String =
        redis::from_redis_value(server.cmd(&["INFO", "commandstats"])).expect("INFO commandstats");
    text.lines()
        .find_map(|l| l.strip_prefix("cmdstat_info:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn listing_one_node_of_a_cluster_is_refused_with_a_hint() {
    let cluster = RedisCluster::start();
    let urls = cluster.urls();
    let with_cluster = || {
        let mut cmd = rlock();
        cmd.arg("--cluster");
        for url in &urls {
            cmd.args(["--url", url]);
        }
        cmd
    };
    // Locks on every master.
    let mut names = Vec::new();
    let mut owners = std::collections::BTreeSet::new();
    for i in 0..1000 {
        let name = format!("job{i}");
        if owners.insert(cluster.owner(&format!("rlock:{name}"))) {
            let out = run(with_cluster().args(["acquire", "-k", &name, "--ttl", "1m"]));
            assert_eq!(out.code, 0, "{out}");
            names.push(name);
        }
        if owners.len() == 3 {
            break;
        }
    }
    assert_eq!(names.len(), 3, "no key found for every master");

    let out = run(rlock_at(cluster.node(0)).arg("inspect"));
    assert_eq!(out.code, 78, "{out}");
    assert!(out.stderr.contains("add --cluster"), "{out}");
    assert!(out.stderr.contains("Redis Cluster"), "{out}");
    assert_eq!(out.stdout, "", "{out}");
    assert_eq!(out.stderr.lines().count(), 1, "{out}");

    let out = run(with_cluster().args(["inspect", "--json"]));
    assert_eq!(out.code, 0, "{out}");
    let json: Value = serde_json::from_str(&out.stdout).expect("JSON");
    let mut listed: Vec<&str> = json
        .as_array()
        .expect("array")
        .iter()
        .filter_map(|l| l["key"].as_str())
        .collect();
    listed.sort();
    let mut want: Vec<&str> = names.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(listed, want, "{out}");
}

#[test]
fn the_cluster_check_costs_nothing_without_a_listing_and_needs_no_info_right() {
    let server = RedisServer::start();
    let out = run(rlock_at(&server).args(["acquire", "-k", "mine", "--ttl", "1m"]));
    assert_eq!(out.code, 0, "{out}");

    // inspect -k sends no INFO; a listing sends one.
    let before = info_calls(&server);
    let out = run(rlock_at(&server).args(["inspect", "-k", "mine"]));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(info_calls(&server), before + 1, "inspect -k asked INFO");
    let before = info_calls(&server);
    let out = run(rlock_at(&server).arg("inspect"));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        info_calls(&server),
        before + 2,
        "the listing did not ask INFO once"
    );

    // A user who may not run INFO still gets the listing.
    server.cmd(&[
        "ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info",
    ]);
    let url = format!("redis://noinfo:pw@127.0.0.1:{}", server.port());
    let out = run(rlock().args(["--url", &url, "inspect"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.lines().any(|l| l.starts_with("mine ")), "{out}");
    // INFO is a plain command (no script may ask it on every service): the ACL LOG keeps the
    // one refusal, and nothing else.
    let log: Vec<redis::Value> = redis::cmd("ACL")
        .arg("LOG")
        .query(&mut server.conn())
        .expect("ACL LOG");
    assert!(log.len() <= 1, "refused: {log:?}");
}
