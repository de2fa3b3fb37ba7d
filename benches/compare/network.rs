//! The rows across a network: one Redis behind the tests' latency proxy (`RLOCK_BENCH_RTT_MS`
//! round trip, 10 ms by default, no jitter, so that the figures are the round trips' and the
//! programs' own), as most users' Redis is on another host or zone. An uncontended
//! `exec -- true` beside the minimal client at the same delay, and the handoffs of the host
//! table (one waiter queued, inside a line); each with the round trips it takes, counted at
//! the proxy as `network::round_trips` counts them: what docs/waiting.md ("Across a network")
//! says, and a count that must not grow.

use std::fs;
use std::path::Path;
use std::process::Stdio;
use std::thread;
use std::time::Duration;

use nix::sys::stat::Mode;
use nix::unistd::mkfifo;

use rlock_test_support::{Dir, Proxy, RedisServer, Rtt};

use crate::host::{RlockTool, Spread, Tool, handoffs_in_line, handoffs_one_queued, release};
use crate::minimal;
use crate::process::{Bg, fail, quiet, rlock, wait_for, wall};
use crate::setup::Bench;
use crate::table::{interleaved, ms};

/// The waiters ahead of the handoffs timed inside a line: the first handoffs of a line this
/// long are timed while most of it still waits. Shorter than the host table's 100, since each
/// waiter takes some round trips to join the line.
const LINE: usize = 30;

/// Handoffs timed of each kind.
const HANDOFFS: usize = 30;

/// What the network table shows.
struct Measured {
    rtt_ms: u64,
    exec: f64,
    minimal: f64,
    one: Spread,
    line: Spread,
    trips: Trips,
}

/// Round trips, counted at the proxy.
struct Trips {
    exec: usize,
    minimal: usize,
    grant: usize,
    renewal: usize,
    one: usize,
    line: usize,
}

/// The network table: measured, then printed.
pub fn table(b: &Bench) {
    let rtt_ms = b.cfg.rtt_ms;
    let server = RedisServer::start_across(Rtt {
        base: Duration::from_millis(rtt_ms),
        jitter: Duration::ZERO,
    });
    let front = server
        .front()
        .unwrap_or_else(|| fail("the server behind the proxy has no proxy"));
    let port = server.client_port().to_string();
    let exec = |key: &str| quiet(&mut rlock(&server, &["exec", "-k", key, "--", "true"]));
    let min = |key: &str| quiet(&mut minimal::command(&[&port, key, "true"]));
    // The scripts loaded, the pages in the cache: what the first use costs is not counted.
    for _ in 0..3 {
        exec("net-warm");
        min("net-min-warm");
    }
    let (grant, renewal) = grant_and_renewal(&server, front);
    let trips = Trips {
        exec: round_trips(front, || exec("net-count")),
        minimal: round_trips(front, || min("net-min-count")),
        grant,
        renewal,
        one: handoff_trips(&server, front, b.dir, 1),
        line: handoff_trips(&server, front, b.dir, 3),
    };
    let [e_rlock, e_min] = interleaved(
        b.cfg.runs,
        [&mut || ms(wall(|| exec("net-wall"))), &mut || {
            ms(wall(|| min("net-min-wall")))
        }],
    );
    let tool = RlockTool(&server);
    let one = Spread::of(handoffs_one_queued(&tool, b.dir, HANDOFFS));
    let line = Spread::of(handoffs_in_line(&tool, b.dir, LINE + HANDOFFS, HANDOFFS));
    print(&Measured {
        rtt_ms,
        exec: e_rlock,
        minimal: e_min,
        one,
        line,
        trips,
    });
}

/// Requests the clients sent through `front` while `f` ran: each client waits for a reply
/// before it sends again (or sends what it pipelines in one write), so each piece the proxy
/// reads towards the server is one round trip.
fn round_trips(front: &Proxy, f: impl FnOnce()) -> usize {
    let before = front.pieces(Dir::ToServer);
    f();
    front.pieces(Dir::ToServer) - before
}

