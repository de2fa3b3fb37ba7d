//! Scale-out (issue 6) against real servers the tests start: Redlock over five independent
//! masters (frozen minorities and majorities, partial grants given back, release everywhere,
//! exec's deadline from the validity, fencing across changing majorities, waking a waiter),
//! a three-master Redis Cluster (keys on every master, helper keys in the lock's slot, listing
//! across masters, one seed, a slot migrating under a held lock, waking a waiter), a master with a
//! replica and three Sentinels (discovery, failovers during `exec`), TLS with a CA made in the test
//! (verification on, mTLS), and an ACL user with only the rights rlock needs.
//!
//! Frozen servers are SIGSTOPped: they keep their sockets (connections are accepted by the
//! kernel) and answer nothing, so whatever was sent to them runs when they are thawed. Timing
//! bounds are outcome bounds with generous slack on both sides; everything else is polled with
//! deadlines. Every server belongs to one test and is killed on drop; every background process
//! leads a process group of its own, killed on drop with the group of the child it runs.

mod common;

use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File};
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{
    Background as Bg, Output, RedisCluster, RedisServer, Sentinels, TestCerts, TlsServer,
    pid_alive, rlock, run, wait_for_file, wait_until,
};

/// The lock most tests use, and the Redis names rlock gives it (see `src/lock/mod.rs`).
const KEY: &str = "k";
const LOCK: &str = "rlock:k";
const STATE: &str = "{rlock:k}:state";
const QUEUE: &str = "{rlock:k}:q";
const WAKE: &str = "{rlock:k}:wake";
/// Time for something to happen when nothing should hold it back.
const SOON: Duration = Duration::from_secs(10);
/// Time for a whole `rlock` run to finish once it has been told to.
const FINISH: Duration = Duration::from_secs(20);
/// Well below the holder's 60 s lease (when a parked waiter would check on its own): a waiter
/// that runs sooner after parking was woken by the release.
const REFRESH: Duration = Duration::from_secs(2);

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("rlock-scale-")
        .tempdir()
        .expect("create temp dir")
}

/// `n` plain servers, started in parallel.
fn start_nodes(n: usize) -> Vec<RedisServer> {
    thread::scope(|s| {
        let handles: Vec<_> = (0..n).map(|_| s.spawn(RedisServer::start)).collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("start a redis-server"))
            .collect()
    })
}

/// Runs every rlock script once on each of `nodes` (Redlock over all of them), so their script
/// caches hold them: a request that reaches a frozen server then runs when it is thawed, instead
/// of failing with NOSCRIPT, which is what makes a missing give-back show.
fn warm_scripts(nodes: &[RedisServer]) {
    let warm = |args: &[&str]| run(redlock(nodes).args(args).args(["-k", "warm"]));
    let out = warm(&["acquire", "-n", "--json"]);
    assert_eq!(out.code, 0, "warm-up acquire: {out}");
    let token = token_of(&out);
    // A second acquire is busy everywhere, so it runs the give-back script (to give back nothing).
    assert_eq!(warm(&["acquire", "-n"]).code, 75);
    assert_eq!(warm(&["renew", "--token", &token]).code, 0);
    assert_eq!(warm(&["inspect"]).code, 0);
    assert_eq!(warm(&["release", "--token", &token]).code, 0);
}

/// `rlock --url N1 --url N2 …`: Redlock over `nodes`.
fn redlock(nodes: &[RedisServer]) -> Command {
    let mut cmd = rlock();
    for n in nodes {
        cmd.arg("--url").arg(n.url());
    }
    cmd
}

/// `rlock --cluster --url SEED …` with every node of `cluster` as a seed.
fn clustered(cluster: &RedisCluster) -> Command {
    let mut cmd = rlock();
    cmd.arg("--cluster");
    for url in cluster.urls() {
        cmd.arg("--url").arg(url);
    }
    cmd
}

/// `rlock --cluster --url redis://USER:SECRET@SEED …` with every node of `cluster` as a seed.
fn clustered_as(cluster: &RedisCluster, user: &str) -> Command {
    let mut cmd = rlock();
    cmd.arg("--cluster");
    for node in cluster.nodes() {
        cmd.arg("--url")
            .arg(format!("redis://{user}:{SECRET}@127.0.0.1:{}", node.port()));
    }
    cmd
}

/// `rlock --sentinel NAME --url S1 --url S2 --url S3`.
fn via_sentinels(set: &Sentinels) -> Command {
    let mut cmd = rlock();
    cmd.arg("--sentinel").arg(set.name());
    for url in set.urls() {
        cmd.arg("--url").arg(url);
    }
    cmd
}

/// Runs `cmd` and asserts exit code `code`; returns the output.
fn expect(code: i32, cmd: &mut Command) -> Output {
    let out = run(cmd);
    assert_eq!(
        out.code,
        code,
        "{:?}: {out}",
        cmd.get_args().collect::<Vec<_>>()
    );
    out
}

/// The JSON an `acquire --json` printed.
fn json(out: &Output) -> serde_json::Value {
    serde_json::from_str(out.stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {out}"))
}

fn token_of(out: &Output) -> String {
    json(out)["token"]
        .as_str()
        .unwrap_or_else(|| panic!("no token in {out}"))
        .to_string()
}

/// The fence a command printed (`echo $RLOCK_FENCE`), checked to be above `than`.
#[track_caller]
fn printed_fence_above(out: &Output, than: i64) {
    let fence: i64 = out
        .stdout
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("no fence printed: {out}"));
    assert!(
        fence > than,
        "fence {fence} is not above the earlier {than}: {out}"
    );
}

fn fence_of(out: &Output) -> i64 {
    json(out)["fence"]
        .as_i64()
        .unwrap_or_else(|| panic!("no fence in {out}"))
}

/// GET of the lock key on each of `nodes` (which must not be frozen).
fn values(nodes: &[RedisServer], key: &str) -> Vec<Option<String>> {
    nodes.iter().map(|n| n.get(key)).collect()
}

fn state_token(node: &RedisServer, state: &str) -> Option<String> {
    node.hgetall(state).remove("token")
}

/// Nanoseconds since the epoch on CLOCK_REALTIME, the clock `date +%s%N` reads in a child.
fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as i128
}

