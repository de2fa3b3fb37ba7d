//! Every field another user or another client can write (the holder's user, host, command,
//! label; the key's name; the state hash's fields) reaches a terminal with its control
//! characters escaped, in every message: busy lines, `release --force`, `-v`, inspect.

use crate::common::basic::*;
use crate::common::{RedisServer, rlock_at, run};

/// OSC 52 (a clipboard write on some terminals), a colour, a bell, C1's CSI, DEL and a
/// bidirectional override.
const HOSTILE: &str = "x\u{1b}]52;c;aGk=\u{7}\u{1b}[31m\u{9b}2J\u{7f}\u{202e}\r\ny";

#[track_caller]
fn assert_escaped(what: &str, text: &str) {
    let raw: Vec<char> = text
        .chars()
        .filter(|&c| (c.is_control() && c != '\n') || ('\u{202a}'..='\u{202e}').contains(&c))
        .collect();
    assert!(raw.is_empty(), "{what} printed {raw:?} raw:\n{text:?}");
}

/// What another user sees of the lock `key`: a busy acquire and exec (with -v), a refused
/// release and renewal, inspect (table, JSON, -v), a `release --force`, and last the history
/// that release left (table and JSON).
fn assert_every_view_escaped(server: &RedisServer, key: &str) {
    for args in [
        &["acquire", "-n", "-k", key][..],
        &["-v", "acquire", "-w", "50ms", "-k", key],
        &["-v", "exec", "-n", "-k", key, "--", "true"],
        &["release", "-k", key, "--token", "not-it"],
        &["-v", "renew", "-k", key, "--token", "not-it"],
        &["inspect"],
        &["-v", "inspect", "-k", key],
        &["inspect", "--json"],
        &["-v", "release", "-k", key, "--force"],
        &["inspect", "--history", "-k", key],
        &["inspect", "--history", "--json", "-k", key],
    ] {
        let out = run(rlock_at(server).args(args));
        assert_escaped(
            &format!("{args:?}"),
            &format!("{}{}", out.stdout, out.stderr),
        );
    }
}

#[test]
fn a_hostile_user_name_is_escaped_in_every_message() {
    let server = RedisServer::start();
    let out = run(rlock_at(&server)
        .env("USER", HOSTILE)
        .args(["acquire", "-k", "k", "--ttl", "1h"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(server.hgetall(&state_key("k"))["user"].contains('\u{1b}'));
    assert_every_view_escaped(&server, "k");
}

#[test]
fn hostile_bytes_in_any_field_or_key_are_escaped_in_every_message() {
    let server = RedisServer::start();
    let token = acquire(&server, "plain", &["--ttl", "1h"]);
    // Another client rewrites the holder record, every field of it, and writes a lock whose
    // name rlock itself would refuse.
    let state = state_key("plain");
    for field in ["host", "user", "cmd", "label", "pidns"] {
        server.cmd(&["HSET", &state, field, &format!("{field}{HOSTILE}")]);
    }
    server.cmd(&["HSET", &state, "pid", &format!("1{HOSTILE}")]);
    let odd = format!("rlock:k{HOSTILE}");
    server.cmd(&["SET", &odd, "t", "PX", "600000"]);
    let odd_state = format!("{{{odd}}}:state");
    server.cmd(&[
        "HSET", &odd_state, "token", "t", "user", HOSTILE, "host", HOSTILE,
    ]);
    server.cmd(&["HSET", &odd_state, "pid", "1", "cmd", HOSTILE, "fence", "3"]);
    assert_eq!(server.get(&lock_key("plain")), Some(token));
    assert_every_view_escaped(&server, "plain");
    // A fence that is no number: the scripts quote it in their refusal.
    acquire(&server, "fenced", &["--ttl", "1h"]);
    server.cmd(&[
        "HSET",
        &state_key("fenced"),
        "fence",
        &format!("7{HOSTILE}"),
    ]);
    assert_every_view_escaped(&server, "fenced");
}
