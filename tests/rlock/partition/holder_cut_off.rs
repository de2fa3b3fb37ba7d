//! A holder cut off from Redis by a blackhole on its own link (scenario 4): with `--ttl 3s
//! --renew-every 500ms --grace 300ms --op-timeout 250ms` it rides out a cut of half its TTL
//! (renewals fail, and one succeeds before deadline − grace), and is stopped (76) before its
//! lease can lapse when the cut lasts 0.9× or 1.5× its TTL. A waiter talking to Redis directly
//! is served only after the holder's last heartbeat, in every case.

use super::*;

const TTL: Duration = Duration::from_secs(3);

fn cut_for(fraction: f64) -> (crate::common::Output, tempfile::TempDir) {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let mut a = rlock();
    a.args(["-u", &proxy.url(), "--op-timeout", "250ms"])
        .args(["exec", "-k", "cut", "--ttl", "3s", "--renew-every", "500ms"])
        .args(["--grace", "300ms", "--"])
        .args(beating("a", 6));
    let mut a = Bg::spawn_group("a", d, &mut a);
    a.wait_for("A's first heartbeat", Duration::from_secs(10), || {
        !stamps(d, "a.beats").is_empty()
    });
    // A waiter that reaches Redis directly, queued before the cut.
    let mut b = rlock();
    b.args(["-u", &server.url(), "exec", "-k", "cut", "-w", "30s", "--"])
        .args(starting("b"));
    let mut b = Bg::spawn_group("b", d, &mut b);
    b.wait_for("B to queue", Duration::from_secs(10), || {
        matches!(
            server.try_cmd(&["ZCARD", "{rlock:cut}:q"]),
            Ok(redis::Value::Int(1))
        )
    });
    proxy.set(Mode::Blackhole);
    let cut = Instant::now();
    let length = TTL.mul_f64(fraction);
    wait_until("the cut to last", length + Duration::from_secs(5), || {
        cut.elapsed() >= length
    });
    proxy.heal();
    let (a_out, _) = a.finish(Duration::from_secs(20));
    let (b_out, _) = b.finish(Duration::from_secs(20));
    assert_eq!(b_out.code, 0, "the waiter: {b_out}");
    assert_no_overlap(d, "a", "b");
    (a_out, dir)
}

#[test]
fn half_the_ttl_is_ridden_out() {
    let (a, dir) = cut_for(0.5);
    assert_eq!(a.code, 0, "a cut of half the TTL must be ridden out: {a}");
    assert!(
        dir.path().join("a.done").exists(),
        "A's command ran to its end"
    );
}

#[test]
fn nine_tenths_of_the_ttl_stops_the_holder_in_time() {
    let (a, dir) = cut_for(0.9);
    assert_eq!(a.code, 76, "{a}");
    assert!(
        !dir.path().join("a.done").exists(),
        "A's command was stopped"
    );
}

#[test]
fn one_and_a_half_ttls_stop_the_holder_in_time() {
    let (a, dir) = cut_for(1.5);
    assert_eq!(a.code, 76, "{a}");
    assert!(
        !dir.path().join("a.done").exists(),
        "A's command was stopped"
    );
}
