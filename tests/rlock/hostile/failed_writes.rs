//! A write to stdout or stderr that fails (a full disk, a pipe nobody reads, a closed
//! descriptor) never crashes rlock (never 101): it finishes what it was doing and exits with the
//! table's code. A token that could not be printed is given back (70).

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::basic::*;
use crate::common::{RedisServer, rlock_at};

/// Where stdout or stderr goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sink {
    /// /dev/full: every write fails with ENOSPC.
    Full,
    /// A pipe whose reader is gone: every write fails with EPIPE.
    NoReader,
    /// Closed when rlock starts (`>&-`).
    Closed,
}

const SINKS: [Sink; 3] = [Sink::Full, Sink::NoReader, Sink::Closed];

/// Runs `rlock ARGS` against `server` with stdout (`fd` 1) or stderr (2) going to `sink`, the
/// other to /dev/null; returns its exit code (or -N for death by signal N).
fn code_with(server: &RedisServer, args: &[&str], fd: u8, sink: Sink) -> i32 {
    let mut cmd = if sink == Sink::Closed {
        // The shell closes it, then becomes rlock.
        let mut cmd = sh(&format!("exec \"$RL\" \"$@\" {fd}>&-"));
        cmd.arg("sh").args(["-u", &server.url()]);
        cmd
    } else {
        rlock_at(server)
    };
    cmd.args(args).stdin(Stdio::null());
    let target = || -> Stdio {
        match sink {
            Sink::Full => std::fs::OpenOptions::new()
                .write(true)
                .open("/dev/full")
                .expect("/dev/full")
                .into(),
            Sink::NoReader => {
                let (read, write) = nix::unistd::pipe().expect("pipe");
                drop(read);
                write.into()
            }
            Sink::Closed => Stdio::null(),
        }
    };
    if fd == 1 {
        cmd.stdout(target()).stderr(Stdio::null());
    } else {
        cmd.stdout(Stdio::null()).stderr(target());
    }
    finish(&mut cmd)
}

fn finish(cmd: &mut Command) -> i32 {
    let mut child = cmd.spawn().expect("spawn rlock");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status
                .code()
                .or(status.signal().map(|s| -s))
                .expect("code or signal");
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{cmd:?} did not finish in 20s");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_failed_write_of_a_message_changes_nothing_but_the_message() {
    let server = RedisServer::start();
    let token = acquire(&server, "busy", &["--ttl", "1h"]);
    for sink in SINKS {
        for (args, want) in [
            (&["acquire", "-k", "busy", "-n"][..], 75),
            (&["-v", "acquire", "-k", "busy", "-n"], 75),
            (&["-v", "exec", "-k", "busy", "-n", "--", "true"], 75),
            (&["release", "-k", "busy", "--token", "not-it"], 77),
            (&["-v", "renew", "-k", "busy", "--token", "not-it"], 77),
            (&["inspect", "-k", "free"], 1),
            (&["-v", "renew", "-k", "busy", "--token", &token], 0),
            (&["-v", "exec", "-k", "free", "--", "true"], 0),
            (&["-v", "inspect", "--json"], 0),
            (&["acquire"], 2),
        ] {
            assert_eq!(
                code_with(&server, args, 2, sink),
                want,
                "{args:?}, stderr {sink:?}"
            );
        }
    }
    assert_eq!(server.get(&lock_key("busy")), Some(token));
}

#[test]
fn a_token_that_could_not_be_printed_is_given_back_with_70() {
    let server = RedisServer::start();
    for sink in SINKS {
        for extra in [&[][..], &["--json"], &["--export"]] {
            let args = [&["acquire", "-k", "lost-token"][..], extra].concat();
            assert_eq!(
                code_with(&server, &args, 1, sink),
                70,
                "{args:?}, stdout {sink:?}"
            );
            assert!(
                !server.exists(&lock_key("lost-token")),
                "{args:?}, stdout {sink:?}: the lock is held, its token printed nowhere"
            );
        }
    }
    // To /dev/null on purpose, the token is discarded, and the lock taken.
    let mut cmd = rlock_at(&server);
    cmd.args(["acquire", "-k", "discarded"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    assert_eq!(finish(&mut cmd), 0);
    assert!(server.exists(&lock_key("discarded")));
}

#[test]
fn data_that_could_not_be_written_ends_with_the_tables_code() {
    let server = RedisServer::start();
    acquire(&server, "held", &["--ttl", "1h"]);
    let ran = crate::common::run(rlock_at(&server).args(["exec", "-k", "ran", "--", "true"]));
    assert_eq!(ran.code, 0, "{ran}");
    for sink in SINKS {
        // The table, JSON or help nobody can read: 70 for a full disk or a closed stdout (the
        // data went nowhere), 0 for a reader that left (`rlock inspect | head`).
        let want = if sink == Sink::NoReader { 0 } else { 70 };
        for args in [
            &["inspect"][..],
            &["inspect", "--json", "-k", "held"],
            &["inspect", "--history", "-k", "ran"],
            &["inspect", "--history", "--json", "-k", "ran"],
            &["--help"],
            &["exec", "--help"],
            &["--version"],
        ] {
            assert_eq!(
                code_with(&server, args, 1, sink),
                want,
                "{args:?}, stdout {sink:?}"
            );
        }
        // The command's own output is the command's business: echo fails (or dies of SIGPIPE),
        // and rlock passes that on.
        let code = code_with(&server, &["exec", "-k", "e", "--", "echo", "hi"], 1, sink);
        assert!([0, 1, 141].contains(&code), "exec, stdout {sink:?}: {code}");
        // A lock broken whose news cannot be printed is broken all the same.
        acquire(&server, "brk", &["--ttl", "1h"]);
        let code = code_with(&server, &["release", "-k", "brk", "--force"], 1, sink);
        assert_eq!(code, 0, "release --force, stdout {sink:?}");
        assert!(!server.exists(&lock_key("brk")));
    }
}

#[test]
fn release_force_into_a_pipe_closed_early_breaks_the_lock_and_exits_0() {
    let server = RedisServer::start();
    // Longer than a pipe holds, so that the write meets the closed pipe.
    let key = "k".repeat(100_000);
    acquire(&server, &key, &["--ttl", "1h"]);
    let script = format!(
        "\"$RL\" -u {} release -k \"$1\" --force | head -c 10 >/dev/null; echo \"${{PIPESTATUS[0]}}\"",
        server.url()
    );
    // PIPESTATUS is bash's.
    let mut bash = Command::new("bash");
    bash.args(["-c", &script, "bash", &key])
        .env("RL", env!("CARGO_BIN_EXE_rlock"));
    let out = crate::common::run(&mut bash);
    assert_eq!(out.stdout.trim(), "0", "{out}");
    assert!(!server.exists(&lock_key(&key)));
}

#[test]
fn a_verbose_exec_whose_stderr_reader_left_still_exits_76_when_redis_freezes() {
    let server = RedisServer::start();
    let (read, write) = nix::unistd::pipe().expect("pipe");
    drop(read);
    let mut cmd = rlock_at(&server);
    cmd.args([
        "-v", "exec", "-k", "frozen", "--ttl", "2s", "--", "sleep", "30",
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::from(write));
    let mut child = cmd.spawn().expect("spawn");
    crate::common::wait_until("exec holds the lock", Duration::from_secs(10), || {
        server.exists(&lock_key("frozen"))
    });
    server.freeze();
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "exec did not end");
        std::thread::sleep(Duration::from_millis(10));
    };
    server.thaw();
    assert_eq!(status.code(), Some(76), "{status:?}");
}
