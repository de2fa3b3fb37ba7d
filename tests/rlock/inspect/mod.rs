//! `inspect`: the table and `--json` of named keys and of every lock under the prefix, when each
//! lease was last renewed, holders on this host whose process is gone marked as stale, `--watch`
//! redrawing, one node of a Redis Cluster never passed off as the whole cluster, and keys and
//! holder fields of any content.

mod cluster_listing;
mod listing;
mod odd_contents;
mod output;
mod piped;
mod stale;
mod waiters;
mod watch;

use crate::common::{Background, RedisCluster, RedisServer, rlock, rlock_at, run, wait_until};
use nix::sys::signal::Signal;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const SOON: Duration = Duration::from_secs(10);

/// What `cmd` prints on a terminal of 80 columns (its stdout a pseudo-terminal), run to its
/// end, with the terminal's `\r\n` read back as `\n`.
pub(crate) fn on_terminal(cmd: &mut Command) -> String {
    let size = nix::pty::Winsize {
        ws_row: 50,
        ws_col: 80,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(Some(&size), None).expect("openpty");
    cmd.stdout(std::process::Stdio::from(pty.slave))
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().expect("spawn rlock");
    let (screen, reader) = crate::common::drain(std::fs::File::from(pty.master));
    let status = child.wait().expect("wait");
    // The last copy of the terminal's far end was the child's: the reader ends with it.
    drop(std::mem::replace(cmd, Command::new("true")));
    reader.join().expect("the terminal's reader");
    assert!(status.success(), "{status}");
    String::from_utf8_lossy(&screen.lock().unwrap()).replace("\r\n", "\n")
}

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("rlock-inspect-test-")
        .tempdir()
        .expect("create temp dir")
}

/// `sh -c SCRIPT` with `$RL` the rlock binary and `$URL` the server, and no RLOCK_* setting
/// of the developer's.
fn shell(server: &RedisServer, script: &str) -> Command {
    let mut cmd = Command::new("sh");
    for (name, _) in std::env::vars_os() {
        if name.as_encoded_bytes().starts_with(b"RLOCK_") {
            cmd.env_remove(&name);
        }
    }
    cmd.arg("-c")
        .arg(script)
        .env("RL", env!("CARGO_BIN_EXE_rlock"))
        .env("URL", server.url());
    cmd
}

/// Takes `key` from a short-lived shell, as `eval "$(rlock acquire --export …)"` in a script
/// that then ends: returns the shell's pid, which is gone once this returns.
fn acquire_from_a_shell_that_exits(server: &RedisServer, key: &str, opts: &str) -> i64 {
    // `; true` keeps sh from replacing itself with rlock: the holder must be the shell.
    let out = run(&mut shell(
        server,
        &format!(r#"echo $$; eval "$("$RL" --url "$URL" acquire --export -k {key} {opts})"; true"#),
    ));
    assert_eq!(out.code, 0, "{out}");
    out.stdout.trim().parse().expect("the shell's pid")
}

fn inspect_json(server: &RedisServer, key: &str) -> Value {
    let out = run(rlock_at(server).args(["inspect", "--json", "-k", key]));
    assert!(out.code == 0 || out.code == 1, "{out}");
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// `rlock exec -k KEY OPTS -- sleep 60` in the background, once inspect sees it hold the key.
fn live_holder(
    server: &RedisServer,
    dir: &Path,
    name: &str,
    key: &str,
    opts: &[&str],
) -> Background {
    let mut cmd = rlock_at(server);
    cmd.args(["exec", "-k", key])
        .args(opts)
        .args(["--", "sleep", "60"]);
    let mut holder = Background::spawn(name, dir, &mut cmd);
    let pid = holder.pid() as i64;
    holder.wait_for("the exec to hold the lock", SOON, || {
        inspect_json(server, key)["holders"]
            .as_array()
            .is_some_and(|hs| hs.iter().any(|h| h["pid"] == pid))
    });
    holder
}

/// The `renewed_ms` of the one holder of `key`, by inspect.
fn renewed_ms(server: &RedisServer, key: &str) -> i64 {
    let json = inspect_json(server, key);
    json["holders"][0]["renewed_ms"]
        .as_i64()
        .unwrap_or_else(|| panic!("no renewed_ms: {json}"))
}

/// The lines of a file written so far (a background process's stdout).
fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// Waits until `holder`'s lease was renewed `n` times more (so that a watch looking every 100ms
/// has looked several times meanwhile).
fn renewals(server: &RedisServer, key: &str, n: usize) {
    let mut last = renewed_ms(server, key);
    let mut count = 0;
    wait_until(&format!("{n} renewals of {key}"), SOON, || {
        let now = renewed_ms(server, key);
        if now != last {
            last = now;
            count += 1;
        }
        count >= n
    });
}
