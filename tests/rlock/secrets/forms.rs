//! Secrets in every form users write them (the issue's list), on the command line of a shell
//! that runs `acquire` and in the command of an `exec`: never in any key rlock writes, in
//! `inspect` (table and JSON), in a busy waiter's message or in `-v` output.

use std::time::Duration;

use crate::common::basic::*;
use crate::common::{RedisServer, rlock_at, run, wait_for_file};

/// The forms, each with its own secret; every secret holds `S3C`.
const FORMS: &[&str] = &[
    "mysql -pS3C01 db",
    "app -aS3C02",
    "sshpass -pS3C03 ssh h",
    "sh -c 'mysql -pS3C04 db'",
    "sh -c \"deploy --password 'S3C05 15'\"",
    "docker run --env=MYSQL_ROOT_PASSWORD=S3C06 x",
    "docker run -e MYSQL_ROOT_PASSWORD=S3C07 x",
    "curl -u user:S3C08 https://h",
    "curl -H 'Authorization: Bearer S3C09' https://h",
    "GITHUB_PAT=S3C10 ./release",
    "helm upgrade a c --set db.password=S3C11",
    "git clone https://S3C12@github.com/o/r",
    "curl -H 'X-Api-Key: S3C13' https://h",
    "export API_TOKEN=S3C14",
];

/// Every key in the server, every field and member of it, as text.
fn dump_everything(server: &RedisServer) -> String {
    let mut conn = server.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).expect("KEYS");
    let mut dump = String::new();
    for key in keys {
        let value: redis::Value = match server.key_type(&key).as_str() {
            "string" => server.cmd(&["GET", &key]),
            "hash" => server.cmd(&["HGETALL", &key]),
            "list" => server.cmd(&["LRANGE", &key, "0", "-1"]),
            "set" => server.cmd(&["SMEMBERS", &key]),
            "zset" => server.cmd(&["ZRANGE", &key, "0", "-1", "WITHSCORES"]),
            "stream" => server.cmd(&["XRANGE", &key, "-", "+"]),
            other => panic!("{key} is a {other}, which this test does not read"),
        };
        dump.push_str(&format!("{key}: {value:?}\n"));
    }
    dump
}

/// The words of `form` as the shell splits them.
fn words(form: &str) -> Vec<String> {
    let out = run(&mut sh(&format!("printf '%s\\n' {form}")));
    assert_eq!(out.code, 0, "{out}");
    out.stdout.lines().map(String::from).collect()
}

#[track_caller]
fn assert_nowhere(what: &str, text: &str) {
    assert!(!text.contains("S3C"), "{what} shows a secret:\n{text}");
}

/// Redis, inspect (table, JSON, -v) and a busy waiter's message, for the lock `key`.
fn assert_no_secret_anywhere(server: &RedisServer, key: &str) {
    assert_nowhere("Redis", &dump_everything(server));
    for args in [
        &["inspect"][..],
        &["inspect", "--json"],
        &["inspect", "-k", key],
        &["inspect", "--json", "-k", key],
        &["-v", "inspect", "-k", key],
        &["-v", "acquire", "-n", "-k", key],
        &["-v", "exec", "-n", "-k", key, "--", "true"],
    ] {
        let out = run(rlock_at(server).args(args));
        assert_nowhere(&format!("{args:?}"), &format!("{out}"));
    }
}

#[test]
fn secrets_on_the_calling_shells_command_line_are_masked_in_every_form() {
    let server = RedisServer::start();
    for (i, form) in FORMS.iter().enumerate() {
        let key = format!("shell{i}");
        // The shell runs rlock and goes on (`; :`), so the holder recorded is the shell, with
        // the form on its command line.
        let script = format!(
            "\"$RL\" -u {} acquire --record-args -k {key} --ttl 1h >/dev/null; : {form}",
            server.url()
        );
        let out = run(&mut sh(&script));
        assert_eq!(out.code, 0, "{form}\n{out}");
        let cmd = server.hgetall(&state_key(&key))["cmd"].clone();
        assert!(cmd.contains("acquire --record-args -k"), "{form}: {cmd}");
        assert_no_secret_anywhere(&server, &key);
    }
}

#[test]
fn secrets_in_an_execs_command_are_masked_in_every_form() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    for (i, form) in FORMS.iter().enumerate() {
        let key = format!("exec{i}");
        let started = dir.path().join(format!("started{i}"));
        // The form's words are the command's own arguments; `sh -c` only waits.
        let mut cmd = rlock_at(&server);
        cmd.args(["exec", "--record-args", "-k", &key, "--", "sh", "-c"])
            .arg(r#"echo up > "$1"; sleep 30"#)
            .arg("sh")
            .arg(&started)
            .args(words(form));
        let mut child = cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn exec");
        wait_for_file(&started, Duration::from_secs(10));
        assert_no_secret_anywhere(&server, &key);
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = child.wait();
    }
}

#[test]
fn by_default_only_the_programs_name_is_recorded_and_program_only_changes_nothing() {
    let server = RedisServer::start();
    for (i, extra) in [&[][..], &["--program-only"]].iter().enumerate() {
        let key = format!("p{i}");
        let out = run(rlock_at(&server)
            .arg("exec")
            .args(*extra)
            .args(["-k", &key, "--", "/bin/sh", "-c"])
            .arg("rlock inspect >/dev/null; : --opaque-secret-form S3C")
            .args(FORMS.iter().flat_map(|f| words(f))));
        assert_eq!(out.code, 0, "{out}");
        assert_eq!(server.hgetall(&state_key(&key))["cmd"], "sh");
    }
    let script = format!(
        "\"$RL\" -u {} acquire -k p2 >/dev/null; : S3C",
        server.url()
    );
    let out = run(sh(&script).env("RLOCK_PROGRAM_ONLY", "1"));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(server.hgetall(&state_key("p2"))["cmd"], "sh");
    // A label still wins.
    let out = run(rlock_at(&server).args([
        "exec", "--label", "nightly", "-k", "p3", "--", "true", "S3C",
    ]));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(server.hgetall(&state_key("p3"))["cmd"], "nightly");
    assert_no_secret_anywhere(&server, "p3");
    let history = run(rlock_at(&server).args(["inspect", "--history", "--json", "-k", "p0"]));
    assert_nowhere("--history", &format!("{history}"));
}

#[test]
fn a_long_command_line_or_label_is_stored_cut_at_the_cap() {
    let server = RedisServer::start();
    // 1 MiB of arguments (one argument may hold at most 128 KiB), and a label of 64 KiB.
    let word = "x".repeat(64 << 10);
    let out = run(rlock_at(&server)
        .args(["exec", "--record-args", "-k", "long", "--", "true"])
        .args(std::iter::repeat_n(&word, 16)));
    assert_eq!(out.code, 0, "{out}");
    let out = run(rlock_at(&server).args(["exec", "--label", &word, "-k", "label", "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    for key in ["long", "label"] {
        let cmd = &server.hgetall(&state_key(key))["cmd"];
        assert!(
            cmd.len() <= 4096 && cmd.ends_with("…[cut]"),
            "{key}: {} bytes",
            cmd.len()
        );
        let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
            .arg(format!("{{rlock:{key}}}:history"))
            .arg("-")
            .arg("+")
            .query(&mut server.conn())
            .expect("XRANGE");
        let size: usize = entries[0].1.iter().map(String::len).sum();
        assert!(size < 4096 + 512, "{key}: an entry of {size} bytes");
    }
}
