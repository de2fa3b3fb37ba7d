//! Beyond one plain server, against real servers the tests start: Redlock over five independent
//! masters, a three-master Redis Cluster (and its failover), a master with replicas and three
//! Sentinels, TLS with a CA made in the test (verification on, mTLS), and an ACL user with only the
//! rights rlock needs.
//!
//! Frozen servers are SIGSTOPped: they keep their sockets (connections are accepted by the
//! kernel) and answer nothing, so whatever was sent to them runs when they are thawed. Timing
//! bounds are outcome bounds with generous slack on both sides; everything else is polled with
//! deadlines. Every server belongs to one test and is killed on drop; every background process
//! leads a process group of its own, killed on drop with the group of the child it runs.

mod acl;
mod cluster;
mod cluster_failover;
mod cluster_migration;
mod credentials;
mod managed_profile;
mod redlock;
mod redlock_hold;
mod redlock_losses;
mod redlock_members;
mod replicas;
mod scale_out_mistakes;
mod sentinel;
mod sentinel_faults;
mod suite_user;
mod tls;

use crate::common::acl::{Deployment, suite_login_behind_sentinels, suite_url};
use crate::common::{
    Background as Bg, Output, RedisCluster, RedisServer, Sentinels, TestCerts, TlsServer,
    pid_alive, rlock, run, wait_for_file, wait_until,
};
use std::collections::{BTreeSet, HashMap};
use std::fs::{self, File};
use std::path::Path;
use std::process::Command;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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

/// `n` independent masters for Redlock, started in parallel.
fn start_nodes(n: usize) -> Vec<RedisServer> {
    thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|_| {
                s.spawn(|| {
                    let mut node = RedisServer::start();
                    node.join(Deployment::Redlock);
                    node
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("start a redis-server"))
            .collect()
    })
}

/// The URL rlock reaches `port` by: with `RLOCK_TEST_ACL`, as the documented user.
fn url_of(port: u16) -> String {
    suite_url(port)
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

/// How long `node` has run, as INFO says (whole seconds).
fn uptime(node: &RedisServer) -> u64 {
    let info = match node.cmd(&["INFO", "server"]) {
        redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        redis::Value::VerbatimString { text, .. } => text,
        other => panic!("INFO server: {other:?}"),
    };
    info.lines()
        .find_map(|l| l.strip_prefix("uptime_in_seconds:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("uptime_in_seconds")
}

/// Waits until every one of `nodes` has surely run for `secs` seconds (INFO's whole seconds
/// may count one too many): a Redlock master that has run for less than the TTL asked for does
/// not vote where another master says the lock is held.
fn ran_for(nodes: &[RedisServer], secs: u64) {
    wait_until("the masters to have run long enough", SOON, || {
        nodes.iter().all(|n| uptime(n) > secs)
    });
}

/// Waits until every one of `nodes` has surely run for longer than the longest lease any of them
/// reports for the lock (its PTTL; INFO's whole seconds may count one too many): a Redlock
/// master that has run for less does not vote where another master says the lock is held.
fn outlasted(nodes: &[RedisServer]) {
    wait_until(
        "the masters to outlast the leases they report",
        SOON,
        || {
            let longest = nodes.iter().map(|n| n.pttl(LOCK)).max().unwrap_or(0);
            nodes
                .iter()
                .all(|n| uptime(n) * 1000 > longest.max(0) as u64 + 2_000)
        },
    );
}

/// `rlock --url N1 --url N2 …`: Redlock over `nodes`.
fn redlock(nodes: &[RedisServer]) -> Command {
    let mut cmd = rlock();
    for n in nodes {
        cmd.arg("--url").arg(url_of(n.port()));
    }
    cmd
}

/// A proxy in front of `node` that accepts connections and drops every byte: whoever reaches
/// the node through it finds it slow for as long as the proxy lives.
fn blackholed(node: &RedisServer) -> crate::common::Proxy {
    let proxy = crate::common::Proxy::start(node.port());
    proxy.set(crate::common::Mode::Blackhole);
    proxy
}

/// Redlock over the first two of three `nodes` directly and over the third through `third`.
fn redlock_via(nodes: &[RedisServer], third: &crate::common::Proxy) -> Command {
    let mut cmd = redlock(&nodes[..2]);
    cmd.arg("--url").arg(url_of(third.port()));
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

/// The commands rlock sends to one Redis, its own (EVALSHA, EVAL on NOSCRIPT, SCAN for the
/// listing, SUBSCRIBE for waiting) and those its scripts call, which ACLs check too.
/// docs/connecting.md documents the same list.
const LOCK_COMMANDS: [&str; 29] = [
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
    // The history of runs (exec writes it, inspect --history reads it).
    "xadd",
    "xrevrange",
    // A run's entry of its start gives way to the entry of its end.
    "xdel",
];

/// The keys (lock, `{lock}:state`, `{lock}:q`, `{lock}:history`) and the wake channel under the default prefix.
const LOCK_PATTERNS: [&str; 3] = ["~rlock:*", "~{rlock:*", "&{rlock:*"];

fn cluster_commands() -> Vec<&'static str> {
    LOCK_COMMANDS
        .iter()
        .chain(&CLUSTER_COMMANDS)
        .copied()
        .collect()
}

/// What a Redlock master's user needs besides: INFO (server and replication, plain commands),
/// with which each master says which server it is and that it is no replica.
const REDLOCK_COMMANDS: [&str; 1] = ["info"];

fn redlock_commands() -> Vec<&'static str> {
    LOCK_COMMANDS
        .iter()
        .chain(&REDLOCK_COMMANDS)
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
        // A listing asks INFO to tell a cluster node; a user without the right lists as usual,
        // and the refused INFO is logged (docs/connecting.md).
        .filter(|d| d != "command info (toplevel)")
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

/// What rlock sends to a Cluster besides: CLUSTER SLOTS for the slot map (and the listing's
/// masters), ASKING before a command redirected by ASK. (No PING: rlock routes by itself.)
const CLUSTER_COMMANDS: [&str; 2] = ["cluster|slots", "asking"];
