//! The idle-waiter rows of the first table: what a waiter parked behind a held lock asks of
//! Redis per second, rlock's against the raw pair's poll loop (flock asks nothing).

use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use rlock_test_support::RedisServer;

use crate::monitor::{Watched, settle, watch, zcard};
use crate::process::{Bg, fail, output, quiet, rlock, wait_for};
use crate::redis_cli::{self, POLL_LOOP};
use crate::setup::Bench;
use crate::table::{Figure, Row};

pub fn figure(b: &Bench) -> Figure {
    let idle = idle_rlock(b.redis, b.cfg.idle);
    let (idle_req, idle_cmds) = (idle.requests, idle.commands);
    let idle_poll = idle_cli(b.redis, b.cfg.idle.min(Duration::from_secs(3)));
    let row = |figure: &str, rlock: f64, target: &str, met: Option<bool>| Row {
        figure: figure.into(),
        unit: "/s",
        rlock,
        flock: Some(0.0),
        minimal: None,
        cli: Some(idle_poll),
        target: target.into(),
        met,
        decimals: 2,
    };
    Figure {
        rows: vec![
            row(
                "idle waiter: requests to Redis per second",
                idle_req,
                "0 (≤ 1 /s)",
                Some(idle_req <= 1.0),
            ),
            row(
                "idle waiter: commands/s incl. those its scripts run",
                idle_cmds,
                "(for reference)",
                None,
            ),
        ],
        note: Some(format!(
            "Idle rows: rates from the first to the last request seen ({} requests, {} commands \
             counted with script internals, in {:?}); a parked rlock waiter asks nothing while \
             the holder's lease is alive.",
            idle.seen, idle.counted, idle.window
        )),
    }
}

/// Idle cost of a parked `rlock acquire` behind a 60 s holder.
fn idle_rlock(redis: &RedisServer, window: Duration) -> Watched {
    let mut conn = redis.conn();
    let holder = output(&mut rlock(
        redis,
        &["acquire", "-k", "idle", "--ttl", "60s"],
    ));
    let mut waiter = Bg::spawn(
        rlock(redis, &["acquire", "-k", "idle", "--ttl", "5s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_for("the idle waiter to park", || {
        zcard(&mut conn, "{rlock:idle}:q") == 1
    });
    // It tries once more after subscribing: let that land before watching.
    settle(redis);
    let figures = watch(redis, window);
    if waiter.0.try_wait().expect("try_wait").is_some() {
        fail("the idle rlock waiter stopped waiting");
    }
    let _ = kill(Pid::from_raw(waiter.pid()), Signal::SIGTERM);
    waiter.wait("the idle waiter after SIGTERM");
    quiet(&mut rlock(
        redis,
        &["release", "-k", "idle", "--token", holder.trim()],
    ));
    figures
}

/// Idle cost of the redis-cli poll loop (100 ms) behind a held key: requests/s.
fn idle_cli(redis: &RedisServer, window: Duration) -> f64 {
    let mut conn = redis.conn();
    redis_cli::hold(&mut conn, "cli-idle");
    let port = redis.port().to_string();
    let _poller = Bg::spawn(
        Command::new("sh")
            .args(["-c", POLL_LOOP, "sh", &port, "cli-idle", "waiter"])
            .stdout(Stdio::null()),
    );
    let requests = watch(redis, window).requests;
    redis_cli::clear(&mut conn, "cli-idle");
    requests
}
