//! The README's "section of a shell script" gives its lock back however the script is stopped:
//! HUP, INT and TERM sent to the job (as a CI cancel, Ctrl-C or a logout send them to the whole
//! process group) free the lock at once, under dash (Debian's `/bin/sh`) as under bash. The
//! script is the README's own, as written, with a long step put in after its first step.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::common::{RedisServer, wait_until};

/// The `sh` block of README.md's "A section of a shell script".
fn readme_recipe() -> String {
    let readme = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let section = readme
        .split("### A section of a shell script")
        .nth(1)
        .expect("the README has the shell-script section");
    let body = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("the section's sh block");
    body.to_string()
}

/// The README's recipe and docs/exec.md's are the same script.
#[test]
fn the_readme_and_exec_md_show_the_same_shell_recipe() {
    let exec = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/exec.md"))
        .expect("docs/exec.md");
    let squeeze = |s: &str| -> Vec<String> {
        s.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    };
    let recipe = squeeze(&readme_recipe());
    let found = exec
        .split("```sh\n")
        .skip(1)
        .filter_map(|b| b.split("\n```").next())
        .any(|b| squeeze(b) == recipe);
    assert!(found, "docs/exec.md shows the README's recipe as it is");
}

/// Whether `pid` has a `sleep` child yet.
fn has_sleeping_child(pid: u32) -> bool {
    let children =
        fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    children.split_whitespace().any(|c| {
        fs::read_to_string(format!("/proc/{c}/comm")).is_ok_and(|comm| comm.trim() == "sleep")
    })
}

#[test]
fn the_readme_shell_recipe_releases_on_term_hup_and_int_under_dash_and_bash() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let recipe = readme_recipe();
    assert!(
        recipe.contains("echo \"step 1"),
        "the recipe has its first step: {recipe}"
    );
    // The long step, where a cancel finds the script.
    let script = recipe.replacen("echo \"step 2\"", "sleep 60\necho \"step 2\"", 1);
    let path = dir.path().join("nightly.sh");
    fs::write(&path, &script).expect("script");
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_rlock"));
    let search = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for shell in ["dash", "bash"] {
        for signal in [Signal::SIGTERM, Signal::SIGHUP, Signal::SIGINT] {
            let mut child = Command::new(shell)
                .arg(&path)
                .current_dir(dir.path())
                .env("PATH", &search)
                .env("RLOCK_URL", server.url())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                // A job of its own, as a CI runner or a terminal starts one.
                .process_group(0)
                .spawn()
                .unwrap_or_else(|e| {
                    panic!("{shell}: {e} (install it with `apt-get install -y {shell}`)")
                });
            let pid = child.id();
            let mut first = String::new();
            BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut first)
                .expect("the script's first line");
            assert!(first.starts_with("step 1"), "{shell}: {first:?}");
            assert!(server.exists("rlock:nightly"), "{shell}: the lock is held");
            wait_until(
                "the script's long step to start",
                Duration::from_secs(10),
                || has_sleeping_child(pid),
            );
            let sent = Instant::now();
            killpg(Pid::from_raw(pid as i32), signal).expect("signal the job");
            let status = child.wait().expect("wait for the script");
            let code = status.code();
            assert_eq!(
                code,
                Some(128 + signal as i32),
                "{shell} {signal:?}: the script exits as the signal's trap says"
            );
            assert!(
                !server.exists("rlock:nightly"),
                "{shell} {signal:?}: the lock was given back"
            );
            assert!(
                sent.elapsed() < Duration::from_secs(10),
                "{shell} {signal:?}: at once, not after the long step ({:?})",
                sent.elapsed()
            );
        }
    }
}
