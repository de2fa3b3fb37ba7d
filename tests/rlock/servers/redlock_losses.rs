//! Redlock when a server is counted wrongly or forgets: one server under several names (one
//! vote, refused before anything is written), masters restarted empty under a holder (a lost
//! majority is a lost lock, at the release too; one empty restart is repaired by the next
//! renewal). Overlaps are judged by the commands' own heartbeats.

use super::*;
use crate::common::basic::hostname;

/// A server that listens on 127.0.0.1, 127.0.0.2 and ::1, so that it can be named five ways.
fn on_every_loopback() -> RedisServer {
    RedisServer::start_with(&["--bind", "127.0.0.1", "127.0.0.2", "-::1"])
}

/// Keys in the server's database.
fn dbsize(node: &RedisServer) -> i64 {
    match node.cmd(&["DBSIZE"]) {
        redis::Value::Int(n) => n,
        other => panic!("DBSIZE: {other:?}"),
    }
}

#[test]
fn redlock_refuses_one_server_under_two_names_before_writing_anything() {
    let a = on_every_loopback();
    let b = RedisServer::start();
    let p = a.port();
    let aliases = [
        format!("redis://localhost:{p}"),
        format!("redis://127.0.0.2:{p}"),
        format!("redis://[::1]:{p}"),
        format!("redis://{}:{p}", hostname()),
    ];
    for alias in &aliases {
        for args in [
            &["acquire", "-n", "-k", KEY, "--ttl", "30s"][..],
            &["exec", "-k", KEY, "--ttl", "30s", "--", "true"][..],
        ] {
            let out = run(rlock()
                .args(["-u", &a.url(), "-u", alias, "-u", &b.url()])
                .args(args));
            assert_eq!(out.code, 78, "{alias} names the first server again: {out}");
            assert!(
                out.stderr.contains("same Redis server") && out.stderr.lines().count() == 1,
                "one line saying that two URLs name one server: {out}"
            );
            assert!(out.stdout.is_empty(), "{out}");
            assert_eq!(
                (dbsize(&a), dbsize(&b)),
                (0, 0),
                "nothing may be written when two URLs name one server ({alias})"
            );
        }
    }
    // Three servers, each named once (one of them by another name): a lock as usual.
    let c = RedisServer::start();
    let out = run(rlock()
        .args(["-u", &aliases[0], "-u", &b.url(), "-u", &c.url()])
        .args(["acquire", "-n", "-k", KEY]));
    assert_eq!(out.code, 0, "three distinct servers: {out}");
}

/// The heartbeat command of the holders here: stamps `$D/<name>.beats` every ~20 ms (and its
/// start in `$D/<name>.start`, its token in `$D/<name>.token`) until `$D/<name>.stop` appears.
fn beating_until_stopped(name: &str) -> [String; 3] {
    [
        "sh".into(),
        "-c".into(),
        format!(
            r#"date +%s%N > "$D/{name}.start"; echo "$RLOCK_TOKEN" > "$D/{name}.token"; i=0; while [ ! -e "$D/{name}.stop" ] && [ $i -lt 3000 ]; do date +%s%N >> "$D/{name}.beats"; sleep 0.02; i=$((i+1)); done"#
        ),
    ]
}

