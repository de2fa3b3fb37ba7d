//! `cargo bench --bench compare`: the figures of issue 4, rlock side by side with `flock(1)` and
//! a raw `redis-cli` pair (`SET key token NX PX` to take, an `EVAL` compare-and-delete to give
//! back), printed as one table with targets and ratios.
//!
//! Everything runs against `redis-server` processes this program starts on free ports of
//! 127.0.0.1 and kills at the end, with the tests' own harness (`tests/rlock/common`, included
//! file by file); `redis-server`, `redis-cli` and `flock` come from PATH.
//!
//! Options (environment):
//! - `RLOCK_BENCH_RUNS`      samples per median (default 30)
//! - `RLOCK_BENCH_IDLE_SECS` how long the idle waiter is watched (default 6)
//! - `RLOCK_BENCH_PROCS`     processes in the contention figure (default 6)
//! - `RLOCK_BENCH_ITERS`     iterations per process in the contention figure (default 15)
//! - `RLOCK_BENCH_SOAK_GRANTS` contended grants of the soak run (default 10000, 0 skips it)
//! - `RLOCK_BENCH_LINE`      the longer line of the waiting table (default 300; the shorter is a
//!   third of it)
//! - `RLOCK_BENCH_ONLY=host` only the table of what waiting costs on the host and the handoff
//!   (`compare/host.rs`), for a quick look; `RLOCK_BENCH_ONLY=soak` only the long soak
//!
//! The Redlock figure starts four more servers and puts each of the five behind the tests' fault
//! proxy, set to delay `RLOCK_BENCH_LATENCY_MS` (default 5) each way, so the network counts as it
//! does between hosts and parallel requests can be told from sequential ones.
//!
//! A second table has the waiting figures of issue 12 (`compare/waiting.rs`): idle waiters,
//! handoffs with a line, lines of 100 and 300 waiters drained through one key, with `etcdctl
//! lock` beside flock when Debian's etcd-server and etcd-client are installed (the benchmark
//! starts its own etcd on loopback ports; without them it says how to install them and leaves
//! the column out), how the costs grow, and what 1,000 distinct keys leave behind.
//!
//! Last comes the soak (issue 11, the long mode of `tests/soak.rs`): four loops of `rlock exec`
//! on one key through freezes, `SCRIPT FLUSH` and `CLIENT KILL` of a server of its own, and
//! (issue 21) blackholes of 0.2–1.5 s of their link to it (rlock talks to the server through
//! the tests' fault proxy), checked for overlapping holders and fences out of order. It takes
//! minutes; the table comes first.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::fcntl::{Flock, FlockArg};

// The tests' harness, file by file: the crate root stands where `tests/rlock/common` does, so
// that the files' `super::` paths resolve. Those allowed dead code are used only in part here.
#[allow(dead_code)]
#[path = "../tests/rlock/common/binary.rs"]
mod binary;
#[path = "../tests/rlock/common/limits.rs"]
mod limits;
#[allow(dead_code)]
#[path = "../tests/rlock/common/server.rs"]
mod server;
#[path = "../tests/rlock/common/spawn.rs"]
mod spawn;
#[allow(dead_code)]
#[path = "../tests/rlock/common/wait.rs"]
mod wait;

use server::RedisServer;

#[path = "compare/host.rs"]
mod host;
#[path = "../tests/rlock/common/procfs.rs"]
mod procfs;
#[path = "compare/waiting.rs"]
mod waiting;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

#[path = "../tests/rlock/common/soak.rs"]
mod soak;
// The tests' generator, which the soak engine uses (as `super::rng`); only part of it.
#[allow(dead_code)]
#[path = "../tests/rlock/common/rng.rs"]
mod rng;
// The tests' fault proxy: fixed delays for the Redlock figure's links, blackholes for the soak's
// partitions; only part of it is used.
#[allow(dead_code)]
#[path = "../tests/rlock/common/proxy.rs"]
mod fault_proxy;

const RLOCK: &str = env!("CARGO_BIN_EXE_rlock");

/// Compare-and-delete, as every Redis lock client writes it.
const CAD: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0";

/// The conventional shell waiter for a raw redis-cli lock: retry every 100 ms.
const POLL_LOOP: &str =
    r#"until [ "$(redis-cli -p "$1" SET "$2" "$3" NX PX 60000)" = OK ]; do sleep 0.1; done"#;

/// Generous limit for anything the benchmark waits for.
const PATIENCE: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------------
// Set-up
// ---------------------------------------------------------------------------------------------

struct Config {
    runs: usize,
    idle: Duration,
    procs: usize,
    iters: usize,
    latency: Duration,
    soak_grants: usize,
    /// The longer line of the waiting figures (the shorter is a third of it).
    line: usize,
    /// Only the host table, or only the soak (`RLOCK_BENCH_ONLY=host|soak`).
    only: Option<&'static str>,
}

impl Config {
    fn from_env() -> Config {
        let num = |name: &str, default: u64, max: u64| -> u64 {
            match std::env::var(name) {
                Err(_) => default,
                Ok(v) => match v.trim().parse::<u64>() {
                    Ok(n) if (1..=max).contains(&n) => n,
                    _ => exit_with(&format!(
                        "{name}={v}: expected a whole number from 1 to {max}"
                    )),
                },
            }
        };
        Config {
            runs: num("RLOCK_BENCH_RUNS", 30, 1000) as usize,
            idle: Duration::from_secs(num("RLOCK_BENCH_IDLE_SECS", 6, 120)),
            procs: num("RLOCK_BENCH_PROCS", 6, 64) as usize,
            iters: num("RLOCK_BENCH_ITERS", 15, 1000) as usize,
            latency: Duration::from_millis(num("RLOCK_BENCH_LATENCY_MS", 5, 1000)),
            line: num("RLOCK_BENCH_LINE", 300, 1000).max(3) as usize,
            only: match std::env::var("RLOCK_BENCH_ONLY") {
                Err(_) => None,
                Ok(v) if v == "host" => Some("host"),
                Ok(v) if v == "soak" => Some("soak"),
                Ok(v) => exit_with(&format!(
                    "RLOCK_BENCH_ONLY={v}: the choices are 'host' and 'soak'"
                )),
            },
            soak_grants: match std::env::var("RLOCK_BENCH_SOAK_GRANTS") {
                Err(_) => 10_000,
                Ok(v) => v.trim().parse().unwrap_or_else(|_| {
                    exit_with(&format!(
                        "RLOCK_BENCH_SOAK_GRANTS={v}: expected a whole number (0 skips the soak)"
                    ))
                }),
            },
        }
    }
}