/// `PUBSUB NUMSUB channel` on `node`.
fn subscribers(node: &RedisServer, channel: &str) -> i64 {
    let (_, n): (String, i64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(channel)
        .query(&mut node.conn())
        .expect("PUBSUB NUMSUB");
    n
}

fn touch(path: impl AsRef<Path>) {
    File::create(path).expect("create marker file");
}

/// A child script for `exec`: records its pid and token, says it is ready, and runs until
/// `$D/stop` appears (at most 60 s). TERM is recorded in `$D/died` (CLOCK_REALTIME ns).
const HOLD_UNTIL_STOP: &str = r#"
trap 'date +%s%N > "$D/died.tmp"; mv "$D/died.tmp" "$D/died"; exit 0' TERM
echo $$ > "$D/pid"; echo "$RLOCK_TOKEN" > "$D/token"; : > "$D/ready"
i=0; while [ ! -e "$D/stop" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done"#;

/// What scale's tests wait for on a `Bg` that runs `rlock exec` with a child like
/// `HOLD_UNTIL_STOP`.
trait Ready {
    /// Waits for the exec child to have written `$D/ready`; returns its token.
    fn ready(&mut self) -> String;
}

impl Ready for Bg {
    fn ready(&mut self) -> String {
        let ready = self.dir().join("ready");
        self.wait_for("the child to start", SOON, || ready.exists());
        fs::read_to_string(self.dir().join("token"))
            .unwrap_or_default()
            .trim()
            .to_string()
    }
}

/// Follows the PTTL of a lock key on one server and counts renewals (a PTTL that went up).
struct Renewals {
    last: Option<i64>,
    seen: usize,
}

impl Renewals {
    fn new() -> Self {
        Renewals {
            last: None,
            seen: 0,
        }
    }

    /// Takes one PTTL sample; `pttl` must be positive (the lock is held).
    fn sample(&mut self, pttl: i64, what: &str) {
        assert!(pttl > 0, "{what}: the lock key is gone (PTTL {pttl})");
        if let Some(last) = self.last
            && pttl > last + 20
        {
            self.seen += 1;
        }
        self.last = Some(pttl);
    }
}

// ---------------------------------------------------------------------------------------------
// Redlock: five independent masters
// ---------------------------------------------------------------------------------------------

#[test]
fn redlock_grants_with_two_of_five_frozen_within_the_per_node_timeout() {
    let nodes = start_nodes(5);
    warm_scripts(&nodes);
    nodes[3].freeze();
    nodes[4].freeze();
    let started = Instant::now();
    let out = run(redlock(&nodes).args(["acquire", "-n", "--json", "-k", KEY, "--ttl", "10s"]));
    let took = started.elapsed();
    nodes[3].thaw();
    nodes[4].thaw();
    assert_eq!(out.code, 0, "three of five answer, a majority: {out}");
    let token = token_of(&out);
    assert_eq!(
        values(&nodes[..3], LOCK),
        vec![Some(token.clone()); 3],
        "the token must be on the three answering nodes"
    );
    for n in &nodes[..3] {
        let pttl = n.pttl(LOCK);
        assert!(
            (1..=10_000).contains(&pttl),
            "PTTL {pttl} on port {}",
            n.port()
        );
    }
    // Per-node timeout min(--op-timeout 2s, TTL/10) = 1 s, the two frozen nodes waited for in
    // parallel: about 1 s. Sequential requests would take 2 s or more; --op-timeout alone 2 s.
    assert!(
        took < Duration::from_millis(1800),
        "acquire took {took:?} with two frozen nodes: the per-node timeout (TTL/10 = 1s) must \
         bound it, the nodes asked in parallel"
    );
    // The validity it reports: TTL − time spent − drift (1% + 2 ms).
    let ttl_ms = json(&out)["ttl_ms"].as_i64().expect("ttl_ms");
    let took_ms = took.as_millis() as i64;
    assert!(
        ttl_ms < 10_000 - 102 && ttl_ms >= 10_000 - 102 - took_ms,
        "ttl_ms {ttl_ms} is not the validity left (TTL 10 s − {took_ms} ms at most − 102 ms)"
    );
}

#[test]
fn redlock_three_of_five_frozen_is_69_and_every_partial_grant_is_given_back() {
    let nodes = start_nodes(5);
    warm_scripts(&nodes);
    for n in &nodes[2..] {
        n.freeze();
    }
    let started = Instant::now();
    let out = run(redlock(&nodes).args([
        "acquire",
        "-n",
        "-k",
        KEY,
        "--ttl",
        "30s",
        "--op-timeout",
        "300ms",
    ]));
    let took = started.elapsed();
    assert_eq!(out.code, 69, "two of five answer, no majority: {out}");
    assert!(out.stdout.is_empty(), "no token may be printed: {out}");
    assert!(
        out.stderr.contains("no quorum") && out.stderr.lines().count() == 1,
        "one line saying there is no quorum: {out}"
    );
    assert!(
        took < Duration::from_secs(3),
        "a failed acquire with 300 ms per node took {took:?}"
    );
    // The two answering nodes granted, and were given the grant back before rlock exited.
    let token = state_token(&nodes[0], STATE).expect("node 0 granted the acquire");
    assert_eq!(
        state_token(&nodes[1], STATE).as_deref(),
        Some(token.as_str())
    );
    assert_eq!(
        values(&nodes[..2], LOCK),
        vec![None, None],
        "partial grants on the answering nodes must be released"
    );

    // The frozen nodes run what was sent to them once thawed: the acquire (its script is
    // cached, so it grants), then the give-back, which must have been sent to them too.
    for n in &nodes[2..] {
        n.thaw();
    }
    for n in &nodes[2..] {
        wait_until(
            &format!(
                "the acquire sent to port {} to run after the thaw",
                n.port()
            ),
            SOON,
            || state_token(n, STATE).as_deref() == Some(token.as_str()),
        );
    }
    wait_until(
        "every node to be free of the failed acquire's token (its TTL is 30 s)",
        Duration::from_secs(3),
        || values(&nodes, LOCK).iter().all(Option::is_none),
    );
}

#[test]
fn redlock_release_reaches_every_node_including_those_that_did_not_answer() {
    let nodes = start_nodes(5);
    warm_scripts(&nodes);
    let opts = ["--op-timeout", "300ms"];

    // Node 4 is frozen during the acquire: it grants only after the thaw, after rlock returned.
    nodes[4].freeze();
    let out = expect(
        0,
        redlock(&nodes)
            .args(["acquire", "-n", "--json", "-k", KEY, "--ttl", "30s"])
            .args(opts),
    );
    let token = token_of(&out);
    nodes[4].thaw();
    wait_until("the late grant on the thawed node", SOON, || {
        nodes[4].get(LOCK).as_deref() == Some(token.as_str())
    });
    assert_eq!(values(&nodes, LOCK), vec![Some(token.clone()); 5]);

    // Node 3 is frozen during the release: it must get the release too, and run it when thawed.
    nodes[3].freeze();
    let out = expect(
        0,
        redlock(&nodes)
            .args(["release", "-k", KEY, "--token", &token])
            .args(opts),
    );
    assert!(out.stdout.is_empty(), "{out}");
    for (i, n) in nodes.iter().enumerate().filter(|(i, _)| *i != 3) {
        assert_eq!(n.get(LOCK), None, "node {i} still holds the released lock");
    }
    nodes[3].thaw();
    wait_until(
        "the node frozen during the release to drop the lock (TTL 30 s)",
        Duration::from_secs(3),
        || nodes[3].get(LOCK).is_none(),
    );
}

#[test]
fn redlock_is_busy_when_another_client_holds_a_majority_and_not_for_a_minority() {
    let nodes = start_nodes(5);
    // Another client's plain `SET NX PX` lock on three of five.
    for n in &nodes[..3] {
        n.cmd(&["SET", LOCK, "foreign", "PX", "60000"]);
    }
    let out = expect(75, redlock(&nodes).args(["acquire", "-n", "-k", KEY]));
    assert!(out.stderr.contains("busy"), "{out}");
    assert_eq!(
        values(&nodes, LOCK),
        vec![
            Some("foreign".to_string()),
            Some("foreign".into()),
            Some("foreign".into()),
            None,
            None
        ],
        "the foreign lock stays, the grants on the two free nodes are given back"
    );
    let out = expect(0, redlock(&nodes).args(["inspect", "--json", "-k", KEY]));
    let info = json(&out);
    assert_eq!(info["held"], true, "{out}");
    assert_eq!(info["token"], "foreign", "{out}");

    // Held on two of five only: the other three are a majority.
    nodes[0].cmd(&["DEL", LOCK]);
    let out = expect(
        0,
        redlock(&nodes).args(["acquire", "-n", "--json", "-k", KEY]),
    );
    let token = token_of(&out);
    assert_eq!(
        values(&nodes, LOCK),
        vec![
            Some(token.clone()),
            Some("foreign".into()),
            Some("foreign".into()),
            Some(token.clone()),
            Some(token.clone())
        ]
    );
    // And now rlock's own majority makes the next one busy, naming the holder.
    let out = expect(75, redlock(&nodes).args(["acquire", "-n", "-k", KEY]));
    assert!(out.stderr.contains("is busy (held by"), "{out}");
    assert_eq!(nodes[0].get(LOCK).as_deref(), Some(token.as_str()));
    let out = expect(0, redlock(&nodes).args(["inspect", "--json", "-k", KEY]));
    assert_eq!(json(&out)["token"].as_str(), Some(token.as_str()), "{out}");
}

#[test]
fn redlock_exec_stops_the_child_before_the_validity_ends_when_a_majority_freezes() {
    let nodes = start_nodes(5);
    let dir = tempdir();
    let d = dir.path();
    let mut rl = Bg::spawn_group(
        "exec",
        d,
        redlock(&nodes)
            .args(["exec", "-k", KEY, "--ttl", "2s", "--", "sh", "-c"])
            .arg(HOLD_UNTIL_STOP),
    );
    let token = rl.ready();
    assert_eq!(values(&nodes, LOCK), vec![Some(token.clone()); 5]);
    // Let renewals happen first, so the lease runs on a renewal, not on the grant.
    let mut renewals = Renewals::new();
    rl.wait_for("two renewals", SOON, || {
        renewals.sample(nodes[0].pttl(LOCK), "before the freeze");
        renewals.seen >= 2
    });

    let child: i32 = wait_for_file(d.join("pid"), SOON)
        .trim()
        .parse()
        .expect("pid");
    let first_frozen_at = now_ns();
    for n in &nodes[..3] {
        n.freeze();
    }
    let majority_frozen_at = now_ns();
    rl.wait_for("the child to be stopped", SOON, || !pid_alive(child));
    let died = fs::read_to_string(d.join("died")).unwrap_or_default();
    for n in &nodes[..3] {
        n.thaw();
    }
    let (out, _) = rl.finish(FINISH);
    assert!(
        !died.is_empty(),
        "the child died without getting TERM first: {out}"
    );
    let died_at: i128 = died.trim().parse().expect("a date +%s%N stamp");
    let after_majority = (died_at - majority_frozen_at) / 1_000_000;
    let after_first = (died_at - first_frozen_at) / 1_000_000;
    // TTL 2 s, renewals every 667 ms, each waited for at most TTL/10 = 200 ms per node, grace
    // 500 ms, drift 22 ms. The last renewal a majority granted was sent before the majority
    // froze, so the lease ends by 1978 ms after that, and TERM is due 500 ms before.
    assert!(
        after_majority < 2000 - 22,
        "child stopped {after_majority} ms after the majority froze: after the validity ended"
    );
    assert!(
        after_majority <= 2000 - 22 - 500 + 350,
        "child got TERM {after_majority} ms after the majority froze: later than the deadline \
         minus --grace"
    );
    assert!(
        after_first >= 2000 - 667 - 500 - 170,
        "child stopped only {after_first} ms after the first freeze: too early for a 2 s lease"
    );
    assert_eq!(out.code, 76, "{out}");
    assert!(out.stderr.contains("lost lock 'k'"), "{out}");
}

#[test]
fn redlock_fence_strictly_increases_as_the_granting_majority_changes() {
    let mut nodes = start_nodes(5);
    warm_scripts(&nodes);
    let fence = |nodes: &[RedisServer]| -> i64 {
        let out = expect(
            0,
            redlock(nodes)
                .args(["--op-timeout", "300ms", "exec", "-k", KEY, "--ttl", "3s"])
                .args(["--", "sh", "-c", "echo $RLOCK_FENCE"]),
        );
        out.stdout
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("RLOCK_FENCE is not an integer ({e}): {out}"))
    };
    // After a thaw, what was sent to a frozen node (a late acquire and the release) runs; the
    // next round waits until every node is free again.
    let settle = |nodes: &[RedisServer]| {
        wait_until("every node to be free", SOON, || {
            values(nodes, LOCK).iter().all(Option::is_none)
        });
    };
    let mut fences = vec![fence(&nodes)];
    let mut check = |f: i64, what: &str| {
        let last = *fences.last().expect("a first fence");
        assert!(
            f > last,
            "fence {f} after {what} is not above the previous {last} (all: {fences:?})"
        );
        fences.push(f);
    };

    // Nodes 0-2 grant, twice (3 and 4 frozen, then down): their counters run ahead.
    nodes[3].freeze();
    nodes[4].freeze();
    check(fence(&nodes), "granting by nodes 0-2 with 3 and 4 frozen");
    nodes[3].thaw();
    nodes[4].thaw();
    settle(&nodes);
    nodes[3].kill9();
    nodes[4].kill9();
    check(fence(&nodes), "granting by nodes 0-2 with 3 and 4 down");

    // 3 and 4 come back empty (counters 0); nodes 2-4 grant: only node 2 remembers.
    nodes[3].restart();
    nodes[4].restart();
    nodes[0].freeze();
    nodes[1].freeze();
    let f = fence(&nodes);
    check(f, "granting by nodes 2-4, two of them restarted empty");
    // The granting nodes' counters were raised to the fence handed out, so the next majority,
    // which shares a node with this one, counts on from there.
    for n in &nodes[2..] {
        assert_eq!(
            n.hgetall(STATE).get("fence").map(String::as_str),
            Some(f.to_string().as_str()),
            "the counter on port {} was not raised to the fence {f}",
            n.port()
        );
    }
    nodes[0].thaw();
    nodes[1].thaw();
    settle(&nodes);

    // Node 2 comes back empty; nodes 0, 1 and 2 grant while 3 and 4 are frozen.
    nodes[2].restart();
    nodes[3].freeze();
    nodes[4].freeze();
    check(
        fence(&nodes),
        "granting by nodes 0-2, node 2 restarted empty",
    );
    nodes[3].thaw();
    nodes[4].thaw();
    settle(&nodes);

    // Nodes 0 and 1 restarted empty, the rest grant; then all five.
    nodes[0].restart();
    nodes[1].restart();
    nodes[0].freeze();
    check(fence(&nodes), "granting by nodes 1-4");
    nodes[0].thaw();
    settle(&nodes);
    check(fence(&nodes), "granting by all five");
}

#[test]
fn redlock_waiter_wakes_on_release() {
    let nodes = start_nodes(5);
    let dir = tempdir();
    for round in 0..3 {
        let out = expect(
            0,
            redlock(&nodes).args(["acquire", "--json", "-k", KEY, "--ttl", "60s"]),
        );
        let holder = token_of(&out);
        let name = format!("waiter{round}");
        let mut waiter = Bg::spawn_group(
            &name,
            dir.path(),
            redlock(&nodes).args(["exec", "-w", "30s", "-k", KEY, "--", "true"]),
        );
        // Redlock waiters do not queue: a parked one is subscribed to the wake channel on every
        // node, and tried (and found busy) after subscribing.
        waiter.wait_for("the waiter to subscribe on every node", SOON, || {
            nodes.iter().all(|n| subscribers(n, WAKE) >= 1)
        });
        let parked_at = Instant::now();
        assert_eq!(values(&nodes, LOCK), vec![Some(holder.clone()); 5]);
        expect(
            0,
            redlock(&nodes).args(["release", "-k", KEY, "--token", &holder]),
        );
        let released_at = Instant::now();
        let (out, done_at) = waiter.finish(SOON);
        assert_eq!(out.code, 0, "round {round}: {out}");
        assert!(
            done_at - released_at < Duration::from_secs(1),
            "round {round}: the waiter ran {:?} after the release (holder's TTL 60 s)",
            done_at - released_at
        );
        assert!(
            done_at - parked_at < REFRESH - Duration::from_millis(150),
            "round {round}: the waiter ran {:?} after it parked: no sooner than its own retry, \
             so the release did not wake it",
            done_at - parked_at
        );
        assert_eq!(values(&nodes, LOCK), vec![None; 5], "round {round}");
    }
}

#[test]
fn redlock_needs_an_odd_number_of_urls() {
    for n in [2, 4] {
        let mut cmd = rlock();
        for i in 0..n {
            cmd.arg("--url").arg(format!("redis://127.0.0.1:{}", 1 + i));
        }
        let out = expect(2, cmd.args(["acquire", "-n", "-k", KEY]));
        assert!(
            out.stderr.contains("odd number") && out.stderr.contains(&format!("got {n}")),
            "{out}"
        );
        let urls: Vec<String> = (0..n)
            .map(|i| format!("redis://127.0.0.1:{}", 1 + i))
            .collect();
        let out = expect(
            2,
            rlock()
                .env("RLOCK_URL", urls.join(","))
                .args(["exec", "-k", KEY, "--", "true"]),
        );
        assert!(out.stderr.contains("odd number"), "RLOCK_URL: {out}");
    }
}

// ---------------------------------------------------------------------------------------------
// Redis Cluster: three masters
// ---------------------------------------------------------------------------------------------

/// `n` lock names whose keys land on every master of `cluster`, with the master of each.
fn keys_on_every_master(cluster: &RedisCluster, n: usize) -> Vec<(String, usize)> {
    let keys: Vec<(String, usize)> = (0..n)
        .map(|i| {
            let name = format!("job-{i}");
            let owner = cluster.owner(&format!("rlock:{name}"));
            (name, owner)
        })
        .collect();
    let owners: BTreeSet<usize> = keys.iter().map(|(_, o)| *o).collect();
    assert_eq!(
        owners.len(),
        3,
        "the test keys must span all three masters: {keys:?}"
    );
    keys
}

/// A lock name whose key lives on master `want` of `cluster`.
fn key_on(cluster: &RedisCluster, want: usize) -> String {
    (0..1000)
        .map(|i| format!("on{want}-{i}"))
        .find(|name| cluster.owner(&format!("rlock:{name}")) == want)
        .expect("a key on every master among 1000 names")
}

/// Whether `key` exists on `node` itself (a direct connection: a key of a slot the node does
/// not serve is answered with MOVED, which counts as "not here").
fn here(node: &RedisServer, key: &str) -> bool {
    matches!(node.try_cmd(&["EXISTS", key]), Ok(redis::Value::Int(1)))
}

/// Prints `$RLOCK_FENCE` if the master on port `$OWNER` holds the lock with `$RLOCK_TOKEN`.
const OWNER_HOLDS_IT: &str = r#"
[ "$(redis-cli -p "$OWNER" GET "rlock:$RLOCK_KEY")" = "$RLOCK_TOKEN" ] && echo "$RLOCK_FENCE""#;

#[test]
fn cluster_locks_keys_on_every_master_with_the_helper_keys_in_the_lock_slot() {
    let cluster = RedisCluster::start();
    let keys = keys_on_every_master(&cluster, 20);
    let mut tokens = HashMap::new();
    let mut fences = HashMap::new();
    for (name, owner) in &keys {
        let lock = format!("rlock:{name}");
        let state = format!("{{rlock:{name}}}:state");
        let out = expect(
            0,
            clustered(&cluster).args(["acquire", "--json", "-k", name, "--ttl", "60s"]),
        );
        let token = token_of(&out);
        assert!(fence_of(&out) > 0, "{out}");
        fences.insert(name.clone(), fence_of(&out));
        let node = cluster.node(*owner);
        assert_eq!(node.get(&lock).as_deref(), Some(token.as_str()), "{name}");
        assert_eq!(cluster.slot(&state), cluster.slot(&lock), "{name}");
        assert!(
            here(node, &state),
            "{state} is not on the master of {lock} (port {})",
            node.port()
        );
        for (i, other) in cluster.nodes().iter().enumerate() {
            if i != *owner {
                assert!(
                    !here(other, &lock) && !here(other, &state),
                    "{name} on node {i}"
                );
            }
        }
        let out = expect(
            0,
            clustered(&cluster).args(["inspect", "--json", "-k", name]),
        );
        assert_eq!(json(&out)["token"].as_str(), Some(token.as_str()), "{out}");
        tokens.insert(name.clone(), token);
    }

    // The listing SCANs every master.
    let out = expect(0, clustered(&cluster).args(["inspect", "--json"]));
    let listed: HashMap<String, String> = json(&out)
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {out}"))
        .iter()
        .map(|l| {
            (
                l["key"].as_str().expect("key").to_string(),
                l["token"].as_str().expect("token").to_string(),
            )
        })
        .collect();
    assert_eq!(
        listed, tokens,
        "inspect without -k must list the locks of all masters"
    );
    let out = expect(0, clustered(&cluster).arg("inspect"));
    for (name, _) in &keys {
        assert!(
            out.stdout
                .lines()
                .any(|l| l.split_whitespace().next() == Some(name)),
            "{name} missing from the table: {out}"
        );
    }

    for (name, owner) in &keys {
        expect(
            0,
            clustered(&cluster).args(["release", "-k", name, "--token", &tokens[name]]),
        );
        assert!(
            !here(cluster.node(*owner), &format!("rlock:{name}")),
            "{name}"
        );
        // The child checks on the master itself that its token holds the lock.
        let out = expect(
            0,
            clustered(&cluster)
                .args(["exec", "-k", name, "--", "sh", "-c"])
                .arg(OWNER_HOLDS_IT)
                .env("OWNER", cluster.node(*owner).port().to_string()),
        );
        // The second grant, held on its master.
        printed_fence_above(&out, fences[name]);
        assert!(
            !here(cluster.node(*owner), &format!("rlock:{name}")),
            "{name}"
        );
    }
    let out = expect(0, clustered(&cluster).args(["inspect", "--json"]));
    assert_eq!(json(&out), serde_json::json!([]), "{out}");
}

#[test]
fn cluster_one_seed_is_enough_and_rlock_cluster_env_is_the_flag() {
    let cluster = RedisCluster::start();
    let seed = cluster.node(0).url();
    for owner in [1, 2] {
        let name = key_on(&cluster, owner);
        let lock = format!("rlock:{name}");
        let node = cluster.node(owner);
        // --cluster with the one seed, which does not serve the key.
        let one_seed = || {
            let mut cmd = rlock();
            cmd.args(["--cluster", "--url", &seed]);
            cmd
        };
        let out = expect(0, one_seed().args(["acquire", "--json", "-k", &name]));
        let token = token_of(&out);
        assert_eq!(node.get(&lock).as_deref(), Some(token.as_str()));
        expect(0, one_seed().args(["inspect", "-q", "-k", &name]));
        expect(
            0,
            one_seed().args(["release", "-k", &name, "--token", &token]),
        );
        assert!(!here(node, &lock));

        // The same through the environment: RLOCK_CLUSTER=1 and RLOCK_URL.
        let env = || {
            let mut cmd = rlock();
            cmd.env("RLOCK_CLUSTER", "1").env("RLOCK_URL", &seed);
            cmd
        };
        let out = expect(0, env().args(["acquire", "--json", "-k", &name]));
        let token = token_of(&out);
        let env_fence = fence_of(&out);
        assert_eq!(node.get(&lock).as_deref(), Some(token.as_str()));
        let out = expect(0, env().args(["inspect", "--json"]));
        assert_eq!(
            json(&out)[0]["token"].as_str(),
            Some(token.as_str()),
            "{out}"
        );
        expect(0, env().args(["release", "-k", &name, "--token", &token]));
        let out = expect(
            0,
            env().args(["exec", "-k", &name, "--", "sh", "-c", "echo $RLOCK_FENCE"]),
        );
        printed_fence_above(&out, env_fence);
        assert!(!here(node, &lock));

        // Without cluster mode the seed is one Redis, which refuses a key it does not serve.
        let out = run(rlock()
            .env("RLOCK_URL", &seed)
            .args(["acquire", "-n", "-k", &name]));
        assert!(
            out.code == 69 && out.stderr.to_lowercase().contains("moved"),
            "a single-Redis acquire of a key served elsewhere must fail with MOVED: {out}"
        );
        assert!(!here(node, &lock));
    }
}

/// Starts moving `slot` from master `from` to master `to`: IMPORTING on `to`, MIGRATING on
/// `from` (what `redis-cli --cluster reshard` does first).
fn begin_migration(cluster: &RedisCluster, slot: u16, from: usize, to: usize) {
    let slot = slot.to_string();
    let (from_id, to_id) = (cluster.node_id(from), cluster.node_id(to));
    cluster
        .node(to)
        .cmd(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]);
    cluster
        .node(from)
        .cmd(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]);
}

