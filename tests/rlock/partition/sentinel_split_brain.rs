//! Sentinel split brain (scenario 1): master M and replica R, three Sentinels, every link through
//! a proxy. Holder A runs on M through the Sentinels; then the network splits into {M, Sentinel
//! 0, A} and {R, Sentinels 1 and 2, B}: the majority promotes R, Sentinel 0 goes on naming M, and
//! B asks the majority's Sentinels for the lock.

use super::*;
use crate::common::Sentinels;

/// A's command runs until the test tells it to stop (`end_of_holder`), or at most this long.
const A_LIMIT_SECS: u32 = 120;
/// `min-replicas-max-lag` (whole seconds) when the master has `min-replicas-to-write 1`.
const MAX_LAG: Duration = Duration::from_secs(1);
/// How long the lock may take to reach a replica.
const REPLICATED: Duration = Duration::from_secs(20);

/// A's end: a holder cut off with the old master is either stopped by rlock within about one
/// TTL, or goes on renewing there for as long as the partition lasts; the test lets it beat
/// for two TTLs past B's start (or exit) and then tells its command to stop.
fn end_of_holder(a: &mut Bg, d: &Path) -> crate::common::Output {
    let b_start = stamps(d, "b.start").first().copied();
    let two_ttls = 2 * TTL.as_nanos() as i128;
    // Without B's start there is nothing to wait for: B's failure is the test's.
    let past_b = |d: &Path| match (stamps(d, "a.beats").last(), b_start) {
        (Some(last), Some(start)) => *last >= start + two_ttls,
        (_, None) => true,
        (None, Some(_)) => false,
    };
    wait_until(
        "A to exit, or to beat two TTLs past B's start",
        2 * TTL + Duration::from_secs(30),
        || !a.running() || past_b(d),
    );
    std::fs::write(d.join("a.stop"), "").expect("write a.stop");
    a.finish(Duration::from_secs(30)).0
}

struct Outcome {
    a: crate::common::Output,
    b: crate::common::Output,
    overlap_ms: f64,
    _dir: tempfile::TempDir,
}

