//! What waiting costs on the host, and the handoff, for rlock, flock(1) and `etcdctl lock`:
//!
//! - an idle waiter's wake-ups: the voluntary context switches of all its threads per second,
//!   read from /proc while it waits behind a lock that stays held;
//! - the handoff: from the moment one holder's command ends (its last stamp) to the moment the
//!   next holder's command starts (its first stamp), at least 60 times in three rounds, with one
//!   waiter queued and inside lines of 100 and more, as median, min and max;
//! - `-- true` under the lock, as median wall time of at least 100 interleaved runs.
//!
//! Every command is a bash script that stamps with its own clock (`$EPOCHREALTIME`, no process
//! of its own). A handoff is judged as the user sees it: from the end stamp to the start stamp,
//! bash's own start included for every tool alike.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::stat::Mode;
use nix::unistd::mkfifo;

use rlock_test_support::RedisServer;
use rlock_test_support::procfs::voluntary_switches as switches;

use crate::etcd::Etcd;
use crate::monitor::zcard;
use crate::process::{Bg, fail, flocks_on, quiet, rlock, wait_for};
use crate::setup::Bench;
use crate::table::{WARMUP, median, turn};

/// Median, min and max of some samples (ms).
#[derive(Debug, Clone, Copy)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(v: Vec<f64>) -> Spread {
        let min = v.iter().copied().fold(f64::INFINITY, f64::min);
        let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Spread {
            median: median(v),
            min,
            max,
        }
    }
}

/// A lock tool, as the handoff figures drive it.
pub trait Tool {
    fn name(&self) -> &'static str;
    /// A waiter (or holder) that runs `bash -c SCRIPT bash ARGS…` under the lock `key`.
    fn under_lock(&self, key: &str, script: &str, args: &[String]) -> Command;
    /// How many processes hold or wait for `key` now.
    fn in_line(&self, key: &str) -> usize;
}

pub struct RlockTool<'a>(pub &'a RedisServer);
pub struct FlockTool<'a> {
    pub flock: &'a Path,
    pub dir: &'a Path,
}
pub struct EtcdTool<'a>(pub &'a Etcd);

impl Tool for RlockTool<'_> {
    fn name(&self) -> &'static str {
        "rlock"
    }

    fn under_lock(&self, key: &str, script: &str, args: &[String]) -> Command {
        let mut cmd = rlock(
            self.0,
            &[
                "exec", "-w", "600s", "-k", key, "--", "bash", "-c", script, "bash",
            ],
        );
        cmd.args(args);
        cmd
    }

    fn in_line(&self, key: &str) -> usize {
        let mut conn = self.0.conn();
        let held = redis::cmd("EXISTS")
            .arg(format!("rlock:{key}"))
            .query::<usize>(&mut conn)
            .unwrap_or(0);
        held + zcard(&mut conn, &format!("{{rlock:{key}}}:q"))
    }
}

impl Tool for FlockTool<'_> {
    fn name(&self) -> &'static str {
        "flock"
    }

    fn under_lock(&self, key: &str, script: &str, args: &[String]) -> Command {
        let mut cmd = Command::new(self.flock);
        cmd.arg(self.dir.join(format!("{key}.lock")))
            .args(["bash", "-c", script, "bash"])
            .args(args);
        cmd
    }

    /// Holders and waiters of the key's lock file.
    fn in_line(&self, key: &str) -> usize {
        flocks_on(&self.dir.join(format!("{key}.lock")), false)
    }
}

impl Tool for EtcdTool<'_> {
    fn name(&self) -> &'static str {
        "etcdctl lock"
    }

    fn under_lock(&self, key: &str, script: &str, args: &[String]) -> Command {
        let mut cmd = self.0.ctl();
        cmd.args(["lock", key, "--", "bash", "-c", script, "bash"])
            .args(args);
        cmd
    }

    fn in_line(&self, key: &str) -> usize {
        self.0.count(key)
    }
}

