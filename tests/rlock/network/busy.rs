//! A busy lock is busy at any round trip (75), a silent Redis unavailable (69): one Redis,
//! Redlock of three, Sentinel.

use super::*;
use crate::common::acl::{Deployment, suite_url};
use crate::common::{Mode, RedisServer, Sentinels, rlock, rlock_at, run, wait_until};

/// Time for the holder's lock to show, or a waiter's give-back to arrive.
const SOON: Duration = Duration::from_secs(10);

/// Takes `KEY` for ten minutes with `cmd` (longer than 20 runs of every wait); returns the token.
fn hold(mut cmd: Command) -> String {
    let out = run(cmd.args(["acquire", "-k", KEY, "--ttl", "10m"]));
    assert_eq!(out.code, 0, "the holder's acquire: {out}");
    out.stdout.trim().to_string()
}

/// The holder still holds on `server`, and no waiter is left in line there (a give-back sent
/// as a wait ended arrives a round trip later).
fn only_the_holder(server: &RedisServer, token: &str) {
    assert_eq!(
        server.get(LOCK).as_deref(),
        Some(token),
        "the holder's lock"
    );
    wait_until("the waiters to leave the line", SOON, || {
        !server.exists(QUEUE)
    });
}

fn one_redis(rtt: Rtt) {
    let server = RedisServer::start_across(rtt);
    let token = hold(rlock_at(&server));
    busy_every_time(rtt, || rlock_at(&server));
    only_the_holder(&server, &token);
    server
        .front()
        .expect("behind a network")
        .set(Mode::Blackhole);
    unavailable_every_time(rtt, || rlock_at(&server));
}

#[test]
fn one_redis_a_zone_away_busy_is_75_and_silent_is_69() {
    one_redis(Rtt::ms(ZONE));
}

#[test]
fn one_redis_a_region_away_busy_is_75_and_silent_is_69() {
    one_redis(Rtt::ms(REGION));
}

fn redlock(rtt: Rtt) {
    let nodes: Vec<RedisServer> = (0..3)
        .map(|_| {
            let mut node = RedisServer::start_across(rtt);
            node.join(Deployment::Redlock);
            node
        })
        .collect();
    let cmd = || {
        let mut cmd = rlock();
        for n in &nodes {
            cmd.arg("--url").arg(suite_url(n.port()));
        }
        cmd
    };
    let token = hold(cmd());
    busy_every_time(rtt, cmd);
    for node in &nodes {
        assert_eq!(node.get(LOCK).as_deref(), Some(token.as_str()));
        node.front().expect("behind a network").set(Mode::Blackhole);
    }
    unavailable_every_time(rtt, cmd);
}

#[test]
fn redlock_of_three_a_zone_away_busy_is_75_and_silent_is_69() {
    redlock(Rtt::ms(ZONE));
}

#[test]
fn redlock_of_three_a_region_away_busy_is_75_and_silent_is_69() {
    redlock(Rtt::ms(REGION));
}

fn sentinel(rtt: Rtt) {
    let set = Sentinels::start_across("net", rtt);
    let cmd = || set.rlock();
    let token = hold(cmd());
    busy_every_time(rtt, cmd);
    only_the_holder(set.server(0), &token);
    for i in 0..3 {
        set.sentinel_proxy(i).set(Mode::Blackhole);
    }
    set.proxy(0).set(Mode::Blackhole);
    unavailable_every_time(rtt, cmd);
}

#[test]
fn sentinel_a_zone_away_busy_is_75_and_silent_is_69() {
    sentinel(Rtt::ms(ZONE));
}

#[test]
fn sentinel_a_region_away_busy_is_75_and_silent_is_69() {
    sentinel(Rtt::ms(REGION));
}
