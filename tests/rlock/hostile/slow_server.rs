//! Hostile, round four: a server that answers slowly or without end. `--op-timeout` bounds a
//! whole reply, not the gap between two bytes, and a reply larger than rlock holds is refused
//! at the header that announces it: every run ends within `-w` + `--op-timeout` + 1 s, its peak
//! memory small, whatever the server sends. The liar lets every request reach a real server,
//! so the grants it hides are real, and each test checks they were given back.

use std::time::Duration;

use crate::common::basic::*;
use crate::common::liar::{Liar, Lie, grant_request, script_with_argument};
use crate::common::peak::{Measured, run_measured};
use crate::common::{RedisServer, rlock};

/// The most memory a run may take, whatever the server sends.
const PEAK_KIB: u64 = 64 * 1024;

/// `-w 3s --op-timeout 1s`: every run must end within 5 s.
const WAIT: Duration = Duration::from_secs(3);
const OP_TIMEOUT: Duration = Duration::from_secs(1);
const BOUND: Duration = Duration::from_secs(5);

/// A grant as acquire.lua sends it.
const GRANT: &[u8] = b"*5\r\n$2\r\nok\r\n$5\r\nfence\r\n:7\r\n$3\r\nttl\r\n:30000\r\n";

/// `rlock exec -w 3s --op-timeout 1s -k KEY -- touch RAN` through `liar`, measured.
fn exec_through(liar: &Liar, key: &str, ran: &std::path::Path) -> Measured {
    run_measured(
        rlock()
            .args([
                "-u",
                &liar.url(),
                "--op-timeout",
                "1s",
                "exec",
                "-w",
                "3s",
                "-k",
                key,
            ])
            .args(["--", "touch"])
            .arg(ran),
    )
}

/// The line a run ended with (a wait says on an earlier line when an outage began).
fn last_line(run: &Measured) -> &str {
    run.out.stderr.lines().last().unwrap_or_default()
}

fn assert_bounded(what: &str, run: &Measured) {
    assert!(
        run.took < WAIT + OP_TIMEOUT + Duration::from_secs(1),
        "{what}: took {:?} (bound {BOUND:?}): {}",
        run.took,
        run.out
    );
    assert!(
        run.peak_kib < PEAK_KIB,
        "{what}: peak {} KiB: {}",
        run.peak_kib,
        run.out
    );
}

#[test]
fn a_grant_trickled_a_byte_at_a_time_ends_within_the_wait_and_is_given_back() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let ran = dir.path().join("ran");
    // Each byte comes well within --op-timeout of the one before: only a bound on the whole
    // reply ends it.
    let liar = Liar::start(
        server.port(),
        grant_request,
        Lie::Trickle(GRANT.to_vec(), Duration::from_millis(300)),
    );
    let run = exec_through(&liar, "trickle", &ran);
    assert_eq!(run.out.code, 69, "{}", run.out);
    assert!(last_line(&run).contains("timed out"), "{}", run.out);
    assert_bounded("trickle", &run);
    assert!(liar.told() >= 1);
    assert!(!ran.exists(), "the command ran");
    assert!(!server.exists(&lock_key("trickle")), "{}", run.out);
}

#[test]
fn a_reply_past_the_limits_is_refused_at_once_with_memory_to_spare() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let cases: [(&str, &[u8], &[u8], &str); 4] = [
        // A 4 GiB bulk string, its data streamed without end.
        (
            "4 GiB bulk",
            b"$4294967296\r\n",
            b"x",
            "bytes in a bulk string",
        ),
        // An array announced huge.
        (
            "huge array",
            b"*4294967295\r\n",
            b":1\r\n",
            "values in a reply",
        ),
        // Arrays within arrays, each announced within the limit, streamed without end.
        (
            "nested arrays",
            b"*65000\r\n",
            b"*65000\r\n",
            "values in a reply",
        ),
        // A line that never ends.
        ("endless line", b"*5\r\n+", b"x", "bytes in a reply"),
    ];
    for (i, (what, head, filler, limit)) in cases.into_iter().enumerate() {
        let liar = Liar::start(
            server.port(),
            grant_request,
            Lie::Stream {
                head: head.to_vec(),
                filler: filler.to_vec(),
            },
        );
        let key = format!("big{i}");
        let ran = dir.path().join(&key);
        let run = exec_through(&liar, &key, &ran);
        assert_eq!(run.out.code, 69, "{what}: {}", run.out);
        let line = last_line(&run);
        assert!(
            line.contains("over rlock's limit") && line.contains(limit),
            "{what}: {}",
            run.out
        );
        assert_bounded(what, &run);
        assert!(!ran.exists(), "{what}: the command ran");
        assert!(!server.exists(&lock_key(&key)), "{what}: {}", run.out);
    }
}

#[test]
fn exec_exits_on_time_when_the_release_trickles() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let ran = dir.path().join("ran");
    let liar = Liar::start(
        server.port(),
        |words| script_with_argument(words, b"force"),
        // A reply whose end is a long way off at this pace.
        Lie::Trickle(
            [b"$100\r\n".as_slice(), &[b'1'; 100], b"\r\n"].concat(),
            Duration::from_millis(300),
        ),
    );
    let run = exec_through(&liar, "exit", &ran);
    assert!(ran.exists(), "the command did not run: {}", run.out);
    assert!(liar.told() >= 1, "the release was not lied to: {}", run.out);
    // The command is `touch`: everything after it is the release, bounded by --op-timeout.
    assert_bounded("release", &run);
    assert!(
        run.took < OP_TIMEOUT + Duration::from_secs(2),
        "took {:?}: {}",
        run.took,
        run.out
    );
}

#[test]
fn a_wake_channel_that_streams_without_end_costs_the_waiter_no_memory() {
    let server = RedisServer::start();
    let holder = acquire(&server, "sub", &[]);
    let dir = tempfile::tempdir().expect("temp dir");
    let ran = dir.path().join("ran");
    let liar = Liar::start(
        server.port(),
        |words| {
            words
                .first()
                .is_some_and(|w| w.eq_ignore_ascii_case(b"SUBSCRIBE"))
        },
        Lie::Stream {
            head: b"$4294967296\r\n".to_vec(),
            filler: b"x".to_vec(),
        },
    );
    let run = exec_through(&liar, "sub", &ran);
    assert_eq!(run.out.code, 75, "{}", run.out);
    assert!(liar.told() >= 1, "no subscription was lied to: {}", run.out);
    assert_bounded("subscription", &run);
    assert!(!ran.exists(), "the command ran");
    assert_eq!(
        server.get(&lock_key("sub")).as_deref(),
        Some(holder.as_str())
    );
}
