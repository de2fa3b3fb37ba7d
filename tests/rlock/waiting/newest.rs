//! Newest wins (`exec --newest`, `--cancel-running`): five deploys queued one after another run
//! the first and the last, the three between exit 79 at once; a holder that asked for it is
//! stopped for a newer run, and nothing of it runs once the newer one starts; runs that did not
//! ask for it keep their place; a message from a foreign writer stops nothing; Redlock refuses
//! it. On one Redis and on a Cluster (the same scenarios, on the master of the lock's slot).

use super::*;
use crate::common::RedisCluster;
use std::path::Path;
use std::process::Command;

/// The exit code of a run a newer one displaced (README, "Exit codes").
const SUPERSEDED: i32 = 79;

/// How soon a displaced waiter ends after the newer run joined the line: it is woken by a
/// message, not by the holder's lease (60 s here) nor by a check.
const AT_ONCE: Duration = Duration::from_secs(3);

/// Where the scenarios run: rlock's command line for the deployment, and the server that has
/// the lock's keys (the one Redis, or the master of the lock's slot).
struct Deployment<'a> {
    rlock: Box<dyn Fn() -> Command + 'a>,
    node: &'a RedisServer,
}

impl Deployment<'_> {
    /// `rlock exec -k k OPTIONS --label LABEL -- sh -c SCRIPT`, `$D` the test's dir; a lease of
    /// 60 s unless OPTIONS say.
    fn exec(&self, dir: &Path, options: &[&str], label: &str, script: &str) -> Command {
        let mut cmd = (self.rlock)();
        cmd.env("D", dir).args(["exec", "-k", KEY]);
        if !options.contains(&"--ttl") {
            cmd.args(["--ttl", "60s"]);
        }
        cmd.args(options);
        cmd.args(["--label", label, "--", "sh", "-c", script]);
        cmd
    }

    fn queue(&self) -> Vec<String> {
        queue(self.node)
    }

    /// Waits until the line holds `n` waiters; fails at once if one of `procs` ended.
    fn wait_queued(&self, n: usize, procs: &mut [Bg]) -> Vec<String> {
        wait_queued(self.node, n, procs)
    }
}

fn one_redis(server: &RedisServer) -> Deployment<'_> {
    Deployment {
        rlock: Box::new(|| rlock_at(server)),
        node: server,
    }
}

/// Through a Sentinel that names `server` as the master `locks`.
fn sentinel<'a>(
    server: &'a RedisServer,
    sentinel: &'a crate::common::LoneSentinel,
) -> Deployment<'a> {
    Deployment {
        rlock: Box::new(|| {
            let mut cmd = crate::common::rlock();
            crate::common::acl::suite_login_behind_sentinels(&mut cmd);
            cmd.args(["--sentinel", "locks", "--url", &sentinel.url()]);
            cmd
        }),
        node: server,
    }
}

fn cluster(cluster: &RedisCluster) -> Deployment<'_> {
    Deployment {
        rlock: Box::new(|| {
            let mut cmd = crate::common::rlock();
            cmd.arg("--cluster");
            for url in cluster.urls() {
                cmd.arg("--url").arg(url);
            }
            cmd
        }),
        node: cluster.node(cluster.owner(LOCK)),
    }
}

/// A command that says it started, then runs until `$D/go` exists.
const UNTIL_GO: &str = "touch \"$D/started\"; while [ ! -e \"$D/go\" ]; do sleep 0.02; done";

/// Waits until `file` in `dir` exists, failing at once if `proc` ended.
fn wait_for_file(dir: &Path, file: &str, proc: &mut Bg) {
    wait_until(
        &format!("{file} to appear"),
        Duration::from_secs(10),
        || {
            assert!(proc.running(), "ended first: {}", proc.describe());
            dir.join(file).exists()
        },
    );
}

