//! A partition cannot make two holders: links cut, slowed and blackholed by the fault proxy on
//! loopback while both ends live, for one server, a Redlock quorum, Sentinel and Cluster (split
//! brain). Safety is judged by the commands' own heartbeats: a holder's command stamps the time
//! every ~20 ms, the next holder's command stamps its start, and no stamp of the first may come at
//! or after it.

use crate::common::{Background as Bg, Dir, Mode, Proxy, RedisServer, rlock, wait_until};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

// The fault proxy itself (`proxy`), and the partitions, one file each.
mod cluster_split_brain;
mod holder_cut_off;
mod late_give_back;
mod proxy;
mod redlock;
mod sentinel_split_brain;
mod slow_links;

/// A command that stamps the time (ns) into `$D/<name>.beats` every ~20 ms for `secs` seconds,
/// or until `$D/<name>.stop` exists, then writes `$D/<name>.done`.
fn beating(name: &str, secs: u32) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            r#"end=$(( $(date +%s) + {secs} )); while [ "$(date +%s)" -lt "$end" ] && [ ! -e "$D/{name}.stop" ]; do date +%s%N >> "$D/{name}.beats"; sleep 0.02; done; touch "$D/{name}.done""#
        ),
    ]
}

/// The lease of the split-brain holders (docs/safety.md's table is measured with it), and the
/// bounds of each scenario are counted from it.
const TTL: Duration = Duration::from_secs(3);
const RENEW_EVERY: Duration = Duration::from_millis(500);
const GRACE: Duration = Duration::from_millis(300);
/// What one renewal may take. The lease stops a renewal at the lost-signal whatever this is, so
/// it changes nothing in what a partition can do; it only has to let a renewal through on a
/// loaded machine: a round trip through the fault proxies (threads of the test process) takes
/// up to some 400 ms on two busy cores, and one on a fresh connection needs two, while a
/// renewal through Sentinels gets half of this after asking them.
const OP_TIMEOUT: Duration = Duration::from_secs(1);

/// How long after rlock's lost-signal the stopped command may still beat: the signal's way to
/// its group, and a beat already under way.
const STOPPED_WITHIN: Duration = Duration::from_millis(300);

/// `--op-timeout … exec -k KEY --ttl … --renew-every … --grace … --` with the lease above.
fn holder_args(key: &str) -> Vec<String> {
    let ms = |d: Duration| format!("{}ms", d.as_millis());
    [
        "--op-timeout",
        &ms(OP_TIMEOUT),
        "exec",
        "-k",
        key,
        "--ttl",
        &ms(TTL),
        "--renew-every",
        &ms(RENEW_EVERY),
        "--grace",
        &ms(GRACE),
        "--",
    ]
    .map(String::from)
    .to_vec()
}

/// A command that stamps its start into `$D/<name>.start` and ends.
fn starting(name: &str) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!(r#"date +%s%N > "$D/{name}.start""#),
    ]
}

fn stamps(dir: &Path, file: &str) -> Vec<i128> {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// A's last heartbeat came before B's command started.
fn assert_no_overlap(dir: &Path, a: &str, b: &str) {
    let beats = stamps(dir, &format!("{a}.beats"));
    let start = stamps(dir, &format!("{b}.start"));
    let (Some(last), Some(start)) = (beats.last(), start.first()) else {
        panic!(
            "no heartbeat of {a} ({} stamps) or no start of {b}",
            beats.len()
        );
    };
    assert!(
        last < start,
        "{a}'s command beat {:.1} ms after {b}'s command started",
        (last - start) as f64 / 1e6
    );
}

/// A plain RESP exchange through a socket: the reply's first line, or the read's error.
fn ping(stream: &mut TcpStream) -> std::io::Result<String> {
    stream.write_all(b"*1\r\n$4\r\nPING\r\n")?;
    let mut buf = [0u8; 64];
    let n = stream.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).trim_end().to_string())
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the proxy");
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .expect("read timeout");
    s
}

/// How far A's heartbeats ran past B's start: positive is an overlap (ms), negative a gap.
fn overlap_ms(dir: &Path, a: &str, b: &str) -> f64 {
    let beats = stamps(dir, &format!("{a}.beats"));
    let start = stamps(dir, &format!("{b}.start"));
    match (beats.last(), start.first()) {
        (Some(last), Some(start)) => (last - start) as f64 / 1e6,
        _ => panic!(
            "no heartbeat of {a} ({} stamps) or no start of {b}",
            beats.len()
        ),
    }
}
