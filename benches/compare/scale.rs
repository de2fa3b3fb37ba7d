//! Waiting at scale: a long line drained through one key (3,000 waiters by default,
//! `RLOCK_BENCH_BIG_LINE`) and a crowd larger than the server's connection limit (`maxclients`
//! 50, `RLOCK_BENCH_CROWD` waiters started at once), each beside flock with as many waiters.
//! Rows of the waiting table (`waiting.rs`); `RLOCK_BENCH_ONLY=scale` runs them alone.

use std::process::Stdio;
use std::time::Instant;

use rlock_test_support::RedisServer;

use crate::monitor::zcard;
use crate::process::{Bg, fail, rlock, wait_for};
use crate::setup::Bench;
use crate::table::ms;
use crate::waiting::{Row, drain_flock, drain_rlock};

/// The connection limit of the crowd's server.
const MAXCLIENTS: usize = 50;

/// The long line, then the crowd over the connection limit.
pub fn rows(b: &Bench) -> Vec<Row> {
    let n = b.cfg.big_line;
    let r = drain_rlock(b.redis, b.dir, n);
    let f = drain_flock(b.flock, b.dir, n);
    let crowd = b.cfg.crowd;
    let over = crowd_rlock(b, crowd);
    let flock = drain_flock(b.flock, b.dir, crowd);
    vec![
        Row {
            figure: format!("{n} waiters through one key: release → last done"),
            unit: "ms",
            rlock: r.total,
            flock: Some(f.total),
            etcd: None,
            target: "≤ 2× flock".into(),
            met: Some(r.total <= 2.0 * f.total),
        },
        Row {
            figure: format!("{n} waiters: order inversions"),
            unit: "",
            rlock: r.inversions as f64,
            flock: Some(f.inversions as f64),
            etcd: None,
            target: "0".into(),
            met: Some(r.inversions == 0),
        },
        Row {
            figure: format!("a waiter's RSS with {n} in line (MiB)"),
            unit: "MiB",
            rlock: r.waiter_rss.unwrap_or(f64::NAN),
            flock: None,
            etcd: None,
            target: "(for reference)".into(),
            met: None,
        },
        Row {
            figure: format!(
                "{crowd} waiters at once, maxclients {MAXCLIENTS}: release → last done (all exit 0)"
            ),
            unit: "ms",
            rlock: over,
            flock: Some(flock.total),
            etcd: None,
            target: "all run; < 15 s".into(),
            met: Some(over < 15_000.0),
        },
    ]
}

/// `n` rlock exec waiters started at once behind a holder on a server that takes MAXCLIENTS
/// clients: most cannot even connect, and wait for room. The holder lets go when told (over the
/// connection it holds: a new one could be refused). Go → the last waiter done (ms); every waiter
/// must exit 0.
fn crowd_rlock(b: &Bench, n: usize) -> f64 {
    let redis = RedisServer::start_with(&["--maxclients", &MAXCLIENTS.to_string()]);
    let key = "crowd";
    let queue = format!("{{rlock:{key}}}:q");
    let go = b.dir.join("crowd-go");
    let _ = std::fs::remove_file(&go);
    // Kept open before the crowd comes: the server will have no room for a new one.
    let mut conn = redis.conn();
    let until_go = format!("until [ -e '{}' ]; do sleep 0.01; done", go.display());
    let mut holder = Bg::spawn(
        rlock(&redis, &["exec", "-k", key, "--", "sh", "-c", &until_go])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_for("the holder", || {
        redis::cmd("EXISTS")
            .arg(format!("rlock:{key}"))
            .query::<bool>(&mut conn)
            .unwrap_or(false)
    });
    let mut waiters: Vec<Bg> = (0..n)
        .map(|_| {
            Bg::spawn(
                rlock(&redis, &["exec", "-w", "600s", "-k", key, "--", "true"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null()),
            )
        })
        .collect();
    // As many in line as the server has room for: two connections each.
    let room = (MAXCLIENTS - 3) / 2;
    wait_for("the line to fill the server", || {
        zcard(&mut conn, &queue) >= room
    });
    let start = Instant::now();
    std::fs::write(&go, "").expect("tell the holder");
    if !holder.wait("the crowd's holder").success() {
        fail("the crowd's holder failed");
    }
    for w in &mut waiters {
        if !w.wait("a waiter of the crowd").success() {
            fail("a waiter over the connection limit did not exit 0");
        }
    }
    ms(start.elapsed())
}
