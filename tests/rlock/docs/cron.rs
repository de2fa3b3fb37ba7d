//! The README's crontab runs under cron's own environment: `env -i PATH=/usr/bin:/bin
//! SHELL=/bin/sh`, the crontab's assignments on top (as cron makes them), the job line given to
//! `/bin/sh -c`, with rlock installed where the README's Install copies it. The test cannot write
//! `/usr/local/bin` on a shared machine, so a temporary directory stands in for it: the crontab's
//! `/usr/local/bin` is read as that directory, in its PATH line and in its job's path alike.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crate::common::{RedisServer, rlock_at, run};

/// The README's `crontab` block: its assignments (NAME=value) and its one job line's command
/// (what follows the five schedule fields).
fn readme_crontab() -> (Vec<(String, String)>, String) {
    let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let block = text
        .split("```crontab\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("a crontab block in README.md");
    let mut env = Vec::new();
    let mut jobs = Vec::new();
    for line in block
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
    {
        let first = line.split_whitespace().next().unwrap_or("");
        match first.split_once('=') {
            Some((name, value)) if !name.contains(['*', '/']) => {
                env.push((name.to_string(), value.to_string()))
            }
            _ => jobs.push(line.splitn(6, ' ').nth(5).expect("a command").to_string()),
        }
    }
    assert_eq!(jobs.len(), 1, "one job line: {block}");
    assert!(
        !jobs[0].contains('%'),
        "cron turns % into a newline: {}",
        jobs[0]
    );
    (env, jobs.remove(0))
}

/// Runs `command` as cron runs it, with `crontab_env` assigned on top of cron's environment.
fn as_cron(crontab_env: &[(String, String)], command: &str) -> crate::common::Output {
    let mut cmd = Command::new("/usr/bin/env");
    cmd.args(["-i", "PATH=/usr/bin:/bin", "SHELL=/bin/sh"])
        .args(crontab_env.iter().map(|(n, v)| format!("{n}={v}")))
        .args(["/bin/sh", "-c", command]);
    run(&mut cmd)
}

#[test]
fn the_readme_crontab_line_runs_under_crons_environment() {
    let server = RedisServer::start();
    let root = tempfile::tempdir().expect("temp dir");
    let bin_dir = root.path().join("usr/local/bin");
    fs::create_dir_all(&bin_dir).expect("mkdir");
    let rlock = bin_dir.join("rlock");
    fs::copy(env!("CARGO_BIN_EXE_rlock"), &rlock).expect("install rlock");
    let report = bin_dir.join("report.sh");
    let ran = root.path().join("ran");
    fs::write(
        &report,
        format!(
            "#!/bin/sh\necho \"$RLOCK_KEY $RLOCK_FENCE\" > '{}'\n",
            ran.display()
        ),
    )
    .expect("report.sh");
    for file in [&rlock, &report] {
        fs::set_permissions(file, fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    let (env, command) = readme_crontab();
    let stand_in = |s: &str| s.replace("/usr/local/bin", &bin_dir.display().to_string());
    let env: Vec<(String, String)> = env
        .into_iter()
        .map(|(name, value)| match name.as_str() {
            "RLOCK_URL" => (name, server.url()),
            _ => (name, stand_in(&value)),
        })
        .collect();
    assert!(
        env.iter().any(|(n, _)| n == "PATH"),
        "the crontab sets PATH: {env:?}"
    );
    let command = stand_in(&command);

    let out = as_cron(&env, &command);
    assert_eq!(
        (out.code, out.stdout.as_str(), out.stderr.as_str()),
        (0, "", ""),
        "cron mails what is printed: {command}\n{out}"
    );
    let said = fs::read_to_string(&ran).expect("the job ran");
    assert!(said.starts_with("report "), "{said}");
    let history = run(rlock_at(&server).args(["inspect", "-k", "report", "--history", "--json"]));
    assert!(history.stdout.contains("cron report on "), "{history}");

    // Without the crontab's PATH, cron's own finds no rlock: what the line would do without it.
    let server2 = RedisServer::start();
    let bare: Vec<(String, String)> = env
        .iter()
        .filter(|(n, _)| n != "PATH")
        .map(|(n, v)| {
            (
                n.clone(),
                if n == "RLOCK_URL" {
                    server2.url()
                } else {
                    v.clone()
                },
            )
        })
        .collect();
    let out = as_cron(&bare, &command);
    assert_eq!(
        out.code, 127,
        "rlock: not found without the PATH line: {out}"
    );
}
