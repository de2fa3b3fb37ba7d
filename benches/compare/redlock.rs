//! The Redlock row of the first table: `acquire -n` + `release` on five nodes against one, each
//! node behind the tests' fault proxy set to a fixed delay each way, so that requests sent to
//! all nodes at once land near 1× and one after the other near 5×.

use std::time::Duration;

use rlock_test_support::{Mode, Proxy, RedisServer};

use crate::process::{output, quiet, rlock_ports, wall};
use crate::setup::Bench;
use crate::table::{Figure, Row, median, ms};

pub fn figure(b: &Bench) -> Figure {
    let more: Vec<RedisServer> = (0..4).map(|_| RedisServer::start()).collect();
    let direct: Vec<u16> = std::iter::once(b.redis)
        .chain(&more)
        .map(RedisServer::port)
        .collect();
    let latency = b.cfg.latency;
    let (r5, r1, r5_lo, r1_lo) = five_vs_one(&direct, latency, b.cfg.runs);
    let ratio = r5 / r1;
    Figure {
        rows: vec![Row {
            figure: format!(
                "Redlock `acquire -n` + `release`: 5 nodes ÷ 1 ({r5:.1} / {r1:.1} ms, {} ms links)",
                latency.as_millis()
            ),
            unit: "×",
            rlock: ratio,
            flock: None,
            cli: None,
            target: "≈1× (parallel), not 5× (sequential)".into(),
            met: Some(ratio < 2.0),
            decimals: 2,
        }],
        note: Some(format!(
            "Redlock row: each node behind a proxy adding {} ms each way. A grant and a release \
             are one round each, sent to every node at once (a second round raises the fence \
             counters of granting nodes that are behind, which the common case skips), so parallel \
             requests land near 1×, sequential ones near 5×. On plain loopback, where process \
             start-up dominates: {r5_lo:.2} / {r1_lo:.2} ms = {:.2}×.",
            latency.as_millis(),
            r5_lo / r1_lo
        )),
    }
}

/// Median `acquire -n` + `release` time with the five nodes on `direct` and with the first one,
/// over links of `delay` and over plain loopback: `(five, one, five_loopback, one_loopback)` in
/// ms.
fn five_vs_one(direct: &[u16], delay: Duration, runs: usize) -> (f64, f64, f64, f64) {
    let links: Vec<Proxy> = direct
        .iter()
        .map(|port| {
            let link = Proxy::start(*port);
            link.set(Mode::Delay {
                base: delay,
                jitter: Duration::ZERO,
            });
            link
        })
        .collect();
    let slow: Vec<u16> = links.iter().map(Proxy::port).collect();
    // Warm the script caches of all five (and the page cache).
    for _ in 0..3 {
        acquire_release(direct, 1);
    }
    (
        acquire_release(&slow, runs),
        acquire_release(&slow[..1], runs),
        acquire_release(direct, runs),
        acquire_release(&direct[..1], runs),
    )
}

/// Median wall time, in ms, of `rlock acquire -n` followed by `rlock release` on `ports`.
fn acquire_release(ports: &[u16], runs: usize) -> f64 {
    median(
        (0..runs)
            .map(|_| {
                ms(wall(|| {
                    let token = output(&mut rlock_ports(
                        ports,
                        &["acquire", "-n", "-k", "redlock", "--ttl", "30s"],
                    ));
                    quiet(&mut rlock_ports(
                        ports,
                        &["release", "-k", "redlock", "--token", token.trim()],
                    ));
                }))
            })
            .collect(),
    )
}
