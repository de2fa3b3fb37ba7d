//! The soak engine: several loops run `rlock exec` on one key while Redis is frozen
//! (SIGSTOP / SIGCONT), has its scripts flushed and its clients killed; every command writes
//! heartbeats to one shared log, and the log is then checked for overlapping holders and fences
//! out of order.
//!
//! Used by the tests' soaks (`tests/rlock/soak.rs`, `soak_redlock.rs`, `partition/slow_links.rs`)
//! and the benchmark's long one (`benches/compare/soak.rs`). The engine speaks to Redis in plain
//! RESP and is handed the switch of a link rather than a proxy: the caller starts Redis (`--save
//! "" --appendonly no`, 127.0.0.1) and passes its port and pid.
//!
//! Partitions: the caller may put a fault proxy in front of Redis, point rlock at it
//! (`Target::rlock_port`) and hand the engine a switch for that link (`Target::link`); the fault
//! rotation then also blackholes the link for a while, some of the cuts aimed just after a long
//! command started. The engine's own fault commands still go to Redis directly.
//!
//! Each command is `sh -c` that appends, with O_APPEND, one line per sign of life:
//! `KIND FENCE NANOS TOKEN LEFT`, KIND being `start`, `hb` (every ~20 ms) or `end`, NANOS from
//! `date +%s%N`, FENCE and TOKEN from the command's environment, LEFT how many `hb` are still to
//! come (so a `start` line says how long the command means to run). Commands take turns at
//! running the loop as themselves, under `timeout` and as a `set -m` job (`WRAP`). A line's stamp is taken before it is written, and a killed command writes nothing more,
//! so any stamp of one holder at or after the next holder's `start` is a real overlap.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::rng::Rng;

/// The key every loop contends for.
pub const KEY: &str = "soak";

/// One command: a start line, $2 heartbeats ~20 ms apart, an end line.
const SCRIPT: &str = r#"log=$1 n=$2
echo "start $RLOCK_FENCE $(date +%s%N) $RLOCK_TOKEN $n" >> "$log"
while [ "$n" -gt 0 ]; do
  sleep 0.02
  n=$((n - 1))
  echo "hb $RLOCK_FENCE $(date +%s%N) $RLOCK_TOKEN $n" >> "$log"
done
echo "end $RLOCK_FENCE $(date +%s%N) $RLOCK_TOKEN 0" >> "$log""#;

/// How a command runs its heartbeat loop, in turn: as itself, under coreutils `timeout` (which
/// moves into a process group of its own), and as a bash `set -m` job (a group of its own too); the
/// lost-lock signals must reach the loop all the same. `$4` is SCRIPT.
const WRAP: &str = r#"case $3 in
timeout) timeout 600 sh -c "$4" soak "$1" "$2" ;;
setm) set -m; sh -c "$4" soak "$1" "$2" & wait ;;
*) sh -c "$4" soak "$1" "$2" ;;
esac"#;
const WAYS: [&str; 3] = ["plain", "timeout", "setm"];
static NEXT_WAY: AtomicUsize = AtomicUsize::new(0);

/// An `rlock exec` that runs longer than this is taken as hung: killed and counted as exit -9.
const EXEC_LIMIT: Duration = Duration::from_secs(120);

/// When the run ends.
#[derive(Debug, Clone, Copy)]
pub enum Until {
    /// No new command starts after this much wall time.
    Wall(Duration),
    /// No new command starts once this many have been granted (exit 0 or 76).
    Grants(usize),
}

