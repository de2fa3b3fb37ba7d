//! The rows of the first table that time one command start to finish: an uncontended
//! `exec -- true`, and the busy path (`-n` on a lock another holds), for rlock, flock, the
//! minimal Redis client and the raw redis-cli pair, taking turns.

use std::process::Command;

use crate::minimal;
use crate::process::{exits_with, fail, quiet, rlock, wall};
use crate::redis_cli;
use crate::setup::Bench;
use crate::table::{Figure, Row, interleaved, ms};

/// One uncontended `exec -k K -- true`, each tool taking turns.
pub fn uncontended(b: &Bench) -> Figure {
    let lockfile = b.dir.join("wall.lock");
    let port = b.redis.port().to_string();
    let [e_rlock, e_flock, e_min, e_cli] = interleaved(
        b.cfg.runs,
        [
            &mut || {
                ms(wall(|| {
                    quiet(&mut rlock(b.redis, &["exec", "-k", "wall", "--", "true"]))
                }))
            },
            &mut || {
                ms(wall(|| {
                    quiet(Command::new(b.flock).arg(&lockfile).arg("true"))
                }))
            },
            &mut || {
                ms(wall(|| {
                    quiet(&mut minimal::command(&[&port, "min-wall", "true"]))
                }))
            },
            &mut || {
                ms(wall(|| {
                    if !redis_cli::pair(&port, "cli-wall", "t") {
                        fail("the uncontended redis-cli SET NX found the key taken");
                    }
                }))
            },
        ],
    );
    Figure {
        rows: vec![Row {
            figure: "`exec -k K -- true` wall time, median".into(),
            unit: "ms",
            rlock: e_rlock,
            flock: Some(e_flock),
            minimal: Some(e_min),
            cli: Some(e_cli),
            target: "≤ 1.5× flock".into(),
            met: Some(e_rlock <= 1.5 * e_flock),
            decimals: 2,
        }],
        note: Some(
            "exec, busy and contention rows: the tools take turns, run by run, so that the \
             machine's drift weighs on all of them alike."
                .into(),
        ),
    }
}

/// The busy path: `exec -n -k K -- true` on a lock another holds, until the tool has said so
/// (rlock and the minimal client exit 75, `flock -n` 1, and the redis-cli pair's `SET NX` is
/// answered nil).
pub fn busy(b: &Bench) -> Figure {
    let lockfile = b.dir.join("busy.lock");
    let port = b.redis.port().to_string();
    let mut conn = b.redis.conn();
    quiet(&mut rlock(
        b.redis,
        &["acquire", "-k", "busy", "--ttl", "10m"],
    ));
    for key in ["min-busy", "cli-busy"] {
        redis_cli::hold(&mut conn, key);
    }
    let held = std::fs::File::create(&lockfile).expect("the busy lock file");
    let held = nix::fcntl::Flock::lock(held, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .unwrap_or_else(|(_, e)| fail(&format!("flock of the busy lock file: {e}")));
    let [b_rlock, b_flock, b_min, b_cli] = interleaved(
        b.cfg.runs,
        [
            &mut || {
                ms(wall(|| {
                    exits_with(
                        &mut rlock(b.redis, &["exec", "-n", "-k", "busy", "--", "true"]),
                        75,
                    )
                }))
            },
            &mut || {
                ms(wall(|| {
                    exits_with(
                        Command::new(b.flock).arg("-n").arg(&lockfile).arg("true"),
                        1,
                    )
                }))
            },
            &mut || {
                ms(wall(|| {
                    exits_with(&mut minimal::command(&[&port, "min-busy", "true"]), 75)
                }))
            },
            &mut || {
                ms(wall(|| {
                    if redis_cli::pair(&port, "cli-busy", "t") {
                        fail("the redis-cli SET NX took a held key");
                    }
                }))
            },
        ],
    );
    drop(held);
    quiet(&mut rlock(b.redis, &["release", "--force", "-k", "busy"]));
    for key in ["min-busy", "cli-busy"] {
        redis_cli::clear(&mut conn, key);
    }
    Figure {
        rows: vec![Row {
            figure: "`exec -n -k K -- true` on a held lock (busy), median".into(),
            unit: "ms",
            rlock: b_rlock,
            flock: Some(b_flock),
            minimal: Some(b_min),
            cli: Some(b_cli),
            target: "≤ 2× flock".into(),
            met: Some(b_rlock <= 2.0 * b_flock),
            decimals: 2,
        }],
        note: None,
    }
}

/// What two of rlock's guarantees cost in an `exec -- true`: the same command as it is, without
/// its run on record (`--history-limit 0`: one round trip fewer, after the release), and kept
/// in the process tree below its guardian rather than a cgroup of its own (`--contain tree`,
/// where rlock may make cgroups), taking turns with each other and flock.
pub fn guarantees(b: &Bench) -> Figure {
    let lockfile = b.dir.join("guarantees.lock");
    let exec = |extra: &[&str]| {
        let mut args = vec!["exec", "-k", "guarantees"];
        args.extend(extra);
        args.extend(["--", "true"]);
        ms(wall(|| quiet(&mut rlock(b.redis, &args))))
    };
    let [whole, no_record, tree, flock] = interleaved(
        b.cfg.runs,
        [
            &mut || exec(&[]),
            &mut || exec(&["--history-limit", "0"]),
            &mut || exec(&["--contain", "tree"]),
            &mut || {
                ms(wall(|| {
                    quiet(Command::new(b.flock).arg(&lockfile).arg("true"))
                }))
            },
        ],
    );
    let row = |figure: &str, rlock: f64| Row {
        figure: figure.into(),
        unit: "ms",
        rlock,
        flock: Some(flock),
        minimal: None,
        cli: None,
        target: "(for reference)".into(),
        met: None,
        decimals: 2,
    };
    Figure {
        rows: vec![
            row("`exec -- true` again, in turns with the two below", whole),
            row(
                "… without its run on record (`--history-limit 0`)",
                no_record,
            ),
            row("… in the process tree, no cgroup (`--contain tree`)", tree),
        ],
        note: None,
    }
}
