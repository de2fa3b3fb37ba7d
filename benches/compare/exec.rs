//! The rows of the first table that time one command start to finish: process start-up
//! (`--version`), an uncontended `exec -- true`, the same exec with its run on record and
//! without (`--history-limit 0`), and with `--replicas 1` (a WAIT for one replica after the
//! grant).

use std::process::Command;

use rlock_test_support::RedisServer;

use crate::process::{RLOCK, fail, quiet, rlock, wait_for, wall};
use crate::redis_cli;
use crate::setup::Bench;
use crate::table::{Figure, Row, interleaved, median, ms};

/// Median wall time of `--version` for each tool: what starting a process costs, for reading
/// the rest.
pub fn startup(b: &Bench) -> Figure {
    let startup = |program: &std::path::Path| {
        median(
            (0..b.cfg.runs)
                .map(|_| ms(wall(|| quiet(Command::new(program).arg("--version")))))
                .collect(),
        )
    };
    let rlock = startup(RLOCK.as_ref());
    let flock = startup(b.flock);
    let cli = startup("redis-cli".as_ref());
    Figure {
        rows: vec![Row {
            figure: "process start-up (--version), median".into(),
            unit: "ms",
            rlock,
            flock: Some(flock),
            cli: Some(cli),
            target: "(for reference)".into(),
            met: None,
            decimals: 2,
        }],
        note: None,
    }
}

/// One uncontended `exec -k K -- true`, rlock, flock and the raw pair taking turns.
pub fn uncontended(b: &Bench) -> Figure {
    let lockfile = b.dir.join("wall.lock");
    let port = b.redis.port().to_string();
    let [e_rlock, e_flock, e_cli] = interleaved(
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
            cli: Some(e_cli),
            target: "≤ 1.3× flock".into(),
            met: Some(e_rlock <= 1.3 * e_flock),
            decimals: 2,
        }],
        note: Some(
            "exec and contention rows: rlock, flock and redis-cli take turns, run by run, so that \
             the machine's drift weighs on all three alike."
                .into(),
        ),
    }
}

/// What recording the run costs: `exec -- true` as it is (its run appended to the lock's history
/// at the end), the same with `--history-limit 0`, and flock, run by run.
pub fn history(b: &Bench) -> Figure {
    let lockfile = b.dir.join("history.lock");
    let exec = |extra: &[&str]| {
        let args: Vec<&str> = ["exec", "-k", "hist"]
            .iter()
            .chain(extra)
            .chain(&["--", "true"])
            .copied()
            .collect();
        ms(wall(|| quiet(&mut rlock(b.redis, &args))))
    };
    let [h_on, h_off, h_flock] = interleaved(
        b.cfg.runs,
        [
            &mut || exec(&[]),
            &mut || exec(&["--history-limit", "0"]),
            &mut || {
                ms(wall(|| {
                    quiet(Command::new(b.flock).arg(&lockfile).arg("true"))
                }))
            },
        ],
    );
    Figure {
        rows: vec![Row {
            figure: format!(
                "`exec -- true` with its run on record, median (--history-limit 0: {h_off:.2} ms, {:.2}× flock; history costs {:+.2} ms)",
                h_off / h_flock,
                h_on - h_off
            ),
            unit: "ms",
            rlock: h_on,
            flock: Some(h_flock),
            cli: None,
            target: "≤ 1.3× flock".into(),
            met: Some(h_on <= 1.3 * h_flock),
            decimals: 2,
        }],
        note: None,
    }
}

/// `--replicas 1`: the exec with a WAIT after the grant, a replica on loopback, against the
/// same exec without it and flock, run by run.
pub fn replicas(b: &Bench) -> Figure {
    let replica = start_replica(b.redis);
    let lockfile = b.dir.join("replicas.lock");
    let exec = |replicas: &[&str]| {
        let args: Vec<&str> = replicas
            .iter()
            .chain(&["exec", "-k", "repl", "--", "true"])
            .copied()
            .collect();
        ms(wall(|| quiet(&mut rlock(b.redis, &args))))
    };
    let [w_rlock, w_plain, w_flock] = interleaved(
        b.cfg.runs,
        [
            &mut || exec(&["--replicas", "1"]),
            &mut || exec(&[]),
            &mut || {
                ms(wall(|| {
                    quiet(Command::new(b.flock).arg(&lockfile).arg("true"))
                }))
            },
        ],
    );
    drop(replica);
    Figure {
        rows: vec![Row {
            figure: format!(
                "`--replicas 1 exec -- true`, 1 replica, median (without --replicas: {w_plain:.2} ms, {:.2}×)",
                w_rlock / w_plain
            ),
            unit: "ms",
            rlock: w_rlock,
            flock: Some(w_flock),
            cli: None,
            target: "≤ 1.25× without --replicas".into(),
            met: Some(w_rlock <= 1.25 * w_plain),
            decimals: 2,
        }],
        note: None,
    }
}

/// A server replicating `master`, once its link is up.
fn start_replica(master: &RedisServer) -> RedisServer {
    let replica = RedisServer::start();
    let mut conn = replica.conn();
    redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(master.port())
        .query::<()>(&mut conn)
        .expect("REPLICAOF");
    wait_for("the replica's link to come up", || {
        redis::cmd("INFO")
            .arg("replication")
            .query::<String>(&mut conn)
            .is_ok_and(|i| i.contains("master_link_status:up"))
    });
    replica
}