fn stamps(dir: &Path, file: &str) -> Vec<i128> {
    fs::read_to_string(dir.join(file))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn token_in(dir: &Path, name: &str) -> String {
    wait_for_file(dir.join(format!("{name}.token")), SOON)
        .trim()
        .to_string()
}

#[test]
fn redlock_a_lost_majority_is_76_at_the_release_and_77_for_release_token() {
    let mut nodes = start_nodes(3);
    let dir = tempdir();
    let d = dir.path();
    // A holds on all three, with a long lease: no renewal comes before its command ends.
    let mut a = Bg::spawn_group(
        "a",
        d,
        redlock(&nodes)
            .args(["exec", "-k", KEY, "--ttl", "30s", "--"])
            .args(beating_until_stopped("a")),
    );
    let a_token = token_in(d, "a");
    // And a lock taken with `acquire`, released with `release --token` later.
    let out = expect(
        0,
        redlock(&nodes).args(["acquire", "--json", "-k", "other", "--ttl", "30s"]),
    );
    let other = token_of(&out);
    assert_eq!(values(&nodes, LOCK), vec![Some(a_token.clone()); 3]);
    // Every master comes back empty: B takes the lock (no master says anybody holds it).
    for n in nodes.iter_mut() {
        n.restart();
    }
    let b = expect(
        0,
        redlock(&nodes).args(["acquire", "--json", "-k", KEY, "--ttl", "30s"]),
    );
    let b_token = token_of(&b);
    expect(
        0,
        redlock(&nodes).args(["acquire", "-n", "-k", "other", "--ttl", "30s"]),
    );
    // A's command ends: its release finds B everywhere.
    touch(d.join("a.stop"));
    let (out, _) = a.finish(FINISH);
    assert_eq!(
        out.code, 76,
        "A's release found B holding the majority: its lock was lost: {out}"
    );
    assert!(out.stderr.contains("lost lock 'k'"), "{out}");
    assert_eq!(values(&nodes, LOCK), vec![Some(b_token.clone()); 3]);
    let out = expect(
        77,
        redlock(&nodes).args(["release", "-k", "other", "--token", &other]),
    );
    assert!(out.stderr.contains("'other'"), "{out}");
    // B's own release is a success (a majority released).
    expect(
        0,
        redlock(&nodes).args(["release", "-k", KEY, "--token", &b_token]),
    );
}

#[test]
fn redlock_two_empty_restarts_stop_the_first_holder_and_nobody_else_runs_meanwhile() {
    let mut nodes = start_nodes(3);
    let dir = tempdir();
    let d = dir.path();
    // TTL 6 s: renewals every 2 s.
    let mut a = Bg::spawn_group(
        "a",
        d,
        redlock(&nodes)
            .args(["exec", "-k", KEY, "--ttl", "6s", "--"])
            .args(beating_until_stopped("a")),
    );
    token_in(d, "a");
    nodes[0].restart();
    nodes[1].restart();
    // B waits: the two empty masters have run for less than its TTL and the third says A
    // holds the lock, so they do not vote.
    let mut b = Bg::spawn_group(
        "b",
        d,
        redlock(&nodes)
            .args(["exec", "-w", "20s", "-k", KEY, "--ttl", "6s", "--"])
            .args(beating_until_stopped("b")),
    );
    let (out, _) = a.finish(FINISH);
    assert_eq!(
        out.code, 76,
        "A's renewal found its lock on one master of three: {out}"
    );
    token_in(d, "b");
    touch(d.join("b.stop"));
    let (out, _) = b.finish(FINISH);
    assert_eq!(out.code, 0, "{out}");
    let a_beats = stamps(d, "a.beats");
    let b_start = stamps(d, "b.start")[0];
    let gap = (b_start - a_beats.last().expect("A beat")) as f64 / 1e6;
    eprintln!("two empty restarts, TTL 6s: B started {gap:.0} ms after A's last beat");
    assert!(gap > 0.0, "A beat {:.0} ms past B's start", -gap);
}

#[test]
fn redlock_one_empty_restart_is_repaired_by_the_next_renewal() {
    let mut nodes = start_nodes(3);
    let dir = tempdir();
    let d = dir.path();
    let mut a = Bg::spawn_group(
        "a",
        d,
        redlock(&nodes)
            .args(["exec", "-k", KEY, "--ttl", "3s", "--"])
            .args(beating_until_stopped("a")),
    );
    let token = token_in(d, "a");
    nodes[0].restart();
    // A's next renewal (every 1 s) finds the key gone there and writes it again, since the
    // lease holds on the other two.
    a.wait_for("A's lock to be back on the restarted master", SOON, || {
        nodes[0].get(LOCK).as_deref() == Some(token.as_str())
    });
    assert!(
        nodes[0].pttl(LOCK) > 0,
        "the lock written again has a lease"
    );
    // A second restart, of another master, now leaves A with two of three: B is refused.
    nodes[1].restart();
    let out = expect(75, redlock(&nodes).args(["acquire", "-n", "-k", KEY]));
    assert!(out.stderr.contains("busy"), "{out}");
    touch(d.join("a.stop"));
    let (out, _) = a.finish(FINISH);
    assert_eq!(out.code, 0, "A kept its majority throughout: {out}");
    assert_eq!(values(&nodes, LOCK), vec![None; 3]);
}

/// How many times each overlap test below runs: a race it would lose shows as a failure in
/// some of the runs, not necessarily in one (`RLOCK_TEST_RUNS=20` for the long count).
fn runs() -> usize {
    crate::common::runs(4)
}

/// A's grant misses a frozen master (the lock is on a bare majority); then the frozen master
/// comes back and another master restarts empty. A's renewals write the lock on the master
/// that missed it at once (`-v` says so), not a renewal interval later, so the restart leaves
/// A with two of three: B is refused and A keeps its lock.
#[test]
fn redlock_a_master_slow_at_the_grant_gets_the_lock_at_once_and_one_restart_is_survived() {
    for run in 0..runs() {
        let mut nodes = start_nodes(3);
        let dir = tempdir();
        let d = dir.path();
        nodes[2].freeze();
        // TTL 6 s: renewals every 2 s.
        let mut a = Bg::spawn_group(
            "a",
            d,
            redlock(&nodes)
                .args(["-v", "exec", "-k", KEY, "--ttl", "6s", "--"])
                .args(beating_until_stopped("a")),
        );
        let token = token_in(d, "a");
        nodes[2].thaw();
        let thawed = Instant::now();
        a.wait_for("A's lock on the master that missed the grant", SOON, || {
            nodes[2].get(LOCK).as_deref() == Some(token.as_str())
        });
        let took = thawed.elapsed();
        assert!(
            took < Duration::from_millis(1500),
            "run {run}: the lock reached the slow master {took:?} after it answered again, not at once"
        );
        nodes[1].restart();
        let out = expect(
            75,
            redlock(&nodes).args(["acquire", "-n", "-k", KEY, "--ttl", "6s"]),
        );
        assert!(out.stderr.contains("busy"), "run {run}: {out}");
        touch(d.join("a.stop"));
        let (out, _) = a.finish(FINISH);
        assert_eq!(
            out.code, 0,
            "run {run}: A kept two of three throughout: {out}"
        );
        assert!(
            out.stderr.contains("the lock is on 2 of 3 masters")
                && out.stderr.contains("the lock is now on 3 of 3 masters"),
            "run {run}: -v says how many masters hold the lock: {out}"
        );
    }
}

/// A's grant misses the third master (A's link to it is a blackhole: for A it is slow for as
/// long as the test lasts), then the second restarts empty: A's lock is on the first alone. B,
/// which reaches every master, finds the third free and the second free, but the second has run
/// for less than B's TTL and the first says A holds the lock, so the second does not vote: B
/// gets the lock only once A's lease has ended and A's command was stopped (76).
#[test]
fn redlock_a_master_slow_at_the_grant_and_one_empty_restart_never_make_two_holders() {
    for run in 0..runs() {
        let mut nodes = start_nodes(3);
        let dir = tempdir();
        let d = dir.path();
        let proxy = blackholed(&nodes[2]);
        let mut a = Bg::spawn_group(
            "a",
            d,
            redlock_via(&nodes, &proxy)
                .args(["exec", "-k", KEY, "--ttl", "3s", "--"])
                .args(beating_until_stopped("a")),
        );
        token_in(d, "a");
        nodes[1].restart();
        let mut b = Bg::spawn_group(
            "b",
            d,
            redlock(&nodes)
                .args(["exec", "-w", "30s", "-k", KEY, "--ttl", "3s", "--"])
                .args(beating_until_stopped("b")),
        );
        let (out, _) = a.finish(FINISH);
        assert_eq!(
            out.code, 76,
            "run {run}: A's lease ran out on one master: {out}"
        );
        token_in(d, "b");
        touch(d.join("b.stop"));
        let (out, _) = b.finish(FINISH);
        assert_eq!(out.code, 0, "run {run}: {out}");
        let a_last = *stamps(d, "a.beats").last().expect("A beat");
        let b_start = stamps(d, "b.start")[0];
        let gap = (b_start - a_last) as f64 / 1e6;
        eprintln!("run {run}: B started {gap:.0} ms after A's last beat");
        assert!(gap > 0.0, "run {run}: A beat {:.0} ms past B's start", -gap);
    }
}

/// How many times the mixed-TTL restart below runs (each waits out a few seconds of uptime;
/// `RLOCK_TEST_RUNS=20` for the long count).
fn mixed_ttl_runs() -> usize {
    crate::common::runs(2)
}

/// Holders of one key with different TTLs: A holds with a 60 s lease on two of three masters
/// (its link to the third is a blackhole), then the second restarts empty, and B asks with a
/// 1 s TTL once the restarted master has run for longer than that. The first master says A
/// holds the lock, with ~60 s left: the restarted master may have lost A's lock, so it does not
/// vote, whatever TTL B asks for. B is busy (75), its command never runs, nothing of B's is left
/// anywhere, and A keeps its lock.
#[test]
fn redlock_a_short_ttl_after_one_empty_restart_never_takes_a_longer_lease() {
    for run in 0..mixed_ttl_runs() {
        let mut nodes = start_nodes(3);
        let dir = tempdir();
        let d = dir.path();
        let proxy = blackholed(&nodes[2]);
        let mut a = Bg::spawn_group(
            "a",
            d,
            redlock_via(&nodes, &proxy)
                .args(["exec", "-k", KEY, "--ttl", "60s", "--"])
                .args(beating_until_stopped("a")),
        );
        let token = token_in(d, "a");
        nodes[1].restart();
        // Up for longer than B's TTL (uptime counts whole seconds): the asker's TTL would let
        // it vote.
        wait_until("the restarted master to run for 3 s", SOON, || {
            uptime(&nodes[1]) >= 3
        });
        let ran = d.join("b.ran");
        let out = expect(
            75,
            redlock(&nodes)
                .args(["exec", "-n", "-k", KEY, "--ttl", "1s", "--", "touch"])
                .arg(&ran),
        );
        assert!(out.stderr.contains("busy"), "run {run}: {out}");
        assert!(!ran.exists(), "run {run}: B's command ran beside A's");
        assert_eq!(
            nodes[0].get(LOCK).as_deref(),
            Some(token.as_str()),
            "run {run}: A's lock is where it was"
        );
        for n in &nodes[1..] {
            assert_eq!(n.get(LOCK), None, "run {run}: B's grants were given back");
        }
        assert!(a.running(), "run {run}: A runs on");
        touch(d.join("a.stop"));
        a.finish(FINISH);
    }
}
