//! The contention row of the first table: many processes running short critical sections on
//! one key.

use std::process::Command;
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
            minimal: None,
            cli: Some(c_cli),
            target: "≤ 2× flock".into(),
            met: Some(c_rlock <= 2.0 * c_flock),
            decimals: 0,
        }],
        note: Some(
            "redis-cli column: for idle, a sh loop retrying SET NX every 100 ms (there is \
             nothing to wait on); for contention, a retry every 10 ms. The minimal client does \
             not wait (a taken key exits 75). flock waits in the kernel and sends nothing to \
             Redis."
                .into(),
        ),
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
