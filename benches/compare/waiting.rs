//! The waiting table: what idle waiters cost Redis, a line of 100 and of 300 waiters drained
//! through one key by rlock, `etcdctl lock` and flock side by side, how the costs grow from 100
//! to 300 waiters, and what 1,000 distinct keys leave behind. `etcdctl lock` runs against an etcd
//! this benchmark starts on loopback ports. The host table (`host.rs`) comes first, with the
//! same etcd.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use rlock_test_support::RedisServer;

use crate::etcd::{self, Etcd};
use crate::host;
use crate::memory::rss_kib;
use crate::monitor::{settle, watch, zcard};
use crate::process::{Bg, fail, flocks_on, output, quiet, rlock, wait_for};
use crate::setup::Bench;
use crate::table::ms;

/// One row of the waiting table; a tool's cell is None when it has no such figure.
pub struct Row {
    pub figure: String,
    pub unit: &'static str,
    pub rlock: f64,
    pub flock: Option<f64>,
    pub etcd: Option<f64>,
    pub target: String,
    pub met: Option<bool>,
}

pub fn print(rows: &[Row]) {
    let cell =
        |v: Option<f64>, unit: &str| v.map_or("–".to_string(), |v| format!("{v:.2} {unit}"));
    let ratio = |a: f64, b: Option<f64>| match b {
        Some(b) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".into(),
    };
    println!("| figure | rlock | flock | etcdctl lock | rlock/flock | rlock/etcd | target | met |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            r.figure,
            cell(Some(r.rlock), r.unit),
            cell(r.flock, r.unit),
            cell(r.etcd, r.unit),
            ratio(r.rlock, r.flock),
            ratio(r.rlock, r.etcd),
            r.target,
            match r.met {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "",
            }
        );
    }
}

/// Redis commands per second while `n` waiters idle behind a 60 s lease.
pub fn idle_waiters(redis: &RedisServer, n: usize, window: Duration) -> f64 {
    let key = format!("idle{n}");
    let queue = format!("{{rlock:{key}}}:q");
    let holder = output(&mut rlock(redis, &["acquire", "-k", &key, "--ttl", "60s"]));
    let mut conn = redis.conn();
    let waiters: Vec<Bg> = (0..n)
        .map(|_| {
            Bg::spawn(
                rlock(redis, &["acquire", "-k", &key, "--ttl", "5s"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null()),
            )
        })
        .collect();
    wait_for("the idle waiters to park", || zcard(&mut conn, &queue) == n);
    // Each tries once more after subscribing: let those land.
    settle(redis);
    let watched = watch(redis, window);
    for w in &waiters {
        let _ = kill(Pid::from_raw(w.pid()), Signal::SIGTERM);
    }
    drop(waiters);
    quiet(&mut rlock(
        redis,
        &["release", "-k", &key, "--token", holder.trim()],
    ));
    watched.counted as f64 / window.as_secs_f64()
}

/// What draining a line of waiters through one key cost.
pub struct Drain {
    /// Release → the last waiter done (ms).
    pub total: f64,
    /// Waiters that ran before one that arrived earlier.
    pub inversions: usize,
    /// Redis CPU (user + sys, ms) spent over the drain, and a waiter's RSS (MiB); rlock only.
    pub redis_cpu: Option<f64>,
    pub waiter_rss: Option<f64>,
}

/// The critical section every tool runs: a stamp, then its arrival number to the log.
fn section(dir: &Path, i: usize) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            r#"date +%s%N >> "{}/stamps"; echo {i} >> "{}/order""#,
            dir.display(),
            dir.display()
        ),
    ]
}

