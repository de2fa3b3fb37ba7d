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
//! running the loop as themselves, under `timeout` and as a `set -m` job (`WRAP`). A line's stamp
//! is taken before it is written, and a killed command writes nothing more, so any stamp of one
//! holder at or after the next holder's `start` is a real overlap.
//!
//! Here the run itself; its settings and subjects in `config.rs`, the faults in `faults.rs`, the
//! log read back and checked in `check.rs`, and what a run saw in `report.rs`.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use nix::unistd::Pid;

mod check;
mod config;
mod faults;
mod report;

pub use check::check_log;
pub use config::{Config, Link, Target, Until};
pub use report::Report;

use faults::{Heal, Thaw, inject_faults};

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

fn last_line(file: &Path) -> Option<String> {
    let mut f = File::open(file).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(512))).ok()?;
    let mut tail = String::new();
    f.read_to_string(&mut tail).ok()?;
    tail.lines().last().map(str::to_string)
}
