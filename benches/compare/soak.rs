//! The soak, last and long: the tests' soak engine in its long mode, against a server of its
//! own (it gets frozen) reached through the tests' fault proxy (it gets blackholed).

use std::sync::Arc;

use rlock_test_support::soak as engine;
use rlock_test_support::{Proxy, RedisServer};

use crate::process::{RLOCK, fail};

/// Runs the soak's long mode until `grants` contended grants, prints its figures, and fails the
/// benchmark if two holders overlapped or a fence went backwards.
pub fn run(grants: usize) {
    let redis = RedisServer::start();
    let proxy = Arc::new(Proxy::start(redis.port()));
    let dir = tempfile::Builder::new()
        .prefix("rlock-bench-soak-")
        .tempdir()
        .expect("temp dir");
    let target = engine::Target {
        rlock: RLOCK.into(),
        port: redis.port(),
        rlock_port: Some(proxy.port()),
        link: Some(engine::Link(Arc::new(proxy.blackhole_switch()))),
        redis_pid: redis.pid(),
        dir: dir.path().to_path_buf(),
        more_ports: Vec::new(),
    };
    let cfg = engine::Config::long(grants);
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
    let r = engine::run(&target, &cfg);
    println!("{r}");
    print_figures(&r);
    if !r.overlaps.is_empty() || !r.inversions.is_empty() || !r.malformed.is_empty() {
        fail("the soak found holders that overlapped or fences out of order (see above)");
    }
}

fn print_figures(r: &engine::Report) {
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
}
