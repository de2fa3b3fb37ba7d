//! Scale-out mistakes are configuration errors (78) at once, never outages a wait rides out: a
//! `--sentinel` URL that is not a Sentinel (a plain Redis, a web server), `--cluster` against a
//! Redis that is not a cluster, a node of a cluster (MOVED) without `--cluster`. Each ends even a
//! plain `exec` (no `-n`, no `-w`) with one line that says which flag to add or drop.

use super::*;
use std::io::{Read, Write};
use std::net::TcpListener;

/// A web server on a free port that answers every connection `400 Bad Request`. Its thread
/// serves until the test binary ends.
pub(super) fn web_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let port = listener.local_addr().expect("local_addr").port();
    thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
            let mut request = [0u8; 4096];
            let _ = conn.read(&mut request);
            let _ = conn.write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    format!("redis://127.0.0.1:{port}")
}

/// Runs `cmd` (which would wait for ever on an outage) and checks that it ends at once with 78
/// and one line holding every one of `needles`.
fn refused_at_once(cmd: &mut Command, needles: &[&str]) {
    let started = Instant::now();
    let (out, _) = crate::common::basic::run_within(cmd, Duration::from_secs(15));
    let took = started.elapsed();
    assert_eq!(out.code, 78, "{out}");
    assert!(out.stdout.is_empty(), "{out}");
    assert_eq!(out.stderr.lines().count(), 1, "one line: {out}");
    for needle in needles {
        assert!(out.stderr.contains(needle), "'{needle}' missing: {out}");
    }
    assert!(
        took < Duration::from_secs(4),
        "a mistake no wait cures took {took:?} to report"
    );
}

/// The commands that would wait: a plain `exec` and a plain `acquire`.
const WAITING: [&[&str]; 2] = [&["exec", "-k", KEY, "--", "true"], &["acquire", "-k", KEY]];

#[test]
fn a_sentinel_url_that_is_not_a_sentinel_is_78_at_once() {
    let plain = RedisServer::start();
    let web = web_server();
    for url in [plain.url(), web] {
        for args in WAITING {
            refused_at_once(
                rlock()
                    .args(["--sentinel", "mymaster", "-u", &url])
                    .args(args),
                &["not a Sentinel", "--sentinel", &url],
            );
        }
    }
    assert_eq!(plain.get(LOCK), None);
}

#[test]
fn cluster_against_a_redis_that_is_not_a_cluster_is_78_at_once() {
    let plain = RedisServer::start();
    for args in WAITING {
        refused_at_once(
            rlock().args(["--cluster", "-u", &plain.url()]).args(args),
            &["not a node of a Redis Cluster", "drop --cluster"],
        );
    }
    assert_eq!(plain.get(LOCK), None);
}

#[test]
fn cluster_against_a_sentinel_is_78_at_once() {
    let set = Sentinels::start("locks");
    for args in WAITING {
        refused_at_once(
            rlock().args(["--cluster", "-u", &set.urls()[0]]).args(args),
            &["not a node of a Redis Cluster", "--sentinel"],
        );
    }
    assert_eq!(set.server(0).get(LOCK), None);
}

#[test]
fn a_cluster_node_without_cluster_is_78_at_once() {
    let cluster = RedisCluster::start();
    // A lock whose slot another master serves: the node answers MOVED.
    let name = key_on(&cluster, 1);
    let url = format!("redis://127.0.0.1:{}", cluster.node(0).port());
    for args in [
        &["exec", "-k", &name, "--", "true"][..],
        &["acquire", "-k", &name][..],
    ] {
        refused_at_once(
            rlock().args(["-u", &url]).args(args),
            &["MOVED", "add --cluster"],
        );
    }
    // Every node of the cluster given as a Redlock master: each says it is a node of a
    // cluster, a mistake, not two masters down.
    let mut redlock = rlock();
    for url in cluster.urls() {
        redlock.arg("-u").arg(url);
    }
    refused_at_once(
        redlock.args(["acquire", "-k", &name]),
        &["node of a Redis Cluster", "add --cluster"],
    );
    assert!(
        !here(cluster.node(1), &format!("rlock:{name}")),
        "given back"
    );
}

#[test]
fn a_cluster_node_answering_ask_without_cluster_is_named_ask() {
    let cluster = RedisCluster::start();
    let name = key_on(&cluster, 0);
    let slot = cluster.slot(&format!("rlock:{name}"));
    // The lock's slot migrates away from node 0 and none of its keys is there: node 0 answers
    // ASK, which is named as such, not as MOVED.
    super::cluster::begin_migration(&cluster, slot, 0, 1);
    let url = format!("redis://127.0.0.1:{}", cluster.node(0).port());
    let mut acquire = rlock();
    refused_at_once(
        acquire.args(["-u", &url, "acquire", "-k", &name]),
        &["answered ASK", "add --cluster"],
    );
    let out = run(rlock().args(["-u", &url, "acquire", "-k", &name]));
    assert!(!out.stderr.contains("MOVED"), "{out}");
    super::cluster::end_migration(&cluster, slot, 0);
}
