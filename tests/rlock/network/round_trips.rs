//! How many round trips rlock's steps take, counted at the proxy in front of Redis: what the
//! table of docs/waiting.md ("Across a network") says, and a count that must not grow (each
//! costs a whole round trip across zones).

use super::*;
use crate::common::{Dir, Proxy, RedisServer, rlock, run};

/// Requests the client sent through `front` while `f` ran: rlock waits for each reply before it
/// sends again (or sends what it pipelines in one write), so each read counts one round trip.
fn round_trips(front: &Proxy, f: impl FnOnce()) -> usize {
    let before = front.pieces(Dir::ToServer);
    f();
    front.pieces(Dir::ToServer) - before
}

#[test]
fn exec_takes_two_round_trips_a_grant_and_a_renewal_one_each() {
    let server = RedisServer::start_across(Rtt::ms(ZONE));
    let front = server.front().expect("behind a network");
    let url = server.url();
    let at = |args: &[&str]| {
        let mut cmd = rlock();
        cmd.args(["--url", &url]).args(args);
        run(&mut cmd)
    };
    // The first use of a script on a server loads it (NOSCRIPT, then the script): not counted.
    assert_eq!(at(&["exec", "-k", "warm", "--", "true"]).code, 0);
    let warm = at(&["acquire", "-k", "warm"]).stdout.trim().to_string();
    assert_eq!(at(&["renew", "-k", "warm", "--token", &warm]).code, 0);

    let n = round_trips(front, || {
        let out = at(&["exec", "-k", "x", "--", "true"]);
        assert_eq!(out.code, 0, "{out}");
    });
    assert_eq!(
        n, 2,
        "exec -- true: the grant, then the release with its record"
    );
    let mut token = String::new();
    let n = round_trips(front, || {
        let out = at(&["acquire", "-k", "y"]);
        assert_eq!(out.code, 0, "{out}");
        token = out.stdout.trim().to_string();
    });
    assert_eq!(n, 1, "a grant");
    let n = round_trips(front, || {
        let out = at(&["renew", "-k", "y", "--token", &token]);
        assert_eq!(out.code, 0, "{out}");
    });
    assert_eq!(n, 1, "a renewal");
}

#[test]
fn exec_on_a_cluster_takes_two_round_trips_to_the_locks_master() {
    // The run's entry goes with the grant, and its end with the release, in one write to the
    // slot's master each, as on one server.
    let cluster = crate::common::RedisCluster::start_masters_behind_proxies();
    let at = |args: &[&str]| {
        let mut cmd = rlock();
        cmd.arg("--cluster");
        for url in cluster.urls() {
            cmd.arg("--url").arg(url);
        }
        run(cmd.args(args))
    };
    let pieces = || -> Vec<usize> {
        (0..3)
            .map(|i| {
                cluster
                    .client_proxy(i)
                    .expect("behind proxies")
                    .pieces(Dir::ToServer)
            })
            .collect()
    };
    // The scripts loaded on the lock's master first.
    assert_eq!(at(&["exec", "-k", "x", "--", "true"]).code, 0);
    let before = pieces();
    let out = at(&["exec", "-k", "x", "--", "true"]);
    assert_eq!(out.code, 0, "{out}");
    let sent: Vec<usize> = pieces().iter().zip(&before).map(|(a, b)| a - b).collect();
    let master = (0..3)
        .find(|&i| {
            matches!(
                cluster.node(i).try_cmd(&["EXISTS", "{rlock:x}:history"]),
                Ok(redis::Value::Int(1))
            )
        })
        .expect("the run on record on the lock's master");
    assert!(
        sent.iter().sum::<usize>() == 3 && sent[master] >= 2,
        "the slot map from one node, then the grant and the release on node {master}: {sent:?}"
    );
}