/// What to run, and which faults to inject.
#[derive(Debug, Clone)]
pub struct Config {
    /// Loops running `rlock exec` one after the other.
    pub workers: usize,
    pub until: Until,
    /// `--ttl` of every exec.
    pub ttl: Duration,
    /// Heartbeats of an ordinary command (~20 ms each).
    pub short_beats: u32,
    /// Heartbeats of a long command, which outlives the TTL (so it renews, and a freeze can
    /// make it lose the lock while it runs).
    pub long_beats: u32,
    /// Every `long_every`-th command of each loop is a long one.
    pub long_every: u32,
    /// Pause between two faults, drawn from this range.
    pub gap: (Duration, Duration),
    /// Length of an ordinary freeze, drawn from this range; an aimed freeze (one in three
    /// faults' rotation) takes the upper bound and starts just after a long command did.
    pub freeze: (Duration, Duration),
    /// Length of an ordinary blackhole of the holders' link (only with `Target::link`), drawn
    /// from this range; an aimed one takes the upper bound and starts just after a long command
    /// did.
    pub cut: (Duration, Duration),
    /// No more faults than this (0: none at all).
    pub max_faults: usize,
    /// Seed of the fault schedule's random numbers (printed in the report).
    pub seed: u64,
    /// `--limit N` on every exec (a semaphore): at most N sections at once, instead of one.
    pub limit: Option<u32>,
}

impl Config {
    /// About `secs` seconds for the test suite: four loops, `--ttl 1s`.
    pub fn short(secs: u64) -> Config {
        Config {
            workers: 4,
            until: Until::Wall(Duration::from_secs(secs)),
            ttl: Duration::from_secs(1),
            short_beats: 3,
            long_beats: 50,
            long_every: 8,
            gap: (Duration::from_millis(800), Duration::from_millis(2200)),
            freeze: (Duration::from_millis(200), Duration::from_millis(1500)),
            cut: (Duration::from_millis(200), Duration::from_millis(1500)),
            max_faults: 10_000,
            seed: seed_from_clock(),
            limit: None,
        }
    }

    /// `grants` contended grants for the benchmark: the same, with long commands rarer.
    pub fn long(grants: usize) -> Config {
        Config {
            until: Until::Grants(grants),
            long_every: 25,
            ..Config::short(0)
        }
    }
}

fn seed_from_clock() -> u64 {
    let ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    ns ^ u64::from(std::process::id()) << 32
}

/// A switch on the link between the rlock processes and Redis: `true` blackholes it (both
/// directions: requests are read and dropped, no reply comes), `false` heals it. The caller
/// builds it, from a fault proxy say, so that this file needs no proxy of its own.
#[derive(Clone)]
pub struct Link(pub Arc<dyn Fn(bool) + Send + Sync>);

impl fmt::Debug for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Link(..)")
    }
}

/// Where the engine finds its subjects.
#[derive(Debug, Clone)]
pub struct Target {
    /// The `rlock` binary.
    pub rlock: PathBuf,
    /// The Redis port on 127.0.0.1; the engine's own fault commands go there.
    pub port: u16,
    /// The port rlock is pointed at, when it is not `port`: a proxy in front of Redis.
    pub rlock_port: Option<u16>,
    /// The switch of rlock's link to Redis: with it, blackholes join the fault rotation.
    pub link: Option<Link>,
    /// Redlock: the ports of the other masters (on 127.0.0.1) rlock is pointed at besides the
    /// first (empty: one Redis). The engine's own faults stay on `port`.
    pub more_ports: Vec<u16>,
    /// The `redis-server` process, frozen and thawed by the engine.
    pub redis_pid: i32,
    /// Where the heartbeat log and the loops' stderr go.
    pub dir: PathBuf,
}

/// What a run saw.
#[derive(Debug, Default)]
pub struct Report {
    pub seed: u64,
    pub wall: Duration,
    /// Commands that wrote a `start` line.
    pub grants: usize,
    /// Of those, commands that ran a long time (more than the TTL).
    pub long_grants: usize,
    /// Commands with a `start` but no `end` line: stopped while they ran.
    pub cut_short: usize,
    /// `rlock exec` exit code → how many times (-9: hung, killed by the engine).
    pub exits: BTreeMap<i32, usize>,
    /// How many `rlock exec` each loop ran.
    pub execs_per_loop: Vec<usize>,
    /// The length of every freeze.
    pub freezes: Vec<Duration>,
    /// The length of every blackhole of rlock's link (`Target::link`).
    pub cuts: Vec<Duration>,
    pub script_flushes: usize,
    /// `CLIENT KILL` commands sent, and the connections they closed.
    pub client_kills: usize,
    pub clients_killed: i64,
    /// Faults that failed to go out (a reply missing, say); a description each.
    pub fault_errors: Vec<String>,
    /// Lines of one holder stamped at or after the next holder's start.
    pub overlaps: Vec<String>,
    /// Consecutive grants (by start time) whose fences do not strictly increase.
    pub inversions: Vec<String>,
    /// Log lines that do not parse, or a token whose lines disagree on its fence.
    pub malformed: Vec<String>,
    /// The most holders running at one instant (semaphore mode).
    pub max_running: usize,
    /// For every exit other than 0 and 76: the code and the last line rlock wrote on stderr.
    pub other_exits: Vec<String>,
}

