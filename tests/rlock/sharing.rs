//! Semaphores (`--limit N`) and shared locks (`--shared`). Every test runs real servers; what
//! ran at the same time is judged by the commands' own marks (a directory entry per running
//! section, counted from inside), never by rlock's exit times.

use crate::common::{Background, RedisCluster, RedisServer, rlock, rlock_at, run, wait_until};
use nix::sys::signal::Signal;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const SOON: Duration = Duration::from_secs(20);

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("rlock-sharing-test-")
        .tempdir()
        .expect("create temp dir")
}

/// A critical section for `sh -c`: marks itself in `$D/$1/` while it runs, and writes how many
/// sections of each kind it saw running (`readers writers`) to `$D/seen`, at its start and end.
const SECTION: &str = r#"kind=$1
mkdir -p "$D/r" "$D/w"
mkdir "$D/$kind/$$"
look() { echo "$kind $(ls "$D/r" | wc -l) $(ls "$D/w" | wc -l)" >> "$D/seen"; }
look; sleep 0.15; look
rmdir "$D/$kind/$$""#;

/// What the sections saw: (kind, readers running, writers running), one per look.
fn seen(dir: &Path) -> Vec<(String, usize, usize)> {
    std::fs::read_to_string(dir.join("seen"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[0].to_string(),
                f[1].parse().expect("a count"),
                f[2].parse().expect("a count"),
            )
        })
        .collect()
}

/// A worker that runs `rounds` sections under `rlock exec -k k OPTS`, each a fresh rlock.
fn worker(
    server: &RedisServer,
    dir: &Path,
    name: &str,
    opts: &str,
    kind: &str,
    rounds: usize,
) -> Background {
    let script = format!(
        r#"i=0
while [ $i -lt {rounds} ]; do
  "$RL" --url "$URL" exec -k k {opts} -w 60s -- sh -c "$SECTION" section {kind} || echo "{name}: exit $?" >> "$D/errors"
  i=$((i+1))
done"#
    );
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(script)
        .env("RL", env!("CARGO_BIN_EXE_rlock"))
        .env("URL", server.url())
        .env("SECTION", SECTION);
    Background::spawn_group(name, dir, &mut cmd)
}

fn finish_all(workers: &mut [Background], dir: &Path) {
    for w in workers.iter_mut() {
        let (out, _) = w.finish(Duration::from_secs(120));
        assert_eq!(out.code, 0, "{out}");
    }
    let errors = std::fs::read_to_string(dir.join("errors")).unwrap_or_default();
    assert!(errors.is_empty(), "failed runs:\n{errors}");
}

#[test]
fn a_semaphore_never_admits_more_than_its_limit() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let mut workers: Vec<Background> = (0..5)
        .map(|i| worker(&server, d, &format!("w{i}"), "--limit 2", "w", 6))
        .collect();
    finish_all(&mut workers, d);
    let seen = seen(d);
    assert_eq!(seen.len(), 5 * 6 * 2, "every section looked twice");
    let most = seen.iter().map(|s| s.2).max().unwrap_or(0);
    assert!(
        most <= 2,
        "{most} sections ran at once under --limit 2: {seen:?}"
    );
    assert_eq!(
        most, 2,
        "never two at once: the semaphore admitted one at a time"
    );
    assert!(!server.exists("rlock:k"), "the semaphore was left behind");
}

#[test]
fn readers_share_and_a_writer_runs_alone() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let mut workers: Vec<Background> = (0..4)
        .map(|i| worker(&server, d, &format!("r{i}"), "--shared", "r", 6))
        .collect();
    workers.extend((0..2).map(|i| worker(&server, d, &format!("w{i}"), "", "w", 4)));
    finish_all(&mut workers, d);
    let seen = seen(d);
    assert_eq!(seen.len(), (4 * 6 + 2 * 4) * 2);
    for (kind, readers, writers) in &seen {
        match kind.as_str() {
            "r" => assert_eq!(*writers, 0, "a reader ran beside a writer: {seen:?}"),
            _ => assert_eq!(
                (*readers, *writers),
                (0, 1),
                "a writer did not run alone: {seen:?}"
            ),
        }
    }
    assert!(
        seen.iter().any(|s| s.0 == "r" && s.1 >= 2),
        "readers never shared the lock: {seen:?}"
    );
}