/// Ends the benchmark before anything was started (bad option, missing tool).
fn exit_with(msg: &str) -> ! {
    eprintln!("compare: {msg}");
    std::process::exit(1);
}

/// Ends the benchmark by a panic, so the guards below stop every process it started.
fn fail(msg: &str) -> ! {
    panic!("compare: {msg}");
}

/// `name` from PATH, or exit with how to install it.
fn tool(name: &str, install: &str) -> PathBuf {
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(name))
        .find(|p| {
            use std::os::unix::fs::PermissionsExt;
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
        .unwrap_or_else(|| exit_with(&format!("`{name}` not found on PATH: {install}")))
}

/// A background process (in a process group of its own) that is killed, group and all, on drop.
struct Bg(Child);

impl Bg {
    fn spawn(cmd: &mut Command) -> Bg {
        Bg(cmd
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| fail(&format!("cannot spawn {:?}: {e}", cmd.get_program()))))
    }

    fn pid(&self) -> i32 {
        self.0.id() as i32
    }

    fn wait(&mut self, what: &str) -> ExitStatus {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(status) = self.0.try_wait().expect("try_wait") {
                return status;
            }
            if Instant::now() >= deadline {
                fail(&format!("{what} did not finish within {PATIENCE:?}"));
            }
            thread::sleep(Duration::from_micros(200));
        }
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = killpg(Pid::from_raw(self.pid()), Signal::SIGKILL);
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// `rlock --url URL ARGS…`, with the harness's clean environment (an inherited RLOCK_TOKEN
/// would make it reentrant).
fn rlock(redis: &RedisServer, args: &[&str]) -> Command {
    let mut cmd = binary::rlock_at(redis);
    cmd.args(args);
    cmd
}

/// Runs to completion; returns stdout, or exits the benchmark with what went wrong.
fn output(cmd: &mut Command) -> String {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| fail(&format!("cannot run {:?}: {e}", cmd.get_program())));
    if !out.status.success() {
        fail(&format!(
            "{:?} {:?} failed ({}): {}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs to completion with output discarded; exits the benchmark if it fails.
fn quiet(cmd: &mut Command) {
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| fail(&format!("cannot run {:?}: {e}", cmd.get_program())));
    if !status.success() {
        fail(&format!(
            "{:?} {:?} failed: {status}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<_>>()
        ));
    }
}

fn wall(f: impl FnOnce()) -> Duration {
    let t = Instant::now();
    f();
    t.elapsed()
}

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as i128
}

/// Polls `cond` every 0.2 ms until it holds (a figure that hands the lock over the moment a
/// waiter is seen parked must see it at once); panics naming `what` after PATIENCE.
fn wait_for(what: &str, cond: impl FnMut() -> bool) {
    wait::wait_until_every(Duration::from_micros(200), what, PATIENCE, cond);
}

fn zcard(conn: &mut redis::Connection, key: &str) -> usize {
    redis::cmd("ZCARD").arg(key).query(conn).unwrap_or(0)
}

/// The stamp a `date +%s%N` wrote into `file`.
fn read_stamp(file: &Path) -> i128 {
    let text = fs::read_to_string(file).unwrap_or_default();
    text.trim()
        .parse()
        .unwrap_or_else(|_| fail(&format!("no stamp in {}: {text:?}", file.display())))
}

// ---------------------------------------------------------------------------------------------
// Statistics and the table
// ---------------------------------------------------------------------------------------------

/// Runs each of `subjects` (each measures itself) `runs` times, taking turns and changing who
/// goes first every round, so that a machine that gets slower or faster meanwhile weighs on all
/// of them alike: the median of each.
fn interleaved<const N: usize>(runs: usize, subjects: [&mut dyn FnMut() -> f64; N]) -> [f64; N] {
    let mut samples: [Vec<f64>; N] = std::array::from_fn(|_| Vec::with_capacity(runs));
    for round in 0..runs {
        for k in 0..N {
            let i = (round + k) % N;
            samples[i].push((subjects[i])());
        }
    }
    samples.map(median)
}

fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One line of the table. Values are in `unit`; None is "n/a".
struct Row {
    figure: String,
    unit: &'static str,
    rlock: f64,
    flock: Option<f64>,
    cli: Option<f64>,
    /// e.g. "≤ 5 ms" or "≤ 1.5× flock"
    target: String,
    met: Option<bool>,
    /// Show the values with this many decimals.
    decimals: usize,
}

impl Row {
    fn value(&self, v: Option<f64>) -> String {
        match v {
            Some(v) => format!("{v:.*} {}", self.decimals, self.unit),
            None => "n/a".into(),
        }
    }
}

fn ratio(a: f64, b: Option<f64>) -> String {
    match b {
        Some(b) if b > 0.0 && a.is_finite() => format!("{:.2}×", a / b),
        _ => "n/a".into(),
    }
}

fn print_table(rows: &[Row]) {
    let header = [
        "figure",
        "rlock",
        "flock",
        "redis-cli pair",
        "rlock/flock",
        "rlock/cli",
        "target",
        "met",
    ];
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|r| {
            [
                r.figure.clone(),
                r.value(Some(r.rlock)),
                r.value(r.flock),
                r.value(r.cli),
                ratio(r.rlock, r.flock),
                ratio(r.rlock, r.cli),
                r.target.clone(),
                match r.met {
                    Some(true) => "yes".into(),
                    Some(false) => "NO".into(),
                    None => "".into(),
                },
            ]
        })
        .collect();
    let width = |i: usize| {
        cells
            .iter()
            .map(|c| c[i].chars().count())
            .chain([header[i].chars().count()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..8).map(width).collect();
    let line = |cols: &[String]| {
        let mut s = String::from("|");
        for (i, c) in cols.iter().enumerate() {
            let pad = widths[i] - c.chars().count();
            if i == 0 || i == 6 {
                s.push_str(&format!(" {c}{} |", " ".repeat(pad)));
            } else {
                s.push_str(&format!(" {}{c} |", " ".repeat(pad)));
            }
        }
        s
    };
    println!("{}", line(&header.map(String::from)));
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    println!("{}", line(&rule).replace(' ', "-"));
    for c in &cells {
        println!("{}", line(c));
    }
}

// ---------------------------------------------------------------------------------------------
// The figures
// ---------------------------------------------------------------------------------------------

/// Median cost, in ms, of starting `date +%s%N` directly: from just before the spawn to the
/// stamp it writes. Spawned through fork (a `pre_exec` hook) as rlock and flock spawn it.
fn stamp_cost(dir: &Path, runs: usize) -> f64 {
    let file = dir.join("stamp-direct");
    let samples = (0..runs)
        .map(|_| {
            let out = File::create(&file).expect("stamp file");
            let mut cmd = Command::new("date");
            cmd.arg("+%s%N").stdout(out);
            // SAFETY: an empty hook; it only makes std fork as rlock's spawn does.
            unsafe {
                cmd.pre_exec(|| Ok(()));
            }
            let before = now_ns();
            let status = cmd.status().expect("run date");
            if !status.success() {
                fail(&format!("date +%s%N failed: {status}"));
            }
            (read_stamp(&file) - before) as f64 / 1e6
        })
        .collect();
    median(samples)
}

/// Handoff with rlock: a holder, an `rlock exec -w … -- date +%s%N` parked behind it, then
/// `rlock release`; the time from the release returning to the stamp, in ms.
fn handoff_rlock(redis: &RedisServer, dir: &Path, runs: usize, cost: f64) -> Vec<f64> {
    let mut conn = redis.conn();
    let file = dir.join("stamp-rlock");
    (0..runs)
        .map(|_| {
            let token = output(&mut rlock(
                redis,
                &["acquire", "-k", "handoff", "--ttl", "60s"],
            ));
            let token = token.trim();
            let _ = fs::remove_file(&file);
            let mut next = Bg::spawn(
                rlock(
                    redis,
                    &["exec", "-k", "handoff", "-w", "60s", "--", "date", "+%s%N"],
                )
                .stdout(File::create(&file).expect("stamp file")),
            );
            wait_for("the next holder to park", || {
                zcard(&mut conn, "{rlock:handoff}:q") == 1
            });
            quiet(&mut rlock(
                redis,
                &["release", "-k", "handoff", "--token", token],
            ));
            let released = now_ns();
            let status = next.wait("the next holder");
            if !status.success() {
                fail(&format!("the next holder's rlock exec failed: {status}"));
            }
            (read_stamp(&file) - released) as f64 / 1e6 - cost
        })
        .collect()
}

/// Handoff with flock(1): this process holds the file lock, `flock FILE date +%s%N` blocks on
/// it (seen in /proc/locks), then the lock is dropped.
fn handoff_flock(flock: &Path, dir: &Path, runs: usize, cost: f64) -> Vec<f64> {
    let lockfile = dir.join("handoff.lock");
    let file = dir.join("stamp-flock");
    (0..runs)
        .map(|_| {
            let f = File::create(&lockfile).expect("lock file");
            let held = Flock::lock(f, FlockArg::LockExclusive)
                .unwrap_or_else(|(_, e)| fail(&format!("flock: {e}")));
            let _ = fs::remove_file(&file);
            let mut next = Bg::spawn(
                Command::new(flock)
                    .arg(&lockfile)
                    .args(["date", "+%s%N"])
                    .stdout(File::create(&file).expect("stamp file")),
            );
            let pid = next.pid().to_string();
            wait_for("flock to block", || {
                fs::read_to_string("/proc/locks").is_ok_and(|locks| {
                    locks
                        .lines()
                        .any(|l| l.contains("->") && l.split_whitespace().any(|w| w == pid))
                })
            });
            drop(held);
            let released = now_ns();
            let status = next.wait("flock");
            if !status.success() {
                fail(&format!("flock failed: {status}"));
            }
            (read_stamp(&file) - released) as f64 / 1e6 - cost
        })
        .collect()
}

/// Handoff with the raw pair: a `redis-cli SET NX PX` retried every 100 ms by sh (there is no
/// way to be told), released with redis-cli EVAL compare-and-delete. The release comes at
/// varying points of the retry period.
fn handoff_cli(redis: &RedisServer, dir: &Path, runs: usize, cost: f64) -> Vec<f64> {
    let mut conn = redis.conn();
    let file = dir.join("stamp-cli");
    let port = redis.port().to_string();
    (0..runs)
        .map(|i| {
            let _: () = redis::cmd("SET")
                .arg("cli-handoff")
                .arg("holder")
                .arg("PX")
                .arg(60000)
                .query(&mut conn)
                .expect("SET");
            let _ = fs::remove_file(&file);
            let script = format!("{POLL_LOOP}; exec date +%s%N");
            let mut next = Bg::spawn(
                Command::new("sh")
                    .args(["-c", &script, "sh", &port, "cli-handoff", "next"])
                    .stdout(File::create(&file).expect("stamp file")),
            );
            // The poller has no sign of parking; let it retry a while (varying phase).
            thread::sleep(Duration::from_millis(150 + (i as u64 * 37) % 100));
            quiet(Command::new("redis-cli").args([
                "-p",
                &port,
                "EVAL",
                CAD,
                "1",
                "cli-handoff",
                "holder",
            ]));
            let released = now_ns();
            let status = next.wait("the redis-cli poll loop");
            if !status.success() {
                fail(&format!("the redis-cli poll loop failed: {status}"));
            }
            let _: () = redis::cmd("DEL")
                .arg("cli-handoff")
                .query(&mut conn)
                .expect("DEL");
            (read_stamp(&file) - released) as f64 / 1e6 - cost
        })
        .collect()
}

/// `total_commands_processed` from INFO stats.
fn total_commands(conn: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO").arg("stats").query(conn).expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("total_commands_processed")
}

/// What the server did while a waiter idled.
struct Watched {
    /// Requests clients sent, per second: the steady rate (from the server's stamps of the first
    /// and last request) when there were at least two, else the count over the window.
    requests: f64,
    /// Commands counted by INFO (requests and the commands scripts ran inside Redis), per second,
    /// at the same rate.
    commands: f64,
    /// Raw figures: requests seen, commands counted, window.
    seen: usize,
    counted: u64,
    window: Duration,
}

/// Watches the server for `window`. MONITOR shows each request (stamped by the server) and
/// marks a script's own commands "[0 lua]".
fn watch(redis: &RedisServer, window: Duration) -> Watched {
    let mut monitor = TcpStream::connect(("127.0.0.1", redis.port())).expect("connect");
    monitor.write_all(b"MONITOR\r\n").expect("MONITOR");
    monitor
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut lines = BufReader::new(monitor.try_clone().expect("clone"));
    let mut ok = String::new();
    lines.read_line(&mut ok).expect("MONITOR reply");
    let mut info = redis.conn();
    let before = total_commands(&mut info);
    let start = Instant::now();
    let end = start + window;
    let mut stamps: Vec<f64> = Vec::new();
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        monitor.set_read_timeout(Some(left)).expect("timeout");
        let mut line = String::new();
        match lines.read_line(&mut line) {
            Ok(0) => fail("the MONITOR connection closed"),
            Ok(_) => {
                if !line.contains(" lua]") && !line.to_ascii_lowercase().contains("\"info\"") {
                    let stamp = line.trim_start_matches('+').split(' ').next();
                    stamps.push(stamp.and_then(|t| t.parse().ok()).unwrap_or(f64::NAN));
                }
            }
            Err(_) => break,
        }
    }
    let secs = start.elapsed().as_secs_f64();
    // The first INFO is counted after it answers, so it is in the difference.
    let counted = total_commands(&mut info) - before - 1;
    let n = stamps.len();
    let span = if n >= 2 {
        stamps[n - 1] - stamps[0]
    } else {
        0.0
    };
    // A steady rate needs a few requests; fewer are counted over the whole window.
    let requests = if n >= 3 && span > 0.0 {
        (n - 1) as f64 / span
    } else {
        n as f64 / secs
    };
    let commands = if n > 0 {
        counted as f64 / n as f64 * requests
    } else {
        counted as f64 / secs
    };
    Watched {
        requests,
        commands,
        seen: n,
        counted,
        window,
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
    waiting::settle(redis);
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
    let _: () = redis::cmd("SET")
        .arg("cli-idle")
        .arg("holder")
        .arg("PX")
        .arg(60000)
        .query(&mut conn)
        .expect("SET");
    let port = redis.port().to_string();
    let _poller = Bg::spawn(
        Command::new("sh")
            .args(["-c", POLL_LOOP, "sh", &port, "cli-idle", "waiter"])
            .stdout(Stdio::null()),
    );
    let requests = watch(redis, window).requests;
    let _: () = redis::cmd("DEL")
        .arg("cli-idle")
        .query(&mut conn)
        .expect("DEL");
    requests
}

/// One take-run-give-back with the raw pair: redis-cli SET NX PX, `true`, redis-cli EVAL.
/// Returns false (having done nothing) when the key is taken.
fn cli_pair(port: &str, key: &str, token: &str) -> bool {
    let set = output(
        Command::new("redis-cli").args(["-p", port, "SET", key, token, "NX", "PX", "30000"]),
    );
    if set.trim() != "OK" {
        return false;
    }
    quiet(&mut Command::new("true"));
    let del = output(Command::new("redis-cli").args(["-p", port, "EVAL", CAD, "1", key, token]));
    if del.trim() != "1" {
        fail(&format!("the compare-and-delete answered {del:?}"));
    }
    true
}

/// One section under a flock(1) semaphore of `slots.len()` files: `flock -n` on each file in
/// turn until one is free, a 10 ms pause after a round where none was.
fn flock_slot(flock: &Path, slots: &[PathBuf]) {
    for _ in 0..6000 {
        for slot in slots {
            let status = Command::new(flock)
                .args(["-n", "-E", "75"])
                .arg(slot)
                .args(["sleep", "0.05"])
                .stdin(Stdio::null())
                .status()
                .unwrap_or_else(|e| fail(&format!("cannot run flock: {e}")));
            match status.code() {
                Some(0) => return,
                Some(75) => {}
                _ => fail(&format!("flock -n failed: {status}")),
            }
        }
        thread::sleep(Duration::from_millis(10));
    }
    fail("a flock semaphore contender never got a slot in 6000 rounds");
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

/// VmRSS of `pid`, in KiB.
fn rss_kib(pid: i32) -> Option<f64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn has_child(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .is_ok_and(|c| !c.trim().is_empty())
}

/// The largest VmRSS of `pid` over a few samples, in MiB.
fn sample_rss(pid: i32) -> f64 {
    let mut max: f64 = 0.0;
    for _ in 0..10 {
        if let Some(kib) = rss_kib(pid) {
            max = max.max(kib);
        }
        thread::sleep(Duration::from_millis(20));
    }
    max / 1024.0
}

// ---------------------------------------------------------------------------------------------
// Redlock: five masters against one, over a slow link
// ---------------------------------------------------------------------------------------------

/// `rlock --url P1 --url P2 … ARGS…` (127.0.0.1 ports), with the same clean environment.
fn rlock_ports(ports: &[u16], args: &[&str]) -> Command {
    let mut cmd = binary::rlock();
    for port in ports {
        cmd.arg("--url").arg(format!("redis://127.0.0.1:{port}"));
    }
    cmd.args(args);
    cmd
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

/// Median `acquire -n` + `release` time with five nodes and with one, over links of `delay`
/// and over plain loopback: `(five, one, five_loopback, one_loopback)` in ms.
fn redlock_vs_one(servers: &[&RedisServer], delay: Duration, runs: usize) -> (f64, f64, f64, f64) {
    let direct: Vec<u16> = servers.iter().map(|r| r.port()).collect();
    // Each node behind the tests' fault proxy, delaying every chunk by `delay` each way.
    let links: Vec<fault_proxy::Proxy> = direct
        .iter()
        .map(|port| {
            let link = fault_proxy::Proxy::start(*port);
            link.set(fault_proxy::Mode::Delay {
                base: delay,
                jitter: Duration::ZERO,
            });
            link
        })
        .collect();
    let slow: Vec<u16> = links.iter().map(fault_proxy::Proxy::port).collect();
    // Warm the script caches of all five (and the page cache).
    for _ in 0..3 {
        acquire_release(&direct, 1);
    }
    (
        acquire_release(&slow, runs),
        acquire_release(&slow[..1], runs),
        acquire_release(&direct, runs),
        acquire_release(&direct[..1], runs),
    )
}

// ---------------------------------------------------------------------------------------------
// Soak: many contended grants through faults
// ---------------------------------------------------------------------------------------------

/// Runs the soak's long mode against a server of its own (it gets frozen), through a fault
/// proxy whose link it blackholes now and then, prints its figures, and fails the benchmark if
/// two holders overlapped or a fence went backwards.
fn soak(grants: usize) {
    let redis = RedisServer::start();
    let proxy = std::sync::Arc::new(fault_proxy::Proxy::start(redis.port()));
    let dir = tempfile::Builder::new()
        .prefix("rlock-bench-soak-")
        .tempdir()
        .expect("temp dir");
    let switch = proxy.clone();
    let target = soak::Target {
        rlock: RLOCK.into(),
        port: redis.port(),
        rlock_port: Some(proxy.port()),
        link: Some(soak::Link(std::sync::Arc::new(move |cut| {
            if cut {
                switch.set(fault_proxy::Mode::Blackhole);
            } else {
                switch.heal();
            }
        }))),
        redis_pid: redis.pid(),
        dir: dir.path().to_path_buf(),
    };
    let cfg = soak::Config::long(grants);
    println!();
    println!(
        "Soak: {} loops of `rlock exec --ttl {}ms -w 60s` on one key until {grants} grants, \
         through freezes of the server ({}-{} ms), blackholes of rlock's link to it ({}-{} ms), \
         SCRIPT FLUSH and CLIENT KILL (RLOCK_BENCH_SOAK_GRANTS=0 skips) …",
        cfg.workers,
        cfg.ttl.as_millis(),
        cfg.freeze.0.as_millis(),
        cfg.freeze.1.as_millis(),
        cfg.cut.0.as_millis(),
        cfg.cut.1.as_millis()
    );
    let r = soak::run(&target, &cfg);
    println!("{r}");
    println!(
        "Soak figures: {} grants in {:.1} s = {:.1} grants/s; {} exits 76 (lock lost, {} commands \
         stopped mid-run); {} faults ({} freezes, {} blackholes, {} SCRIPT FLUSH, {} CLIENT KILL); \
         {} overlaps; {} fence inversions.",
        r.grants,
        r.wall.as_secs_f64(),
        r.rate(),
        r.exit_count(76),
        r.cut_short,
        r.faults(),
        r.freezes.len(),
        r.cuts.len(),
        r.script_flushes,
        r.client_kills,
        r.overlaps.len(),
        r.inversions.len()
    );
    if !r.overlaps.is_empty() || !r.inversions.is_empty() || !r.malformed.is_empty() {
        fail("the soak found holders that overlapped or fences out of order (see above)");
    }
}

// ---------------------------------------------------------------------------------------------

fn main() {
    let cfg = Config::from_env();
    // The harness finds redis-server itself; looked for here too, so that a missing one is told
    // like the other tools rather than by the harness's panic.
    tool(
        "redis-server",
        "install Redis (e.g. `apt-get install -y redis-server`, which also brings redis-cli)",
    );
    tool(
        "redis-cli",
        "install Redis's tools (e.g. `apt-get install -y redis-tools`)",
    );
    let flock = tool(
        "flock",
        "install util-linux (e.g. `apt-get install -y util-linux`)",
    );
    tool("date", "install coreutils");
    tool("bash", "install bash");
    tool("sh", "install a POSIX shell");
    tool("true", "install coreutils");

    let redis = RedisServer::start();
    let dir = tempfile::Builder::new()
        .prefix("rlock-bench-")
        .tempdir()
        .expect("temp dir");
    let port = redis.port().to_string();
    let (major, minor, patch) = spawn::redis_version();
    println!(
        "rlock compare: redis-server {major}.{minor}.{patch} on 127.0.0.1:{}, {} runs per median, {} × {} contention, idle window {:?}",
        redis.port(),
        cfg.runs,
        cfg.procs,
        cfg.iters,
        cfg.idle
    );
    let mut rows = Vec::new();

    // Warm the page cache and the script cache.
    for _ in 0..3 {
        quiet(&mut rlock(&redis, &["exec", "-k", "warm", "--", "true"]));
        quiet(
            Command::new(&flock)
                .arg(dir.path().join("warm.lock"))
                .arg("true"),
        );
        cli_pair(&port, "warm", "t");
    }

    match cfg.only {
        Some("host") => {
            let etcd = start_etcd();
            host_figures(&cfg, &redis, &flock, etcd.as_ref(), dir.path());
            return;
        }
        Some(_) => {
            soak(cfg.soak_grants.max(1));
            return;
        }
        None => {}
    }

    // Process start-up, for reading the rest.
    let startup = |cmd: &mut dyn FnMut() -> Command| {
        median(
            (0..cfg.runs)
                .map(|_| ms(wall(|| quiet(&mut cmd()))))
                .collect(),
        )
    };
    let start_rlock = startup(&mut || {
        let mut c = Command::new(RLOCK);
        c.arg("--version");
        c
    });
    let start_flock = startup(&mut || {
        let mut c = Command::new(&flock);
        c.arg("--version");
        c
    });
    let start_cli = startup(&mut || {
        let mut c = Command::new("redis-cli");
        c.arg("--version");
        c
    });
    rows.push(Row {
        figure: "process start-up (--version), median".into(),
        unit: "ms",
        rlock: start_rlock,
        flock: Some(start_flock),
        cli: Some(start_cli),
        target: "(for reference)".into(),
        met: None,
        decimals: 2,
    });

    // 1. Handoff.
    let cost = stamp_cost(dir.path(), cfg.runs);
    let h_rlock = median(handoff_rlock(&redis, dir.path(), cfg.runs, cost));
    let h_flock = median(handoff_flock(&flock, dir.path(), cfg.runs, cost));
    let h_cli = median(handoff_cli(&redis, dir.path(), cfg.runs.min(10), cost));
    rows.push(Row {
        figure: "handoff: release returns → next child starts, median".into(),
        unit: "ms",
        rlock: h_rlock,
        flock: Some(h_flock),
        cli: Some(h_cli),
        target: "≤ 5 ms".into(),
        met: Some(h_rlock <= 5.0),
        decimals: 2,
    });

    // 2. Idle waiter.
    let idle = idle_rlock(&redis, cfg.idle);
    let (idle_req, idle_cmds) = (idle.requests, idle.commands);
    let idle_poll = idle_cli(&redis, cfg.idle.min(Duration::from_secs(3)));
    rows.push(Row {
        figure: "idle waiter: requests to Redis per second".into(),
        unit: "/s",
        rlock: idle_req,
        flock: Some(0.0),
        cli: Some(idle_poll),
        target: "0 (≤ 1 /s)".into(),
        met: Some(idle_req <= 1.0),
        decimals: 2,
    });
    rows.push(Row {
        figure: "idle waiter: commands/s incl. those its scripts run".into(),
        unit: "/s",
        rlock: idle_cmds,
        flock: Some(0.0),
        cli: Some(idle_poll),
        target: "(for reference)".into(),
        met: None,
        decimals: 2,
    });

    // 3. One uncontended exec.
    let lockfile = dir.path().join("wall.lock");
    let [e_rlock, e_flock, e_cli] = interleaved(
        cfg.runs,
        [
            &mut || {
                ms(wall(|| {
                    quiet(&mut rlock(&redis, &["exec", "-k", "wall", "--", "true"]))
                }))
            },
            &mut || {
                ms(wall(|| {
                    quiet(Command::new(&flock).arg(&lockfile).arg("true"))
                }))
            },
            &mut || {
                ms(wall(|| {
                    if !cli_pair(&port, "cli-wall", "t") {
                        fail("the uncontended redis-cli SET NX found the key taken");
                    }
                }))
            },
        ],
    );
    rows.push(Row {
        figure: "`exec -k K -- true` wall time, median".into(),
        unit: "ms",
        rlock: e_rlock,
        flock: Some(e_flock),
        cli: Some(e_cli),
        target: "≤ 1.5× flock".into(),
        met: Some(e_rlock <= 1.5 * e_flock),
        decimals: 2,
    });

    // 4. Contention: procs × iters critical sections on one key, three times each.
    let lockfile = dir.path().join("contended.lock");
    let [c_rlock, c_flock, c_cli] = interleaved(
        3,
        [
            &mut || {
                contention(cfg.procs, cfg.iters, |_| {
                    quiet(&mut rlock(
                        &redis,
                        &["exec", "-w", "60s", "-k", "contended", "--", "true"],
                    ))
                })
            },
            &mut || {
                contention(cfg.procs, cfg.iters, |_| {
                    quiet(Command::new(&flock).arg(&lockfile).arg("true"))
                })
            },
            &mut || {
                contention(cfg.procs, cfg.iters, |p| {
                    let token = format!("p{p}");
                    for _ in 0..6000 {
                        if cli_pair(&port, "cli-contended", &token) {
                            return;
                        }
                        thread::sleep(Duration::from_millis(10));
                    }
                    fail("a redis-cli poller never got the lock in 6000 tries");
                })
            },
        ],
    );
    rows.push(Row {
        figure: format!(
            "{} procs × {} `exec -w 60s -- true`, one key, total (median of 3)",
            cfg.procs, cfg.iters
        ),
        unit: "ms",
        rlock: c_rlock,
        flock: Some(c_flock),
        cli: Some(c_cli),
        target: "≤ 2× flock".into(),
        met: Some(c_rlock <= 2.0 * c_flock),
        decimals: 0,
    });

    // 4b. A semaphore (issue 13): 8 contenders through `exec --limit 4` against a flock
    // semaphore of 4 lock files (`flock -n` over the files in turn, 10 ms apart when all are
    // taken). Each section sleeps 50 ms, so that four at once is what makes it fast.
    let slots: Vec<PathBuf> = (0..4)
        .map(|i| dir.path().join(format!("slot-{i}.lock")))
        .collect();
    let sections = 8 * cfg.iters;
    let [s_rlock, s_flock] = interleaved(
        3,
        [
            &mut || {
                contention(8, cfg.iters, |_| {
                    quiet(&mut rlock(
                        &redis,
                        &[
                            "exec", "-w", "60s", "-k", "sem", "--limit", "4", "--", "sleep", "0.05",
                        ],
                    ))
                })
            },
            &mut || contention(8, cfg.iters, |_| flock_slot(&flock, &slots)),
        ],
    );
    let per_s = |total_ms: f64| sections as f64 / (total_ms / 1e3);
    rows.push(Row {
        figure: format!(
            "8 procs × {} `exec --limit 4 -- sleep 0.05`: sections/s (flock: 4 lock files)",
            cfg.iters
        ),
        unit: "/s",
        rlock: per_s(s_rlock),
        flock: Some(per_s(s_flock)),
        cli: None,
        target: "≥ 0.5× flock".into(),
        met: Some(per_s(s_rlock) >= 0.5 * per_s(s_flock)),
        decimals: 1,
    });

    // 5. Memory of a holder.
    let mut conn = redis.conn();
    let mut holder =
        Bg::spawn(rlock(&redis, &["exec", "-k", "mem", "--", "sleep", "30"]).stdout(Stdio::null()));
    let pid = holder.pid();
    wait_for("rlock exec to hold the lock and run its child", || {
        redis::cmd("EXISTS")
            .arg("rlock:mem")
            .query::<bool>(&mut conn)
            .unwrap_or(false)
            && has_child(pid)
    });
    let m_rlock = sample_rss(pid);
    let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    holder.wait("rlock exec after SIGTERM");
    let mut fl = Bg::spawn(
        Command::new(&flock)
            .arg(dir.path().join("mem.lock"))
            .args(["sleep", "30"]),
    );
    let fpid = fl.pid();
    wait_for("flock to run its child", || has_child(fpid));
    let m_flock = sample_rss(fpid);
    let _ = killpg(Pid::from_raw(fpid), Signal::SIGTERM);
    fl.wait("flock after SIGTERM");
    rows.push(Row {
        figure: "resident memory (VmRSS) while holding".into(),
        unit: "MiB",
        rlock: m_rlock,
        flock: Some(m_flock),
        cli: None,
        target: "≤ 8 MiB".into(),
        met: Some(m_rlock <= 8.0),
        decimals: 2,
    });

    // 6. Redlock: five masters asked in parallel cost about what one does.
    let more: Vec<RedisServer> = (0..4).map(|_| RedisServer::start()).collect();
    let five: Vec<&RedisServer> = std::iter::once(&redis).chain(&more).collect();
    let (r5, r1, r5_lo, r1_lo) = redlock_vs_one(&five, cfg.latency, cfg.runs);
    let redlock_ratio = r5 / r1;
    rows.push(Row {
        figure: format!(
            "Redlock `acquire -n` + `release`: 5 nodes ÷ 1 ({r5:.1} / {r1:.1} ms, {} ms links)",
            cfg.latency.as_millis()
        ),
        unit: "×",
        rlock: redlock_ratio,
        flock: None,
        cli: None,
        target: "≈1× (parallel), not 5× (sequential)".into(),
        met: Some(redlock_ratio < 2.0),
        decimals: 2,
    });

    // 6b. --replicas 1 (issue 14): WAIT after the grant, with a replica on loopback, against
    // the same exec without it and flock, run by run.
    let replica = RedisServer::start();
    let mut rconn = replica.conn();
    redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(redis.port())
        .query::<()>(&mut rconn)
        .expect("REPLICAOF");
    wait_for("the replica's link to come up", || {
        redis::cmd("INFO")
            .arg("replication")
            .query::<String>(&mut rconn)
            .is_ok_and(|i| i.contains("master_link_status:up"))
    });
    let lockfile = dir.path().join("replicas.lock");
    let [w_rlock, w_plain, w_flock] = interleaved(
        cfg.runs,
        [
            &mut || {
                ms(wall(|| {
                    quiet(&mut rlock(
                        &redis,
                        &["--replicas", "1", "exec", "-k", "repl", "--", "true"],
                    ))
                }))
            },
            &mut || {
                ms(wall(|| {
                    quiet(&mut rlock(&redis, &["exec", "-k", "repl", "--", "true"]))
                }))
            },
            &mut || {
                ms(wall(|| {
                    quiet(Command::new(&flock).arg(&lockfile).arg("true"))
                }))
            },
        ],
    );
    drop(replica);
    rows.push(Row {
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
    });

    println!();
    print_table(&rows);
    println!();
    println!(
        "Handoff figures exclude {cost:.2} ms, the measured cost of starting `date +%s%N` directly \
         (so a figure can come out slightly negative)."
    );
    println!(
        "Idle rows: rates from the first to the last request seen ({} requests, {} commands \
         counted with script internals, in {:?}); a parked rlock waiter asks nothing while the \
         holder's lease is alive.",
        idle.seen, idle.counted, idle.window
    );
    println!(
        "exec and contention rows: rlock, flock and redis-cli take turns, run by run, so that \
         the machine's drift weighs on all three alike."
    );
    println!(
        "redis-cli column: for handoff and idle, a sh loop retrying SET NX every 100 ms (there is \
         nothing to wait on); for contention, a retry every 10 ms. flock waits in the kernel and \
         sends nothing to Redis."
    );
    println!(
        "Redlock row: each node behind a proxy adding {} ms each way. A grant and a release \
         are one round each, sent to every node at once (a second round raises the fence \
         counters of granting nodes that are behind, which the common case skips), so parallel \
         requests land near 1×, sequential ones near 5×. On plain loopback, where process \
         start-up dominates: {r5_lo:.2} / {r1_lo:.2} ms = {:.2}×.",
        cfg.latency.as_millis(),
        r5_lo / r1_lo
    );

    // 7. Waiting (issue 12): idle waiters, long lines, rlock beside etcdctl lock and flock.
    waiting_figures(&cfg, &redis, &flock, dir.path(), (e_rlock, e_flock));

    // 8. Soak, last: it takes minutes, and the tables above should not wait for it.
    drop(more);
    if cfg.soak_grants > 0 {
        soak(cfg.soak_grants);
    }
}

/// An etcd of the benchmark's own, when Debian's etcd-server and etcd-client are installed.
fn start_etcd() -> Option<waiting::Etcd> {
    let etcd_bins = ["etcd", "etcdctl"].map(|name| {
        std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    match etcd_bins {
        [Some(server), Some(_)] => Some(waiting::Etcd::start(&server)),
        _ => {
            println!(
                "\netcd not found: the etcdctl lock column is left out (install Debian's \
                 etcd-server and etcd-client: `apt-get install -y etcd-server etcd-client`)"
            );
            None
        }
    }
}

/// What waiting costs on the host, and the handoff (`compare/host.rs`): rlock, flock and
/// etcdctl lock side by side, with ratios.
fn host_figures(
    cfg: &Config,
    redis: &RedisServer,
    flock: &Path,
    etcd: Option<&waiting::Etcd>,
    dir: &Path,
) {
    use host::{EtcdTool, FlockTool, RlockTool, Spread, Tool};
    let r = RlockTool(redis);
    let f = FlockTool { flock, dir };
    let e = etcd.map(EtcdTool);
    let tools: Vec<&dyn Tool> = [&r as &dyn Tool, &f]
        .into_iter()
        .chain(e.as_ref().map(|e| e as &dyn Tool))
        .collect();
    let samples = cfg.runs.max(30);
    let cost = host::shell_cost(dir, cfg.runs);
    let each =
        |f: &dyn Fn(&dyn Tool) -> Spread| -> Vec<Spread> { tools.iter().map(|t| f(*t)).collect() };
    let idle: Vec<f64> = tools
        .iter()
        .map(|t| host::idle_wakeups(*t, dir, cfg.idle))
        .collect();
    let one = each(&|t| host::handoffs_one_queued(t, dir, samples, cost));
    let line = each(&|t| host::handoffs_in_line(t, dir, 100 + samples, samples, cost));
    let exec: Vec<f64> = tools
        .iter()
        .map(|t| host::exec_true(*t, cfg.runs))
        .collect();
    println!();
    println!(
        "What waiting costs on the host, and the handoff ({samples} handoffs each; ms are median (min–max), less {cost:.2} ms for starting bash):"
    );
    println!();
    let names: Vec<&str> = tools.iter().map(|t| t.name()).collect();
    println!(
        "| figure | {} | rlock/flock | rlock/etcdctl lock | target | met |",
        names.join(" | ")
    );
    println!("|---|{}---|---|---|---|", "---|".repeat(names.len()));
    let ratio = |a: f64, b: Option<f64>| match b {
        Some(b) if b > 0.0 => format!("{:.2}×", a / b),
        Some(_) => "–".into(),
        None => "–".into(),
    };
    let row = |figure: &str,
               cells: Vec<String>,
               r: f64,
               f: f64,
               e: Option<f64>,
               target: &str,
               met: bool| {
        println!(
            "| {figure} | {} | {} | {} | {target} | {} |",
            cells.join(" | "),
            ratio(r, Some(f)),
            ratio(r, e),
            if met { "yes" } else { "NO" }
        );
    };
    row(
        "idle waiter behind a held lock: wake-ups/s (voluntary context switches, all threads)",
        idle.iter().map(|v| format!("{v:.1} /s")).collect(),
        idle[0],
        idle[1],
        idle.get(2).copied(),
        "≤ 1 /s",
        idle[0] <= 1.0,
    );
    let spread = |v: &[Spread]| -> Vec<String> {
        v.iter()
            .map(|s| format!("{:.2} ({:.2}–{:.2})", s.median, s.min, s.max))
            .collect()
    };
    for (what, v) in [("1 waiter queued", &one), ("a line of 100+ queued", &line)] {
        let (r, f, e) = (v[0].median, v[1].median, v.get(2).map(|s| s.median));
        row(
            &format!("handoff, holder's command ends → next command starts, {what}"),
            spread(v),
            r,
            f,
            e,
            "≤ 1.5× flock, < etcdctl",
            r <= 1.5 * f && e.is_none_or(|e| r < e),
        );
    }
    let (r, f, e) = (exec[0], exec[1], exec.get(2).copied());
    row(
        "`-- true` under the lock, median wall time",
        exec.iter().map(|v| format!("{v:.2}")).collect(),
        r,
        f,
        e,
        "≤ 1.3× flock",
        r <= 1.3 * f,
    );
}

/// The waiting table: idle waiters, a line of 100 and of 300 waiters drained through one key by
/// rlock, `etcdctl lock` (when etcd is installed) and flock, how the costs grow, and what 1,000
/// distinct keys leave behind.
fn waiting_figures(
    cfg: &Config,
    redis: &RedisServer,
    flock: &Path,
    dir: &Path,
    (e_rlock, e_flock): (f64, f64),
) {
    use waiting::Row as W;
    let etcd = start_etcd();
    host_figures(cfg, redis, flock, etcd.as_ref(), dir);
    let (small, large) = (cfg.line / 3, cfg.line);
    let mut rows = Vec::new();
    for n in [10, 100] {
        let rate = waiting::idle_waiters(redis, n, cfg.idle);
        rows.push(W {
            figure: format!("{n} idle waiters behind a 60 s lease: Redis commands/s"),
            unit: "/s",
            rlock: rate,
            flock: Some(0.0),
            etcd: None,
            target: "0".into(),
            met: Some(rate == 0.0),
        });
    }
    let drains = |n: usize| {
        let r = waiting::drain_rlock(redis, dir, n);
        let f = waiting::drain_flock(flock, dir, n);
        let e = etcd.as_ref().map(|e| waiting::drain_etcd(e, dir, n));
        (r, f, e)
    };
    // (The handoff, measured 30 times and more, is in the host table above.)
    let (r_s, f_s, e_s) = drains(small);
    let (r_l, f_l, e_l) = drains(large);
    for (n, (r, f, e)) in [(small, (&r_s, &f_s, &e_s)), (large, (&r_l, &f_l, &e_l))] {
        rows.push(W {
            figure: format!("{n} waiters through one key: release → last done"),
            unit: "ms",
            rlock: r.total,
            flock: Some(f.total),
            etcd: e.as_ref().map(|e| e.total),
            target: "< etcdctl, ≤ 2× flock".into(),
            met: Some(r.total <= 2.0 * f.total && e.as_ref().is_none_or(|e| r.total < e.total)),
        });
        rows.push(W {
            figure: format!("{n} waiters: order inversions"),
            unit: "",
            rlock: r.inversions as f64,
            flock: Some(f.inversions as f64),
            etcd: e.as_ref().map(|e| e.inversions as f64),
            target: "0".into(),
            met: Some(r.inversions == 0),
        });
    }
    let growth = |a: f64, b: f64| if a > 0.0 { b / a } else { f64::NAN };
    rows.push(W {
        figure: format!("growth {small} → {large} waiters: drain time"),
        unit: "×",
        rlock: growth(r_s.total, r_l.total),
        flock: Some(growth(f_s.total, f_l.total)),
        etcd: e_s
            .as_ref()
            .zip(e_l.as_ref())
            .map(|(s, l)| growth(s.total, l.total)),
        target: "≤ 3.3× (linear)".into(),
        met: Some(growth(r_s.total, r_l.total) <= 3.3),
    });
    let cpu = growth(r_s.redis_cpu.unwrap_or(0.0), r_l.redis_cpu.unwrap_or(0.0));
    rows.push(W {
        figure: format!(
            "growth {small} → {large} waiters: Redis CPU ({:.0} → {:.0} ms)",
            r_s.redis_cpu.unwrap_or(0.0),
            r_l.redis_cpu.unwrap_or(0.0)
        ),
        unit: "×",
        rlock: cpu,
        flock: None,
        etcd: None,
        target: "≤ 3.3× (linear)".into(),
        met: Some(cpu <= 3.3),
    });
    rows.push(W {
        figure: format!("a waiter's RSS with {small} / {large} in line (MiB)"),
        unit: "MiB",
        rlock: r_l.waiter_rss.unwrap_or(f64::NAN),
        flock: None,
        etcd: None,
        target: format!(
            "≈ {:.2} MiB (no growth)",
            r_s.waiter_rss.unwrap_or(f64::NAN)
        ),
        met: None,
    });
    rows.push(W {
        figure: "`lock -- true`, median wall time (peer row)".into(),
        unit: "ms",
        rlock: e_rlock,
        flock: Some(e_flock),
        etcd: etcd.as_ref().map(|e| waiting::exec_etcd(e, cfg.runs)),
        target: "(for reference)".into(),
        met: None,
    });
    let (forever, longest) = waiting::leftovers(redis, 1000);
    rows.push(W {
        figure: format!(
            "1,000 distinct keys locked and released (--ttl 1s): keys with no expiry (longest life left {longest:.1} s)"
        ),
        unit: "",
        rlock: forever as f64,
        flock: None,
        etcd: None,
        target: "0, none past 61 s".into(),
        met: Some(forever == 0 && longest <= 61.0),
    });
    println!();
    waiting::print(&rows);
}