/// Moves `keys` from master `from` to master `to` with one MIGRATE.
fn move_keys(cluster: &RedisCluster, from: usize, to: usize, keys: &[&str]) {
    let port = cluster.node(to).port().to_string();
    let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
    args.extend_from_slice(keys);
    let reply = cluster.node(from).cmd(&args);
    assert_eq!(reply, redis::Value::Okay, "MIGRATE {keys:?}");
}

/// Ends the move: every master is told that `to` serves `slot`, the new owner first.
fn end_migration(cluster: &RedisCluster, slot: u16, to: usize) {
    let slot = slot.to_string();
    let to_id = cluster.node_id(to);
    let mut order: Vec<usize> = (0..cluster.nodes().len()).collect();
    order.sort_by_key(|i| *i != to);
    for i in order {
        cluster
            .node(i)
            .cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
    }
}

/// PTTL of `key` on a node that imports its slot (ASKING, then PTTL, on one connection).
fn pttl_asking(node: &RedisServer, key: &str) -> i64 {
    let (pttl,): (i64,) = redis::pipe()
        .cmd("ASKING")
        .ignore()
        .cmd("PTTL")
        .arg(key)
        .query(&mut node.conn())
        .expect("ASKING + PTTL");
    pttl
}

#[test]
fn cluster_renewals_follow_moved_when_the_locks_slot_moves_during_exec() {
    let cluster = RedisCluster::start();
    let name = key_on(&cluster, 0);
    let lock = format!("rlock:{name}");
    let state = format!("{{rlock:{name}}}:state");
    let slot = cluster.slot(&lock);
    let dir = tempdir();
    let mut rl = Bg::spawn_group(
        "exec",
        dir.path(),
        clustered(&cluster)
            .args(["exec", "-k", &name, "--ttl", "3s", "--", "sh", "-c"])
            .arg(HOLD_UNTIL_STOP),
    );
    let token = rl.ready();
    let (a, b) = (cluster.node(0), cluster.node(1));
    assert_eq!(a.get(&lock).as_deref(), Some(token.as_str()));
    let mut on_a = Renewals::new();
    rl.wait_for("a renewal on the first master", SOON, || {
        on_a.sample(a.pttl(&lock), "before the move");
        on_a.seen >= 1
    });

    begin_migration(&cluster, slot, 0, 1);
    move_keys(&cluster, 0, 1, &[&lock, &state]);
    end_migration(&cluster, slot, 1);
    assert!(!here(a, &lock));
    let mut on_b = Renewals::new();
    rl.wait_for("two renewals on the new master (after MOVED)", SOON, || {
        on_b.sample(b.pttl(&lock), "after the move");
        on_b.seen >= 2
    });
    assert_eq!(b.get(&lock).as_deref(), Some(token.as_str()));

    touch(dir.path().join("stop"));
    let (out, _) = rl.finish(FINISH);
    assert_eq!(out.code, 0, "{out}");
    assert!(!here(b, &lock), "the release must reach the new master");
    assert!(!here(a, &lock));
}