/// An idle waiter's wake-ups per second: a holder keeps `key` (its command waits on a FIFO),
/// a waiter queues behind it, and its threads' voluntary context switches are counted over
/// `window`. For a tool whose waiter is a process tree (etcdctl runs none before the lock), the
/// waiter's own process is counted.
pub fn idle_wakeups(tool: &dyn Tool, dir: &Path, window: Duration) -> f64 {
    let d = fresh(dir, &format!("idle-{}", tool.name().replace(' ', "-")));
    let key = format!("idle-wake-{}", std::process::id());
    let base = tool.in_line(&key);
    let fifo = d.join("release");
    mkfifo(&fifo, Mode::S_IRWXU).unwrap_or_else(|e| fail(&format!("mkfifo: {e}")));
    let mut holder = Bg::spawn(
        tool.under_lock(&key, r#"read x < "$1""#, &[fifo.display().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_for("the idle figure's holder", || tool.in_line(&key) > base);
    let mut waiter = Bg::spawn(
        tool.under_lock(&key, "true", &[])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_for("the idle waiter to queue", || tool.in_line(&key) > base + 1);
    // Its start (connections, subscriptions) is not idling.
    thread::sleep(Duration::from_millis(500));
    let before = switches(waiter.pid());
    let start = Instant::now();
    thread::sleep(window);
    let rate = (switches(waiter.pid()) - before) as f64 / start.elapsed().as_secs_f64();
    release(&fifo);
    holder.wait("the idle figure's holder");
    waiter.wait("the idle waiter");
    rate
}

/// Ends a command blocked in `read x < FIFO`.
pub fn release(fifo: &Path) {
    let mut f = OpenOptions::new()
        .write(true)
        .open(fifo)
        .unwrap_or_else(|e| fail(&format!("open {}: {e}", fifo.display())));
    let _ = f.write_all(b"\n");
}

/// A command that stamps its start, waits on its FIFO, and stamps its end (µs).
const CHAINED: &str = r#"echo ${EPOCHREALTIME/./} > "$1/start-$2"; read x < "$1/fifo-$2"; echo ${EPOCHREALTIME/./} > "$1/end-$2""#;

/// `samples` handoffs with exactly one waiter queued: each holder's command runs until the
/// next waiter is in line, then ends; the gaps from its end stamp to the next command's start
/// stamp, in ms.
pub fn handoffs_one_queued(tool: &dyn Tool, dir: &Path, samples: usize) -> Vec<f64> {
    let d = fresh(dir, &format!("one-{}", tool.name().replace(' ', "-")));
    let key = format!("handoff-one-{}", std::process::id());
    let base = tool.in_line(&key);
    for i in 0..=samples {
        mkfifo(&d.join(format!("fifo-{i}")), Mode::S_IRWXU)
            .unwrap_or_else(|e| fail(&format!("mkfifo: {e}")));
    }
    let spawn = |i: usize| {
        Bg::spawn(
            tool.under_lock(&key, CHAINED, &[d.display().to_string(), i.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        )
    };
    // Written in one go by `date`, but created empty by the shell's redirection first.
    let started = |i: usize| {
        fs::read_to_string(d.join(format!("start-{i}")))
            .is_ok_and(|t| t.trim().parse::<i128>().is_ok())
    };
    let mut procs = vec![spawn(0)];
    wait_for("the first holder's command", || started(0));
    let mut gaps = Vec::with_capacity(samples);
    for i in 1..=samples {
        procs.push(spawn(i));
        wait_for("the next waiter to queue", || {
            tool.in_line(&key) >= base + 2
        });
        // Let it settle into its wait (subscribed, parked) before the handoff.
        thread::sleep(Duration::from_millis(20));
        release(&d.join(format!("fifo-{}", i - 1)));
        wait_for("the next holder's command", || started(i));
        procs[i - 1].wait("a holder");
        let end = stamp(&d.join(format!("end-{}", i - 1)));
        let start = stamp(&d.join(format!("start-{i}")));
        gaps.push((start - end) as f64 / 1e3);
    }
    release(&d.join(format!("fifo-{samples}")));
    for p in &mut procs {
        p.wait("a holder");
    }
    gaps
}

/// Handoffs through a line of `n` waiters queued behind a holder, in arrival order: each
/// command stamps its start and its end at once; the gaps between one command's end and the
/// next one's start, over the first `samples` handoffs (while most of the line still waits),
/// in ms.
pub fn handoffs_in_line(tool: &dyn Tool, dir: &Path, n: usize, samples: usize) -> Vec<f64> {
    let d = fresh(dir, &format!("line-{}", tool.name().replace(' ', "-")));
    let key = format!("handoff-line-{}", std::process::id());
    let base = tool.in_line(&key);
    let fifo = d.join("holder");
    mkfifo(&fifo, Mode::S_IRWXU).unwrap_or_else(|e| fail(&format!("mkfifo: {e}")));
    let mut holder = Bg::spawn(
        tool.under_lock(&key, r#"read x < "$1""#, &[fifo.display().to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_for("the line's holder", || tool.in_line(&key) > base);
    let script =
        r#"echo ${EPOCHREALTIME/./} >> "$1/starts"; echo ${EPOCHREALTIME/./} >> "$1/ends""#;
    let mut waiters = Vec::with_capacity(n);
    for i in 0..n {
        waiters.push(Bg::spawn(
            tool.under_lock(&key, script, &[d.display().to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null()),
        ));
        wait_for("a waiter to queue", || tool.in_line(&key) > base + 1 + i);
    }
    thread::sleep(Duration::from_millis(300));
    release(&fifo);
    holder.wait("the line's holder");
    for w in &mut waiters {
        w.wait("a waiter in line");
    }
    let read = |name: &str| -> Vec<i128> {
        fs::read_to_string(d.join(name))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    };
    let (starts, ends) = (read("starts"), read("ends"));
    if starts.len() != n || ends.len() != n {
        fail(&format!(
            "{}: {} starts and {} ends for {n} waiters",
            tool.name(),
            starts.len(),
            ends.len()
        ));
    }
    (0..samples.min(n - 1))
        .map(|k| (starts[k + 1] - ends[k]) as f64 / 1e3)
        .collect()
}

/// `CMD -- true` under the lock, `runs` rounds of one run of each tool in turn: each tool's
/// median wall time in ms. The tools take turns (`table::turn`), so that every tool follows every
/// other as often: etcd goes on working for a while after `etcdctl lock` exits (its lease
/// revoked, its log written), and the tool that always ran next paid for it.
fn exec_true(tools: &[&dyn Tool], runs: usize) -> Vec<f64> {
    let key = format!("exec-true-{}", std::process::id());
    let mut times = vec![Vec::with_capacity(runs); tools.len()];
    for round in 0..WARMUP + runs {
        for k in 0..tools.len() {
            let i = turn(round, k, tools.len());
            let t = Instant::now();
            quiet(&mut tools[i].under_lock(&key, "true", &[]));
            if round >= WARMUP {
                times[i].push(t.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    times.into_iter().map(median).collect()
}

fn stamp(file: &Path) -> i128 {
    let text = fs::read_to_string(file).unwrap_or_default();
    text.trim()
        .parse()
        .unwrap_or_else(|_| fail(&format!("no stamp in {}: {text:?}", file.display())))
}

fn fresh(dir: &Path, name: &str) -> PathBuf {
    let d = dir.join(name);
    let _ = fs::remove_dir_all(&d);
    fs::create_dir_all(&d).expect("bench dir");
    d
}

/// What the host table shows, one entry per tool (rlock, flock, then etcdctl lock if any).
struct Measured {
    names: Vec<&'static str>,
    idle: Vec<f64>,
    one: Vec<Spread>,
    line: Vec<Spread>,
    exec: Vec<f64>,
    samples: usize,
}

/// The host table: rlock, flock and (with `etcd`) etcdctl lock side by side, with ratios.
pub fn table(b: &Bench, etcd: Option<&Etcd>) {
    let r = RlockTool(b.redis);
    let f = FlockTool {
        flock: b.flock,
        dir: b.dir,
    };
    let e = etcd.map(EtcdTool);
    let tools: Vec<&dyn Tool> = [&r as &dyn Tool, &f]
        .into_iter()
        .chain(e.as_ref().map(|e| e as &dyn Tool))
        .collect();
    print_table(&measure(b, &tools));
}

/// Rounds of handoffs (with one waiter queued, and in a line), each tool in turn, so that a
/// machine that slows down or speeds up during the run weighs on every tool alike.
const ROUNDS: usize = 3;

/// At least this many handoffs of each kind per tool, and runs of `-- true`: on a noisy 2-core
/// machine fewer leave a median that moves by a tenth between two runs.
const HANDOFFS: usize = 60;
const EXEC_RUNS: usize = 100;

fn measure(b: &Bench, tools: &[&dyn Tool]) -> Measured {
    let (runs, dir) = (b.cfg.runs, b.dir);
    let samples = runs.max(HANDOFFS).next_multiple_of(ROUNDS);
    let idle = tools
        .iter()
        .map(|t| idle_wakeups(*t, dir, b.cfg.idle))
        .collect();
    let mut one = vec![Vec::new(); tools.len()];
    for _ in 0..ROUNDS {
        for (tool, gaps) in tools.iter().zip(&mut one) {
            gaps.extend(handoffs_one_queued(*tool, dir, samples.div_ceil(ROUNDS)));
        }
    }
    let mut line = vec![Vec::new(); tools.len()];
    let per_round = samples / ROUNDS;
    for _ in 0..ROUNDS {
        for (tool, gaps) in tools.iter().zip(&mut line) {
            gaps.extend(handoffs_in_line(*tool, dir, 100 + per_round, per_round));
        }
    }
    let exec = exec_true(tools, runs.max(EXEC_RUNS));
    Measured {
        names: tools.iter().map(|t| t.name()).collect(),
        idle,
        one: one.into_iter().map(Spread::of).collect(),
        line: line.into_iter().map(Spread::of).collect(),
        exec,
        samples,
    }
}

fn print_table(m: &Measured) {
    println!();
    println!(
        "What waiting costs on the host, and the handoff ({} handoffs each; ms are median (min–max)):",
        m.samples
    );
    println!();
    println!(
        "| figure | {} | rlock/flock | rlock/etcdctl lock | target | met |",
        m.names.join(" | ")
    );
    println!("|---|{}---|---|---|---|", "---|".repeat(m.names.len()));
    print_row(
        "idle waiter behind a held lock: wake-ups/s (voluntary context switches, all threads)",
        m.idle.iter().map(|v| format!("{v:.1} /s")).collect(),
        (m.idle[0], m.idle[1], m.idle.get(2).copied()),
        "≤ 1 /s",
        Some(m.idle[0] <= 1.0),
    );
    let spread = |v: &[Spread]| -> Vec<String> {
        v.iter()
            .map(|s| format!("{:.2} ({:.2}–{:.2})", s.median, s.min, s.max))
            .collect()
    };
    for (what, v) in [
        ("1 waiter queued", &m.one),
        ("a line of 100+ queued", &m.line),
    ] {
        let (r, f, e) = (v[0].median, v[1].median, v.get(2).map(|s| s.median));
        print_row(
            &format!("handoff, holder's command ends → next command starts, {what}"),
            spread(v),
            (r, f, e),
            "≤ 1.5× flock, < etcdctl",
            Some(r <= 1.5 * f && e.is_none_or(|e| r < e)),
        );
    }
    let (r, f, e) = (m.exec[0], m.exec[1], m.exec.get(2).copied());
    print_row(
        "`-- true` under the lock, median wall time",
        m.exec.iter().map(|v| format!("{v:.2}")).collect(),
        (r, f, e),
        "≤ 1.5× flock",
        Some(r <= 1.5 * f),
    );
}

/// One row: the tools' cells, then rlock's ratios to flock and to etcdctl lock (`(rlock, flock,
/// etcdctl)` are the values compared).
fn print_row(
    figure: &str,
    cells: Vec<String>,
    (r, f, e): (f64, f64, Option<f64>),
    target: &str,
    met: Option<bool>,
) {
    let ratio = |a: f64, b: Option<f64>| match b {
        Some(b) if b > 0.0 => format!("{:.2}×", a / b),
        Some(_) => "–".into(),
        None => "–".into(),
    };
    println!(
        "| {figure} | {} | {} | {} | {target} | {} |",
        cells.join(" | "),
        ratio(r, Some(f)),
        ratio(r, e),
        match met {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "–",
        }
    );
}