impl Report {
    pub fn exit_count(&self, code: i32) -> usize {
        self.exits.get(&code).copied().unwrap_or(0)
    }

    pub fn faults(&self) -> usize {
        self.freezes.len() + self.cuts.len() + self.script_flushes + self.client_kills
    }

    pub fn longest_freeze(&self) -> Duration {
        self.freezes.iter().copied().max().unwrap_or_default()
    }

    pub fn longest_cut(&self) -> Duration {
        self.cuts.iter().copied().max().unwrap_or_default()
    }

    /// Grants per second of wall time.
    pub fn rate(&self) -> f64 {
        self.grants as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let exits: Vec<String> = self.exits.iter().map(|(c, n)| format!("{c}×{n}")).collect();
        writeln!(
            f,
            "soak: {} grants ({} long, {} cut short) in {:.1} s ({:.1} grants/s), seed {}",
            self.grants,
            self.long_grants,
            self.cut_short,
            self.wall.as_secs_f64(),
            self.rate(),
            self.seed
        )?;
        writeln!(f, "  exit codes: {}", exits.join(", "))?;
        if !self.execs_per_loop.is_empty() {
            writeln!(f, "  execs per loop: {:?}", self.execs_per_loop)?;
        }
        writeln!(
            f,
            "  faults: {} freezes (longest {} ms), {} blackholes (longest {} ms), {} SCRIPT FLUSH, {} CLIENT KILL ({} connections), {} failed",
            self.freezes.len(),
            self.longest_freeze().as_millis(),
            self.cuts.len(),
            self.longest_cut().as_millis(),
            self.script_flushes,
            self.client_kills,
            self.clients_killed,
            self.fault_errors.len()
        )?;
        if self.max_running > 0 {
            writeln!(f, "  at most {} holders at once", self.max_running)?;
        }
        write!(
            f,
            "  overlaps: {}, fence inversions: {}, malformed lines: {}",
            self.overlaps.len(),
            self.inversions.len(),
            self.malformed.len()
        )?;
        for (what, list) in [
            ("overlap", &self.overlaps),
            ("inversion", &self.inversions),
            ("malformed", &self.malformed),
            ("fault error", &self.fault_errors),
            ("exit", &self.other_exits),
        ] {
            for line in list.iter().take(10) {
                write!(f, "\n  {what}: {line}")?;
            }
        }
        Ok(())
    }
}

/// Sends SIGCONT to the server when dropped, so no exit path (a panic included) leaves it
/// frozen.
struct Thaw(Pid);

impl Drop for Thaw {
    fn drop(&mut self) {
        let _ = kill(self.0, Signal::SIGCONT);
    }
}

/// Heals the link when dropped, so no exit path (a panic included) leaves it cut.
struct Heal<'a>(&'a Link);

impl Drop for Heal<'_> {
    fn drop(&mut self) {
        (self.0.0)(false);
    }
}

