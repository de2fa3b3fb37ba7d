//! The history on a Redis Cluster (in the lock's slot, on the lock's master, listed across
//! masters), behind Sentinels (on the master they name), and on Redlock (on every master that
//! answers, read back merged).

use super::*;
use crate::common::acl::{Deployment, suite_url};
use crate::common::{RedisCluster, Sentinels, rlock};

fn clustered(cluster: &RedisCluster) -> Command {
    let mut cmd = rlock();
    cmd.arg("--cluster");
    for url in cluster.urls() {
        cmd.arg("--url").arg(url);
    }
    cmd
}

/// Three independent masters for Redlock.
fn masters() -> Vec<RedisServer> {
    (0..3)
        .map(|_| {
            let mut node = RedisServer::start();
            node.join(Deployment::Redlock);
            node
        })
        .collect()
}

fn redlock(nodes: &[RedisServer]) -> Command {
    let mut cmd = rlock();
    for n in nodes {
        cmd.arg("--url").arg(suite_url(n.port()));
    }
    cmd
}

#[test]
fn on_a_cluster_the_history_is_on_the_locks_master_and_listed_across_masters() {
    let cluster = RedisCluster::start();
    // Keys whose locks live on every master.
    let mut names = Vec::new();
    let mut owners = std::collections::BTreeSet::new();
    for i in 0.. {
        let name = format!("job-{i}");
        if owners.insert(cluster.owner(&format!("rlock:{name}"))) {
            names.push(name);
        }
        if owners.len() == cluster.nodes().len() || i > 1000 {
            break;
        }
    }
    assert!(names.len() > 1, "keys on several masters: {names:?}");
    for name in &names {
        for script in ["exit 0", "exit 4"] {
            let out = run(clustered(&cluster).args(["exec", "-k", name, "--", "sh", "-c", script]));
            assert!(out.code == 0 || out.code == 4, "{out}");
        }
        let history = format!("{{rlock:{name}}}:history");
        assert_eq!(
            cluster.slot(&history),
            cluster.slot(&format!("rlock:{name}"))
        );
        let owner = cluster.owner(&history);
        assert_eq!(
            xlen(cluster.node(owner), &history),
            2,
            "{name} on its lock's master"
        );
        let runs = history_of(clustered(&cluster), name, 10);
        assert_eq!(outcomes(&runs), ["failed", "ok"], "{name}");
    }
    let out = run(clustered(&cluster).args(["inspect", "--history", "--json"]));
    assert_eq!(out.code, 0, "{out}");
    let mut listed: Vec<String> = runs_of(&out)
        .iter()
        .map(|r| r["key"].as_str().unwrap().to_string())
        .collect();
    listed.sort();
    names.sort();
    assert_eq!(
        listed, names,
        "the last run of every lock, on every master: {out}"
    );
}

