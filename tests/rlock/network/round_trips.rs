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
