//! `cargo bench --bench compare`: what a user of rlock feels, side by side with `flock(1)`, a
//! minimal Redis client (`compare/minimal.rs`: `SET NX PX`, the command, a compare-and-delete),
//! the raw `redis-cli` pair and, where Debian's etcd packages are installed, `etcdctl lock`:
//! an uncontended `exec -- true`, the busy path (`-n` on a held lock), what the run's record and
//! its cgroup add to it, contention on one key, what an idle waiter asks of Redis, a holder's
//! memory (first table); an idle waiter's wake-ups, the handoff with one waiter queued and inside
//! a line, and `-- true` under the lock (the host table, `compare/host.rs`); lines of waiters
//! drained through one key, and what they cost as they grow (the waiting table,
//! `compare/waiting.rs`); and across a network, `exec -- true` beside the minimal client and the
//! handoffs, at a 10 ms round trip with the round trips each takes (`compare/network.rs`).
//! docs/benchmarks.md has the last run.
//!
//! Everything runs against `redis-server` processes this program starts on free ports of
//! 127.0.0.1 and kills at the end, with the tests' own harness (the `rlock-test-support` crate,
//! `tests/support`); `redis-server`, `redis-cli` and `flock` come from PATH. The benchmark starts
//! its own etcd on loopback ports when `etcd` and `etcdctl` are installed (Debian: `etcd-server
//! etcd-client`), and says how to install them when not.
//!
//! Options (environment):
//! - `RLOCK_BENCH_RUNS`      samples per median (default 100, after 5 rounds not counted)
//! - `RLOCK_BENCH_IDLE_SECS` how long the idle waiter is watched (default 6)
//! - `RLOCK_BENCH_PROCS`     processes in the contention figure (default 6)
//! - `RLOCK_BENCH_ITERS`     iterations per process in the contention figure (default 15)
//! - `RLOCK_BENCH_LINE`      the longer line of the waiting table (default 300; the shorter is a
//!   third of it)
//! - `RLOCK_BENCH_BIG_LINE`  the long line of the scale rows (default 3000: some 3.5 MiB of RSS
//!   per waiter, and two connections each on the server)
//! - `RLOCK_BENCH_CROWD`     waiters started at once against a server with `maxclients 50`
//!   (default 120)
//! - `RLOCK_BENCH_RTT_MS`    the round trip of the network rows (default 10)
//! - `RLOCK_BENCH_ONLY=host` only the host table, for a quick look
//! - `RLOCK_BENCH_ONLY=network` only the rows across a network
//! - `RLOCK_BENCH_ONLY=scale` only the scale rows (`compare/scale.rs`): the long line, and the
//!   crowd over the connection limit
//! - `RLOCK_BENCH_ONLY=soak` only the long soak (`compare/soak.rs`, the long mode of
//!   `tests/rlock/soak.rs`), `RLOCK_BENCH_SOAK_GRANTS` contended grants long (default 10000):
//!   four loops of `rlock exec` on one key through freezes, `SCRIPT FLUSH`, `CLIENT KILL` and
//!   blackholes of their link, checked for overlapping holders and fences out of order. It takes
//!   minutes, and is a safety check, not a figure: the default run leaves it out.

// Its options and helpers, then one module per figure or table.
mod contention;
mod etcd;
mod exec;
mod host;
mod idle;
mod memory;
mod minimal;
mod monitor;
mod network;
mod process;
mod redis_cli;
mod scale;
mod setup;
mod soak;
mod table;
mod waiting;

use rlock_test_support::{RedisServer, redis_version};
use setup::{Bench, Config, Only};
use table::Table;

fn main() {
    minimal::run_if_asked();
    let cfg = Config::from_env();
    let flock = setup::require_tools();
    let redis = RedisServer::start();
    let dir = tempfile::Builder::new()
        .prefix("rlock-bench-")
        .tempdir()
        .expect("temp dir");
    let b = Bench {
        cfg: &cfg,
        redis: &redis,
        flock: &flock,
        dir: dir.path(),
    };
    let (major, minor, patch) = redis_version();
    println!(
        "rlock compare: redis-server {major}.{minor}.{patch} on 127.0.0.1:{}, {} runs per median, {} × {} contention, idle window {:?}",
        redis.port(),
        cfg.runs,
        cfg.procs,
        cfg.iters,
        cfg.idle
    );
    setup::warm(&b);

    match cfg.only {
        Some(Only::Host) => {
            host::table(&b, etcd::start().as_ref());
            return;
        }
        Some(Only::Soak) => {
            soak::run(cfg.soak_grants.max(1));
            return;
        }
        Some(Only::Network) => {
            network::table(&b);
            return;
        }
        Some(Only::Scale) => {
            let rows = scale::rows(&b);
            println!();
            waiting::print(&rows);
            return;
        }
        None => {}
    }

    // The first table: each figure measured in turn, then printed together.
    let mut first = Table::default();
    first.add(exec::uncontended(&b));
    first.add(exec::busy(&b));
    first.add(exec::guarantees(&b));
    first.add(contention::one_key(&b));
    first.add(idle::figure(&b));
    first.add(memory::figure(&b));
    println!();
    first.print();

    // The host table and the waiting table, then the rows across a network.
    waiting::tables(&b, scale::rows);
    network::table(&b);
}