#[test]
fn cluster_renewals_and_a_waiter_follow_ask_while_the_slot_migrates() {
    let cluster = RedisCluster::start();
    // As a user with only the documented rights: ASKING is one of them.
    for node in cluster.nodes() {
        set_user(node, "locker", &LOCK_PATTERNS, &cluster_commands());
    }
    let clustered = |cluster: &RedisCluster| clustered_as(cluster, "locker");
    let name = key_on(&cluster, 0);
    let lock = format!("rlock:{name}");
    let state = format!("{{rlock:{name}}}:state");
    let queue = format!("{{rlock:{name}}}:q");
    let slot = cluster.slot(&lock);
    let dir = tempdir();
    let waiter_dir = tempdir();
    let mut holder = Bg::spawn_group(
        "exec",
        dir.path(),
        clustered(&cluster)
            .args(["exec", "-k", &name, "--ttl", "3s", "--", "sh", "-c"])
            .arg(HOLD_UNTIL_STOP),
    );
    let token = holder.ready();
    // A waiter in line: the lock's three keys (lock, state, queue) all exist, so the old
    // master answers ASK (not TRYAGAIN) once they have moved.
    let mut waiter = Bg::spawn_group(
        "waiter",
        waiter_dir.path(),
        clustered(&cluster).args(["acquire", "-w", "30s", "--json", "-k", &name, "--ttl", "9s"]),
    );
    let (a, b) = (cluster.node(0), cluster.node(1));
    waiter.wait_for("the waiter to queue", SOON, || {
        matches!(a.try_cmd(&["ZCARD", &queue]), Ok(redis::Value::Int(1)))
    });

    begin_migration(&cluster, slot, 0, 1);
    move_keys(&cluster, 0, 1, &[&lock, &state, &queue]);
    let mut on_b = Renewals::new();
    holder.wait_for(
        "two renewals on the importing master (after ASK)",
        SOON,
        || {
            on_b.sample(pttl_asking(b, &lock), "while the slot migrates");
            on_b.seen >= 2
        },
    );
    assert!(waiter.running(), "{}", waiter.describe());
    end_migration(&cluster, slot, 1);
    holder.wait_for("a renewal on the new master (after MOVED)", SOON, || {
        on_b.sample(b.pttl(&lock), "after the move");
        on_b.seen >= 3
    });
    assert_eq!(b.get(&lock).as_deref(), Some(token.as_str()));

    touch(dir.path().join("stop"));
    let (out, released_at) = holder.finish(FINISH);
    assert_eq!(out.code, 0, "{out}");
    let (out, acquired_at) = waiter.finish(SOON);
    assert_eq!(out.code, 0, "{out}");
    assert!(
        acquired_at - released_at < Duration::from_secs(1),
        "the waiter took {:?} after the release",
        acquired_at - released_at
    );
    assert_eq!(b.get(&lock), Some(token_of(&out)));
    for node in cluster.nodes() {
        assert_eq!(
            acl_denials(node, "locker"),
            Vec::<String>::new(),
            "port {}",
            node.port()
        );
    }
}

#[test]
fn cluster_renewals_continue_while_the_locks_slot_is_marked_migrating() {
    let cluster = RedisCluster::start();
    let name = key_on(&cluster, 0);
    let lock = format!("rlock:{name}");
    let slot = cluster.slot(&lock);
    let dir = tempdir();
    let mut rl = Bg::spawn_group(
        "exec",
        dir.path(),
        clustered(&cluster)
            .args(["exec", "-k", &name, "--ttl", "2s", "--", "sh", "-c"])
            .arg(HOLD_UNTIL_STOP),
    );
    rl.ready();
    let a = cluster.node(0);
    // The slot is being resharded, its keys not moved yet: the old master still has the lock
    // key and its state and serves commands on keys it has. Resharding a slot with many keys
    // takes a while; renewals must go on meanwhile.
    begin_migration(&cluster, slot, 0, 1);
    let mut on_a = Renewals::new();
    let mut gone = None;
    rl.wait_for(
        "five renewals on the old master while the slot is MIGRATING (TTL 2 s)",
        SOON,
        || match a.try_cmd(&["PTTL", &lock]) {
            Ok(redis::Value::Int(pttl)) if pttl > 0 => {
                on_a.sample(pttl, "while the slot is marked migrating");
                on_a.seen >= 5
            }
            other => {
                gone = Some(format!("{other:?}"));
                true
            }
        },
    );
    if let Some(reply) = gone {
        panic!(
            "the lock expired on the old master after {} renewals while its slot was marked \
             MIGRATING (PTTL answered {reply}); {}",
            on_a.seen,
            rl.describe()
        );
    }
    touch(dir.path().join("stop"));
    let (out, _) = rl.finish(FINISH);
    assert_eq!(out.code, 0, "{out}");
}