/// Runs the soak and checks its log. Panics only when it cannot run at all (no shell, log
/// unreadable); what rlock did wrong is in the report.
pub fn run(target: &Target, cfg: &Config) -> Report {
    let redis = Pid::from_raw(target.redis_pid);
    let _thaw = Thaw(redis);
    let _heal = target.link.as_ref().map(Heal);
    let log = target.dir.join("heartbeats.log");
    File::create(&log).unwrap_or_else(|e| panic!("create {}: {e}", log.display()));

    let stop = AtomicBool::new(false);
    let granted = AtomicUsize::new(0);
    let exits = Mutex::new(BTreeMap::new());
    let per_loop = Mutex::new(vec![0usize; cfg.workers]);
    let other_exits = Mutex::new(Vec::new());
    let mut report = Report {
        seed: cfg.seed,
        ..Report::default()
    };
    let started = Instant::now();
    thread::scope(|s| {
        let faults = s.spawn(|| inject_faults(target, cfg, &log, &stop));
        let loops: Vec<_> = (0..cfg.workers)
            .map(|w| {
                let (log, stop, granted) = (&log, &stop, &granted);
                let (exits, other_exits, per_loop) = (&exits, &other_exits, &per_loop);
                s.spawn(move || {
                    let stderr = target.dir.join(format!("loop-{w}.stderr"));
                    let mut n = 0u32;
                    while !stop.load(Ordering::SeqCst) {
                        n += 1;
                        let beats = if n.is_multiple_of(cfg.long_every) {
                            cfg.long_beats
                        } else {
                            cfg.short_beats
                        };
                        let code = exec_once(target, cfg, log, beats, &stderr);
                        *exits.lock().unwrap().entry(code).or_insert(0) += 1;
                        per_loop.lock().unwrap()[w] += 1;
                        if code != 0 && code != 76 {
                            let said = last_line(&stderr).unwrap_or_default();
                            other_exits.lock().unwrap().push(format!("{code}: {said}"));
                        }
                        if code == 0 || code == 76 {
                            let total = granted.fetch_add(1, Ordering::SeqCst) + 1;
                            if matches!(cfg.until, Until::Grants(g) if total >= g) {
                                stop.store(true, Ordering::SeqCst);
                            }
                        }
                        if matches!(cfg.until, Until::Wall(d) if started.elapsed() >= d) {
                            stop.store(true, Ordering::SeqCst);
                        }
                    }
                })
            })
            .collect();
        // A loop that panics must still stop the others and the faults.
        let mut panicked = None;
        for l in loops {
            if let Err(p) = l.join() {
                stop.store(true, Ordering::SeqCst);
                panicked = Some(p);
            }
        }
        stop.store(true, Ordering::SeqCst);
        match faults.join() {
            Ok(f) => {
                report.freezes = f.freezes;
                report.cuts = f.cuts;
                report.script_flushes = f.script_flushes;
                report.client_kills = f.client_kills;
                report.clients_killed = f.clients_killed;
                report.fault_errors = f.errors;
            }
            Err(p) => panicked = Some(p),
        }
        if let Some(p) = panicked {
            std::panic::resume_unwind(p);
        }
    });
    report.wall = started.elapsed();
    report.exits = exits.into_inner().unwrap();
    report.execs_per_loop = per_loop.into_inner().unwrap();
    report.other_exits = other_exits.into_inner().unwrap();
    check_log(&log, cfg, &mut report);
    report
}

