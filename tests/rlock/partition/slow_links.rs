//! Slow links: every link to Redis delayed 20–200 ms each way, with
//! jitter, by the fault proxy. Contended holders still never overlap (judged by their
//! commands' own heartbeats) and get fences that rise in the order they started; waiters are
//! served in the order they arrived; and `--op-timeout` with the deadline maths keeps a holder
//! renewing through a link whose round trip is 300–400 ms.

use super::*;

// The soak engine (shared with soak.rs and the benchmark): its loops, heartbeat log and
// log checks, pointed at the proxy, with no faults of its own.
use crate::common::soak;

use std::fs;

/// 20 ms plus up to 180 ms: the 20–200 ms of the scenario, each way.
const SLOW: Mode = Mode::Delay {
    base: Duration::from_millis(20),
    jitter: Duration::from_millis(180),
};

/// The round trip of one PING through `proxy`.
fn ping_time(proxy: &Proxy) -> Duration {
    let mut c = TcpStream::connect(("127.0.0.1", proxy.port())).expect("connect to the proxy");
    c.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
    let t = Instant::now();
    assert_eq!(ping(&mut c).expect("PING through the proxy"), "+PONG");
    t.elapsed()
}

/// Six loops of `rlock -u PROXY exec -w 60s --ttl 2s` on one key, every third command running
/// longer than the TTL (so it renews over the slow link): no two commands ever run at once, the
/// fences rise in start order, and every exec exits 0.
#[test]
fn contended_holders_never_overlap_and_fences_rise() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    proxy.set(SLOW);
    // The link really is slow: a round trip takes at least the two 20 ms bases.
    let rtt = ping_time(&proxy);
    assert!(
        rtt >= Duration::from_millis(40),
        "a PING through the slowed proxy took {rtt:?}"
    );
    let dir = tempfile::Builder::new()
        .prefix("rlock-slow-links-")
        .tempdir()
        .expect("temp dir");
    let target = soak::Target {
        rlock: env!("CARGO_BIN_EXE_rlock").into(),
        port: server.port(),
        rlock_port: Some(proxy.port()),
        link: None,
        redis_pid: server.pid(),
        dir: dir.path().to_path_buf(),
        more_ports: Vec::new(),
    };
    let cfg = soak::Config {
        workers: 6,
        // Waiters are served in arrival order and every loop queues again as soon as its exec
        // ends, so by the 12th grant every loop has had its first turn and queued its second,
        // and the loops served first their third (a long one): about 18 grants in all.
        until: soak::Until::Grants(12),
        ttl: Duration::from_secs(2),
        short_beats: 3,
        // ~2.2–3 s: more than the TTL, so the holder renews through the slow link.
        long_beats: 100,
        long_every: 3,
        max_faults: 0,
        ..soak::Config::short(0)
    };
    let report = soak::run(&target, &cfg);
    eprintln!("slow links (PING round trip {rtt:?} before the run): {report}");
    let stderr = || {
        (0..cfg.workers)
            .map(|w| {
                let text = fs::read_to_string(dir.path().join(format!("loop-{w}.stderr")))
                    .unwrap_or_default();
                format!("--- loop {w} ---\n{text}")
            })
            .collect::<Vec<_>>()
            .join("\n")
    };

    assert!(report.overlaps.is_empty(), "holders overlapped:\n{report}");
    assert!(
        report.inversions.is_empty(),
        "fences did not rise in start order:\n{report}"
    );
    assert!(
        report.malformed.is_empty(),
        "unreadable heartbeats:\n{report}"
    );
    assert!(
        report.exits.keys().all(|&c| c == 0),
        "every exec must exit 0 over a slow link:\n{report}\n{}",
        stderr()
    );
    // Not vacuous: every loop got several turns, and some holders renewed over the slow link.
    assert!(
        report.execs_per_loop.iter().all(|&n| n >= 2),
        "a loop got fewer than two turns:\n{report}"
    );
    assert!(
        report.long_grants >= 1,
        "no command outlived the TTL:\n{report}"
    );
    assert_eq!(report.grants, report.exit_count(0), "{report}");
    assert_eq!(report.cut_short, 0, "a command was stopped:\n{report}");
}