/// Five deploys, each queued once the one before it waits: the first runs, each of the middle
/// three exits 79 at once when the next one queues (naming it), the last runs; the history says
/// who superseded whom, and the displaced run's events say it too.
fn five_deploys(d: &Deployment) {
    let dir = tempdir();
    let path = dir.path();
    let mut first = Bg::spawn(
        "d1",
        path,
        &mut d.exec(path, &["--newest"], "deploy-1", UNTIL_GO),
    );
    wait_for_file(path, "started", &mut first);
    let deploy = |i: usize| {
        let script = format!("touch \"$D/ran-{i}\"");
        let mut cmd = d.exec(path, &["--newest"], &format!("deploy-{i}"), &script);
        cmd.env("RLOCK_EVENTS", "json");
        Bg::spawn(&format!("d{i}"), path, &mut cmd)
    };
    let mut waiting = deploy(2);
    d.wait_queued(1, std::slice::from_mut(&mut waiting));
    for i in 3..=5 {
        let mut newer = deploy(i);
        let (out, _) = waiting.finish(AT_ONCE);
        assert_eq!(
            out.code,
            SUPERSEDED,
            "deploy-{} was not displaced: {out}",
            i - 1
        );
        assert!(
            out.stderr
                .contains(&format!("lock '{KEY}' was superseded by a newer run"))
                && out
                    .stderr
                    .contains(&format!("(deploy-{i}): this run left the line")),
            "the line names the newer run: {out}"
        );
        let event = out
            .stderr
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("an event is JSON"))
            .find(|e| e["event"] == "superseded")
            .unwrap_or_else(|| panic!("no superseded event: {out}"));
        assert_eq!(event["process.exit.code"], SUPERSEDED, "{event}");
        assert!(
            event["by"]
                .as_str()
                .unwrap_or_default()
                .contains(&format!("(deploy-{i})")),
            "{event}"
        );
        d.wait_queued(1, std::slice::from_mut(&mut newer));
        waiting = newer;
    }
    fs::write(path.join("go"), "").expect("write go");
    let (out, _) = first.finish(Duration::from_secs(10));
    assert_eq!(out.code, 0, "{out}");
    let (out, _) = waiting.finish(Duration::from_secs(10));
    assert_eq!(out.code, 0, "the last deploy runs: {out}");
    let ran: Vec<bool> = (2..=5)
        .map(|i| path.join(format!("ran-{i}")).exists())
        .collect();
    assert_eq!(ran, [false, false, false, true], "which deploys ran");
    assert!(d.queue().is_empty(), "{:?}", d.queue());

    // The history: the three in the middle superseded, each by the next.
    let out = run((d.rlock)().args(["inspect", "-k", KEY, "--history", "--json", "-n", "10"]));
    assert_eq!(out.code, 0, "{out}");
    let runs: Vec<serde_json::Value> = serde_json::from_str(&out.stdout).expect("JSON");
    for i in 2..=4 {
        let run = runs
            .iter()
            .find(|r| r["command"] == format!("deploy-{i}").as_str())
            .unwrap_or_else(|| panic!("deploy-{i} not on record: {out}"));
        assert_eq!(run["outcome"], "superseded", "{run}");
        assert_eq!(run["code"], SUPERSEDED, "{run}");
        let by = run["by"].as_str().unwrap_or_default();
        assert!(by.contains(&format!("(deploy-{})", i + 1)), "{run}");
    }
}

#[test]
fn five_deploys_with_newest_run_the_first_and_the_last() {
    let server = RedisServer::start();
    five_deploys(&one_redis(&server));
}

#[test]
fn five_deploys_with_newest_run_the_first_and_the_last_through_sentinel() {
    let mut server = RedisServer::start();
    server.join(crate::common::acl::Deployment::Sentinel);
    let s = crate::common::LoneSentinel::start("locks", server.port());
    five_deploys(&sentinel(&server, &s));
}

#[test]
fn five_deploys_with_newest_run_the_first_and_the_last_on_a_cluster() {
    let c = RedisCluster::start();
    five_deploys(&cluster(&c));
}

/// A holder that ran with --cancel-running gets --lost-signal when a newer run with it queues,
/// gives the lock back once its command is gone and exits 79; the newer run starts after the
/// holder's last heartbeat.
fn cancel_running(d: &Deployment) {
    let dir = tempdir();
    let path = dir.path();
    let beats = "trap 'echo stopped >> \"$D/holder.log\"; exit 3' TERM; \
                 while :; do date +%s%N >> \"$D/beats\"; sleep 0.02; done";
    let mut holder = Bg::spawn(
        "holder",
        path,
        &mut d.exec(path, &["--cancel-running"], "deploy-old", beats),
    );
    wait_for_file(path, "beats", &mut holder);
    let started = "date +%s%N > \"$D/newer-started\"";
    let mut newer = Bg::spawn(
        "newer",
        path,
        &mut d.exec(path, &["--cancel-running"], "deploy-new", started),
    );
    let (out, _) = holder.finish(AT_ONCE + Duration::from_secs(15));
    assert_eq!(out.code, SUPERSEDED, "{out}");
    assert!(
        out.stderr
            .contains("(deploy-new): its command was stopped (SIGTERM) and the lock handed on"),
        "{out}"
    );
    let log = fs::read_to_string(path.join("holder.log")).unwrap_or_default();
    assert_eq!(
        log.trim(),
        "stopped",
        "the holder's command got --lost-signal"
    );
    let (out, _) = newer.finish(Duration::from_secs(10));
    assert_eq!(out.code, 0, "the newest runs: {out}");
    let last_beat: u128 = fs::read_to_string(path.join("beats"))
        .expect("beats")
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .max()
        .expect("a heartbeat");
    let newer_started: u128 = fs::read_to_string(path.join("newer-started"))
        .expect("the newer run started")
        .trim()
        .parse()
        .expect("a time");
    assert!(
        last_beat < newer_started,
        "the old holder beat at {last_beat}, after the newer run started at {newer_started}"
    );
    let out = run((d.rlock)().args(["inspect", "-k", KEY, "--history", "--json"]));
    let runs: Vec<serde_json::Value> = serde_json::from_str(&out.stdout).expect("JSON");
    let old = runs
        .iter()
        .find(|r| r["command"] == "deploy-old")
        .unwrap_or_else(|| panic!("{out}"));
    assert_eq!(old["outcome"], "superseded", "{old}");
    assert!(
        old["by"]
            .as_str()
            .unwrap_or_default()
            .contains("(deploy-new)"),
        "{old}"
    );
}

