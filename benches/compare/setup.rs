//! The benchmark's options, the tools it needs, and what every figure is given.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use rlock_test_support::RedisServer;

use crate::process::{quiet, rlock};
use crate::redis_cli;

/// The part that runs alone (`RLOCK_BENCH_ONLY`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Only {
    /// The table of what waiting costs on the host, and the handoff.
    Host,
    /// The long soak, alone (it is not part of the default run).
    Soak,
    /// Waiting at scale: a long line, and a crowd over the connection limit (`scale.rs`).
    Scale,
    /// The rows across a network (`network.rs`).
    Network,
}

pub struct Config {
    pub runs: usize,
    pub idle: Duration,
    pub procs: usize,
    pub iters: usize,
    pub soak_grants: usize,
    /// The longer line of the waiting figures (the shorter is a third of it).
    pub line: usize,
    /// The long line of the scale figures, and the crowd started at once against a server with
    /// a low connection limit (`scale.rs`).
    pub big_line: usize,
    pub crowd: usize,
    /// The round trip the network rows add (ms).
    pub rtt_ms: u64,
    pub only: Option<Only>,
}

impl Config {
    pub fn from_env() -> Config {
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
            runs: num("RLOCK_BENCH_RUNS", 100, 1000) as usize,
            idle: Duration::from_secs(num("RLOCK_BENCH_IDLE_SECS", 6, 120)),
            procs: num("RLOCK_BENCH_PROCS", 6, 64) as usize,
            iters: num("RLOCK_BENCH_ITERS", 15, 1000) as usize,
            line: num("RLOCK_BENCH_LINE", 300, 1000).max(3) as usize,
            big_line: num("RLOCK_BENCH_BIG_LINE", 3000, 10_000) as usize,
            crowd: num("RLOCK_BENCH_CROWD", 120, 1000) as usize,
            rtt_ms: num("RLOCK_BENCH_RTT_MS", 10, 1000),
            only: match std::env::var("RLOCK_BENCH_ONLY") {
                Err(_) => None,
                Ok(v) if v == "host" => Some(Only::Host),
                Ok(v) if v == "soak" => Some(Only::Soak),
                Ok(v) if v == "scale" => Some(Only::Scale),
                Ok(v) if v == "network" => Some(Only::Network),
                Ok(v) => exit_with(&format!(
                    "RLOCK_BENCH_ONLY={v}: the choices are 'host', 'network', 'scale' and 'soak'"
                )),
            },
            soak_grants: match std::env::var("RLOCK_BENCH_SOAK_GRANTS") {
                Err(_) => 10_000,
                Ok(v) => v.trim().parse().unwrap_or_else(|_| {
                    exit_with(&format!(
                        "RLOCK_BENCH_SOAK_GRANTS={v}: expected a whole number"
                    ))
                }),
            },
        }
    }
}

/// Ends the benchmark before anything was started (bad option, missing tool).
pub fn exit_with(msg: &str) -> ! {
    eprintln!("compare: {msg}");
    std::process::exit(1);
}

/// `name` from PATH, or exit with how to install it.
pub fn tool(name: &str, install: &str) -> PathBuf {
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

/// Exits with how to install whatever the figures run and PATH lacks, before anything starts;
/// returns flock's path. (The harness finds `redis-server` itself; it is looked for here too, so
/// that a missing one is told like the rest rather than by the harness's panic.)
pub fn require_tools() -> PathBuf {
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
    flock
}

/// What every figure is given: the options, the server they share, flock, a scratch directory.
pub struct Bench<'a> {
    pub cfg: &'a Config,
    pub redis: &'a RedisServer,
    pub flock: &'a Path,
    pub dir: &'a Path,
}

/// Warms the page cache and the script cache before anything is measured.
pub fn warm(b: &Bench) {
    let port = b.redis.port().to_string();
    for _ in 0..3 {
        quiet(&mut rlock(b.redis, &["exec", "-k", "warm", "--", "true"]));
        quiet(
            Command::new(b.flock)
                .arg(b.dir.join("warm.lock"))
                .arg("true"),
        );
        redis_cli::pair(&port, "warm", "t");
    }
}