#[test]
fn cluster_exec_stops_the_child_before_the_ttl_when_its_master_freezes() {
    let cluster = RedisCluster::start();
    let name = key_on(&cluster, 1);
    let lock = format!("rlock:{name}");
    let dir = tempdir();
    let d = dir.path();
    let mut rl = Bg::spawn_group(
        "exec",
        d,
        clustered(&cluster)
            .args(["exec", "-k", &name, "--ttl", "2s", "--", "sh", "-c"])
            .arg(HOLD_UNTIL_STOP),
    );
    rl.ready();
    let master = cluster.node(1);
    let mut renewals = Renewals::new();
    rl.wait_for("two renewals", SOON, || {
        renewals.sample(master.pttl(&lock), "before the freeze");
        renewals.seen >= 2
    });
    let child: i32 = wait_for_file(d.join("pid"), SOON)
        .trim()
        .parse()
        .expect("pid");
    let frozen_at = now_ns();
    master.freeze();
    rl.wait_for("the child to be stopped", SOON, || !pid_alive(child));
    let died = fs::read_to_string(d.join("died")).unwrap_or_default();
    master.thaw();
    let (out, _) = rl.finish(FINISH);
    assert!(
        !died.is_empty(),
        "the child died without getting TERM first: {out}"
    );
    let after = (died.trim().parse::<i128>().expect("a stamp") - frozen_at) / 1_000_000;
    // As for one Redis: TERM between about 810 and 1478 ms after the freeze, before the 2 s
    // lock can expire.
    assert!(
        (2000 - 667 - 500 - 170..=2000 - 22 - 500 + 350).contains(&after),
        "child got TERM {after} ms after its master froze (TTL 2 s, grace 500 ms)"
    );
    assert_eq!(out.code, 76, "{out}");
}

#[test]
fn cluster_a_frozen_master_costs_at_most_the_op_timeout() {
    let cluster = RedisCluster::start();
    let name = key_on(&cluster, 1);
    let dir = tempdir();
    cluster.node(1).freeze();
    let started = Instant::now();
    let mut acquire = Bg::spawn_group(
        "acquire",
        dir.path(),
        clustered(&cluster).args(["--op-timeout", "500ms", "acquire", "-n", "-k", &name]),
    );
    // A request and the best-effort give-back after its timeout: 2 × 500 ms, plus slack.
    let (out, at) = acquire.finish(Duration::from_secs(4));
    assert_eq!(out.code, 69, "{out}");
    assert!(
        at - started < Duration::from_secs(3),
        "took {:?}: {out}",
        at - started
    );

    // exec: the child is stopped by the local deadline; rlock must then exit, not wait for the
    // frozen master.
    cluster.node(1).thaw();
    let mut rl = Bg::spawn_group(
        "exec",
        dir.path(),
        clustered(&cluster)
            .args(["--op-timeout", "500ms", "exec", "-k", &name, "--ttl", "2s"])
            .args(["--", "sh", "-c"])
            .arg(HOLD_UNTIL_STOP),
    );
    rl.ready();
    let frozen_at = Instant::now();
    cluster.node(1).freeze();
    let (out, at) = rl.finish(Duration::from_secs(8));
    assert_eq!(out.code, 76, "{out}");
    assert!(
        at - frozen_at < Duration::from_secs(4),
        "exec exited {:?} after its master froze (TTL 2 s, --op-timeout 500ms)",
        at - frozen_at
    );
}

#[test]
fn cluster_waiter_wakes_on_release() {
    let cluster = RedisCluster::start();
    // Not on the first seed, where the waiter subscribes: the wake-up crosses the cluster bus.
    let name = key_on(&cluster, 2);
    let lock = format!("rlock:{name}");
    let queue = format!("{{rlock:{name}}}:q");
    let owner = cluster.node(2);
    let dir = tempdir();
    for round in 0..3 {
        let out = expect(
            0,
            clustered(&cluster).args(["acquire", "--json", "-k", &name, "--ttl", "60s"]),
        );
        let holder = token_of(&out);
        let mut waiter = Bg::spawn_group(
            &format!("waiter{round}"),
            dir.path(),
            clustered(&cluster).args(["exec", "-w", "30s", "-k", &name, "--", "true"]),
        );
        waiter.wait_for("the waiter to queue", SOON, || {
            matches!(owner.try_cmd(&["ZCARD", &queue]), Ok(redis::Value::Int(1)))
        });
        let parked_at = Instant::now();
        expect(
            0,
            clustered(&cluster).args(["release", "-k", &name, "--token", &holder]),
        );
        let released_at = Instant::now();
        let (out, done_at) = waiter.finish(SOON);
        assert_eq!(out.code, 0, "round {round}: {out}");
        assert!(
            done_at - released_at < Duration::from_secs(1),
            "round {round}: the waiter ran {:?} after the release (holder's TTL 60 s)",
            done_at - released_at
        );
        assert!(
            done_at - parked_at < REFRESH - Duration::from_millis(150),
            "round {round}: the waiter ran {:?} after it queued: no sooner than its own \
             refresh, so the release did not wake it",
            done_at - parked_at
        );
        assert!(!here(owner, &lock), "round {round}");
    }
}

// ---------------------------------------------------------------------------------------------
// Sentinel: a master, a replica, three Sentinels
// ---------------------------------------------------------------------------------------------

#[test]
fn sentinel_discovery_locks_on_the_master_the_sentinels_name() {
    let set = Sentinels::start("locks");
    let (master, replica) = (set.server(0), set.server(1));
    let out = expect(
        0,
        via_sentinels(&set).args(["-v", "acquire", "--json", "-k", KEY, "--ttl", "60s"]),
    );
    let token = token_of(&out);
    let first_fence = fence_of(&out);
    assert!(
        out.stderr.contains("master 'locks'"),
        "-v should say which master it locks on: {out}"
    );
    assert_eq!(master.get(LOCK).as_deref(), Some(token.as_str()));
    assert!(
        master.exists(STATE),
        "the state hash is written on the master"
    );
    wait_until("the lock to reach the replica", SOON, || {
        replica.get(LOCK).as_deref() == Some(token.as_str())
    });
    let out = expect(
        0,
        via_sentinels(&set).args(["inspect", "--json", "-k", KEY]),
    );
    assert_eq!(json(&out)["token"].as_str(), Some(token.as_str()), "{out}");
    expect(
        0,
        via_sentinels(&set).args(["release", "-k", KEY, "--token", &token]),
    );
    assert_eq!(master.get(LOCK), None);

    // A dead Sentinel first in the list costs one refused connection; the next one answers.
    // The environment works as the flags do.
    let mut urls = vec!["redis://127.0.0.1:1".to_string()];
    urls.extend(set.urls());
    let out = expect(
        0,
        rlock()
            .env("RLOCK_SENTINEL", set.name())
            .env("RLOCK_URL", urls.join(","))
            .args(["exec", "-k", KEY, "--", "sh", "-c", "echo $RLOCK_FENCE"]),
    );
    printed_fence_above(&out, first_fence);
    assert_eq!(master.get(LOCK), None);
}

#[test]
fn sentinel_unknown_master_name_is_69_with_a_clear_message() {
    let set = Sentinels::start("locks");
    let mut cmd = rlock();
    cmd.args(["--sentinel", "no-such-master"]);
    for url in set.urls() {
        cmd.arg("--url").arg(url);
    }
    let out = expect(69, cmd.args(["acquire", "-n", "-k", KEY]));
    assert!(out.stdout.is_empty(), "{out}");
    assert_eq!(out.stderr.lines().count(), 1, "one line: {out}");
    assert!(
        out.stderr.contains("no-such-master") && out.stderr.contains("does not know"),
        "the message must say that the Sentinels do not know that master: {out}"
    );
    assert_eq!(set.server(0).get(LOCK), None);
}

/// Starts `exec` through the Sentinels of `set` with the lock replicated to the replica;
/// returns the process and its token.
fn exec_via_sentinels(set: &Sentinels, dir: &Path, opts: &[&str]) -> (Bg, String) {
    let mut rl = Bg::spawn_group(
        "exec",
        dir,
        via_sentinels(set)
            .args(["exec", "-k", KEY])
            .args(opts)
            .args(["--", "sh", "-c"])
            .arg(HOLD_UNTIL_STOP),
    );
    let token = rl.ready();
    assert_eq!(set.server(0).get(LOCK).as_deref(), Some(token.as_str()));
    rl.wait_for("the lock to reach the replica", SOON, || {
        set.server(1).get(LOCK).as_deref() == Some(token.as_str())
    });
    (rl, token)
}

#[test]
fn sentinel_failover_during_exec_keeps_a_replicated_lock() {
    let mut set = Sentinels::start("locks");
    let dir = tempdir();
    let (mut rl, token) =
        exec_via_sentinels(&set, dir.path(), &["--ttl", "20s", "--renew-every", "1s"]);
    let new_master = set.server(1).port();

    // The master dies; the Sentinels agree and promote the replica, which has the lock.
    set.server_mut(0).kill9();
    set.wait_master(new_master, Duration::from_secs(30));
    let promoted = set.server(1);
    let mut renewals = Renewals::new();
    rl.wait_for("two renewals on the promoted replica", SOON, || {
        renewals.sample(promoted.pttl(LOCK), "after the failover");
        renewals.seen >= 2
    });
    assert_eq!(promoted.get(LOCK).as_deref(), Some(token.as_str()));
    let child: i32 = fs::read_to_string(dir.path().join("pid"))
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    assert!(pid_alive(child), "the child must run on: {}", rl.describe());

    touch(dir.path().join("stop"));
    let (out, _) = rl.finish(FINISH);
    assert_eq!(out.code, 0, "{out}\n{}", set.logs());
    assert!(
        !dir.path().join("died").exists(),
        "the child was signalled: {out}"
    );
    assert_eq!(promoted.get(LOCK), None, "released on the new master");
}

#[test]
fn sentinel_failover_that_loses_the_lock_stops_exec_with_76() {
    let mut set = Sentinels::start("locks");
    let dir = tempdir();
    let (mut rl, token) =
        exec_via_sentinels(&set, dir.path(), &["--ttl", "20s", "--renew-every", "1s"]);
    // The replica loses the key (as an asynchronous replica can lose the last writes), then
    // the master dies and the replica is promoted without the lock.
    let replica = set.server(1);
    replica.cmd(&["CONFIG", "SET", "replica-read-only", "no"]);
    replica.cmd(&["DEL", LOCK]);
    assert_eq!(set.server(0).get(LOCK).as_deref(), Some(token.as_str()));
    let new_master = replica.port();
    set.server_mut(0).kill9();
    set.wait_master(new_master, Duration::from_secs(30));

    let (out, _) = rl.finish(FINISH);
    assert_eq!(out.code, 76, "{out}\n{}", set.logs());
    assert!(out.stderr.contains("lost lock 'k'"), "{out}");
    assert!(
        dir.path().join("died").exists(),
        "the child must get TERM: {out}"
    );
    let promoted = set.server(1);
    assert_eq!(
        promoted.get(LOCK),
        None,
        "a lost lock must never be taken again behind the user's back"
    );
}