/// One `rlock exec` of the shared command; its exit code (-N if it died of signal N).
fn exec_once(target: &Target, cfg: &Config, log: &Path, beats: u32, stderr: &Path) -> i32 {
    let err = File::options()
        .create(true)
        .append(true)
        .open(stderr)
        .unwrap_or_else(|e| panic!("open {}: {e}", stderr.display()));
    let mut cmd = Command::new(&target.rlock);
    // The developer's own settings (an RLOCK_TOKEN would make every exec reentrant) stay out.
    for (name, _) in std::env::vars_os() {
        if name.as_encoded_bytes().starts_with(b"RLOCK_") {
            cmd.env_remove(&name);
        }
    }
    cmd.env_remove("REDIS_URL").env_remove("REDISCLI_AUTH");
    cmd.arg("--url")
        .arg(format!(
            "redis://127.0.0.1:{}",
            target.rlock_port.unwrap_or(target.port)
        ))
        .args(
            target
                .more_ports
                .iter()
                .flat_map(|p| ["--url".to_string(), format!("redis://127.0.0.1:{p}")]),
        )
        .args(["exec", "-k", KEY, "--ttl"])
        .arg(format!("{}ms", cfg.ttl.as_millis()))
        .args(cfg.limit.map(|n| format!("--limit={n}")))
        .args(["-w", "60s", "--", "bash", "-c", WRAP, "soak"])
        .arg(log)
        .arg(beats.to_string())
        .arg(WAYS[NEXT_WAY.fetch_add(1, Ordering::Relaxed) % WAYS.len()])
        .arg(SCRIPT)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err);
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {}: {e}", target.rlock.display()));
    let deadline = Instant::now() + EXEC_LIMIT;
    loop {
        match child.try_wait().expect("wait for rlock exec") {
            Some(status) => {
                use std::os::unix::process::ExitStatusExt;
                return status
                    .code()
                    .unwrap_or_else(|| -status.signal().unwrap_or(0));
            }
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return -9;
            }
            None => thread::sleep(Duration::from_millis(2)),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Faults
// ---------------------------------------------------------------------------------------------

#[derive(Default)]
struct Injected {
    freezes: Vec<Duration>,
    cuts: Vec<Duration>,
    script_flushes: usize,
    client_kills: usize,
    clients_killed: i64,
    errors: Vec<String>,
}

/// The rotation of faults: an aimed long freeze, a flush, a kill, a random freeze, …
#[derive(Clone, Copy)]
enum Fault {
    AimedFreeze,
    Freeze,
    /// A blackhole of rlock's link of the longest length, just after a long command started.
    AimedCut,
    /// A blackhole of rlock's link of random length.
    Cut,
    ScriptFlush,
    Kill(&'static [&'static str]),
}

const ROTATION: [Fault; 9] = [
    Fault::AimedFreeze,
    Fault::ScriptFlush,
    Fault::Kill(&["CLIENT", "KILL", "TYPE", "normal"]),
    Fault::Freeze,
    Fault::ScriptFlush,
    Fault::Kill(&["CLIENT", "KILL", "TYPE", "pubsub"]),
    Fault::Freeze,
    Fault::ScriptFlush,
    Fault::Kill(&["CLIENT", "KILL", "SKIPME", "yes"]),
];

/// The rotation when the engine holds a switch of rlock's link: a third of the faults are
/// blackholes of it, one in four of those aimed at a long command.
const ROTATION_WITH_CUTS: [Fault; 12] = [
    Fault::AimedCut,
    Fault::ScriptFlush,
    Fault::AimedFreeze,
    Fault::Cut,
    Fault::Kill(&["CLIENT", "KILL", "TYPE", "normal"]),
    Fault::Freeze,
    Fault::Cut,
    Fault::ScriptFlush,
    Fault::Kill(&["CLIENT", "KILL", "TYPE", "pubsub"]),
    Fault::Cut,
    Fault::Freeze,
    Fault::Kill(&["CLIENT", "KILL", "SKIPME", "yes"]),
];