#[test]
fn a_stream_of_readers_does_not_starve_a_writer() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    // Readers that overlap without pause: without a queue, the lock would never be free of them.
    let mut readers: Vec<Background> = (0..4)
        .map(|i| worker(&server, d, &format!("r{i}"), "--shared", "r", 40))
        .collect();
    wait_until("two readers at once", SOON, || {
        seen(d).iter().any(|s| s.1 >= 2)
    });
    let start = Instant::now();
    let out = run(rlock_at(&server)
        .args([
            "exec", "-k", "k", "-w", "20s", "--", "sh", "-c", SECTION, "section", "w",
        ])
        .env("D", d));
    let waited = start.elapsed();
    assert_eq!(out.code, 0, "{out}");
    // Each reader holds for 0.15 s: the writer waits for those that hold when it comes, then
    // the readers that came after it wait for the writer.
    assert!(
        waited < Duration::from_secs(5),
        "the writer waited {waited:?}"
    );
    for r in &readers {
        r.kill(Signal::SIGKILL);
    }
    for r in readers.iter_mut() {
        let _ = r.finish(SOON);
    }
    let seen = seen(d);
    assert!(seen.iter().any(|s| s.0 == "w"), "the writer ran");
    for (kind, readers, writers) in &seen {
        if kind == "w" {
            assert_eq!((*readers, *writers), (0, 1), "{seen:?}");
        } else {
            assert_eq!(*writers, 0, "{seen:?}");
        }
    }
}

/// `rlock exec --limit 2 -k k --ttl TTL` of a command that writes its token to `$D/NAME.token`
/// and heartbeats (`$D/NAME.beat`, a line every 50 ms) until it is stopped.
fn holder(server: &RedisServer, dir: &Path, name: &str, ttl: &str) -> Background {
    let script = format!(
        r#"echo "$RLOCK_TOKEN" > "$D/{name}.token.tmp" && mv "$D/{name}.token.tmp" "$D/{name}.token"
while :; do echo beat >> "$D/{name}.beat"; sleep 0.05; done"#
    );
    Background::spawn_group(
        name,
        dir,
        rlock_at(server).args([
            "exec", "-k", "k", "--limit", "2", "--ttl", ttl, "--", "sh", "-c", &script,
        ]),
    )
}

fn token_of(dir: &Path, name: &str) -> String {
    let path = dir.join(format!("{name}.token"));
    wait_until(&format!("{name}'s token"), SOON, || path.exists());
    std::fs::read_to_string(path)
        .expect("token")
        .trim()
        .to_string()
}

