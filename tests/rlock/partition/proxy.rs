//! The fault proxy the partitions are made with: bytes pass both ways, each direction is
//! delayed by its own setting, a closed connection's delayed bytes still arrive, a blackhole
//! reads and answers nothing, a reset closes every connection, and a rule for one process
//! leaves the others alone.

use super::*;

#[test]
fn passes_bytes_both_ways() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut c = connect(proxy.port());
    assert_eq!(ping(&mut c).expect("PING through the proxy"), "+PONG");
    assert_eq!(proxy.open_connections(), 1);
}

#[test]
fn delays_each_direction_by_its_setting() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut c = connect(proxy.port());
    ping(&mut c).expect("PING");
    proxy.set_dir(
        Dir::ToServer,
        Mode::Delay {
            base: Duration::from_millis(150),
            jitter: Duration::from_millis(50),
        },
    );
    let t = Instant::now();
    assert_eq!(ping(&mut c).expect("a delayed PING"), "+PONG");
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(150) && took < Duration::from_millis(450),
        "a request delayed 150–200 ms took {took:?}"
    );
    proxy.set(Mode::Pass);
    let t = Instant::now();
    ping(&mut c).expect("PING");
    assert!(
        t.elapsed() < Duration::from_millis(100),
        "{:?}",
        t.elapsed()
    );
}

#[test]
fn what_a_client_sent_before_closing_still_arrives_late() {
    // As over TCP: a client that gives up on a delayed request does not take it back.
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    proxy.set_dir(
        Dir::ToServer,
        Mode::Delay {
            base: Duration::from_millis(300),
            jitter: Duration::ZERO,
        },
    );
    let mut c = connect(proxy.port());
    c.write_all(b"*3\r\n$3\r\nSET\r\n$4\r\nlate\r\n$1\r\n1\r\n")
        .expect("send a SET");
    wait_until("the proxy to read the SET", Duration::from_secs(5), || {
        proxy.senders() == 1
    });
    drop(c);
    wait_until(
        "the SET sent before closing",
        Duration::from_secs(5),
        || server.exists("late"),
    );
    wait_until(
        "the closed connection to go",
        Duration::from_secs(5),
        || proxy.open_connections() == 0,
    );
}

#[test]
fn a_blackhole_reads_and_answers_nothing_then_heals_with_a_new_connection() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut c = connect(proxy.port());
    ping(&mut c).expect("PING");
    proxy.set(Mode::Blackhole);
    // The write succeeds (the proxy reads it), and no reply ever comes.
    let err = ping(&mut c).expect_err("a reply through a blackhole");
    assert!(
        matches!(
            err.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        "{err}"
    );
    // A new connection is accepted and blackholed too.
    let mut c2 = connect(proxy.port());
    assert!(ping(&mut c2).is_err());
    proxy.heal();
    // The connections that lost bytes are closed on healing; a new one passes.
    let mut buf = [0u8; 8];
    assert_eq!(
        c.read(&mut buf).unwrap_or(0),
        0,
        "the old connection is closed"
    );
    let mut c3 = connect(proxy.port());
    assert_eq!(ping(&mut c3).expect("PING after healing"), "+PONG");
}

#[test]
fn reset_closes_every_connection_and_every_new_one() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut c = connect(proxy.port());
    ping(&mut c).expect("PING");
    proxy.set(Mode::Reset);
    let mut buf = [0u8; 8];
    assert_eq!(c.read(&mut buf).unwrap_or(0), 0, "closed by the reset");
    let mut c2 = connect(proxy.port());
    assert!(
        ping(&mut c2).map_or(true, |r| r.is_empty()),
        "a new connection during a reset must not get a reply"
    );
    proxy.set(Mode::Pass);
    let mut c3 = connect(proxy.port());
    assert_eq!(ping(&mut c3).expect("PING after the reset"), "+PONG");
}

#[test]
fn a_rule_for_one_process_leaves_the_others_alone() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    // Two redis-cli processes: one is cut off, the other is not.
    let cli = |name: &str| {
        let dir = tempfile::tempdir().expect("dir");
        let mut cmd = std::process::Command::new(crate::common::redis_cli_bin());
        cmd.args(["-p", &proxy.port().to_string(), "--raw"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped());
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("redis-cli {name}: {e}"));
        (child, dir)
    };
    let (mut cut, _d1) = cli("cut");
    let (mut kept, _d2) = cli("kept");
    wait_until("both clients to connect", Duration::from_secs(5), || {
        proxy.open_connections() == 2
    });
    proxy.set_for(&[cut.id() as i32], Mode::Blackhole);
    for (child, key) in [(&mut cut, "from_cut"), (&mut kept, "from_kept")] {
        let stdin = child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "SET {key} 1").expect("write to redis-cli");
        stdin.flush().expect("flush");
    }
    wait_until("the kept client's write", Duration::from_secs(5), || {
        server.exists("from_kept")
    });
    // An absence is seen only over time: give the cut client's write every chance.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !server.exists("from_cut"),
        "the blackholed client's write arrived"
    );
    let _ = cut.kill();
    let _ = kept.kill();
    let _ = cut.wait();
    let _ = kept.wait();
}
