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
