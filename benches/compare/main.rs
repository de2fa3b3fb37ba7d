//! `cargo bench --bench compare`: rlock side by side with `flock(1)` and a raw `redis-cli` pair
//! (`SET key token NX PX` to take, an `EVAL` compare-and-delete to give back), printed as one
//! table with targets and ratios: what starting a process costs, the handoff from one holder to
//! the next, what an idle waiter asks of Redis, an uncontended `exec`, contention on one key and
//! through a semaphore, a holder's memory, five Redlock nodes against one, and what recording
//! the run (the history) and `--replicas 1` add to an `exec`.
//!
//! Everything runs against `redis-server` processes this program starts on free ports of
//! 127.0.0.1 and kills at the end, with the tests' own harness (the `rlock-test-support` crate,
//! `tests/support`); `redis-server`, `redis-cli` and `flock` come from PATH.
//!
//! Options (environment):
//! - `RLOCK_BENCH_RUNS`      samples per median (default 100, after 5 rounds not counted)
//! - `RLOCK_BENCH_IDLE_SECS` how long the idle waiter is watched (default 6)
//! - `RLOCK_BENCH_PROCS`     processes in the contention figure (default 6)
//! - `RLOCK_BENCH_ITERS`     iterations per process in the contention figure (default 15)
//! - `RLOCK_BENCH_SOAK_GRANTS` contended grants of the soak run (default 10000, 0 skips it)
//! - `RLOCK_BENCH_LINE`      the longer line of the waiting table (default 300; the shorter is a
//!   third of it)
//! - `RLOCK_BENCH_BIG_LINE`  the long line of the scale rows (default 3000: some 3.5 MiB of RSS
//!   per waiter, and two connections each on the server)
//! - `RLOCK_BENCH_CROWD`     waiters started at once against a server with `maxclients 50`
//!   (default 120)
//! - `RLOCK_BENCH_ONLY=host` only the table of what waiting costs on the host and the handoff
//!   (`compare/host.rs`), for a quick look; `RLOCK_BENCH_ONLY=soak` only the long soak;
//!   `RLOCK_BENCH_ONLY=history` only `exec -- true` with its run on record and without, and
//!   the handoff, side by side; `RLOCK_BENCH_ONLY=scale` only the scale rows
//!   (`compare/scale.rs`)
//!
//! The Redlock figure starts four more servers and puts each of the five behind the tests' fault
//! proxy, set to delay `RLOCK_BENCH_LATENCY_MS` (default 5) each way, so the network counts as it
//! does between hosts and parallel requests can be told from sequential ones.
//!
//! A second table has what waiting costs on the host (`compare/host.rs`): an idle waiter's
//! wake-ups, and the handoff with one waiter queued and with a line of 100 and more. A third has
//! the waiting figures (`compare/waiting.rs`): idle waiters, lines of 100 and 300 waiters drained
//! through one key, how the costs grow, and what 1,000 distinct keys leave behind. Both put
//! `etcdctl lock` beside flock when Debian's etcd-server and etcd-client are installed (the
//! benchmark starts its own etcd on loopback ports; without them it says how to install them and
//! leaves the column out).
//!
//! Last comes the soak (`compare/soak.rs`, the long mode of `tests/rlock/soak.rs`): four loops of
//! `rlock exec` on one key through freezes, `SCRIPT FLUSH` and `CLIENT KILL` of a server of its
//! own, and blackholes of 0.2–1.5 s of their link to it (rlock talks to the server through the
//! tests' fault proxy), checked for overlapping holders and fences out of order. It takes
//! minutes; the tables come first.

// Its options and helpers, then one module per figure or table.
mod contention;
mod etcd;
mod exec;
mod handoff;
mod host;
mod idle;
mod memory;
mod monitor;
mod process;
mod redis_cli;
mod redlock;
mod scale;
mod setup;
mod soak;
mod table;
mod waiting;

use rlock_test_support::{RedisServer, redis_version};
use setup::{Bench, Config, Only};
use table::Table;

fn main() {
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
        Some(Only::Scale) => {
            let rows = scale::rows(&b);
            println!();
            waiting::print(&rows);
            return;
        }
        Some(Only::History) => {
            let mut table = Table::default();
            table.add(exec::history(&b));
            table.add(handoff::figure(&b));
            println!();
            table.print();
            return;
        }
        None => {}
    }

    // The first table: each figure measured in turn, then printed together.
    let mut first = Table::default();
    first.add(exec::startup(&b));
    first.add(handoff::figure(&b));
    first.add(idle::figure(&b));
    let exec_true = exec::uncontended(&b);
    let peer = exec_true.rows[0].clone();
    first.add(exec_true);
    first.add(exec::history(&b));
    first.add(contention::one_key(&b));
    first.add(contention::semaphore(&b));
    first.add(memory::figure(&b));
    first.add(redlock::figure(&b));
    first.add(exec::replicas(&b));
    println!();
    first.print();

    // The host table and the waiting table, the `exec -- true` row repeated as the peer row.
    waiting::tables(&b, &peer);

    // The soak, last: it takes minutes, and the tables above should not wait for it.
    if cfg.soak_grants > 0 {
        soak::run(cfg.soak_grants);
    }
}
