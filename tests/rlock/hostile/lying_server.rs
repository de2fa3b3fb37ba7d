//! Hostile, round four: a server that lies in its grant. The liar (`common::liar`) lets every
//! request reach a real server, so the grant it hides or garbles is real: each test checks that
//! rlock gave it back at once (the real key is free when rlock has exited) and that the command
//! never started.

use crate::common::basic::*;
use crate::common::liar::{Liar, Lie, grant_request};
use crate::common::{RedisServer, rlock, run};

/// acquire.lua's grant, as a server sends it: "ok", then the fields by name.
fn grant(fence: &str, ttl: &str) -> Vec<u8> {
    format!("*5\r\n$2\r\nok\r\n$5\r\nfence\r\n:{fence}\r\n$3\r\nttl\r\n:{ttl}\r\n").into_bytes()
}

/// Replies to a grant that rlock must not believe, by what is wrong with them.
fn lies() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("fence -1", grant("-1", "30000")),
        ("fence 0", grant("0", "30000")),
        ("fence 2^53", grant("9007199254740992", "30000")),
        ("fence 2^53+1", grant("9007199254740993", "30000")),
        ("fence 2^63-1", grant("9223372036854775807", "30000")),
        ("fence past i64", grant("9223372036854775808", "30000")),
        ("ttl 0", grant("7", "0")),
        ("ttl -5", grant("7", "-5")),
        (
            "no fence",
            b"*3\r\n$2\r\nok\r\n$3\r\nttl\r\n:30000\r\n".to_vec(),
        ),
        (
            "a fence that is text",
            b"*5\r\n$2\r\nok\r\n$5\r\nfence\r\n$3\r\nabc\r\n$3\r\nttl\r\n:30000\r\n".to_vec(),
        ),
        ("not a list", b"+ok\r\n".to_vec()),
        ("a word no script says", b"*1\r\n$7\r\ngranted\r\n".to_vec()),
        ("not RESP", b"@@@ nonsense\r\n".to_vec()),
    ]
}

#[test]
fn a_grant_rlock_cannot_believe_is_given_back_and_the_command_never_runs() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    for (i, (what, reply)) in lies().into_iter().enumerate() {
        let liar = Liar::start(server.port(), grant_request, Lie::Reply(reply));
        let key = format!("lie{i}");
        let ran = dir.path().join(format!("ran{i}"));
        let out = run(rlock()
            .args([
                "-u",
                &liar.url(),
                "--op-timeout",
                "2s",
                "exec",
                "-n",
                "-k",
                &key,
                "--",
                "touch",
            ])
            .arg(&ran));
        assert_eq!(out.code, 69, "{what}: {out}");
        assert_one_line(&out, 69);
        assert!(liar.told() >= 1, "{what}: the liar was never asked");
        assert!(!ran.exists(), "{what}: the command ran");
        assert!(
            !server.exists(&lock_key(&key)),
            "{what}: the real grant was not given back: {out}"
        );
        // Free for anyone else at once.
        let other = acquire(&server, &key, &["-n"]);
        release(&server, &key, &other);
    }
}

#[test]
fn acquire_prints_no_fence_it_cannot_believe_and_holds_nothing() {
    let server = RedisServer::start();
    for (what, reply) in [
        ("fence -1", grant("-1", "30000")),
        ("fence 2^53+1", grant("9007199254740993", "30000")),
        ("ttl 0", grant("7", "0")),
    ] {
        let liar = Liar::start(server.port(), grant_request, Lie::Reply(reply));
        let out = run(rlock().args(["-u", &liar.url(), "acquire", "--json", "-n", "-k", "j"]));
        assert_eq!(out.code, 69, "{what}: {out}");
        assert_eq!(out.stdout, "", "{what}: {out}");
        assert!(
            out.stderr.contains("the grant was given back"),
            "{what}: {out}"
        );
        assert!(!server.exists(&lock_key("j")), "{what}: {out}");
    }
}

#[test]
fn a_waiter_lied_to_gives_back_every_try_and_ends_within_its_wait() {
    let server = RedisServer::start();
    let liar = Liar::start(
        server.port(),
        grant_request,
        Lie::Reply(grant("0", "30000")),
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let ran = dir.path().join("ran");
    let (out, took) = run_within(
        rlock()
            .args([
                "-u",
                &liar.url(),
                "--op-timeout",
                "1s",
                "exec",
                "-w",
                "2s",
                "-k",
                "w",
                "--",
                "touch",
            ])
            .arg(&ran),
        std::time::Duration::from_secs(20),
    );
    assert_eq!(out.code, 69, "{out}");
    assert!(
        took < std::time::Duration::from_secs(4),
        "took {took:?}: {out}"
    );
    assert!(!ran.exists(), "the command ran");
    assert!(!server.exists(&lock_key("w")), "{out}");
}