fn results(dir: &Path, done: Instant, start: Instant) -> Drain {
    let stamps = fs::read_to_string(dir.join("stamps")).unwrap_or_default();
    if !stamps.lines().any(|l| l.trim().parse::<i128>().is_ok()) {
        fail("no waiter ran");
    }
    let order: Vec<usize> = fs::read_to_string(dir.join("order"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    let inversions = order.windows(2).filter(|w| w[1] < w[0]).count();
    Drain {
        total: ms(done - start),
        inversions,
        redis_cpu: None,
        waiter_rss: None,
    }
}

fn fresh(dir: &Path, name: &str) -> PathBuf {
    let d = dir.join(name);
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).expect("mkdir");
    d
}

fn redis_cpu_ms(redis: &RedisServer) -> f64 {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query(&mut redis.conn())
        .expect("INFO cpu");
    ["used_cpu_sys:", "used_cpu_user:"]
        .iter()
        .filter_map(|f| info.lines().find_map(|l| l.strip_prefix(f)))
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .sum::<f64>()
        * 1000.0
}

/// `n` rlock exec waiters queued in arrival order behind a holder, then the holder releases.
pub fn drain_rlock(redis: &RedisServer, dir: &Path, n: usize) -> Drain {
    let d = fresh(dir, &format!("rlock-{n}"));
    let key = format!("chain{n}");
    let queue = format!("{{rlock:{key}}}:q");
    let mut conn = redis.conn();
    let holder = output(&mut rlock(redis, &["acquire", "-k", &key, "--ttl", "600s"]));
    let mut waiters = Vec::with_capacity(n);
    for i in 0..n {
        let mut args: Vec<String> = ["exec", "-w", "600s", "-k", &key, "--"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        args.extend(section(&d, i));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        waiters.push(Bg::spawn(
            rlock(redis, &args)
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        ));
        wait_for("a waiter to queue", || zcard(&mut conn, &queue) == i + 1);
    }
    settle(redis);
    let rss = rss_kib(waiters[n - 1].pid()).map(|k| k / 1024.0);
    let cpu = redis_cpu_ms(redis);
    let start = Instant::now();
    quiet(&mut rlock(
        redis,
        &["release", "-k", &key, "--token", holder.trim()],
    ));
    for w in &mut waiters {
        w.wait("an rlock waiter");
    }
    let done = Instant::now();
    let mut out = results(&d, done, start);
    out.redis_cpu = Some(redis_cpu_ms(redis) - cpu);
    out.waiter_rss = rss;
    out
}

/// The same with flock(1): the benchmark holds the file lock itself, `n` flock processes wait
/// in the kernel (seen in /proc/locks), then the benchmark lets go.
pub fn drain_flock(flock: &Path, dir: &Path, n: usize) -> Drain {
    let d = fresh(dir, &format!("flock-{n}"));
    let path = d.join("lock");
    let file = File::create(&path).expect("lock file");
    let held = Flock::lock(file, FlockArg::LockExclusive).unwrap_or_else(|_| fail("flock"));
    let blocked = || flocks_on(&path, true);
    let base = blocked();
    let mut waiters = Vec::with_capacity(n);
    for i in 0..n {
        let mut cmd = Command::new(flock);
        cmd.arg(&path).args(section(&d, i));
        waiters.push(Bg::spawn(cmd.stdout(Stdio::null()).stderr(Stdio::null())));
        wait_for("a flock waiter to block", || blocked() > base + i);
    }
    let start = Instant::now();
    drop(held);
    for w in &mut waiters {
        w.wait("a flock waiter");
    }
    results(&d, Instant::now(), start)
}

/// The same with `etcdctl lock`: a holder `etcdctl lock` (no command) released by SIGTERM.
pub fn drain_etcd(etcd: &Etcd, dir: &Path, n: usize) -> Drain {
    let d = fresh(dir, &format!("etcd-{n}"));
    let name = format!("chain{n}-{}", std::process::id());
    let mut holder = Bg::spawn(
        etcd.ctl()
            .args(["lock", &name])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_for("the etcd holder", || etcd.count(&name) == 1);
    let mut waiters = Vec::with_capacity(n);
    for i in 0..n {
        let mut cmd = etcd.ctl();
        cmd.args(["lock", &name, "--"]).args(section(&d, i));
        waiters.push(Bg::spawn(cmd.stdout(Stdio::null()).stderr(Stdio::null())));
        wait_for("an etcdctl waiter to queue", || etcd.count(&name) == i + 2);
    }
    let start = Instant::now();
    let _ = kill(Pid::from_raw(holder.pid()), Signal::SIGTERM);
    holder.wait("the etcd holder");
    for w in &mut waiters {
        w.wait("an etcdctl waiter");
    }
    results(&d, Instant::now(), start)
}

/// Locks and releases `n` distinct keys, then reports the keys with no expiry and the longest
/// life any key has left (s).
/// What `n` locked and released keys leave: keys with no expiry, the longest life left of the
/// lock's own keys (s), and of their run histories (s; kept `--history-ttl`, 30 days, by
/// design: they go with the last run, not with the lock).
pub fn leftovers(redis: &RedisServer, n: usize) -> (usize, f64, f64) {
    for i in 0..n {
        quiet(&mut rlock(
            redis,
            &[
                "exec",
                "-k",
                &format!("pr-{i}"),
                "--ttl",
                "1s",
                "--",
                "true",
            ],
        ));
    }
    let mut conn = redis.conn();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*pr-*")
        .query(&mut conn)
        .expect("KEYS");
    let mut forever = 0;
    let (mut longest, mut history) = (0i64, 0i64);
    for k in keys {
        let pttl: i64 = redis::cmd("PTTL").arg(&k).query(&mut conn).unwrap_or(-2);
        if pttl == -1 {
            forever += 1;
        }
        if k.ends_with(":history") {
            history = history.max(pttl);
        } else {
            longest = longest.max(pttl);
        }
    }
    (forever, longest as f64 / 1000.0, history as f64 / 1000.0)
}

/// The host table, then the waiting table, with one etcd for both; `scale` makes the rows of
/// waiting at scale (`scale.rs`, which draws its lines with this file's drains: handed in by
/// main, so that the two files do not import each other).
pub fn tables(b: &Bench, scale: fn(&Bench) -> Vec<Row>) {
    let etcd = etcd::start();
    host::table(b, etcd.as_ref());
    let (small, large) = (b.cfg.line / 3, b.cfg.line);
    let mut rows = idle_rows(b);
    // (The handoff, measured 30 times and more, is in the host table above.)
    let s = Drains::measure(b, etcd.as_ref(), small);
    let l = Drains::measure(b, etcd.as_ref(), large);
    for d in [&s, &l] {
        rows.extend(drain_rows(d));
    }
    rows.extend(growth_rows(&s, &l));
    rows.extend(scale(b));
    rows.push(leftovers_row(b.redis));
    println!();
    print(&rows);
}

fn idle_rows(b: &Bench) -> Vec<Row> {
    [10, 100]
        .into_iter()
        .map(|n| {
            let rate = idle_waiters(b.redis, n, b.cfg.idle);
            Row {
                figure: format!("{n} idle waiters behind a 60 s lease: Redis commands/s"),
                unit: "/s",
                rlock: rate,
                flock: Some(0.0),
                etcd: None,
                target: "0".into(),
                met: Some(rate == 0.0),
            }
        })
        .collect()
}

/// One line of `n` waiters drained by each tool.
struct Drains {
    n: usize,
    rlock: Drain,
    flock: Drain,
    etcd: Option<Drain>,
}

impl Drains {
    fn measure(b: &Bench, etcd: Option<&Etcd>, n: usize) -> Drains {
        Drains {
            n,
            rlock: drain_rlock(b.redis, b.dir, n),
            flock: drain_flock(b.flock, b.dir, n),
            etcd: etcd.map(|e| drain_etcd(e, b.dir, n)),
        }
    }
}

fn drain_rows(d: &Drains) -> [Row; 2] {
    let (r, f, e, n) = (&d.rlock, &d.flock, &d.etcd, d.n);
    [
        Row {
            figure: format!("{n} waiters through one key: release → last done"),
            unit: "ms",
            rlock: r.total,
            flock: Some(f.total),
            etcd: e.as_ref().map(|e| e.total),
            target: "< etcdctl, ≤ 2× flock".into(),
            met: Some(r.total <= 2.0 * f.total && e.as_ref().is_none_or(|e| r.total < e.total)),
        },
        Row {
            figure: format!("{n} waiters: order inversions"),
            unit: "",
            rlock: r.inversions as f64,
            flock: Some(f.inversions as f64),
            etcd: e.as_ref().map(|e| e.inversions as f64),
            target: "0".into(),
            met: Some(r.inversions == 0),
        },
    ]
}

/// How drain time and Redis CPU grow from the short line `s` to the long one `l`, and whether a
/// waiter's memory does.
fn growth_rows(s: &Drains, l: &Drains) -> [Row; 3] {
    let growth = |a: f64, b: f64| if a > 0.0 { b / a } else { f64::NAN };
    let cpu = |d: &Drains| d.rlock.redis_cpu.unwrap_or(0.0);
    let cpu_growth = growth(cpu(s), cpu(l));
    let drain_growth = growth(s.rlock.total, l.rlock.total);
    [
        Row {
            figure: format!("growth {} → {} waiters: drain time", s.n, l.n),
            unit: "×",
            rlock: drain_growth,
            flock: Some(growth(s.flock.total, l.flock.total)),
            etcd: s
                .etcd
                .as_ref()
                .zip(l.etcd.as_ref())
                .map(|(s, l)| growth(s.total, l.total)),
            target: "≤ 3.3× (linear)".into(),
            met: Some(drain_growth <= 3.3),
        },
        Row {
            figure: format!(
                "growth {} → {} waiters: Redis CPU ({:.0} → {:.0} ms)",
                s.n,
                l.n,
                cpu(s),
                cpu(l)
            ),
            unit: "×",
            rlock: cpu_growth,
            flock: None,
            etcd: None,
            target: "≤ 3.3× (linear)".into(),
            met: Some(cpu_growth <= 3.3),
        },
        Row {
            figure: format!("a waiter's RSS with {} / {} in line (MiB)", s.n, l.n),
            unit: "MiB",
            rlock: l.rlock.waiter_rss.unwrap_or(f64::NAN),
            flock: None,
            etcd: None,
            target: format!(
                "≈ {:.2} MiB (no growth)",
                s.rlock.waiter_rss.unwrap_or(f64::NAN)
            ),
            met: None,
        },
    ]
}

fn leftovers_row(redis: &RedisServer) -> Row {
    let (forever, longest, history) = leftovers(redis, 1000);
    let days = history / 86_400.0;
    Row {
        figure: format!(
            "1,000 distinct keys locked and released (--ttl 1s): keys with no expiry (longest life left {longest:.1} s; run histories {days:.1} days, --history-ttl)"
        ),
        unit: "",
        rlock: forever as f64,
        flock: None,
        etcd: None,
        target: "0, none past 61 s (histories: 30 days)".into(),
        met: Some(forever == 0 && longest <= 61.0 && days <= 30.0),
    }
}