/// A holder holds the key; five waiters are started through the slowed proxy one at a time, each
/// only once the previous one is seen in the queue (read from Redis directly); once the holder
/// releases, their commands start in arrival order.
#[test]
fn waiters_are_served_in_arrival_order() {
    const NAMES: [&str; 5] = ["A", "B", "C", "D", "E"];
    const QUEUE: &str = "{rlock:fifo}:q";
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let order = d.join("order");

    let held = crate::common::run(
        rlock()
            .args(["-u", &server.url(), "acquire", "-k", "fifo"])
            .args(["--ttl", "60s"]),
    );
    assert_eq!(held.code, 0, "the holder's acquire: {held}");
    let token = held.stdout.trim().to_string();
    assert!(!token.is_empty(), "acquire printed no token: {held}");

    proxy.set(SLOW);
    let queue = || -> Vec<String> {
        redis::cmd("ZRANGE")
            .arg(QUEUE)
            .arg(0)
            .arg(-1)
            .query(&mut server.conn())
            .expect("ZRANGE the queue")
    };
    let mut waiters: Vec<Bg> = Vec::new();
    let mut queued: Vec<String> = Vec::new();
    for (i, name) in NAMES.into_iter().enumerate() {
        let mut w = rlock();
        w.args(["-u", &proxy.url(), "exec", "-k", "fifo", "-w", "60s", "--"])
            .args(["sh", "-c", r#"echo "$2" >> "$1""#, "sh"])
            .arg(&order)
            .arg(name);
        waiters.push(Bg::spawn(name, d, &mut w));
        let n = i + 1;
        waiters[i].wait_for(
            &format!("{name} to be queued ({n} in {QUEUE})"),
            Duration::from_secs(15),
            || {
                matches!(
                    server.try_cmd(&["ZCARD", QUEUE]),
                    Ok(redis::Value::Int(c)) if c >= n as i64
                )
            },
        );
        let q = queue();
        assert_eq!(q.len(), n, "more waiters queued than started: {q:?}");
        assert_eq!(q[..i], queued[..], "the queue was reordered: {q:?}");
        queued = q;
    }
    assert!(
        !order.exists(),
        "a waiter's command ran while the key was held"
    );

    let released = crate::common::run(
        rlock()
            .args(["-u", &server.url(), "release", "-k", "fifo"])
            .args(["--token", &token]),
    );
    assert_eq!(released.code, 0, "the holder's release: {released}");
    for w in &mut waiters {
        let (out, _) = w.finish(Duration::from_secs(30));
        assert_eq!(out.code, 0, "{} failed: {out}", w.name());
    }
    let ran = fs::read_to_string(&order).expect("the waiters' commands ran");
    assert_eq!(
        ran.lines().collect::<Vec<_>>(),
        NAMES,
        "waiters were not served in arrival order over slow links"
    );
    assert!(!server.exists(QUEUE), "the queue is left behind");
}

/// `--op-timeout 1s --ttl 2s` through a link delayed 150–200 ms each way (a round trip of
/// 300–400 ms): the holder's renewals get through within their op-timeout and before its
/// deadline, so a command of 5–6 s (more than two TTLs) runs to its end and rlock exits 0. The
/// lock is read from Redis directly all along: it never lapses, and its TTL is seen renewed.
#[test]
fn op_timeout_and_deadlines_hold_over_a_slow_link() {
    let server = RedisServer::start();
    // The renewal's script in the cache: on a server that lacks it, the first renewal is two
    // round trips (EVALSHA, NOSCRIPT, EVAL), 600–800 ms here, which leaves a 2 s lease almost
    // no margin (it failed about one run in ten, with the debug build); what this test proves
    // is that the deadlines hold over the slow link.
    server.cmd(&["SCRIPT", "LOAD", rlock::lock::RENEW.source]);
    let proxy = Proxy::start(server.port());
    proxy.set(Mode::Delay {
        base: Duration::from_millis(150),
        jitter: Duration::from_millis(50),
    });
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let mut a = rlock();
    a.args(["-u", &proxy.url(), "--op-timeout", "1s"])
        .args(["exec", "-k", "slow", "--ttl", "2s", "--"])
        .args(beating("a", 6));
    let spawned = Instant::now();
    let mut a = Bg::spawn_group("a", d, &mut a);
    a.wait_for("A's first heartbeat", Duration::from_secs(10), || {
        !stamps(d, "a.beats").is_empty()
    });
    let first_beat = Instant::now();
    // The grant itself crossed the slow link: at least one round trip of 2 × 150 ms.
    assert!(
        first_beat - spawned >= Duration::from_millis(300),
        "the grant took only {:?}: the link is not slow",
        first_beat - spawned
    );

    // Sample the lock's TTL in Redis (directly) while the command runs.
    let mut samples: Vec<(Duration, i64)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while a.running() && Instant::now() < deadline {
        // The command's end is checked first: the release after it needs ≥ 150 ms to arrive.
        let done = d.join("a.done").exists();
        let pttl = server.pttl("rlock:slow");
        if done {
            break;
        }
        samples.push((first_beat.elapsed(), pttl));
        std::thread::sleep(Duration::from_millis(20));
    }
    let (out, _) = a.finish(Duration::from_secs(20));
    assert_eq!(out.code, 0, "the holder over a slow link: {out}");
    assert!(d.join("a.done").exists(), "A's command ran to its end");
    let lapsed: Vec<_> = samples.iter().filter(|(_, p)| *p <= 0).collect();
    assert!(
        lapsed.is_empty(),
        "the lock was missing (PTTL ≤ 0) while A's command ran: {lapsed:?}"
    );
    let ran = samples.last().map(|s| s.0).unwrap_or_default();
    assert!(
        ran > Duration::from_secs(4),
        "A's command was watched for only {ran:?}, not more than two TTLs"
    );
    let renewals = samples.windows(2).filter(|w| w[1].1 > w[0].1 + 100).count();
    assert!(
        renewals >= 2,
        "the lock's TTL was seen renewed only {renewals} times in {ran:?}"
    );
}