#[test]
fn on_redlock_every_master_that_answers_keeps_the_run_and_a_reading_merges_them() {
    let mut nodes: Vec<RedisServer> = masters();
    let out = run(redlock(&nodes).args(["exec", "-k", "k", "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    for n in &nodes {
        assert_eq!(
            xlen(n, "{rlock:k}:history"),
            1,
            "every master holds the run"
        );
    }
    // One master down: the run is recorded on the two that answer (the majority holds the lock).
    nodes[2].kill9();
    let out = run(redlock(&nodes).args(["exec", "-k", "k", "--", "false"]));
    assert_eq!(out.code, 1, "{out}");
    for n in &nodes[..2] {
        assert_eq!(xlen(n, "{rlock:k}:history"), 2);
    }
    // The run missing on the dead master's data is no gap, and a run kept twice shows once.
    nodes[2].restart();
    let runs = history_of(redlock(&nodes), "k", 10);
    assert_eq!(outcomes(&runs), ["failed", "ok"], "{runs:#?}");
    let ids: std::collections::HashSet<&str> =
        runs.iter().map(|r| r["run"].as_str().unwrap()).collect();
    assert_eq!(ids.len(), 2);
    // With the first master gone too, the other two (one of them empty) still give both runs.
    nodes[0].kill9();
    let runs = history_of(redlock(&nodes), "k", 10);
    assert_eq!(outcomes(&runs), ["failed", "ok"]);
    let runs = history_of(redlock(&nodes), "k", 1);
    assert_eq!(outcomes(&runs), ["failed"], "-n counts runs, not entries");
}

#[test]
fn on_redlock_a_run_is_on_record_on_every_master_while_it_runs() {
    // Written once the grant is known, with the majority's fence: a reading sees it running,
    // not abandoned, and its end replaces it on every master.
    let nodes = masters();
    let dir = tempdir();
    let stop = dir.path().join("stop");
    let mut rl = Background::spawn(
        "holder",
        dir.path(),
        redlock(&nodes)
            .args(["exec", "-k", "k", "--", "sh", "-c"])
            .arg(r#"while [ ! -e "$1" ]; do sleep 0.02; done"#)
            .arg("sh")
            .arg(&stop),
    );
    rl.wait_for("the run on record on every master", SOON, || {
        nodes.iter().all(|n| xlen(n, "{rlock:k}:history") == 1)
    });
    let runs = history_of(redlock(&nodes), "k", 10);
    assert_eq!(outcomes(&runs), ["running"], "{runs:#?}");
    std::fs::write(&stop, "").unwrap();
    let (out, _) = rl.finish(SOON);
    assert_eq!(out.code, 0, "{out}");
    let runs = history_of(redlock(&nodes), "k", 10);
    assert_eq!(outcomes(&runs), ["ok"], "{runs:#?}");
    for n in &nodes {
        assert_eq!(
            xlen(n, "{rlock:k}:history"),
            1,
            "its start gave way to its end"
        );
    }
}

#[test]
fn on_a_cluster_a_release_records_the_hold_on_the_locks_master() {
    let cluster = RedisCluster::start();
    let out = run(clustered(&cluster).args(["acquire", "--json", "-k", "held", "--label", "pair"]));
    assert_eq!(out.code, 0, "{out}");
    let grant: Value = serde_json::from_str(&out.stdout).unwrap();
    let token = grant["token"].as_str().unwrap();
    let out = run(clustered(&cluster).args(["release", "-k", "held", "--token", token]));
    assert_eq!(out.code, 0, "{out}");
    let history = "{rlock:held}:history";
    let owner = cluster.owner("rlock:held");
    assert_eq!(cluster.owner(history), owner, "in the lock's slot");
    assert_eq!(
        xlen(cluster.node(owner), history),
        1,
        "on the lock's master"
    );
    let runs = history_of(clustered(&cluster), "held", 10);
    assert_eq!(outcomes(&runs), ["released"], "{runs:#?}");
    assert_eq!(
        (&runs[0]["command"], &runs[0]["fence"]),
        (&"pair".into(), &grant["fence"])
    );
}

#[test]
fn on_redlock_a_release_records_the_hold_on_every_master_and_a_reading_shows_it_once() {
    let mut nodes: Vec<RedisServer> = masters();
    let release_of = |nodes: &[RedisServer], label: &str| {
        let out = run(redlock(nodes).args(["acquire", "--json", "-k", "k", "--label", label]));
        assert_eq!(out.code, 0, "{out}");
        let grant: Value = serde_json::from_str(&out.stdout).unwrap();
        let out = run(redlock(nodes).args([
            "release",
            "-k",
            "k",
            "--token",
            grant["token"].as_str().unwrap(),
        ]));
        assert_eq!(out.code, 0, "{out}");
    };
    release_of(&nodes, "first");
    for n in &nodes {
        assert_eq!(
            xlen(n, "{rlock:k}:history"),
            1,
            "every master holds the hold"
        );
    }
    let runs = history_of(redlock(&nodes), "k", 10);
    assert_eq!(outcomes(&runs), ["released"], "one run, once: {runs:#?}");
    // One master down: the two that answer record it.
    nodes[2].kill9();
    release_of(&nodes, "second");
    for n in &nodes[..2] {
        assert_eq!(xlen(n, "{rlock:k}:history"), 2);
    }
    let runs = history_of(redlock(&nodes), "k", 10);
    let labels: Vec<&str> = runs
        .iter()
        .map(|r| r["command"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["second", "first"], "{runs:#?}");
}

#[test]
fn behind_sentinels_the_history_is_on_the_master_they_name() {
    let set = Sentinels::start("locks");
    let out = run(set
        .rlock()
        .args(["exec", "-k", "k", "--", "sh", "-c", "exit 6"]));
    assert_eq!(out.code, 6, "{out}");
    assert_eq!(xlen(set.server(0), "{rlock:k}:history"), 1, "on the master");
    let runs = history_of(set.rlock(), "k", 10);
    assert_eq!(outcomes(&runs), ["failed"]);
    assert_eq!(runs[0]["code"], 6);
}

#[test]
fn on_redlock_a_frozen_master_costs_the_record_a_tenth_of_the_ttl_not_the_op_timeout() {
    let nodes: Vec<RedisServer> = masters();
    // Every script cached on every master first, so that the frozen one fails by its timeout.
    let out = run(redlock(&nodes).args(["exec", "-k", "k", "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    nodes[2].freeze();
    let timed = |extra: &[&str]| {
        let started = std::time::Instant::now();
        let out = run(redlock(&nodes)
            .args(["exec", "-k", "k", "--ttl", "3s"])
            .args(extra)
            .args(["--", "true"]));
        assert_eq!(out.code, 0, "{out}");
        started.elapsed()
    };
    let without = timed(&["--history-limit", "0"]);
    let with = timed(&[]);
    nodes[2].thaw();
    // The record waits at most TTL/10 = 300 ms for the frozen master; a whole --op-timeout
    // (2 s) would show.
    assert!(
        with < without + Duration::from_millis(1000),
        "exec took {with:?} with its record, {without:?} without"
    );
    for n in &nodes[..2] {
        assert_eq!(xlen(n, "{rlock:k}:history"), 2);
    }
}

/// A Redlock release that gives the lock back on one master and finds it taken on the others
/// (lost: 76) records the run once, as lost, under one run ID: not also as the command's own
/// end on the master where the release went through.
#[test]
fn on_redlock_a_run_lost_at_its_release_is_on_record_once() {
    let nodes: Vec<RedisServer> = masters();
    // The command overwrites the lock on two masters: at its end the majority is someone else's.
    let overwrite: Vec<String> = nodes[1..]
        .iter()
        .map(|n| format!("redis-cli -p {} SET rlock:k intruder > /dev/null", n.port()))
        .collect();
    let out =
        run(redlock(&nodes).args(["exec", "-k", "k", "--", "sh", "-c", &overwrite.join("; ")]));
    assert_eq!(out.code, 76, "{out}");
    let runs = history_of(redlock(&nodes), "k", 10);
    assert_eq!(outcomes(&runs), ["lost"], "{runs:#?}");
    let first = xlen(&nodes[0], "{rlock:k}:history");
    assert_eq!(
        first, 1,
        "the master that gave the lock back holds the run once"
    );
}