#[test]
fn cancel_running_stops_the_holder_and_the_newest_runs() {
    let server = RedisServer::start();
    cancel_running(&one_redis(&server));
}

#[test]
fn cancel_running_stops_the_holder_and_the_newest_runs_on_a_cluster() {
    let c = RedisCluster::start();
    cancel_running(&cluster(&c));
}

/// Runs that did not ask for it are left alone: a waiter without --newest keeps its place, and
/// a holder without --cancel-running runs on through its renewals (which would read a
/// displacement); then each runs, in its order.
#[test]
fn runs_that_did_not_ask_keep_their_place() {
    let server = RedisServer::start();
    let d = one_redis(&server);
    let dir = tempdir();
    let path = dir.path();
    let mut holder = Bg::spawn(
        "holder",
        path,
        &mut d.exec(path, &["--newest", "--ttl", "3s"], "h", UNTIL_GO),
    );
    wait_for_file(path, "started", &mut holder);
    let mut procs = vec![Bg::spawn(
        "plain",
        path,
        &mut d.exec(path, &[], "plain", "touch \"$D/plain\""),
    )];
    let plain = d.wait_queued(1, &mut procs)[0].clone();
    procs.push(Bg::spawn(
        "newest",
        path,
        &mut d.exec(
            path,
            &["--cancel-running"],
            "newest",
            "test -e \"$D/plain\"",
        ),
    ));
    let line = d.wait_queued(2, &mut procs);
    assert_eq!(line[0], plain, "the plain waiter keeps its place");
    let renewed = || state(&server).get("renewed").cloned();
    let before = renewed();
    wait_until("the holder to renew", Duration::from_secs(5), || {
        renewed() != before
    });
    assert!(holder.running(), "{}", holder.describe());
    assert!(
        !state(&server).keys().any(|f| f.starts_with("x:")),
        "nobody was displaced: {:?}",
        state(&server)
    );
    fs::write(path.join("go"), "").expect("write go");
    procs.insert(0, holder);
    for p in &mut procs {
        let (out, _) = p.finish(Duration::from_secs(10));
        assert_eq!(out.code, 0, "{}: {out}", p.name());
    }
}

/// A --cancel-running holder woken by anyone's PUBLISH on its channel reads Redis (a renewal),
/// finds no displacement a newer run's script wrote, and runs on.
#[test]
fn a_foreign_message_does_not_stop_a_holder_that_asked_for_it() {
    let server = RedisServer::start();
    let d = one_redis(&server);
    let dir = tempdir();
    let path = dir.path();
    let mut holder = Bg::spawn(
        "holder",
        path,
        &mut d.exec(path, &["--cancel-running"], "h", UNTIL_GO),
    );
    wait_for_file(path, "started", &mut holder);
    let token = server.get(LOCK).expect("held");
    let channel = format!("{{{LOCK}}}:wake:{token}");
    let listening = || {
        let (_, n): (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channel)
            .query(&mut server.conn())
            .expect("PUBSUB NUMSUB");
        n == 1
    };
    wait_until("the holder to listen", Duration::from_secs(10), listening);
    let renewed = || state(&server).get("renewed").cloned();
    // Twice: the first change may be the holder's own check once it listens.
    for _ in 0..2 {
        let before = renewed();
        wait_until("the holder to check Redis", Duration::from_secs(10), || {
            server.cmd(&["PUBLISH", &channel, "x"]);
            renewed() != before
        });
    }
    assert!(holder.running(), "{}", holder.describe());
    fs::write(path.join("go"), "").expect("write go");
    let (out, _) = holder.finish(Duration::from_secs(10));
    assert_eq!(out.code, 0, "{out}");
}

/// Redlock has no one line to displace from: refused, exit 2, before anything is written.
#[test]
fn redlock_refuses_newest_wins() {
    let (a, b, c) = (
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    );
    for option in ["--newest", "--cancel-running"] {
        let mut cmd = crate::common::rlock();
        for s in [&a, &b, &c] {
            cmd.arg("--url").arg(s.url());
        }
        let out = run(cmd.args(["exec", "-k", KEY, option, "--", "true"]));
        assert_eq!(out.code, 2, "{out}");
        assert!(
            out.stderr.contains(&format!(
                "{option} is not available with several --url (Redlock)"
            )),
            "{out}"
        );
        assert!(
            !a.exists(LOCK) && !b.exists(LOCK) && !c.exists(LOCK),
            "{out}"
        );
    }
}