#[test]
fn sentinel_forced_failover_never_lets_a_second_holder_in_while_exec_runs() {
    let set = Sentinels::start("locks");
    let dir = tempdir();
    let (mut rl, _token) = exec_via_sentinels(&set, dir.path(), &["--ttl", "3s"]);
    let child: i32 = fs::read_to_string(dir.path().join("pid"))
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    let new_master = set.server(1).port();
    set.sentinel_cmd(0, &["SENTINEL", "FAILOVER", set.name()])
        .expect("SENTINEL FAILOVER");
    set.wait_master(new_master, SOON);

    // Another client asks the Sentinels for the lock, again and again, while exec's child
    // runs: rlock must keep the lock on the new master, or stop its child first.
    let until = Instant::now() + Duration::from_secs(15);
    let mut overlap = None;
    while Instant::now() < until && pid_alive(child) {
        let out = run(via_sentinels(&set).args(["acquire", "-n", "-k", KEY, "--ttl", "30s"]));
        if out.code == 0 && pid_alive(child) {
            overlap = Some(out);
            break;
        }
        assert!(
            matches!(out.code, 0 | 75 | 69),
            "unexpected answer to the second client: {out}"
        );
        thread::sleep(Duration::from_millis(100));
    }
    touch(dir.path().join("stop"));
    let (out, _) = rl.finish(FINISH);
    if let Some(second) = overlap {
        panic!(
            "a second client got the lock from the new master while exec's child still ran \
             (exec then exited {}): second client: {second}\nexec: {out}",
            out.code
        );
    }
    assert!(matches!(out.code, 0 | 76), "{out}");
}

// ---------------------------------------------------------------------------------------------
// TLS: a CA made in the test
// ---------------------------------------------------------------------------------------------

/// `rlock --url rediss://… --tls-ca CA`.
fn over_tls(server: &TlsServer, certs: &TestCerts) -> Command {
    let mut cmd = rlock();
    cmd.arg("--url")
        .arg(server.url())
        .arg("--tls-ca")
        .arg(&certs.ca);
    cmd
}

#[test]
fn tls_with_the_test_ca_works_for_the_whole_lifecycle() {
    let certs = TestCerts::new();
    let tls = TlsServer::start(&certs, "no");
    let plain = &tls.server;
    let out = expect(
        0,
        over_tls(&tls, &certs).args(["acquire", "--json", "-k", KEY, "--ttl", "60s"]),
    );
    let token = token_of(&out);
    let first_fence = fence_of(&out);
    assert_eq!(plain.get(LOCK).as_deref(), Some(token.as_str()));
    expect(
        0,
        over_tls(&tls, &certs).args(["renew", "-k", KEY, "--token", &token]),
    );
    let out = expect(0, over_tls(&tls, &certs).args(["inspect", "--json"]));
    assert_eq!(
        json(&out)[0]["token"].as_str(),
        Some(token.as_str()),
        "{out}"
    );

    // A waiter subscribes over TLS too, and is woken by the release.
    let dir = tempdir();
    let mut waiter = Bg::spawn_group(
        "waiter",
        dir.path(),
        over_tls(&tls, &certs).args(["exec", "-w", "30s", "-k", KEY, "--", "true"]),
    );
    waiter.wait_for("the waiter to queue", SOON, || {
        matches!(plain.try_cmd(&["ZCARD", QUEUE]), Ok(redis::Value::Int(1)))
    });
    expect(
        0,
        over_tls(&tls, &certs).args(["release", "-k", KEY, "--token", &token]),
    );
    let (out, _) = waiter.finish(Duration::from_secs(1));
    assert_eq!(out.code, 0, "{out}");

    // The environment, and the certificate's other name.
    let out = expect(
        0,
        rlock()
            .env("RLOCK_URL", format!("rediss://localhost:{}", tls.tls_port))
            .env("RLOCK_TLS_CA", &certs.ca)
            .args(["exec", "-k", KEY, "--", "sh", "-c", "echo $RLOCK_FENCE"]),
    );
    printed_fence_above(&out, first_fence);
    assert_eq!(plain.get(LOCK), None);
}

#[test]
fn tls_certificates_are_verified_by_default() {
    let certs = TestCerts::new();
    let tls = TlsServer::start(&certs, "no");
    let refused = |cmd: &mut Command, why: &str| {
        let out = run(cmd.args(["acquire", "-n", "-k", KEY]));
        assert_eq!(out.code, 78, "{why}: {out}");
        assert_eq!(out.stderr.lines().count(), 1, "{why}: one line: {out}");
        assert!(
            out.stderr.to_lowercase().contains("certificate"),
            "{why}: the message must say the certificate was the problem: {out}"
        );
        assert_eq!(tls.server.get(LOCK), None, "{why}: nothing may be written");
    };
    // The system roots do not know the test CA.
    refused(
        rlock().arg("--url").arg(tls.url()),
        "no --tls-ca (system roots)",
    );
    // A CA that did not sign the server's certificate.
    let stranger = TestCerts::new();
    refused(
        rlock()
            .arg("--url")
            .arg(tls.url())
            .arg("--tls-ca")
            .arg(&stranger.ca),
        "another CA",
    );
    // A certificate signed by the right CA, for another name.
    let elsewhere = TestCerts::for_server_names(&["db.example.com"]);
    let wrong_name = TlsServer::start(&elsewhere, "no");
    let out = run(rlock()
        .arg("--url")
        .arg(wrong_name.url())
        .arg("--tls-ca")
        .arg(&elsewhere.ca)
        .args(["acquire", "-n", "-k", KEY]));
    assert_eq!(
        out.code, 78,
        "a certificate for db.example.com at 127.0.0.1: {out}"
    );
    assert!(out.stderr.to_lowercase().contains("certificate"), "{out}");
    assert_eq!(wrong_name.server.get(LOCK), None);
    // And the good case, so the failures above are about verification only.
    expect(0, over_tls(&tls, &certs).args(["acquire", "-n", "-k", KEY]));
}

#[test]
fn tls_option_mistakes_are_configuration_errors() {
    let certs = TestCerts::new();
    let url = "rediss://127.0.0.1:1";
    let missing = certs.dir().join("no-such-ca.pem");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--tls-ca".into(), missing.display().to_string()],
            "no-such-ca.pem",
        ),
        (
            vec!["--tls-cert".into(), certs.client_cert.display().to_string()],
            "--tls-key",
        ),
        (
            vec!["--tls-key".into(), certs.client_key.display().to_string()],
            "--tls-cert",
        ),
    ];
    for (args, says) in cases {
        let out = run(rlock()
            .args(["--url", url])
            .args(&args)
            .args(["acquire", "-n", "-k", KEY]));
        assert_eq!(out.code, 78, "{args:?}: {out}");
        assert!(
            out.stderr.contains(says),
            "{args:?}: the message must name {says}: {out}"
        );
        assert_eq!(out.stderr.lines().count(), 1, "{out}");
    }
    // TLS files for a URL that is not rediss://.
    let out = run(rlock()
        .args(["--url", "redis://127.0.0.1:1", "--tls-ca"])
        .arg(&certs.ca)
        .args(["acquire", "-n", "-k", KEY]));
    assert_eq!(out.code, 78, "{out}");
    assert!(out.stderr.contains("rediss://"), "{out}");
    // Through the environment too.
    let out = run(rlock()
        .env("RLOCK_URL", url)
        .env("RLOCK_TLS_CA", &missing)
        .args(["acquire", "-n", "-k", KEY]));
    assert_eq!(out.code, 78, "RLOCK_TLS_CA: {out}");
}

#[test]
fn tls_client_certificates_for_a_server_that_requires_them() {
    let certs = TestCerts::new();
    let tls = TlsServer::start(&certs, "yes");
    let out = expect(
        0,
        over_tls(&tls, &certs)
            .arg("--tls-cert")
            .arg(&certs.client_cert)
            .arg("--tls-key")
            .arg(&certs.client_key)
            .args(["acquire", "--json", "-k", KEY]),
    );
    let token = token_of(&out);
    assert_eq!(tls.server.get(LOCK).as_deref(), Some(token.as_str()));
    expect(
        0,
        rlock()
            .env("RLOCK_URL", tls.url())
            .env("RLOCK_TLS_CA", &certs.ca)
            .env("RLOCK_TLS_CERT", &certs.client_cert)
            .env("RLOCK_TLS_KEY", &certs.client_key)
            .args(["release", "-k", KEY, "--token", &token]),
    );
    assert_eq!(tls.server.get(LOCK), None);

    // Without a client certificate the server refuses the handshake.
    let out = run(over_tls(&tls, &certs).args(["acquire", "-n", "-k", KEY]));
    assert_eq!(out.code, 78, "{out}");
    assert_eq!(out.stderr.lines().count(), 1, "{out}");
    assert_eq!(tls.server.get(LOCK), None);
    // Nor with one the server's CA did not sign.
    let stranger = TestCerts::new();
    let out = run(over_tls(&tls, &certs)
        .arg("--tls-cert")
        .arg(&stranger.client_cert)
        .arg("--tls-key")
        .arg(&stranger.client_key)
        .args(["acquire", "-n", "-k", KEY]));
    assert_eq!(out.code, 78, "{out}");
    assert_eq!(tls.server.get(LOCK), None);
}

// ---------------------------------------------------------------------------------------------
// ACL: a user with only the rights rlock needs
// ---------------------------------------------------------------------------------------------

