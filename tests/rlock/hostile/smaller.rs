//! The smaller items: a URL's port stays a port whatever blanks stand around it, and durations
//! read as a person reads them.

use crate::common::basic::*;
use crate::common::{RedisServer, rlock, rlock_at, run};

#[test]
fn blanks_around_a_url_never_turn_its_port_into_stars() {
    let port = dead_port();
    for url in [
        format!("redis://127.0.0.1:{port} "),
        format!("redis://127.0.0.1:{port}\t"),
        format!(" redis://127.0.0.1:{port}"),
    ] {
        let out = run(rlock().args([
            "-u",
            &url,
            "--connect-timeout",
            "0",
            "acquire",
            "-n",
            "-k",
            "blank",
        ]));
        assert!(out.code == 69 || out.code == 78, "{url:?}: {out}");
        assert!(out.stderr.contains(&format!(":{port}")), "{url:?}: {out}");
        assert!(!out.stderr.contains("***"), "{url:?}: {out}");
    }
}

#[test]
fn durations_in_messages_are_rounded_to_what_a_person_reads() {
    let server = RedisServer::start();
    let out = run(rlock_at(&server).args(["-v", "acquire", "-k", "d", "--ttl", "1333333333ns"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stderr.contains("ttl 1s 333ms)"), "{out}");
    let out = run(rlock_at(&server).args([
        "exec",
        "-k",
        "e",
        "--ttl",
        "1s",
        "--grace",
        "333333333ns",
        "--renew-every",
        "900ms",
        "--",
        "true",
    ]));
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("(333ms)"), "{out}");
    assert!(
        !out.stderr.contains("333us") && !out.stderr.contains("333ns"),
        "{out}"
    );
}

#[test]
fn a_key_too_long_for_the_commands_environment_is_refused_before_the_lock_is_taken() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let ran = dir.path().join("ran");
    // $RLOCK_KEY=KEY must fit in one entry of the environment (128 KiB with its NUL).
    let long = "k".repeat(128 * 1024 - 20);
    let out = run(rlock_at(&server)
        .args(["exec", "-k", &long, "--", "touch"])
        .arg(&ran));
    assert_eq!(out.code, 2, "{}", out.stderr);
    assert_eq!(out.stderr.lines().count(), 1, "{}", out.stderr);
    assert!(
        out.stderr
            .contains("too long for the command's environment")
    );
    assert!(
        out.stderr.len() < 400,
        "the message does not repeat the key"
    );
    assert!(!ran.exists(), "the command ran");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.conn())
        .expect("KEYS");
    assert!(keys.is_empty(), "nothing was locked: {} keys", keys.len());
    // A long key that fits runs as ever, and its command sees it whole.
    let fits = "k".repeat(100 * 1024);
    let out = run(rlock_at(&server).args([
        "exec",
        "-k",
        &fits,
        "--",
        "sh",
        "-c",
        "test ${#RLOCK_KEY} -eq 102400",
    ]));
    assert_eq!(out.code, 0, "{}", out.stderr);
}

#[test]
fn a_lock_named_like_another_locks_helper_key_is_refused() {
    let server = RedisServer::start();
    assert_eq!(
        run(rlock_at(&server).args(["exec", "-k", "{t}a", "--", "true"])).code,
        0
    );
    for name in ["{t}a:history", "{t}a:state", "{t}a:q"] {
        for args in [
            &["exec", "-k", name, "--", "true"][..],
            &["acquire", "-n", "-k", name],
            &["inspect", "-k", name],
        ] {
            let out = run(rlock_at(&server).args(args));
            assert_eq!(out.code, 2, "{args:?}: {out}");
            assert!(out.stderr.contains("helper key of lock '{t}a'"), "{out}");
        }
    }
    // The history of `{t}a` is untouched: one run, its own.
    let out = run(rlock_at(&server).args(["inspect", "--history", "--json", "-k", "{t}a"]));
    assert_eq!(out.code, 0, "{out}");
    let runs: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(runs.as_array().map(Vec::len), Some(1), "{out}");
}

#[test]
fn a_servers_huge_error_line_is_cut_to_a_line_a_person_reads() {
    use std::io::{Read, Write};
    // A service that answers every request with an error of 1 MiB: its words are input like
    // any other, and a message shows a line of them.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("local_addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut request = [0u8; 4096];
                let error = format!("-ERR {}\r\n", "x".repeat(1 << 20));
                while conn.read(&mut request).is_ok_and(|n| n > 0) {
                    if conn.write_all(error.as_bytes()).is_err() {
                        break;
                    }
                }
            });
        }
    });
    let url = format!("redis://127.0.0.1:{port}");
    let out = run(rlock().args([
        "-u",
        &url,
        "--connect-timeout",
        "0",
        "acquire",
        "-n",
        "-k",
        "e",
    ]));
    assert_ne!(out.code, 0, "{out}");
    assert_eq!(out.stderr.lines().count(), 1, "{out}");
    assert!(
        out.stderr.len() < 1000,
        "a line of {} bytes",
        out.stderr.len()
    );
    assert!(out.stderr.contains("xxx…"), "{out}");
}
