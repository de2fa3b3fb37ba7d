//! What the server is asked while a figure runs: the requests MONITOR shows, the commands INFO
//! counts, and a queue's length.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use rlock_test_support::RedisServer;

use crate::process::{fail, wait_for};

/// `total_commands_processed` from INFO stats.
pub fn total_commands(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("stats").query(conn).expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("total_commands_processed")
}

pub fn zcard(conn: &mut redis::Connection, key: &str) -> usize {
    redis::cmd("ZCARD").arg(key).query(conn).unwrap_or(0)
}

/// What the server did while a waiter idled.
pub struct Watched {
    /// Requests clients sent, per second: the steady rate (from the server's stamps of the first
    /// and last request) when there were at least two, else the count over the window.
    pub requests: f64,
    /// Commands counted by INFO (requests and the commands scripts ran inside Redis), per second,
    /// at the same rate.
    pub commands: f64,
    /// Raw figures: requests seen, commands counted, window.
    pub seen: usize,
    pub counted: u64,
    pub window: Duration,
}

/// Watches the server for `window`. MONITOR shows each request (stamped by the server) and
/// marks a script's own commands "[0 lua]".
pub fn watch(redis: &RedisServer, window: Duration) -> Watched {
    let mut monitor = TcpStream::connect(("127.0.0.1", redis.port())).expect("connect");
    monitor.write_all(b"MONITOR\r\n").expect("MONITOR");
    monitor
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut lines = BufReader::new(monitor.try_clone().expect("clone"));
    let mut ok = String::new();
    lines.read_line(&mut ok).expect("MONITOR reply");
    let mut info = redis.conn();
    let before = total_commands(&mut info);
    let start = Instant::now();
    let end = start + window;
    let mut stamps: Vec<f64> = Vec::new();
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        monitor.set_read_timeout(Some(left)).expect("timeout");
        let mut line = String::new();
        match lines.read_line(&mut line) {
            Ok(0) => fail("the MONITOR connection closed"),
            Ok(_) => {
                if !line.contains(" lua]") && !line.to_ascii_lowercase().contains("\"info\"") {
                    let stamp = line.trim_start_matches('+').split(' ').next();
                    stamps.push(stamp.and_then(|t| t.parse().ok()).unwrap_or(f64::NAN));
                }
            }
            Err(_) => break,
        }
    }
    let secs = start.elapsed().as_secs_f64();
    // The first INFO is counted after it answers, so it is in the difference.
    let counted = total_commands(&mut info) - before - 1;
    rates(&stamps, counted, secs, window)
}

/// The rates of `watch` from the request stamps it saw and the commands INFO counted.
fn rates(stamps: &[f64], counted: u64, secs: f64, window: Duration) -> Watched {
    let n = stamps.len();
    let span = if n >= 2 {
        stamps[n - 1] - stamps[0]
    } else {
        0.0
    };
    // A steady rate needs a few requests; fewer are counted over the whole window.
    let requests = if n >= 3 && span > 0.0 {
        (n - 1) as f64 / span
    } else {
        n as f64 / secs
    };
    let commands = if n > 0 {
        counted as f64 / n as f64 * requests
    } else {
        counted as f64 / secs
    };
    Watched {
        requests,
        commands,
        seen: n,
        counted,
        window,
    }
}

/// Waits until the server has run no command for 300 ms.
pub fn settle(redis: &RedisServer) {
    let mut info = redis.conn();
    let mut last = total_commands(&mut info);
    let mut quiet_since = Instant::now();
    wait_for("the server to settle", || {
        let now = total_commands(&mut info);
        // Our own INFO counts one.
        if now > last + 1 {
            quiet_since = Instant::now();
        }
        last = now;
        quiet_since.elapsed() > Duration::from_millis(300)
    });
}