fn split(replicas: bool, min_replicas_to_write: bool) -> Outcome {
    let s = Sentinels::start_behind_proxies("split");
    if min_replicas_to_write {
        s.server(0)
            .cmd(&["CONFIG", "SET", "min-replicas-to-write", "1"]);
        s.server(0).cmd(&[
            "CONFIG",
            "SET",
            "min-replicas-max-lag",
            &MAX_LAG.as_secs().to_string(),
        ]);
        // The replica counts once it has acknowledged within the lag: until then M refuses
        // every write, A's grant included (NOREPLICAS, which rlock does not wait out).
        wait_until("M to count its replica", Duration::from_secs(10), || {
            s.server(0)
                .try_cmd(&["SET", "probe-good-replicas", "1"])
                .is_ok()
        });
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let through = |urls: &[String]| {
        let mut cmd = rlock();
        cmd.args(["--sentinel", "split"]);
        for url in urls {
            cmd.args(["-u", url]);
        }
        cmd
    };
    let mut a = through(&s.urls());
    if replicas {
        a.args(["--replicas", "1"]);
    }
    a.args(holder_args("sb")).args(beating("a", A_LIMIT_SECS));
    let mut a = Bg::spawn_group("a", d, &mut a);
    a.wait_for("A's first heartbeat", Duration::from_secs(10), || {
        !stamps(d, "a.beats").is_empty()
    });
    wait_until("the lock to reach R", REPLICATED, || {
        s.server(1).get("rlock:sb").is_some()
    });
    s.partition(0, &[a.pid()]);
    let r_port = s.proxy(1).port();
    wait_until(
        "the majority to promote R",
        Sentinels::failover_bound(),
        || (1..3).all(|i| s.master_port_by(i) == Some(r_port)),
    );
    assert_eq!(
        s.master_port_by(0),
        Some(s.proxy(0).port()),
        "the Sentinel on M's side still names M\n{}",
        s.logs()
    );
    let mut b = through(&s.urls()[1..]);
    b.args(["exec", "-k", "sb", "-w", "30s", "--"])
        .args(starting("b"));
    let mut b = Bg::spawn_group("b", d, &mut b);
    let (b, _) = b.finish(Duration::from_secs(40));
    let a = end_of_holder(&mut a, d);
    s.heal();
    let overlap_ms = overlap_ms(d, "a", "b");
    eprintln!(
        "split brain, --replicas {}, min-replicas-to-write {}: A exit {}, B exit {}, A's last heartbeat {overlap_ms:.0} ms after B's start",
        u8::from(replicas),
        u8::from(min_replicas_to_write),
        a.code,
        b.code
    );
    Outcome {
        a,
        b,
        overlap_ms,
        _dir: dir,
    }
}

#[test]
fn with_replicas_the_cut_off_holder_never_overlaps_the_next() {
    let o = split(true, false);
    assert_eq!(o.b.code, 0, "B: {}", o.b);
    assert!(
        o.overlap_ms < 0.0,
        "A beat {:.0} ms after B started; A: {}",
        o.overlap_ms,
        o.a
    );
}

/// What docs/safety.md states: without `--replicas`, the old master renews a
/// lock the new master no longer has for as long as the partition lasts, so both commands
/// run (here for the two TTLs the test keeps A's command going after B got in).
#[test]
fn without_replicas_the_old_master_keeps_renewing_for_the_whole_partition() {
    let o = split(false, false);
    assert_eq!(o.b.code, 0, "B: {}", o.b);
    // A renews on the old master throughout, unless its Sentinels (cut off with it) time out
    // at a renewal that looks the master up again, long enough to use up the lease: then A is
    // stopped by its deadline (76), and the window was shorter, or none (A's deadline counts
    // from its last renewal on M, B's wait from the last one R saw: either may come first).
    // Seen about once in a few full runs under load; the split brain, when A keeps its lock,
    // must be the documented one.
    if o.a.code == 76 {
        assert!(
            o.a.stderr.contains("no Sentinel named the master"),
            "{}",
            o.a
        );
        assert!(
            o.overlap_ms < TTL.as_millis() as f64,
            "A, stopped by its deadline, beat {:.0} ms after B's start: more than one lease",
            o.overlap_ms
        );
        return;
    }
    assert_eq!(
        o.a.code, 0,
        "A renewed on the old master throughout: {}",
        o.a
    );
    assert!(
        o.overlap_ms >= 2.0 * TTL.as_millis() as f64,
        "A and B must both have run for two TTLs, the documented split brain (A's last beat {:.0} ms after B's start)",
        o.overlap_ms
    );
}

/// `min-replicas-to-write 1` (`min-replicas-max-lag 1`) on the server: the old master
/// refuses renewals once its replica has been silent for the lag, so A is stopped by its
/// deadline (76). Renewals it took in the first second or two of the partition were not
/// replicated, so the window narrows to about the lag plus a second; it does not close.
#[test]
fn min_replicas_to_write_narrows_the_window_to_about_the_lag() {
    let o = split(false, true);
    assert_eq!(o.b.code, 0, "B: {}", o.b);
    assert_eq!(o.a.code, 76, "{}", o.a);
    // M takes renewals until its replica's last acknowledgement (sent every second) is more
    // than the lag old by its whole-second clock, seen by its once-a-second count: up to the lag
    // and 2 s into the partition. R's copy counts from the last renewal before it, at most
    // one renewal earlier, and A is stopped `GRACE` before its own lease ends.
    let window = MAX_LAG + Duration::from_secs(2) + RENEW_EVERY - GRACE + STOPPED_WITHIN;
    // The master's refusal (NOREPLICAS) is what stops A's renewals; under load the last
    // error A reports may be its cut-off Sentinels timing out on a later try instead.
    assert!(
        o.a.stderr.contains("Not enough good replicas")
            || o.a.stderr.contains("no Sentinel named the master"),
        "{}",
        o.a
    );
    assert!(
        o.overlap_ms < window.as_millis() as f64,
        "the window must be bounded by the lag ({MAX_LAG:?}), Redis's whole-second clocks and one renewal ({window:?}): A's last beat {:.0} ms after B's start",
        o.overlap_ms
    );
}
