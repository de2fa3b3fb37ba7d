//! The contention rows of the first table: many processes running short critical sections on
//! one key, and eight through a semaphore of four.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use crate::process::{fail, quiet, rlock, wall};
use crate::redis_cli;
use crate::setup::Bench;
use crate::table::{Figure, Row, interleaved, ms};

/// `procs` × `iters` critical sections on one key, for rlock, flock and the raw pair (which
/// retries every 10 ms), three times each, taking turns.
pub fn one_key(b: &Bench) -> Figure {
    let (procs, iters) = (b.cfg.procs, b.cfg.iters);
    let lockfile = b.dir.join("contended.lock");
    let port = b.redis.port().to_string();
    let [c_rlock, c_flock, c_cli] = interleaved(
        3,
        [
            &mut || {
                contention(procs, iters, |_| {
                    quiet(&mut rlock(
                        b.redis,
                        &["exec", "-w", "60s", "-k", "contended", "--", "true"],
                    ))
                })
            },
            &mut || {
                contention(procs, iters, |_| {
                    quiet(Command::new(b.flock).arg(&lockfile).arg("true"))
                })
            },
            &mut || contention(procs, iters, |p| cli_section(&port, p)),
        ],
    );
    Figure {
        rows: vec![Row {
            figure: format!(
                "{procs} procs × {iters} `exec -w 60s -- true`, one key, total (median of 3)"
            ),
            unit: "ms",
            rlock: c_rlock,
            flock: Some(c_flock),
            cli: Some(c_cli),
            target: "≤ 2× flock".into(),
            met: Some(c_rlock <= 2.0 * c_flock),
            decimals: 0,
        }],
        note: Some(
            "redis-cli column: for handoff and idle, a sh loop retrying SET NX every 100 ms \
             (there is nothing to wait on); for contention, a retry every 10 ms. flock waits in \
             the kernel and sends nothing to Redis."
                .into(),
        ),
    }
}

/// A semaphore: 8 contenders through `exec --limit 4` against a flock semaphore of 4 lock files
/// (`flock -n` over the files in turn, 10 ms apart when all are taken). Each section sleeps
/// 50 ms, so that four at once is what makes it fast.
pub fn semaphore(b: &Bench) -> Figure {
    let iters = b.cfg.iters;
    let slots: Vec<PathBuf> = (0..4)
        .map(|i| b.dir.join(format!("slot-{i}.lock")))
        .collect();
    let sections = 8 * iters;
    let [s_rlock, s_flock] = interleaved(
        3,
        [
            &mut || {
                contention(8, iters, |_| {
                    quiet(&mut rlock(
                        b.redis,
                        &[
                            "exec", "-w", "60s", "-k", "sem", "--limit", "4", "--", "sleep", "0.05",
                        ],
                    ))
                })
            },
            &mut || contention(8, iters, |_| flock_slot(b.flock, &slots)),
        ],
    );
    let per_s = |total_ms: f64| sections as f64 / (total_ms / 1e3);
    Figure {
        rows: vec![Row {
            figure: format!(
                "8 procs × {iters} `exec --limit 4 -- sleep 0.05`: sections/s (flock: 4 lock files)"
            ),
            unit: "/s",
            rlock: per_s(s_rlock),
            flock: Some(per_s(s_flock)),
            cli: None,
            target: "≥ 0.5× flock".into(),
            met: Some(per_s(s_rlock) >= 0.5 * per_s(s_flock)),
            decimals: 1,
        }],
        note: None,
    }
}

/// `procs` threads each running `iters` critical sections one after the other: the wall time
/// of the whole lot, in ms.
fn contention(procs: usize, iters: usize, one: impl Fn(usize) + Sync) -> f64 {
    ms(wall(|| {
        thread::scope(|s| {
            for p in 0..procs {
                let one = &one;
                s.spawn(move || {
                    for _ in 0..iters {
                        one(p);
                    }
                });
            }
        });
    }))
}

/// One section with the raw pair for contender `p`: retried every 10 ms until the key is free.
fn cli_section(port: &str, p: usize) {
    let token = format!("p{p}");
    for _ in 0..6000 {
        if redis_cli::pair(port, "cli-contended", &token) {
            return;
        }
        thread::sleep(Duration::from_millis(10));
    }
    fail("a redis-cli poller never got the lock in 6000 tries");
}

/// One section under a flock(1) semaphore of `slots.len()` files: `flock -n` on each file in
/// turn until one is free, a 10 ms pause after a round where none was.
fn flock_slot(flock: &Path, slots: &[PathBuf]) {
    for _ in 0..6000 {
        for slot in slots {
            let status = Command::new(flock)
                .args(["-n", "-E", "75"])
                .arg(slot)
                .args(["sleep", "0.05"])
                .stdin(Stdio::null())
                .status()
                .unwrap_or_else(|e| fail(&format!("cannot run flock: {e}")));
            match status.code() {
                Some(0) => return,
                Some(75) => {}
                _ => fail(&format!("flock -n failed: {status}")),
            }
        }
        thread::sleep(Duration::from_millis(10));
    }
    fail("a flock semaphore contender never got a slot in 6000 rounds");
}