fn beats(dir: &Path, name: &str) -> usize {
    std::fs::read_to_string(dir.join(format!("{name}.beat")))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

#[test]
fn a_holder_that_dies_frees_its_slot_within_its_ttl() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let mut a = holder(&server, d, "a", "2s");
    let mut b = holder(&server, d, "b", "2s");
    token_of(d, "a");
    token_of(d, "b");
    // Both rlocks die without a word; their commands are stopped by the group kill.
    for h in [&a, &b] {
        nix::sys::signal::killpg(nix::unistd::Pid::from_raw(h.pid()), Signal::SIGKILL)
            .expect("kill the group");
    }
    let killed = Instant::now();
    let _ = a.finish(SOON);
    let _ = b.finish(SOON);
    let out =
        run(rlock_at(&server).args(["exec", "-k", "k", "--limit", "2", "-w", "10s", "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    let took = killed.elapsed();
    assert!(
        took < Duration::from_millis(2000 + 1500),
        "a slot of a dead holder freed after {took:?}, past its 2s lease"
    );
}

#[test]
fn a_lost_slot_stops_that_holder_only() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let mut a = holder(&server, d, "a", "3s");
    let mut b = holder(&server, d, "b", "3s");
    let token_a = token_of(d, "a");
    token_of(d, "b");
    // The slot of A goes behind rlock's back.
    server.cmd(&["ZREM", "rlock:k", &token_a]);
    let (out, _) = a.finish(SOON);
    assert_eq!(out.code, 76, "{out}");
    let after = beats(d, "b");
    b.wait_for("B's command going on", SOON, || beats(d, "b") >= after + 10);
    assert!(b.running(), "B was stopped with A");
    // `release --force` breaks every holder (here: B), and says whom.
    let out = run(rlock_at(&server).args(["release", "-k", "k", "--force"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("pid"), "{out}");
    let (out, _) = b.finish(SOON);
    assert_eq!(out.code, 76, "{out}");
    assert!(!server.exists("rlock:k"));
}

fn zcard(server: &RedisServer) -> i64 {
    redis::cmd("ZCARD")
        .arg("rlock:k")
        .query(&mut server.conn())
        .expect("ZCARD")
}

fn acquire_json(server: &RedisServer, opts: &[&str]) -> serde_json::Value {
    let out = run(rlock_at(server)
        .args(["acquire", "-k", "k", "--json", "-n"])
        .args(opts));
    assert_eq!(out.code, 0, "{out}");
    serde_json::from_str(&out.stdout).expect("acquire --json")
}

#[test]
fn semaphore_tokens_release_renew_and_mismatches() {
    let server = RedisServer::start();
    let a = acquire_json(&server, &["--limit", "2", "--ttl", "5s"]);
    let b = acquire_json(&server, &["--limit", "2", "--ttl", "5s"]);
    let (ta, tb) = (a["token"].as_str().unwrap(), b["token"].as_str().unwrap());
    assert!(b["fence"].as_i64() > a["fence"].as_i64(), "{a} {b}");
    // Full: a third waits no more than -n says.
    let out = run(rlock_at(&server).args(["acquire", "-k", "k", "--limit", "2", "-n"]));
    assert_eq!(out.code, 75, "{out}");
    assert!(out.stderr.contains("held 2/2"), "{out}");
    // Another N, an exclusive or a shared request: 65, naming the N in force; nothing changed.
    for opts in [&["--limit", "3"][..], &[], &["--limit", "1"], &["--shared"]] {
        let out = run(rlock_at(&server)
            .args(["acquire", "-k", "k", "-n"])
            .args(opts));
        assert_eq!(out.code, 65, "{opts:?}: {out}");
        assert!(out.stderr.contains("--limit 2"), "{opts:?}: {out}");
    }
    let out = run(rlock_at(&server).args(["exec", "-k", "k", "-n", "--", "true"]));
    assert_eq!(out.code, 65, "{out}");
    assert_eq!(zcard(&server), 2);
    // Renew by token, no --limit needed: the member's lease and the key's expiry grow.
    let out = run(rlock_at(&server).args(["renew", "-k", "k", "--token", ta, "--ttl", "60s"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(server.pttl("rlock:k") > 50_000);
    // Release by token; a retry succeeds; a stranger's token changes nothing.
    let out = run(rlock_at(&server).args(["release", "-k", "k", "--token", "nobody"]));
    assert_eq!(out.code, 77, "{out}");
    for _ in 0..2 {
        let out = run(rlock_at(&server).args(["release", "-k", "k", "--token", ta]));
        assert_eq!(out.code, 0, "{out}");
    }
    assert_eq!(zcard(&server), 1);
    // The key now lives as long as B's lease.
    assert!(
        server.pttl("rlock:k") <= 5_000,
        "{}",
        server.pttl("rlock:k")
    );
    let out = run(rlock_at(&server).args(["acquire", "-k", "k", "--limit", "2", "--export", "-n"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stdout.contains("RLOCK_TOKEN=") && out.stdout.contains("RLOCK_FENCE="),
        "{out}"
    );
    // inspect: held 2/2 and both holders, in text and JSON.
    let out = run(rlock_at(&server).args(["inspect", "-k", "k"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(out.stdout.contains("held 2/2"), "{out}");
    assert_eq!(out.stdout.matches(" pid ").count(), 2, "{out}");
    let out = run(rlock_at(&server).args(["inspect", "-k", "k", "--json"]));
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(json["limit"], 2, "{json}");
    assert_eq!(json["holders"].as_array().map(Vec::len), Some(2), "{json}");
    assert!(
        json["holders"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["token"] == tb),
        "{json}"
    );
    let out = run(rlock_at(&server).args(["inspect"]));
    assert!(out.stdout.contains("held 2/2"), "{out}");
    // Free again: any kind may take it.
    let out = run(rlock_at(&server).args(["release", "-k", "k", "--force"]));
    assert_eq!(out.code, 0, "{out}");
    acquire_json(&server, &["--limit", "3"]);
}

#[test]
fn shared_locks_in_inspect_and_usage_errors() {
    let server = RedisServer::start();
    for _ in 0..3 {
        acquire_json(&server, &["--shared"]);
    }
    let out = run(rlock_at(&server).args(["inspect", "-k", "k"]));
    assert!(out.stdout.contains("shared ×3"), "{out}");
    // An exclusive request waits for the readers.
    let out = run(rlock_at(&server).args(["acquire", "-k", "k", "-n"]));
    assert_eq!(out.code, 75, "{out}");
    assert!(!out.stderr.contains("exclusive request"), "{out}");
    // A reader that comes after a waiting writer queues behind it, and is told why: the
    // readers holding the lock would let it in.
    let dir = tempdir();
    let mut writer = Background::spawn(
        "writer",
        dir.path(),
        rlock_at(&server).args(["acquire", "-k", "k", "-w", "30s"]),
    );
    wait_until("the writer to queue", SOON, || {
        let out = run(rlock_at(&server).args(["inspect", "--json", "-k", "k"]));
        out.stdout.contains("\"waiters\":1")
    });
    let out = run(rlock_at(&server).args(["acquire", "-k", "k", "--shared", "-n"]));
    assert_eq!(out.code, 75, "{out}");
    assert!(
        out.stderr.contains("shared by") && out.stderr.contains("an exclusive request waits first"),
        "{out}"
    );
    writer.kill(Signal::SIGTERM);
    writer.finish(SOON);
    let out = run(rlock_at(&server).args(["acquire", "-k", "k", "--shared", "--limit", "2"]));
    assert_eq!(out.code, 2, "{out}");
    let out = run(rlock_at(&server).args(["acquire", "-k", "k", "--limit", "0"]));
    assert_eq!(out.code, 2, "{out}");
    // Redlock refuses both, saying why.
    let other = RedisServer::start();
    let third = RedisServer::start();
    for opts in [&["--shared"][..], &["--limit", "2"]] {
        let mut cmd = rlock();
        for s in [&server, &other, &third] {
            cmd.args(["--url", &s.url()]);
        }
        let out = run(cmd.args(["acquire", "-k", "x", "-n"]).args(opts));
        assert_eq!(out.code, 2, "{out}");
        assert!(out.stderr.contains("Redlock"), "{out}");
    }
}

#[test]
fn a_nested_exec_takes_no_second_slot() {
    let server = RedisServer::start();
    let dir = tempdir();
    let inner = format!(
        r#""$RL" --url "$URL" exec -k k --limit 2 -- "$RL" --url "$URL" inspect -k k --json > "{}/inner.json""#,
        dir.path().display()
    );
    let out = run(rlock_at(&server)
        .args(["exec", "-k", "k", "--limit", "2", "--", "sh", "-c", &inner])
        .env("RL", env!("CARGO_BIN_EXE_rlock"))
        .env("URL", server.url()));
    assert_eq!(out.code, 0, "{out}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("inner.json")).unwrap())
            .expect("inspect --json");
    assert_eq!(json["holders"].as_array().map(Vec::len), Some(1), "{json}");
}

#[test]
fn a_semaphore_works_on_a_cluster() {
    let cluster = RedisCluster::start();
    let clustered = || {
        let mut cmd = rlock();
        cmd.arg("--cluster");
        for url in cluster.urls() {
            cmd.arg("--url").arg(url);
        }
        cmd
    };
    let mut tokens = Vec::new();
    for _ in 0..2 {
        let out = run(clustered().args(["acquire", "-k", "k", "--limit", "2", "-n"]));
        assert_eq!(out.code, 0, "{out}");
        tokens.push(out.stdout.trim().to_string());
    }
    let out = run(clustered().args(["acquire", "-k", "k", "--limit", "2", "-n"]));
    assert_eq!(out.code, 75, "{out}");
    let out = run(clustered().args(["inspect", "-k", "k"]));
    assert!(out.stdout.contains("held 2/2"), "{out}");
    for t in &tokens {
        let out = run(clustered().args(["release", "-k", "k", "--token", t]));
        assert_eq!(out.code, 0, "{out}");
    }
    let out = run(clustered().args(["exec", "-k", "k", "--shared", "-n", "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
}

#[test]
fn expired_holders_decide_nothing() {
    let server = RedisServer::start();
    acquire_json(&server, &["--limit", "2", "--ttl", "300ms"]);
    wait_until("the slot to expire", SOON, || !server.exists("rlock:k"));
    // Nobody holds it: any kind may take it, and the first to come sets the kind.
    acquire_json(&server, &["--ttl", "300ms"]);
    wait_until("the lock to expire", SOON, || !server.exists("rlock:k"));
    acquire_json(&server, &["--shared", "--ttl", "5s"]);
    // Redis keeps the expired member until a script drops it; it must not count.
    server.cmd(&["ZADD", "rlock:k", "1", "ghost"]);
    let out = run(rlock_at(&server).args(["inspect", "-k", "k", "--json"]));
    let json: serde_json::Value = serde_json::from_str(&out.stdout).expect("json");
    assert_eq!(json["holders"].as_array().map(Vec::len), Some(1), "{json}");
    acquire_json(&server, &["--shared"]);
    assert_eq!(zcard(&server), 2, "the expired member was dropped");
}

/// Keys expire, nothing is left behind: a semaphore with holders, a waiter that gave up and
/// a released slot leaves nothing without an expiry, nor anything that outlives the last lease
/// by more than the helper keys' 60 s.
#[test]
fn a_semaphore_leaves_nothing_that_never_expires() {
    let server = RedisServer::start();
    let a = acquire_json(&server, &["--limit", "2", "--ttl", "2s"]);
    acquire_json(&server, &["--limit", "2", "--ttl", "2s"]);
    let out = run(rlock_at(&server).args(["acquire", "-k", "k", "--limit", "2", "-w", "300ms"]));
    assert_eq!(out.code, 75, "{out}");
    let out = run(rlock_at(&server).args([
        "release",
        "-k",
        "k",
        "--token",
        a["token"].as_str().unwrap(),
    ]));
    assert_eq!(out.code, 0, "{out}");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.conn())
        .expect("KEYS");
    assert!(!keys.is_empty());
    for key in keys {
        let pttl = server.pttl(&key);
        // The history of runs, which the release wrote, lives its own --history-ttl (30 days).
        let most = if key.ends_with("}:history") {
            30 * 86_400_000
        } else {
            2_000 + 60_000
        };
        assert!(
            (0..=most).contains(&pttl),
            "{key} has PTTL {pttl}: it must expire within the lease + 60 s"
        );
    }
}
