//! A label is text a user typed, like an argument: credentials in `--label` or `RLOCK_LABEL`
//! are masked the same way, in Redis, `inspect`, the history and a busy waiter's message; and a
//! command that cannot run is named with its secrets masked.

use std::time::Duration;

use super::forms::{assert_no_secret_anywhere, assert_nowhere};
use crate::common::basic::*;
use crate::common::{RedisServer, rlock_at, run, wait_for_file};

/// Labels holding a secret (each holds `S3C`), and what of each must still be shown.
const LABELS: &[(&str, &str)] = &[
    (
        "deploy https://ci:S3C01@ci.example/jobs/42",
        "ci.example/jobs/42",
    ),
    ("PASSWORD=S3C02 nightly backup", "PASSWORD=***"),
    ("release --token S3C03", "release --token ***"),
    ("upload S3CdXNlcjpwYXNzd29yZDEyMzQ1Njc4OQ==", "upload ***"),
    ("vault login S3C05", "vault login ***"),
    ("echo S3C06 | docker login --password-stdin", "docker login"),
];

#[test]
fn a_label_is_masked_like_an_argument_everywhere() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    for (i, (label, shown)) in LABELS.iter().enumerate() {
        for by_env in [false, true] {
            let key = format!("label{i}{}", if by_env { "env" } else { "" });
            let started = dir.path().join(&key);
            let mut cmd = rlock_at(&server);
            if by_env {
                cmd.env("RLOCK_LABEL", label)
                    .args(["exec", "-k", &key, "--"]);
            } else {
                cmd.args(["exec", "--label", label, "-k", &key, "--"]);
            }
            let mut child = cmd
                .args(["sh", "-c", r#"echo up > "$1"; sleep 30"#, "sh"])
                .arg(&started)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("spawn exec");
            wait_for_file(&started, Duration::from_secs(10));
            let stored = &server.hgetall(&state_key(&key))["cmd"];
            assert!(stored.contains(shown), "{label}: {stored}");
            // The busy waiter's message names the holder by its label, masked.
            let out = run(rlock_at(&server).args(["exec", "-n", "-k", &key, "--", "true"]));
            assert_eq!(out.code, 75, "{out}");
            assert!(out.stderr.contains(shown), "{label}: {out}");
            assert_nowhere("the busy message", &format!("{out}"));
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let _ = child.wait();
            // The run on record, and everything else.
            assert_no_secret_anywhere(&server, &key);
        }
    }
}

#[test]
fn a_command_that_cannot_run_is_named_with_its_secrets_masked() {
    let server = RedisServer::start();
    for command in [
        &["PGPASSWORD=S3C07 psql -h db"][..],
        &["PGPASSWORD=S3C08", "psql", "-h", "db"],
        &["/nowhere/deploy --token S3C09"],
    ] {
        let out = run(rlock_at(&server)
            .args(["exec", "-k", "cannot", "--"])
            .args(command));
        assert_eq!(out.code, 127, "{command:?}: {out}");
        assert!(out.stderr.contains("***"), "{command:?}: {out}");
        assert_nowhere(&format!("{command:?}"), &format!("{out}"));
        assert_eq!(out.stderr.lines().count(), 1, "{out}");
    }
    assert_nowhere("Redis", &super::forms::dump_everything(&server));
}
