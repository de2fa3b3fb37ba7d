//! No polling: a parked waiter sends nothing to Redis while the holder's lease is alive.

use super::*;

// No polling
// ---------------------------------------------------------------------------------------------

#[test]
fn an_idle_waiter_does_not_poll() {
    // Measured, not synchronised: the waiter is left alone for this long.
    const WINDOW: Duration = Duration::from_secs(4);
    let server = RedisServer::start();
    let dir = tempdir();
    hold(&server, "30s");
    let mut info = server.conn();
    let scripts_before = script_calls(&mut info);
    let mut waiter = [Bg::spawn(
        "waiter",
        dir.path(),
        rlock_at(&server).args(["acquire", "-k", KEY, "--ttl", "5s"]),
    )];
    wait_queued(&server, 1, &mut waiter);
    // The waiter's first try queues it; then it subscribes and tries once more (a release may
    // have come in between). Both belong to the start of the wait, not to idling.
    waiter[0].wait_for("the waiter's second try", Duration::from_secs(10), || {
        script_calls(&mut info) >= scripts_before + 2
    });

    // MONITOR shows each request a client sends, and marks the commands a script runs inside
    // Redis with "[0 lua]"; INFO's counter counts both.
    let mut monitor = TcpStream::connect(("127.0.0.1", server.port())).expect("connect");
    monitor.write_all(b"MONITOR\r\n").expect("send MONITOR");
    let mut lines = BufReader::new(monitor.try_clone().expect("clone socket"));
    let mut first = String::new();
    monitor
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    lines.read_line(&mut first).expect("MONITOR reply");
    assert_eq!(first.trim_end(), "+OK", "MONITOR refused");

    let before = total_commands(&mut info);
    let end = Instant::now() + WINDOW;
    let mut requests = Vec::new();
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        monitor.set_read_timeout(Some(left)).unwrap();
        let mut line = String::new();
        match lines.read_line(&mut line) {
            Ok(0) => panic!("the MONITOR connection closed"),
            Ok(_) => {
                let ours = line.to_ascii_lowercase().contains("\"info\"");
                if !line.contains(" lua]") && !ours {
                    requests.push(line.trim_end().to_string());
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break;
            }
            Err(e) => panic!("reading MONITOR: {e}"),
        }
    }
    // The first INFO is counted after it answers, so it is in the difference.
    let total = total_commands(&mut info) - before - 1;
    assert!(waiter[0].running(), "the waiter stopped waiting");

    assert!(
        requests.is_empty() && total == 0,
        "an idle waiter behind a 30 s lease sent {} requests ({total} commands with those its \
         scripts ran) in {WINDOW:?}; it must send none while the lease is alive:\n{}",
        requests.len(),
        requests.join("\n")
    );
    eprintln!(
        "idle waiter: {} requests, {total} commands (with script internals) in {WINDOW:?}",
        requests.len()
    );
}

// ---------------------------------------------------------------------------------------------