/// The commands rlock sends to one Redis, its own (EVALSHA, EVAL on NOSCRIPT, SCAN for the
/// listing, SUBSCRIBE for waiting) and those its scripts call, which ACLs check too. The README
/// documents the same list.
const LOCK_COMMANDS: [&str; 26] = [
    "evalsha",
    "eval",
    "scan",
    "subscribe",
    "time",
    "type",
    "get",
    "set",
    "pexpire",
    "pttl",
    "hget",
    "hmget",
    "hset",
    "hdel",
    "hexists",
    "zadd",
    "zrange",
    "zrem",
    "zcard",
    "del",
    "publish",
    "zscore",
    "zcount",
    "zrangebyscore",
    "zremrangebyscore",
    "hkeys",
];
/// The keys (lock, `{lock}:state`, `{lock}:q`) and the wake channel under the default prefix.
const LOCK_PATTERNS: [&str; 3] = ["~rlock:*", "~{rlock:*", "&{rlock:*"];
/// What rlock sends to a Cluster besides: CLUSTER SLOTS for the slot map (and the listing's
/// masters), ASKING before a command redirected by ASK. (No PING: rlock routes by itself.)
const CLUSTER_COMMANDS: [&str; 2] = ["cluster|slots", "asking"];

fn cluster_commands() -> Vec<&'static str> {
    LOCK_COMMANDS
        .iter()
        .chain(&CLUSTER_COMMANDS)
        .copied()
        .collect()
}

/// A password that must never show in any output.
const SECRET: &str = "Zq7-very-s3cret-pw";

/// `ACL SETUSER name on >SECRET resetkeys resetchannels PATTERNS… -@all +COMMAND…`.
fn set_user(server: &RedisServer, name: &str, patterns: &[&str], commands: &[&str]) {
    let pass = format!(">{SECRET}");
    let mut args = vec![
        "ACL",
        "SETUSER",
        name,
        "reset",
        "on",
        &pass,
        "resetkeys",
        "resetchannels",
    ];
    args.extend_from_slice(patterns);
    args.push("-@all");
    let plus: Vec<String> = commands.iter().map(|c| format!("+{c}")).collect();
    args.extend(plus.iter().map(String::as_str));
    assert_eq!(server.cmd(&args), redis::Value::Okay, "ACL SETUSER {name}");
}

/// The ACL LOG entries about `user`: every command or key it was refused, even inside a
/// best-effort step whose failure rlock swallowed.
fn acl_denials(server: &RedisServer, user: &str) -> Vec<String> {
    let entries: Vec<HashMap<String, redis::Value>> = redis::cmd("ACL")
        .arg("LOG")
        .query(&mut server.conn())
        .expect("ACL LOG");
    entries
        .iter()
        .filter(|e| e.get("username") == Some(&redis::Value::BulkString(user.as_bytes().into())))
        .map(|e| {
            let text = |k: &str| match e.get(k) {
                Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                other => format!("{other:?}"),
            };
            format!(
                "{} {} ({})",
                text("reason"),
                text("object"),
                text("context")
            )
        })
        .collect()
}

/// `rlock --url redis://USER:SECRET@127.0.0.1:PORT`.
fn as_user(server: &RedisServer, user: &str) -> Command {
    let mut cmd = rlock();
    cmd.arg("--url").arg(format!(
        "redis://{user}:{SECRET}@127.0.0.1:{}",
        server.port()
    ));
    cmd
}

/// One user's rlock runs against one server, every output kept.
struct Session<'a> {
    server: &'a RedisServer,
    user: &'a str,
    outputs: Vec<Output>,
}

impl Session<'_> {
    /// Runs rlock with `args` as the user; an exit code other than `code` is an error.
    fn step(&mut self, what: &str, code: i32, args: &[&str]) -> Result<Output, String> {
        let out = run(as_user(self.server, self.user).args(args));
        self.outputs.push(out.clone());
        if out.code == code {
            Ok(out)
        } else {
            Err(format!("{what}: expected exit {code}, got {out}"))
        }
    }

    /// Every path of rlock's protocol: acquire, busy, renew (with and without a new TTL),
    /// inspect of a held, a queued and a free lock, the listing, a waiter that gives up first
    /// in line, a waiter woken by a release, a repeated release, renew and release by a token
    /// that no longer owns the lock, forced release of a held and of a free lock, and exec.
    /// Stops at the first step that does not do what it should.
    fn lifecycle(&mut self) -> Result<(), String> {
        let dir = tempdir();
        let out = self.step(
            "acquire",
            0,
            &["acquire", "--json", "-k", "life", "--ttl", "30s"],
        )?;
        let token = token_of(&out);
        let first_fence = fence_of(&out);
        self.step("busy", 75, &["acquire", "-n", "-k", "life"])?;
        self.step("renew", 0, &["renew", "-k", "life", "--token", &token])?;
        self.step(
            "renew --ttl",
            0,
            &["renew", "-k", "life", "--token", &token, "--ttl", "40s"],
        )?;
        self.step("inspect held", 0, &["inspect", "-k", "life"])?;
        self.step("inspect free", 1, &["inspect", "-k", "free"])?;
        let out = self.step("listing", 0, &["inspect", "--json"])?;
        if !out.stdout.contains(&token) {
            return Err(format!("the listing does not show the lock: {out}"));
        }
        // First in line, gives up: it leaves the queue and, being first, checks the lock.
        self.step(
            "waiter that gives up",
            75,
            &["acquire", "-w", "300ms", "-k", "life"],
        )?;
        let mut waiter = Bg::spawn_group(
            "waiter",
            dir.path(),
            as_user(self.server, self.user).args([
                "exec",
                "-w",
                "30s",
                "-k",
                "life",
                "--",
                "sh",
                "-c",
                "echo $RLOCK_FENCE",
            ]),
        );
        let server = self.server;
        let queued = wait_until_or(SOON, || {
            !waiter.running()
                || matches!(
                    server.try_cmd(&["ZCARD", "{rlock:life}:q"]),
                    Ok(redis::Value::Int(1))
                )
        });
        if !queued || !waiter.running() {
            return Err(format!("the waiter did not queue: {}", waiter.describe()));
        }
        let out = self.step(
            "inspect with a waiter",
            0,
            &["inspect", "--json", "-k", "life"],
        )?;
        if json(&out)["waiters"] != 1 {
            return Err(format!("inspect does not count the waiter: {out}"));
        }
        self.step("release", 0, &["release", "-k", "life", "--token", &token])?;
        // Without a wake-up (no right to SUBSCRIBE, or to PUBLISH), the waiter would only find
        // out when the holder's 30 s lease would have ended.
        if !wait_until_or(SOON, || !waiter.running()) {
            return Err(format!(
                "the release did not wake the waiter: {}",
                waiter.describe()
            ));
        }
        let (out, _) = waiter.finish(SOON);
        self.outputs.push(out.clone());
        let later = out
            .stdout
            .trim()
            .parse::<i64>()
            .is_ok_and(|f| f > first_fence);
        if out.code != 0 || !later {
            return Err(format!("the woken waiter: {out}"));
        }
        let out = self.step("acquire again", 0, &["acquire", "--json", "-k", "life"])?;
        let token = token_of(&out);
        self.step("release", 0, &["release", "-k", "life", "--token", &token])?;
        self.step(
            "repeated release",
            0,
            &["release", "-k", "life", "--token", &token],
        )?;
        self.step(
            "renew after release",
            77,
            &["renew", "-k", "life", "--token", &token],
        )?;
        self.step("acquire a third time", 0, &["acquire", "-k", "life"])?;
        self.step(
            "release by another token",
            77,
            &["release", "-k", "life", "--token", &token],
        )?;
        self.step("forced release", 0, &["release", "-k", "life", "--force"])?;
        self.step(
            "forced release of a free lock",
            0,
            &["release", "-k", "life", "--force"],
        )?;
        self.step("exec", 0, &["exec", "-k", "life", "--", "true"])?;
        // A semaphore and a shared lock (issue 13).
        let mut tokens = Vec::new();
        for what in ["a semaphore's first slot", "its second slot"] {
            let out = self.step(what, 0, &["acquire", "-k", "sem", "--limit", "2", "-n"])?;
            tokens.push(out.stdout.trim().to_string());
        }
        self.step(
            "a semaphore asked with another N",
            65,
            &["acquire", "-k", "sem", "--limit", "3", "-n"],
        )?;
        self.step(
            "renew a slot",
            0,
            &["renew", "-k", "sem", "--token", &tokens[0]],
        )?;
        self.step("inspect a semaphore", 0, &["inspect", "-k", "sem"])?;
        for token in &tokens {
            self.step(
                "release a slot",
                0,
                &["release", "-k", "sem", "--token", token],
            )?;
        }
        self.step(
            "exec --shared",
            0,
            &["exec", "-k", "sem", "--shared", "--", "true"],
        )?;
        Ok(())
    }
}

/// Polls `cond` every 10 ms; false if it did not hold within `timeout`.
fn wait_until_or(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while !cond() {
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(10));
    }
    true
}

#[test]
fn acl_user_with_only_the_documented_rights_runs_the_whole_lifecycle() {
    let server = RedisServer::start();
    set_user(&server, "locker", &LOCK_PATTERNS, &LOCK_COMMANDS);
    let mut session = Session {
        server: &server,
        user: "locker",
        outputs: Vec::new(),
    };
    if let Err(e) = session.lifecycle() {
        panic!("{e}\nACL LOG: {:?}", acl_denials(&server, "locker"));
    }
    assert_eq!(
        acl_denials(&server, "locker"),
        Vec::<String>::new(),
        "nothing may have been refused, not even in a best-effort step"
    );
    for out in &session.outputs {
        assert!(
            !out.stdout.contains(SECRET) && !out.stderr.contains(SECRET),
            "{out}"
        );
    }
}