/// Injects faults, one at a time with a random pause before each, until `stop`.
fn inject_faults(target: &Target, cfg: &Config, log: &Path, stop: &AtomicBool) -> Injected {
    let mut rng = Rng(cfg.seed | 1);
    let mut done = Injected::default();
    let redis = Pid::from_raw(target.redis_pid);
    let rotation: &[Fault] = match target.link {
        Some(_) => &ROTATION_WITH_CUTS,
        None => &ROTATION,
    };
    for fault in rotation.iter().cycle().take(cfg.max_faults) {
        if !pause(rng.between(cfg.gap.0, cfg.gap.1), stop) {
            break;
        }
        match *fault {
            Fault::AimedFreeze | Fault::Freeze => {
                let aimed = matches!(fault, Fault::AimedFreeze);
                let length = fault_length(aimed, cfg.freeze, &mut rng, log, cfg, stop);
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let thaw = Thaw(redis);
                let frozen = Instant::now();
                if let Err(e) = kill(redis, Signal::SIGSTOP) {
                    done.errors.push(format!("SIGSTOP: {e}"));
                    continue;
                }
                thread::sleep(length);
                drop(thaw);
                done.freezes.push(frozen.elapsed());
            }
            Fault::AimedCut | Fault::Cut => {
                let Some(link) = &target.link else {
                    continue;
                };
                // Aimed as a freeze is: the holder cannot renew for longer than its TTL, while
                // the others wait on the same dead link.
                let aimed = matches!(fault, Fault::AimedCut);
                let length = fault_length(aimed, cfg.cut, &mut rng, log, cfg, stop);
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let heal = Heal(link);
                let cut = Instant::now();
                (link.0)(true);
                thread::sleep(length);
                drop(heal);
                done.cuts.push(cut.elapsed());
            }
            Fault::ScriptFlush => match command(target.port, &["SCRIPT", "FLUSH"]) {
                Ok(_) => done.script_flushes += 1,
                Err(e) => done.errors.push(format!("SCRIPT FLUSH: {e}")),
            },
            Fault::Kill(args) => match command(target.port, args) {
                Ok(reply) => {
                    done.client_kills += 1;
                    done.clients_killed += reply.trim_start_matches(':').parse().unwrap_or(0);
                }
                Err(e) => done.errors.push(format!("{}: {e}", args.join(" "))),
            },
        }
    }
    done
}

/// How long a freeze or a cut lasts: drawn from `range`, or, `aimed`, its upper bound from just
/// after a long command started: that command will still run when its deadline passes, so it
/// must be stopped, and its rlock must exit 76.
fn fault_length(
    aimed: bool,
    range: (Duration, Duration),
    rng: &mut Rng,
    log: &Path,
    cfg: &Config,
    stop: &AtomicBool,
) -> Duration {
    if aimed {
        wait_for_long_start(log, cfg, stop);
        range.1
    } else {
        rng.between(range.0, range.1)
    }
}

/// Sleeps `d` unless `stop` comes first; false if it did.
fn pause(d: Duration, stop: &AtomicBool) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        thread::sleep((end - Instant::now()).min(Duration::from_millis(20)));
    }
    !stop.load(Ordering::SeqCst)
}

/// Waits (at most 5 s) until the log's last line comes from the first few beats of a long
/// command and was stamped less than 150 ms ago.
fn wait_for_long_start(log: &Path, cfg: &Config, stop: &AtomicBool) {
    let give_up = Instant::now() + Duration::from_secs(5);
    while Instant::now() < give_up && !stop.load(Ordering::SeqCst) {
        if let Some(line) = last_line(log).and_then(|l| Line::parse(&l)) {
            let age = now_ns() - line.nanos;
            if line.left + 4 >= cfg.long_beats && age < 150_000_000 {
                return;
            }
        }
        thread::sleep(Duration::from_millis(5));
    }
}

fn last_line(file: &Path) -> Option<String> {
    let mut f = File::open(file).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(512))).ok()?;
    let mut tail = String::new();
    f.read_to_string(&mut tail).ok()?;
    tail.lines().last().map(str::to_string)
}

fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

/// Sends one command on a fresh connection (plain RESP, so the engine needs no Redis client)
/// and returns the first line of the reply; an error reply is an `Err`.
fn command(port: u16, args: &[&str]) -> Result<String, String> {
    let timeout = Duration::from_secs(5);
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut conn = TcpStream::connect_timeout(&addr, timeout).map_err(|e| e.to_string())?;
    conn.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    let mut req = format!("*{}\r\n", args.len());
    for a in args {
        req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    conn.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut reply = String::new();
    BufReader::new(conn)
        .read_line(&mut reply)
        .map_err(|e| e.to_string())?;
    let reply = reply.trim_end().to_string();
    if reply.starts_with('-') || reply.is_empty() {
        return Err(format!("reply {reply:?}"));
    }
    Ok(reply)
}

// The log read back and checked.
mod check;

use check::Line;
pub use check::check_log;
