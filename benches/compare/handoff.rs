//! The handoff row of the first table: from the moment a release returns to the moment the
//! next holder's command starts, for rlock, flock(1) and the raw pair. The command is
//! `date +%s%N`, whose stamp marks its start; what starting it costs by itself is measured and
//! taken off.

use std::fs::{self, File};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg};

use rlock_test_support::RedisServer;

use crate::monitor::zcard;
use crate::process::{Bg, fail, now_ns, output, quiet, read_stamp, rlock, wait_for};
use crate::redis_cli::{self, CAD, POLL_LOOP};
use crate::setup::Bench;
use crate::table::{Figure, Row, median};

pub fn figure(b: &Bench) -> Figure {
    let runs = b.cfg.runs;
    let cost = stamp_cost(b.dir, runs);
    let h_rlock = median(handoff_rlock(b.redis, b.dir, runs, cost));
    let h_flock = median(handoff_flock(b.flock, b.dir, runs, cost));
    let h_cli = median(handoff_cli(b.redis, b.dir, runs.min(10), cost));
    Figure {
        rows: vec![Row {
            figure: "handoff: release returns → next child starts, median".into(),
            unit: "ms",
            rlock: h_rlock,
            flock: Some(h_flock),
            cli: Some(h_cli),
            target: "≤ 5 ms".into(),
            met: Some(h_rlock <= 5.0),
            decimals: 2,
        }],
        note: Some(format!(
            "Handoff figures exclude {cost:.2} ms, the measured cost of starting `date +%s%N` \
             directly (so a figure can come out slightly negative)."
        )),
    }
}

/// Median cost, in ms, of starting `date +%s%N` directly: from just before the spawn to the
/// stamp it writes. Spawned through fork (a `pre_exec` hook) as rlock and flock spawn it.
fn stamp_cost(dir: &Path, runs: usize) -> f64 {
    let file = dir.join("stamp-direct");
    let samples = (0..runs)
        .map(|_| {
            let out = File::create(&file).expect("stamp file");
            let mut cmd = Command::new("date");
            cmd.arg("+%s%N").stdout(out);
            // SAFETY: an empty hook; it only makes std fork as rlock's spawn does.
            unsafe {
                cmd.pre_exec(|| Ok(()));
            }
            let before = now_ns();
            let status = cmd.status().expect("run date");
            if !status.success() {
                fail(&format!("date +%s%N failed: {status}"));
            }
            (read_stamp(&file) - before) as f64 / 1e6
        })
        .collect();
    median(samples)
}

/// Handoff with rlock: a holder, an `rlock exec -w … -- date +%s%N` parked behind it, then
/// `rlock release`; the time from the release returning to the stamp, in ms.
fn handoff_rlock(redis: &RedisServer, dir: &Path, runs: usize, cost: f64) -> Vec<f64> {
    let mut conn = redis.conn();
    let file = dir.join("stamp-rlock");
    (0..runs)
        .map(|_| {
            let token = output(&mut rlock(
                redis,
                &["acquire", "-k", "handoff", "--ttl", "60s"],
            ));
            let token = token.trim();
            let _ = fs::remove_file(&file);
            let mut next = Bg::spawn(
                rlock(
                    redis,
                    &["exec", "-k", "handoff", "-w", "60s", "--", "date", "+%s%N"],
                )
                .stdout(File::create(&file).expect("stamp file")),
            );
            wait_for("the next holder to park", || {
                zcard(&mut conn, "{rlock:handoff}:q") == 1
            });
            quiet(&mut rlock(
                redis,
                &["release", "-k", "handoff", "--token", token],
            ));
            let released = now_ns();
            let status = next.wait("the next holder");
            if !status.success() {
                fail(&format!("the next holder's rlock exec failed: {status}"));
            }
            (read_stamp(&file) - released) as f64 / 1e6 - cost
        })
        .collect()
}

/// Handoff with flock(1): this process holds the file lock, `flock FILE date +%s%N` blocks on
/// it (seen in /proc/locks), then the lock is dropped.
fn handoff_flock(flock: &Path, dir: &Path, runs: usize, cost: f64) -> Vec<f64> {
    let lockfile = dir.join("handoff.lock");
    let file = dir.join("stamp-flock");
    (0..runs)
        .map(|_| {
            let f = File::create(&lockfile).expect("lock file");
            let held = Flock::lock(f, FlockArg::LockExclusive)
                .unwrap_or_else(|(_, e)| fail(&format!("flock: {e}")));
            let _ = fs::remove_file(&file);
            let mut next = Bg::spawn(
                Command::new(flock)
                    .arg(&lockfile)
                    .args(["date", "+%s%N"])
                    .stdout(File::create(&file).expect("stamp file")),
            );
            let pid = next.pid().to_string();
            wait_for("flock to block", || {
                fs::read_to_string("/proc/locks").is_ok_and(|locks| {
                    locks
                        .lines()
                        .any(|l| l.contains("->") && l.split_whitespace().any(|w| w == pid))
                })
            });
            drop(held);
            let released = now_ns();
            let status = next.wait("flock");
            if !status.success() {
                fail(&format!("flock failed: {status}"));
            }
            (read_stamp(&file) - released) as f64 / 1e6 - cost
        })
        .collect()
}

/// Handoff with the raw pair: a `redis-cli SET NX PX` retried every 100 ms by sh (there is no
/// way to be told), released with redis-cli EVAL compare-and-delete. The release comes at
/// varying points of the retry period.
fn handoff_cli(redis: &RedisServer, dir: &Path, runs: usize, cost: f64) -> Vec<f64> {
    let mut conn = redis.conn();
    let file = dir.join("stamp-cli");
    let port = redis.port().to_string();
    (0..runs)
        .map(|i| {
            redis_cli::hold(&mut conn, "cli-handoff");
            let _ = fs::remove_file(&file);
            let script = format!("{POLL_LOOP}; exec date +%s%N");
            let mut next = Bg::spawn(
                Command::new("sh")
                    .args(["-c", &script, "sh", &port, "cli-handoff", "next"])
                    .stdout(File::create(&file).expect("stamp file")),
            );
            // The poller has no sign of parking; let it retry a while (varying phase).
            thread::sleep(Duration::from_millis(150 + (i as u64 * 37) % 100));
            quiet(Command::new("redis-cli").args([
                "-p",
                &port,
                "EVAL",
                CAD,
                "1",
                "cli-handoff",
                "holder",
            ]));
            let released = now_ns();
            let status = next.wait("the redis-cli poll loop");
            if !status.success() {
                fail(&format!("the redis-cli poll loop failed: {status}"));
            }
            redis_cli::clear(&mut conn, "cli-handoff");
            (read_stamp(&file) - released) as f64 / 1e6 - cost
        })
        .collect()
}
