//! `--hold-at-least`: the lock stays taken until that long after its grant, by Redis's clock,
//! even once its holder released it; so the same crontab on several hosts runs its short job
//! once per schedule. `release --force` still frees it.

use crate::common::basic::*;
use crate::common::{RedisServer, rlock_at, run, wait_until};
use std::time::{Duration, Instant};

/// Three hosts whose clocks are 0.3 s apart fire the same one-line job: the first runs, the
/// two after it find the lock still taken (75) although the job is long over; once the hold has
/// run out, by the server's clock, a fourth runs.
#[test]
fn contenders_0_3s_apart_run_once_and_the_next_schedule_runs_again() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let ran = dir.path().join("ran");
    let job = |name: &str| {
        let script = format!("echo {name} >> '{}'", ran.display());
        run(rlock_at(&server)
            .args(["exec", "-k", "cron", "-n", "--hold-at-least", "5s"])
            .args(["--", "sh", "-c", &script]))
    };
    let t0 = Instant::now();
    let mut codes = Vec::new();
    for (i, name) in ["a", "b", "c"].into_iter().enumerate() {
        let fire = t0 + Duration::from_millis(300 * i as u64);
        wait_until("the host's minute", Duration::from_secs(5), || {
            Instant::now() >= fire
        });
        let out = job(name);
        codes.push(out.code);
        if i == 0 {
            assert_eq!(out.code, 0, "{out}");
        } else {
            assert_eq!(out.code, 75, "{out}");
            assert!(out.stderr.contains("is busy"), "{out}");
        }
    }
    assert_eq!(codes, [0, 75, 75]);
    assert_eq!(
        std::fs::read_to_string(&ran).unwrap(),
        "a\n",
        "exactly one ran"
    );
    let pttl = server.pttl(&lock_key("cron"));
    assert!(
        (3_000..=5_000).contains(&pttl),
        "held until 5s after the grant: PTTL {pttl}"
    );

    wait_until("the hold to run out", Duration::from_secs(10), || {
        !server.exists(&lock_key("cron"))
    });
    let free_after = t0.elapsed();
    assert!(
        free_after >= Duration::from_millis(4900),
        "free after {free_after:?}, before the hold of 5s"
    );
    let out = job("d");
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(std::fs::read_to_string(&ran).unwrap(), "a\nd\n");

    let history = run(rlock_at(&server).args(["inspect", "-k", "cron", "--history", "--json"]));
    let runs: serde_json::Value = serde_json::from_str(&history.stdout).expect("JSON");
    let held = runs
        .as_array()
        .expect("runs")
        .iter()
        .filter(|r| r["held_until_ms"].is_i64())
        .count();
    assert_eq!(held, 2, "both runs that ran record their hold: {history}");
}

#[test]
fn a_released_hold_stays_taken_until_forced() {
    let server = RedisServer::start();
    let token = acquire(&server, "h", &["--hold-at-least", "1h", "--ttl", "30"]);
    let pttl = server.pttl(&lock_key("h"));
    assert!(
        pttl > 3_500_000,
        "the lock lives as long as the hold: {pttl}"
    );
    let out = run(rlock_at(&server).args(["release", "-k", "h", "--token", &token]));
    assert_eq!(out.code, 0, "{out}");
    // A retried release is still a success, and changes nothing.
    let out = run(rlock_at(&server).args(["release", "-k", "h", "--token", &token]));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(server.get(&lock_key("h")), Some(token.clone()));
    assert!(server.pttl(&lock_key("h")) > 3_500_000);

    let out = run(rlock_at(&server).args(["inspect", "-k", "h"]));
    assert_eq!(out.code, 0, "held: {out}");
    assert!(
        out.stdout.contains("held until ") && out.stdout.contains(", command ended"),
        "{out}"
    );
    // The holder is gone on purpose: not stale, and no hint to break it.
    assert!(
        !out.stdout.contains("stale") && out.stderr.is_empty(),
        "{out}"
    );
    let json = run(rlock_at(&server).args(["inspect", "-k", "h", "--json"]));
    let json: serde_json::Value = serde_json::from_str(&json.stdout).expect("JSON");
    assert_eq!(json["command_ended"], true, "{json}");
    assert_eq!(json["stale"], false, "{json}");
    let until = json["held_until_ms"].as_i64().expect("held_until_ms");
    assert!(until - redis_now_ms(&server) > 3_500_000, "{json}");
    let out = run(rlock_at(&server).args(["acquire", "-k", "h", "-n"]));
    assert_eq!(out.code, 75, "{out}");

    let out = run(rlock_at(&server).args(["release", "-k", "h", "--force"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(!server.exists(&lock_key("h")));
    let out = run(rlock_at(&server).args(["acquire", "-k", "h", "-n"]));
    assert_eq!(out.code, 0, "{out}");

    let out = run(rlock_at(&server).args([
        "exec",
        "-k",
        "s",
        "--limit",
        "2",
        "--hold-at-least",
        "1m",
        "--",
        "true",
    ]));
    assert_eq!(out.code, 2, "a semaphore has no hold: {out}");
}

/// What the help of --hold-at-least and the README's cron recipe say: a single Redis that
/// restarts empty forgets the hold, and the next firing runs the job again.
#[test]
fn a_single_redis_restarted_empty_forgets_the_hold_and_the_job_runs_again() {
    let mut server = RedisServer::start();
    let job = [
        "exec",
        "-k",
        "r",
        "-n",
        "-E",
        "0",
        "--hold-at-least",
        "1h",
        "--",
    ];
    let dir = tempfile::tempdir().expect("temp dir");
    let runs = dir.path().join("runs");
    let once = format!("echo ran >> {}", runs.display());
    let out = run(rlock_at(&server).args(job).args(["sh", "-c", &once]));
    assert_eq!(out.code, 0, "{out}");
    let out = run(rlock_at(&server).args(job).args(["sh", "-c", &once]));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(std::fs::read_to_string(&runs).unwrap().lines().count(), 1);
    server.restart();
    let out = run(rlock_at(&server).args(job).args(["sh", "-c", &once]));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        std::fs::read_to_string(&runs).unwrap().lines().count(),
        2,
        "the hold did not survive the empty restart, and the job ran again"
    );
}
