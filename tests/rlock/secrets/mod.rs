//! Secrets are never stored or shown: passwords on the holder's command line, in `RLOCK_URL`
//! (with commas or slashes), in `--help`; a label replaces the command in inspect.

mod forms;
mod labels;

use crate::common::basic::*;
use crate::common::{RedisServer, rlock, rlock_at, run, wait_for_file};
use std::time::Duration;

// Secrets
// ---------------------------------------------------------------------------------------------

const SECRETS: [&str; 4] = ["hunter2", "s3cr3t-tok", "k3y-value", "pw-in-url"];

#[track_caller]
fn assert_no_secret_kept(server: &RedisServer, what: &str) {
    let mut conn = server.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).expect("KEYS");
    for key in keys {
        let dump = match server.key_type(&key).as_str() {
            "hash" => format!("{:?}", server.hgetall(&key)),
            "string" => server.get(&key).unwrap_or_default(),
            // The history of runs.
            "stream" => {
                let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
                    .arg(&key)
                    .arg("-")
                    .arg("+")
                    .query(&mut conn)
                    .expect("XRANGE");
                format!("{entries:?}")
            }
            other => other.to_string(),
        };
        for secret in SECRETS {
            assert!(
                !dump.contains(secret),
                "{what}: {secret} stored in {key}: {dump}"
            );
        }
    }
    for args in [
        &["inspect"][..],
        &["inspect", "--json"],
        &["-v", "inspect", "-k", "leak"],
    ] {
        let out = run(rlock_at(server).args(args));
        for secret in SECRETS {
            assert!(
                !out.stdout.contains(secret) && !out.stderr.contains(secret),
                "{what}: {args:?} shows {secret}:\n{out}"
            );
        }
    }
}