#[test]
fn acl_every_documented_right_is_needed() {
    let server = RedisServer::start();
    let mut ok = Vec::new();
    for missing in LOCK_COMMANDS
        .iter()
        .map(|c| format!("+{c}"))
        .chain(LOCK_PATTERNS.map(String::from))
    {
        let user = format!("without-{}", missing.trim_start_matches(['+', '~', '&']));
        let commands: Vec<&str> = LOCK_COMMANDS
            .iter()
            .copied()
            .filter(|c| format!("+{c}") != missing)
            .collect();
        let patterns: Vec<&str> = LOCK_PATTERNS
            .iter()
            .copied()
            .filter(|p| *p != missing)
            .collect();
        set_user(&server, &user, &patterns, &commands);
        // Without a cached script EVAL is needed: start every run from an empty cache.
        server.cmd(&["SCRIPT", "FLUSH"]);
        server.cmd(&["FLUSHALL"]);
        let result = Session {
            server: &server,
            user: &user,
            outputs: Vec::new(),
        }
        .lifecycle();
        let denials = acl_denials(&server, &user);
        if result.is_ok() && denials.is_empty() {
            ok.push(missing);
        }
    }
    assert_eq!(
        ok,
        Vec::<String>::new(),
        "rlock ran its whole lifecycle without these rights: the documented ACL is not minimal"
    );
}

#[test]
fn acl_user_without_evalsha_and_eval_gets_77() {
    let server = RedisServer::start();
    let commands: Vec<&str> = LOCK_COMMANDS
        .iter()
        .copied()
        .filter(|c| !matches!(*c, "evalsha" | "eval"))
        .collect();
    set_user(&server, "noscripts", &LOCK_PATTERNS, &commands);
    for args in [
        &["acquire", "-n", "-k", KEY][..],
        &["exec", "-k", KEY, "--", "true"],
        &["inspect", "-k", KEY],
        &["release", "-k", KEY, "--force"],
    ] {
        let out = run(as_user(&server, "noscripts").args(args));
        assert_eq!(out.code, 77, "{args:?}: {out}");
        assert_eq!(out.stderr.lines().count(), 1, "{out}");
        assert!(
            out.stderr.contains("ACL") || out.stderr.contains("permission"),
            "{args:?}: the message must point at the user's rights: {out}"
        );
        assert!(!out.stderr.contains(SECRET), "{out}");
    }
    assert!(!server.exists(LOCK) && !server.exists(STATE));
}

#[test]
fn acl_wrong_password_is_77_and_no_password_is_ever_printed() {
    let server = RedisServer::start_with(&["--requirepass", SECRET]);
    set_user(&server, "locker", &LOCK_PATTERNS, &LOCK_COMMANDS);
    let dir = tempdir();
    let pwfile = dir.path().join("pw");
    fs::write(&pwfile, format!("{SECRET}\n")).expect("write password file");
    let wrong = "Wr0ng-s3cret-guess";
    let wrongfile = dir.path().join("wrong");
    fs::write(&wrongfile, wrong).expect("write password file");
    let url = server.url();
    let user_url = format!("redis://locker:{SECRET}@127.0.0.1:{}", server.port());
    let wrong_url = format!("redis://locker:{wrong}@127.0.0.1:{}", server.port());
    let mut outputs = Vec::new();
    let mut check = |code: i32, cmd: &mut Command| {
        let out = run(cmd);
        assert_eq!(
            out.code,
            code,
            "{:?}: {out}",
            cmd.get_args().collect::<Vec<_>>()
        );
        outputs.push(out);
    };

    // Wrong passwords, every way a password can be given: 77.
    check(
        77,
        rlock().args(["-v", "--url", &wrong_url, "acquire", "-n", "-k", KEY]),
    );
    check(
        77,
        rlock()
            .arg("--url")
            .arg(&url)
            .arg("--password-file")
            .arg(&wrongfile)
            .args(["-v", "inspect"]),
    );
    check(
        77,
        rlock()
            .env("RLOCK_PASSWORD", wrong)
            .args(["--url", &url, "exec", "-k", KEY, "--", "true"]),
    );
    check(
        77,
        rlock()
            .env("REDISCLI_AUTH", wrong)
            .args(["--url", &url, "release", "-k", KEY, "--force"]),
    );
    check(
        77,
        rlock().args(["--url", &url, "acquire", "-n", "-k", KEY]),
    );
    assert!(!server.exists(LOCK));

    // Right ones, verbose, including failures that print the URL.
    check(
        0,
        rlock().args(["-v", "--url", &user_url, "acquire", "-k", KEY]),
    );
    check(
        75,
        rlock().args(["-v", "--url", &user_url, "acquire", "-n", "-k", KEY]),
    );
    check(
        0,
        rlock()
            .arg("--url")
            .arg(&url)
            .arg("--password-file")
            .arg(&pwfile)
            .args(["-v", "inspect"]),
    );
    check(
        0,
        rlock()
            .env("RLOCK_PASSWORD", SECRET)
            .args(["-v", "--url", &url, "release", "-k", KEY, "--force"]),
    );
    check(
        0,
        rlock()
            .env("RLOCK_URL", &user_url)
            .args(["-v", "exec", "-k", KEY, "--", "true"]),
    );
    check(
        77,
        rlock().args([
            "-v",
            "--url",
            &user_url,
            "release",
            "-k",
            KEY,
            "--token",
            "not-the-owner",
        ]),
    );
    let unreachable = format!("redis://locker:{SECRET}@127.0.0.1:1");
    check(
        69,
        rlock().args(["-v", "--url", &unreachable, "acquire", "-n", "-k", KEY]),
    );
    let malformed = format!("redis://locker:{SECRET}@127.0.0.1:notaport");
    check(
        78,
        rlock().args(["-v", "--url", &malformed, "acquire", "-n", "-k", KEY]),
    );
    // Two different dead masters (the same one twice is refused as not independent: 78).
    let unreachable_too = format!("redis://locker:{SECRET}@127.0.0.1:2");
    let redlock = [&user_url, &unreachable, &unreachable_too];
    check(
        69,
        rlock()
            .args(redlock.iter().flat_map(|u| ["--url", u.as_str()]))
            .args(["-v", "acquire", "-n", "-k", KEY]),
    );

    for out in &outputs {
        for secret in [SECRET, wrong] {
            assert!(
                !out.stdout.contains(secret) && !out.stderr.contains(secret),
                "a password was printed: {out}"
            );
        }
    }
    assert!(
        outputs.iter().any(|o| o.stderr.contains("locker:***@")),
        "-v should show the URL with the password redacted"
    );
}

#[test]
fn acl_cluster_user_with_the_documented_rights_and_no_fewer() {
    let cluster = RedisCluster::start();
    let full = cluster_commands();
    for node in cluster.nodes() {
        set_user(node, "locker", &LOCK_PATTERNS, &full);
        // (+asking is proved needed by the slot-migration test.)
        let missing = "cluster|slots";
        let fewer: Vec<&str> = full.iter().copied().filter(|c| *c != missing).collect();
        set_user(node, &format!("no-{missing}"), &LOCK_PATTERNS, &fewer);
    }
    let keys = keys_on_every_master(&cluster, 6);
    let dir = tempdir();
    for (name, owner) in &keys {
        let out = expect(
            0,
            clustered_as(&cluster, "locker").args(["acquire", "--json", "-k", name]),
        );
        let token = token_of(&out);
        assert!(here(cluster.node(*owner), &format!("rlock:{name}")));
        let mut waiter = Bg::spawn_group(
            &format!("waiter-{name}"),
            dir.path(),
            clustered_as(&cluster, "locker").args(["exec", "-w", "30s", "-k", name, "--", "true"]),
        );
        let queue = format!("{{rlock:{name}}}:q");
        waiter.wait_for("the waiter to queue", SOON, || {
            matches!(
                cluster.node(*owner).try_cmd(&["ZCARD", &queue]),
                Ok(redis::Value::Int(1))
            )
        });
        let out = expect(
            0,
            clustered_as(&cluster, "locker").args(["inspect", "--json"]),
        );
        assert_eq!(
            json(&out)[0]["token"].as_str(),
            Some(token.as_str()),
            "{out}"
        );
        expect(
            0,
            clustered_as(&cluster, "locker").args(["release", "-k", name, "--token", &token]),
        );
        let (out, _) = waiter.finish(Duration::from_secs(1));
        assert_eq!(out.code, 0, "{out}");
    }
    for node in cluster.nodes() {
        assert_eq!(
            acl_denials(node, "locker"),
            Vec::<String>::new(),
            "port {}",
            node.port()
        );
    }
    let missing = "cluster|slots";
    let user = format!("no-{missing}");
    let out = run(clustered_as(&cluster, &user).args(["acquire", "-n", "-k", &keys[0].0]));
    assert_ne!(out.code, 0, "without +{missing}: {out}");
    assert!(!out.stderr.contains(SECRET), "{out}");
    assert!(
        cluster
            .nodes()
            .iter()
            .any(|n| !acl_denials(n, &user).is_empty()),
        "without +{missing} something must have been refused: {out}"
    );
}

#[test]
fn acl_cluster_refusals_are_77() {
    let cluster = RedisCluster::start();
    let fewer: Vec<&str> = cluster_commands()
        .into_iter()
        .filter(|c| *c != "cluster|slots")
        .collect();
    for node in cluster.nodes() {
        set_user(node, "locker", &LOCK_PATTERNS, &cluster_commands());
        set_user(node, "no-slots", &LOCK_PATTERNS, &fewer);
    }
    let mut wrong = rlock();
    wrong.arg("--cluster");
    for node in cluster.nodes() {
        wrong.arg("--url").arg(format!(
            "redis://locker:wrong-password@127.0.0.1:{}",
            node.port()
        ));
    }
    let out = run(wrong.args(["acquire", "-n", "-k", KEY]));
    assert_eq!(out.code, 77, "wrong password: {out}");
    let out = run(clustered_as(&cluster, "no-slots").args(["acquire", "-n", "-k", KEY]));
    assert_eq!(out.code, 77, "a user without +cluster|slots: {out}");
}
