//! The faults a soak injects while its loops run, one at a time in a fixed rotation with random
//! pauses: freezes of the server (SIGSTOP / SIGCONT), `SCRIPT FLUSH`, `CLIENT KILL`, and
//! blackholes of rlock's link when the engine holds its switch; some freezes and blackholes are
//! aimed just after a long command started.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use super::check::Line;
use super::last_line;
use super::{Config, Link, Target};
use crate::rng::Rng;

/// Sends SIGCONT to the server when dropped, so no exit path (a panic included) leaves it
/// frozen.
pub(super) struct Thaw(pub(super) Pid);

impl Drop for Thaw {
    fn drop(&mut self) {
        let _ = kill(self.0, Signal::SIGCONT);
    }
}

/// Heals the link when dropped, so no exit path (a panic included) leaves it cut.
pub(super) struct Heal<'a>(pub(super) &'a Link);

impl Drop for Heal<'_> {
    fn drop(&mut self) {
        (self.0.0)(false);
    }
}

#[derive(Default)]
pub(super) struct Injected {
    pub(super) freezes: Vec<Duration>,
    pub(super) cuts: Vec<Duration>,
    pub(super) script_flushes: usize,
    pub(super) client_kills: usize,
    pub(super) clients_killed: i64,
    pub(super) errors: Vec<String>,
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
pub(super) fn inject_faults(
    target: &Target,
    cfg: &Config,
    log: &Path,
    stop: &AtomicBool,
) -> Injected {
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