#[test]
fn secrets_on_the_holders_command_line_are_never_stored_or_shown() {
    let server = RedisServer::start();
    let rlock_bin = env!("CARGO_BIN_EXE_rlock");
    // acquire records its parent's command line: a shell that has the secrets on it.
    let line = format!(
        "DB_PASSWORD=hunter2 API_TOKEN=s3cr3t-tok {rlock_bin} -u {} acquire --record-args -k leak --ttl 1h \
         && : --password hunter2 --api-key k3y-value redis://u:pw-in-url@h",
        server.url()
    );
    let out = run(std::process::Command::new("sh").arg("-c").arg(&line));
    assert_eq!(out.code, 0, "{out}");
    let cmd = server.hgetall("{rlock:leak}:state")["cmd"].clone();
    assert!(
        cmd.contains("DB_PASSWORD=***") && cmd.contains("--password ***"),
        "{cmd}"
    );
    assert_no_secret_kept(&server, "acquire");

    // exec records its command; the command itself still gets its arguments whole.
    let out = run(rlock_at(&server).args([
        "exec",
        "-k",
        "leak2",
        "--",
        "echo",
        "SECRET_KEY=k3y-value",
        "--token",
        "s3cr3t-tok",
        "-p",
        "hunter2",
    ]));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.stdout.trim(),
        "SECRET_KEY=k3y-value --token s3cr3t-tok -p hunter2"
    );
    // The run on record keeps the command as the holder record does: masked.
    assert!(server.exists("{rlock:leak2}:history"));
    let dir = tempfile::tempdir().expect("temp dir");
    let started = dir.path().join("started");
    let mut cmd = rlock_at(&server);
    cmd.args([
        "exec",
        "-k",
        "leak",
        "--",
        "sh",
        "-c",
        r#"echo up > "$1"; sleep 5"#,
        "sh",
    ])
    .arg(&started)
    .args(["--password=hunter2", "redis://:pw-in-url@x"]);
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn exec");
    let out = run(rlock_at(&server).args(["release", "-k", "leak", "--force"]));
    assert_eq!(out.code, 0, "{out}");
    wait_for_file(&started, Duration::from_secs(10));
    assert_no_secret_kept(&server, "exec");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_label_replaces_the_command_in_inspect() {
    let server = RedisServer::start();
    let url = "https://ci.example/job/42";
    let out = run(rlock_at(&server).args(["acquire", "-k", "lab", "--label", url]));
    assert_eq!(out.code, 0, "{out}");
    let out = run(rlock_at(&server).args(["inspect", "--json", "-k", "lab"]));
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(json["holder"]["command"], url, "{out}");
    let out = run(rlock_at(&server)
        .env("RLOCK_LABEL", "nightly backup")
        .args([
            "exec",
            "-k",
            "lab2",
            "--",
            "sh",
            "-c",
            "rlock inspect -k lab2 >/dev/null; true",
        ]));
    assert_eq!(out.code, 0, "{out}");
    let out =
        run(rlock_at(&server).args(["exec", "-k", "lab3", "--label", "nightly", "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(server.hgetall("{rlock:lab3}:state")["cmd"], "nightly");
}

#[test]
fn a_password_with_commas_in_rlock_url_is_never_split_or_echoed() {
    let password = "pa,ss@x,redis";
    let server = RedisServer::start_with(&["--requirepass", password]);
    let url = format!("redis://:{password}@127.0.0.1:{}", server.port());
    let out = run(rlock()
        .env("RLOCK_URL", &url)
        .args(["acquire", "-n", "-k", "c"]));
    assert_eq!(out.code, 0, "the password was cut:\n{out}");
    let wrong = format!("redis://:wr,ong@pw,x@127.0.0.1:{}", server.port());
    let out = run(rlock()
        .env("RLOCK_URL", &wrong)
        .args(["acquire", "-n", "-k", "c"]));
    assert_eq!(out.code, 77, "{out}");
    for piece in ["wr", "ong", "pw,x", "ong@pw"] {
        assert!(
            !out.stderr.contains(&format!("'{piece}'"))
                && !out.stderr.contains(&format!(":{piece}")),
            "a piece of the password is echoed:\n{out}"
        );
    }
    assert!(out.stderr.contains("redis://:***@127.0.0.1"), "{out}");
}

#[test]
fn a_url_password_with_a_comma_or_a_slash_is_one_password_and_never_shown() {
    const PW: &str = "Zq,wq7secret";
    let server = RedisServer::start_with(&["--requirepass", PW]);
    let port = server.port();
    let good = format!("redis://:{PW}@127.0.0.1:{port}");
    let token = token_of(&run(
        rlock().args(["-u", &good, "acquire", "-k", "jobs", "-n"])
    ));
    assert_eq!(server.get(&lock_key("jobs")), Some(token.clone()));
    assert_ok(&run(
        rlock().args(["-u", &good, "release", "-k", "jobs", "--token", &token])
    ));
    assert!(!server.exists(&lock_key("jobs")));

    // A wrong password with a comma: refused, and no piece of either password is shown.
    let wrong = format!("redis://:Kx,vv3wrong@127.0.0.1:{port}");
    let state = server.hgetall(&state_key("jobs"));
    for verbose in [&[][..], &["-v"]] {
        let out = run(rlock()
            .args(["-u", &wrong])
            .args(verbose)
            .args(["acquire", "-k", "jobs", "-n"]));
        assert_eq!(out.code, 77, "{out}");
        for piece in ["Zq", "wq7secret", "Kx", "vv3wrong"] {
            assert_no_secret(&out, piece);
        }
    }
    assert!(
        !server.exists(&lock_key("jobs")),
        "a refused acquire took the lock"
    );
    assert_eq!(
        server.hgetall(&state_key("jobs")),
        state,
        "nothing may be written"
    );

    // A '/' in the password makes the URL malformed (RFC 3986: the authority ends at the first
    // '/'): a configuration error, still without the password.
    let slash = format!("redis://:Zq/wq7secret@127.0.0.1:{}", dead_port());
    for verbose in [&[][..], &["-v"]] {
        let out = run(rlock()
            .args(["-u", &slash])
            .args(verbose)
            .args(["acquire", "-k", "jobs", "-n"]));
        assert_fails(&out, 78, &["URL"]);
        for piece in ["Zq/", "wq7secret"] {
            assert_no_secret(&out, piece);
        }
    }
}

#[test]
fn help_does_not_show_the_password_in_rlock_url() {
    let url = format!("redis://:Zq7secret@127.0.0.1:{}", dead_port());
    for args in [
        &["exec", "--help"][..],
        &["exec", "-h"],
        &["acquire", "--help"],
        &["--help"],
    ] {
        let out = run(rlock().env("RLOCK_URL", &url).args(args));
        assert_eq!(out.code, 0, "{args:?}\n{out}");
        assert!(
            out.stdout.contains("RLOCK_URL"),
            "{args:?}: the help still names the variable\n{out}"
        );
        assert_no_secret(&out, "Zq7secret");
    }
}

#[test]
fn the_holder_command_stored_in_redis_hides_a_url_password() {
    const PW: &str = "Zq7secret";
    let server = RedisServer::start_with(&["--requirepass", PW]);
    // The shell that runs rlock (not exec'd into it: `; true`) is the holder whose command line
    // is recorded, password and all.
    let script = format!(
        r#""$RL" --url redis://:{PW}@127.0.0.1:{} acquire -k jobs --record-args; true"#,
        server.port()
    );
    let out = run(&mut sh(&script));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        server.get(&lock_key("jobs")).as_deref(),
        Some(out.stdout.trim())
    );
    let state = server.hgetall(&state_key("jobs"));
    assert!(
        state
            .get("cmd")
            .is_some_and(|c| c.contains("acquire -k jobs") && c.contains("redis://:***@")),
        "the holder's command is recorded, its password redacted: {state:?}"
    );
    for (field, value) in &state {
        assert!(!value.contains(PW), "{field} holds the password: {state:?}");
    }
    for extra in [&[][..], &["--json"]] {
        let out = run(rlock_at(&server)
            .env("RLOCK_PASSWORD", PW)
            .args(["inspect", "-k", "jobs"])
            .args(extra));
        assert_eq!(out.code, 0, "{out}");
        assert!(
            out.stdout.contains("acquire"),
            "the command is shown\n{out}"
        );
        assert_no_secret(&out, PW);
    }
}
