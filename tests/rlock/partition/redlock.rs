//! Redlock over five masters, each behind its own proxy (scenario 6): a holder cut off from two
//! keeps its majority and runs on; cut off from a third, it is stopped before its validity ends,
//! and a waiter reaching all five directly is served after its last heartbeat.

use super::*;

struct Five {
    servers: Vec<RedisServer>,
    proxies: Vec<Proxy>,
}

fn five() -> Five {
    let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let proxies = servers.iter().map(|s| Proxy::start(s.port())).collect();
    Five { servers, proxies }
}

fn holder(five: &Five, d: &Path) -> Bg {
    let mut a = rlock();
    for p in &five.proxies {
        a.args(["-u", &p.url()]);
    }
    a.args(holder_args("rl")).args(beating("a", 5));
    let mut a = Bg::spawn_group("a", d, &mut a);
    a.wait_for("A's first heartbeat", Duration::from_secs(10), || {
        !stamps(d, "a.beats").is_empty()
    });
    a
}

fn waiter(five: &Five, d: &Path) -> Bg {
    let mut b = rlock();
    for s in &five.servers {
        b.args(["-u", &s.url()]);
    }
    b.args(["exec", "-k", "rl", "-w", "30s", "--"])
        .args(starting("b"));
    Bg::spawn_group("b", d, &mut b)
}

#[test]
fn a_holder_cut_off_from_two_of_five_keeps_its_majority() {
    let five = five();
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let mut a = holder(&five, d);
    five.proxies[0].set(Mode::Blackhole);
    five.proxies[3].set(Mode::Blackhole);
    let mut b = waiter(&five, d);
    let (a_out, _) = a.finish(Duration::from_secs(20));
    assert_eq!(a_out.code, 0, "A keeps three of five: {a_out}");
    assert!(d.join("a.done").exists(), "A's command ran to its end");
    for p in &five.proxies {
        p.heal();
    }
    let (b_out, _) = b.finish(Duration::from_secs(20));
    assert_eq!(b_out.code, 0, "{b_out}");
    assert_no_overlap(d, "a", "b");
}

#[test]
fn a_holder_cut_off_from_three_of_five_is_stopped_in_time() {
    let five = five();
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let mut a = holder(&five, d);
    for i in [0, 2, 4] {
        five.proxies[i].set(Mode::Blackhole);
    }
    let mut b = waiter(&five, d);
    let (a_out, _) = a.finish(Duration::from_secs(20));
    assert_eq!(a_out.code, 76, "A lost its majority: {a_out}");
    assert!(!d.join("a.done").exists(), "A's command was stopped");
    let (b_out, _) = b.finish(Duration::from_secs(20));
    assert_eq!(b_out.code, 0, "{b_out}");
    assert_no_overlap(d, "a", "b");
}
