//! Every run is on record from its grant: `running`, written with the try that is granted,
//! replaced by how it ended; a run whose rlock was SIGKILLed (alone, or with its guardian, as a
//! host that goes down), even a moment after its grant, shows as `abandoned` once its lease has
//! run out, and the next run's entry comes above it.

use super::*;
use crate::common::basic::lock_key;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// The pids of `root`'s children, from /proc.
fn children(root: i32) -> Vec<i32> {
    std::fs::read_to_string(format!("/proc/{root}/task/{root}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn killed_run_is_abandoned(with_guardian: bool) {
    let server = RedisServer::start();
    let dir = tempdir();
    let lock = lock_key("k");
    let mut rl = Background::spawn(
        "holder",
        dir.path(),
        rlock_at(&server).args(["exec", "-k", "k", "--ttl", "1s", "--", "sleep", "30"]),
    );
    wait_held(&server, &lock, &mut rl);
    // Written with the grant, in its round trip.
    wait_until("the run's start on record", SOON, || {
        !history_of(rlock_at(&server), "k", 10).is_empty()
    });
    let runs = history_of(rlock_at(&server), "k", 10);
    assert_eq!(
        outcomes(&runs),
        ["running"],
        "on record while it runs: {runs:?}"
    );
    assert!(
        runs[0]["fence"].is_i64() && runs[0]["granted_ms"].is_i64(),
        "{runs:?}"
    );

    let guardian = children(rl.pid());
    rl.kill(Signal::SIGKILL);
    if with_guardian {
        for pid in guardian {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
    let _ = rl.finish(SOON);
    if with_guardian {
        // A waiter on this host says what it waits for: a lease nobody renews.
        let out = run(rlock_at(&server).args(["-v", "exec", "-k", "k", "-w", "10s", "--", "true"]));
        assert_eq!(out.code, 0, "{out}");
        assert!(
            out.stderr
                .contains("a run whose rlock is gone; its lease ends in"),
            "{out}"
        );
        let runs = history_of(rlock_at(&server), "k", 10);
        assert_eq!(outcomes(&runs), ["ok", "abandoned"], "{runs:?}");
        return;
    }
    wait_until("the killed run's lease to run out", SOON, || {
        !server.exists(&lock)
    });
    let runs = history_of(rlock_at(&server), "k", 10);
    assert_eq!(outcomes(&runs), ["abandoned"], "{runs:?}");

    assert_eq!(exec(&server, "k", &["--", "true"]).code, 0);
    let runs = history_of(rlock_at(&server), "k", 10);
    assert_eq!(outcomes(&runs), ["ok", "abandoned"], "{runs:?}");
    let table = run(rlock_at(&server).args(["inspect", "-k", "k", "--history"]));
    assert!(table.stdout.contains("abandoned"), "{table}");
}

#[test]
fn a_sigkilled_rlocks_run_shows_as_abandoned() {
    killed_run_is_abandoned(false);
}

#[test]
fn a_run_whose_host_went_down_shows_as_abandoned() {
    killed_run_is_abandoned(true);
}

#[test]
fn a_run_that_ended_is_on_record_once() {
    let server = RedisServer::start();
    for _ in 0..3 {
        assert_eq!(exec(&server, "k", &["--", "true"]).code, 0);
    }
    assert_eq!(
        xlen(&server, "{rlock:k}:history"),
        3,
        "its start gave way to its end"
    );
    let runs = history_of(rlock_at(&server), "k", 10);
    assert_eq!(outcomes(&runs), ["ok", "ok", "ok"], "{runs:?}");
}

#[test]
fn a_run_killed_at_its_grant_is_on_record() {
    // A CI job cancelled hard the moment it got the lock: rlock and its guardian, if it has one
    // yet, SIGKILLed as soon as the lock is seen held. The run was on record with its grant.
    let server = RedisServer::start();
    // The scripts loaded, as on any server in use: the try and the run's entry go in one write.
    assert_eq!(exec(&server, "warm", &["--", "true"]).code, 0);
    let dir = tempdir();
    let lock = lock_key("k");
    let mut rl = Background::spawn(
        "holder",
        dir.path(),
        rlock_at(&server).args(["exec", "-k", "k", "--ttl", "1s", "--", "sleep", "5"]),
    );
    wait_held(&server, &lock, &mut rl);
    // Stopped first, so that it starts nothing more; then all of it killed.
    rl.kill(Signal::SIGSTOP);
    for pid in children(rl.pid()) {
        let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    }
    rl.kill(Signal::SIGKILL);
    let _ = rl.finish(SOON);
    wait_until("the run's grant on record", Duration::from_secs(2), || {
        !history_of(rlock_at(&server), "k", 10).is_empty()
    });
    let runs = history_of(rlock_at(&server), "k", 10);
    assert!(
        runs[0]["fence"].is_i64() && runs[0]["granted_ms"].is_i64(),
        "{runs:?}"
    );
    wait_until("the killed run's lease to run out", SOON, || {
        !server.exists(&lock)
    });
    let runs = history_of(rlock_at(&server), "k", 10);
    assert_eq!(outcomes(&runs), ["abandoned"], "{runs:?}");
    assert_eq!(exec(&server, "k", &["--", "true"]).code, 0);
    let runs = history_of(rlock_at(&server), "k", 10);
    assert_eq!(outcomes(&runs), ["ok", "abandoned"], "{runs:?}");
}

/// `sh -c` that waits until the file `$1` exists.
const UNTIL_STOP: &str = r#"while [ ! -e "$1" ]; do sleep 0.02; done"#;

#[test]
fn a_run_under_a_shells_lock_is_on_record_while_it_runs() {
    // No try of its own to carry the entry: it is written beside the command as it starts.
    let server = RedisServer::start();
    let dir = tempdir();
    let stop = dir.path().join("stop");
    let script = format!(
        r#"eval "$("$RL" --url "$URL" acquire --export -k k)" || exit 9
"$RL" --url "$URL" exec -k k -- sh -c '{UNTIL_STOP}' sh "$STOP"; code=$?
"$RL" --url "$URL" release -k k; exit $code"#
    );
    let mut shell = Background::spawn(
        "shell",
        dir.path(),
        crate::common::basic::sh(&script)
            .env("URL", server.url())
            .env("STOP", &stop),
    );
    shell.wait_for("the run on record", SOON, || {
        !history_of(rlock_at(&server), "k", 10).is_empty()
    });
    let runs = history_of(rlock_at(&server), "k", 10);
    assert_eq!(outcomes(&runs), ["running"], "{runs:?}");
    std::fs::write(&stop, "").unwrap();
    let (out, _) = shell.finish(SOON);
    assert_eq!(out.code, 0, "{out}");
    let runs = history_of(rlock_at(&server), "k", 10);
    assert_eq!(outcomes(&runs), ["released", "ok"], "{runs:?}");
}

/// Two shared holders' runs overlap, and the first to start ends first: its end replaces its
/// own `running` entry, which is not the newest (the other's is), and the other's end its own.
/// The raw stream, not only the readers (which keep one entry a run), holds two entries.
#[test]
fn overlapping_runs_each_replace_their_own_running_entry() {
    let server = RedisServer::start();
    let dir = tempdir();
    let history = "{rlock:k}:history";
    let run = |name: &str, stop: &std::path::Path| {
        Background::spawn(
            name,
            dir.path(),
            rlock_at(&server)
                .args(["exec", "-k", "k", "--shared", "--"])
                .args(["sh", "-c", UNTIL_STOP, "sh"])
                .arg(stop),
        )
    };
    let (stop_a, stop_b) = (dir.path().join("a"), dir.path().join("b"));
    let mut a = run("first", &stop_a);
    a.wait_for("the first run on record", SOON, || {
        xlen(&server, history) == 1
    });
    let mut b = run("second", &stop_b);
    b.wait_for("the second run on record", SOON, || {
        xlen(&server, history) == 2
    });
    std::fs::write(&stop_a, "").unwrap();
    assert_eq!(a.finish(SOON).0.code, 0);
    let runs = history_of(rlock_at(&server), "k", 10);
    assert_eq!(outcomes(&runs), ["ok", "running"], "{runs:?}");
    assert_eq!(
        xlen(&server, history),
        2,
        "the first run's `running` is gone"
    );
    std::fs::write(&stop_b, "").unwrap();
    assert_eq!(b.finish(SOON).0.code, 0);
    let runs = history_of(rlock_at(&server), "k", 10);
    assert_eq!(outcomes(&runs), ["ok", "ok"], "{runs:?}");
    assert_ne!(runs[0]["run"], runs[1]["run"], "{runs:?}");
    assert_eq!(xlen(&server, history), 2, "one entry a run");
}