/// The round trips of `acquire` (a grant) and of `renew` (a renewal).
fn grant_and_renewal(server: &RedisServer, front: &Proxy) -> (usize, usize) {
    let token = |out: std::process::Output| String::from_utf8_lossy(&out.stdout).trim().to_string();
    let acquire = |key: &str| {
        let out = rlock(server, &["acquire", "-k", key])
            .output()
            .unwrap_or_else(|e| fail(&format!("rlock acquire: {e}")));
        if !out.status.success() {
            fail(&format!("rlock acquire -k {key}: {out:?}"));
        }
        token(out)
    };
    let renew =
        |key: &str, token: &str| quiet(&mut rlock(server, &["renew", "-k", key, "--token", token]));
    // renew.lua loaded first.
    let warm = acquire("net-warm-renew");
    renew("net-warm-renew", &warm);
    let mut held = String::new();
    let grant = round_trips(front, || held = acquire("net-grant"));
    let renewal = round_trips(front, || renew("net-grant", &held));
    quiet(&mut rlock(
        server,
        &["release", "-k", "net-grant", "--token", &held],
    ));
    quiet(&mut rlock(
        server,
        &["release", "-k", "net-warm-renew", "--token", &warm],
    ));
    (grant, renewal)
}

/// The round trips of one handoff to the first of `waiters` queued behind a holder: from the
/// end of the holder's command to the start of the next holder's.
fn handoff_trips(server: &RedisServer, front: &Proxy, dir: &Path, waiters: usize) -> usize {
    let d = dir.join(format!("net-trips-{waiters}"));
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).expect("bench dir");
    let tool = RlockTool(server);
    let key = format!("net-trips-{waiters}-{}", std::process::id());
    let fifo = |i: usize| d.join(format!("fifo-{i}"));
    // Each command stamps its start, then waits on its FIFO.
    let script = r#"echo > "$1/start-$2"; read x < "$1/fifo-$2""#;
    let mut procs = Vec::new();
    for i in 0..=waiters {
        mkfifo(&fifo(i), Mode::S_IRWXU).unwrap_or_else(|e| fail(&format!("mkfifo: {e}")));
        procs.push(Bg::spawn(
            tool.under_lock(&key, script, &[d.display().to_string(), i.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        ));
        wait_for("a holder or waiter in line", || tool.in_line(&key) > i);
    }
    wait_for("the holder's command", || d.join("start-0").exists());
    // Settled into their wait (subscribed, parked): a waiter sends nothing while it waits.
    thread::sleep(Duration::from_millis(300));
    let n = round_trips(front, || {
        release(&fifo(0));
        wait_for("the next holder's command", || d.join("start-1").exists());
    });
    for (i, p) in procs.iter_mut().enumerate() {
        if i > 0 {
            // The later ones wait for the one before: each in its turn.
            wait_for("the next holder's command", || {
                d.join(format!("start-{i}")).exists()
            });
            release(&fifo(i));
        }
        p.wait("a holder");
    }
    n
}

fn print(m: &Measured) {
    let t = &m.trips;
    println!();
    println!(
        "Across a network: one Redis behind a proxy that adds {} ms to each round trip (no jitter); {HANDOFFS} handoffs each, ms as median (min–max):",
        m.rtt_ms
    );
    println!();
    println!("| figure | rlock | minimal client | rlock/minimal | round trips | target | met |");
    println!("|---|---|---|---|---|---|---|");
    let ratio = m.exec / m.minimal;
    println!(
        "| `exec -k K -- true` wall time, median | {:.2} ms | {:.2} ms | {ratio:.2}× | {}; minimal client {} | ≤ 1.1× minimal | {} |",
        m.exec,
        m.minimal,
        t.exec,
        t.minimal,
        if ratio <= 1.1 { "yes" } else { "NO" }
    );
    println!("| a grant (`acquire`) | – | – | – | {} | | |", t.grant);
    println!("| a renewal (`renew`) | – | – | – | {} | | |", t.renewal);
    let spread = |s: &Spread| format!("{:.2} ({:.2}–{:.2}) ms", s.median, s.min, s.max);
    println!(
        "| handoff, holder's command ends → next command starts, 1 waiter queued | {} | – | – | {} | | |",
        spread(&m.one),
        t.one
    );
    println!(
        "| handoff, inside a line of {LINE}+ queued | {} | – | – | {} | | |",
        spread(&m.line),
        t.line
    );
}
