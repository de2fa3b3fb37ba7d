//! `--replicas N`: a grant and every renewal count only once N replicas have them (Redis WAIT
//! on the connection that wrote). Against a real master with a real replica: the replica has
//! the lock when `acquire` returns; too few replicas gives the grant back and exits 69; a
//! replica killed while `exec` runs stops the command before the lease the replica knows of can
//! end. And `--user`: the ACL user for the master that Sentinels name.

use crate::common::{
    Background, RedisCluster, RedisServer, Sentinels, rlock, rlock_at, run, wait_for_file,
    wait_until,
};
use std::fs;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const SOON: Duration = Duration::from_secs(10);

/// A replica of `master`, returned once its link is up and the master counts it.
pub(super) fn replica_of(master: &RedisServer) -> RedisServer {
    let replica =
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
    wait_until("the replica's link to its master", SOON, || {
        info(&replica, "replication").contains("master_link_status:up")
            && info(master, "replication").contains("connected_slaves:1")
    });
    replica
}

fn info(server: &RedisServer, section: &str) -> String {
    match server.cmd(&["INFO", section]) {
        redis::Value::BulkString(b) => String::from_utf8_lossy(&b).into_owned(),
        redis::Value::VerbatimString { text, .. } => text,
        other => panic!("INFO {section} answered {other:?}"),
    }
}

/// How many WAIT commands the server has run.
fn waits(server: &RedisServer) -> u64 {
    info(server, "commandstats")
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_wait:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("a WAIT call count"))
}

/// `out` is a grant that too few replicas acknowledged: 69, saying `why` and naming the lock,
/// no token printed, and the lock key gone from the master (given back, not left to its TTL).
fn assert_given_back(out: &crate::common::Output, master: &RedisServer, why: &str) {
    assert_eq!(out.code, 69, "{out}");
    assert!(out.stderr.contains(why), "{out}");
    assert!(out.stderr.contains("lock 'r'"), "names the lock: {out}");
    assert!(out.stderr.contains("given back"), "{out}");
    assert_eq!(out.stdout, "", "no token for a grant given back: {out}");
    assert!(!master.exists("rlock:r"), "the grant was left behind");
}

/// `exec -k r -w 5s -- touch MARKER`: the marker says whether the command ran.
fn exec_touching(marker: &std::path::Path) -> Vec<&str> {
    let marker = marker.to_str().expect("a UTF-8 temp path");
    vec!["exec", "-k", "r", "-w", "5s", "--", "touch", marker]
}

fn now_ms() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i128
}

fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("rlock-replicas-test-")
        .tempdir()
        .expect("create temp dir")
}

#[test]
fn a_grant_and_a_renewal_wait_for_a_real_replica() {
    let master = RedisServer::start();
    let replica = replica_of(&master);

    let out =
        run(rlock_at(&master).args(["--replicas", "1", "acquire", "-k", "r", "--ttl", "30s"]));
    assert_eq!(out.code, 0, "{out}");
    let token = out.stdout.trim().to_string();
    // WAIT returned only once the replica had the write: it holds the lock now.
    assert_eq!(replica.get("rlock:r").as_deref(), Some(token.as_str()));
    assert_eq!(waits(&master), 1, "one WAIT after the grant");

    let out = run(rlock_at(&master)
        .args([
            "--replicas",
            "1",
            "renew",
            "-k",
            "r",
            "--ttl",
            "60s",
            "--token",
        ])
        .arg(&token));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(waits(&master), 2, "one WAIT after the renewal");
    assert!(
        replica.pttl("rlock:r") > 30_000,
        "the replica has the renewed lease"
    );

    // Without --replicas nothing waits; RLOCK_REPLICAS is read as --replicas.
    let out = run(rlock_at(&master).args(["acquire", "-k", "plain", "-n"]));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(waits(&master), 2, "no WAIT without --replicas");
    let out = run(rlock_at(&master)
        .env("RLOCK_REPLICAS", "1")
        .args(["acquire", "-k", "env", "-n"]));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(waits(&master), 3, "RLOCK_REPLICAS=1 waits too");
    // A busy answer is no write to wait for.
    let out = run(rlock_at(&master).args(["--replicas", "1", "acquire", "-k", "r", "-n"]));
    assert_eq!(out.code, 75, "{out}");
    assert_eq!(waits(&master), 3, "no WAIT after a busy answer");
}

#[test]
fn too_few_replicas_give_the_grant_back_and_exit_69() {
    let master = RedisServer::start();
    let _replica = replica_of(&master);

    // One replica, two asked for: the grant is given back at once, not left to its TTL. (A
    // wait rides the shortfall out, as after a failover; one that has had no other answer, for
    // --connect-timeout.)
    let started = Instant::now();
    let out = run(rlock_at(&master).args([
        "--replicas",
        "2",
        "--op-timeout",
        "300ms",
        "--connect-timeout",
        "0",
        "acquire",
        "-k",
        "r",
        "--ttl",
        "1h",
    ]));
    assert_given_back(&out, &master, "only 1 of 2 replicas acknowledged the grant");
    // WAIT waited its --op-timeout for the missing replica, and no more than that by much.
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "took {took:?}"
    );
    // The key is free for the next one at once.
    let out = run(rlock_at(&master).args(["acquire", "-k", "r", "-n"]));
    assert_eq!(out.code, 0, "{out}");
}

#[test]
fn no_replica_at_all_is_69_for_acquire_and_exec_and_the_command_never_runs() {
    let master = RedisServer::start();
    let dir = tempdir();
    let marker = dir.path().join("ran");
    // A wait (-w) rides out a shortfall of replicas, as after a failover, until it ends: 69.
    for sub in [
        vec!["acquire", "-k", "r", "-w", "5s"],
        exec_touching(&marker),
    ] {
        let out = run(rlock_at(&master)
            .args(["--replicas", "1", "--op-timeout", "200ms"])
            .args(&sub));
        assert_given_back(&out, &master, "only 0 of 1 replicas acknowledged the grant");
    }
    assert!(
        !marker.exists(),
        "exec ran its command without the replicas"
    );
}

#[test]
fn a_replica_killed_mid_exec_stops_the_command_before_the_lease_it_knows_ends() {
    let master = RedisServer::start();
    let mut replica = replica_of(&master);
    let dir = tempdir();
    let d = dir.path();
    // The command writes a heartbeat (ms since the epoch) every ~20 ms until it is stopped.
    let script = r#"echo $$ > "$D/pid"
while :; do date +%s%3N >> "$D/beats"; sleep 0.02; done"#;
    let mut rl = Background::spawn_group(
        "exec",
        d,
        rlock_at(&master).args([
            "--replicas",
            "1",
            "--op-timeout",
            "200ms",
            "exec",
            "-k",
            "r",
            "--ttl",
            "2s",
            "--",
            "sh",
            "-c",
            script,
        ]),
    );
    wait_for_file(d.join("pid"), SOON);
    // Renewals go through while the replica lives (the grant's WAIT, then two renewals').
    wait_until("two acknowledged renewals", SOON, || waits(&master) >= 3);
    assert!(rl.running(), "{}", rl.describe());

    let killed_at = now_ms();
    replica.kill9();
    let (out, _) = rl.finish(SOON);
    assert_eq!(out.code, 76, "{out}");
    assert!(
        out.stderr
            .contains("only 0 of 1 replicas acknowledged the renewal"),
        "says why the renewals failed: {out}"
    );
    // The replica's copy of the lease was renewed before it died, so it ends at most --ttl after
    // the kill: a master failing over to it would free the lock then. The command's last sign
    // of life must come before.
    let beats = fs::read_to_string(d.join("beats")).expect("heartbeats");
    let last: i128 = beats
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .expect("a heartbeat");
    assert!(
        last < killed_at + 2000,
        "the command beat {} ms after the replica died: past the 2 s lease the replica had",
        last - killed_at
    );
    // And not at once: the lease still had time to run.
    assert!(
        last > killed_at + 300,
        "stopped {} ms after the kill",
        last - killed_at
    );
}

/// The Sentinels' master (and its replica, for a failover) get an ACL user of their own.
fn add_user(sentinels: &Sentinels, user: &str, password: &str) {
    for i in 0..2 {
        sentinels.server(i).cmd(&[
            "ACL",
            "SETUSER",
            user,
            "on",
            &format!(">{password}"),
            "~*",
            "&*",
            "+@all",
        ]);
    }
}

fn sentinel_rlock(sentinels: &Sentinels) -> std::process::Command {
    let mut cmd = rlock();
    cmd.args(["--sentinel", sentinels.name()]);
    for url in sentinels.urls() {
        cmd.args(["-u", &url]);
    }
    cmd
}

#[test]
fn user_logs_in_to_the_master_the_sentinels_name_and_not_to_the_sentinels() {
    let sentinels = Sentinels::start("users");
    add_user(&sentinels, "locker", "pw-1");

    // The Sentinels know no user 'locker': that this works shows they were not sent it. The
    // master they name waits for its replica too.
    let out = run(sentinel_rlock(&sentinels)
        .env("RLOCK_PASSWORD", "pw-1")
        .args([
            "--user",
            "locker",
            "--replicas",
            "1",
            "acquire",
            "-k",
            "s",
            "-n",
        ]));
    assert_eq!(out.code, 0, "{out}");
    let master = sentinels.server(0);
    assert_eq!(
        sentinels.server(1).get("rlock:s"),
        Some(out.stdout.trim().to_string()),
        "the replica has the grant when acquire returns"
    );
    assert_eq!(waits(master), 1);

    // The default user takes any password; 'locker' only its own: a refusal shows the master
    // was asked as 'locker'. RLOCK_USER is read as --user.
    let out = run(sentinel_rlock(&sentinels)
        .env("RLOCK_PASSWORD", "bad-pw-7x")
        .env("RLOCK_USER", "locker")
        .args(["acquire", "-k", "t", "-n"]));
    assert_eq!(out.code, 77, "{out}");
    assert!(
        !out.stderr.contains("bad-pw-7x"),
        "the password is echoed: {out}"
    );
    assert!(!master.exists("rlock:t"));

    // A user named in a URL is not overridden.
    let url = format!("redis://locker:pw-1@127.0.0.1:{}", master.port());
    let out = run(rlock().args(["-u", &url, "--user", "nobody", "acquire", "-k", "u", "-n"]));
    assert_eq!(out.code, 0, "{out}");
}

#[test]
fn replicas_is_checked_as_a_number() {
    for bad in ["-1", "x", "1.5"] {
        let out = run(rlock().args(["--replicas", bad, "acquire", "-k", "r"]));
        assert_eq!(out.code, 2, "--replicas {bad}: {out}");
    }
    // A value that is not a number in the environment is a usage error too, and says which.
    let out = run(rlock()
        .env("RLOCK_REPLICAS", "two")
        .args(["acquire", "-k", "r"]));
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("replicas"), "{out}");
}

/// A server without WAIT (here renamed away, as Garnet and some proxies lack it): the grant it
/// made is given back, acquire and exec exit 78 at once (a setting the server cannot serve,
/// not an outage to wait out: exec's `-w 5s` ends long before), with one line saying that
/// --replicas cannot be used there; the command never runs, and nothing waits out the TTL.
#[test]
fn a_server_without_wait_gets_the_grant_back_and_says_replicas_cannot_be_used() {
    let master = RedisServer::start_with(&["--rename-command", "WAIT", ""]);
    let dir = tempdir();
    let marker = dir.path().join("ran");
    for sub in [
        vec!["acquire", "-k", "r", "-n", "--ttl", "60s"],
        exec_touching(&marker),
    ] {
        let began = Instant::now();
        let out = run(rlock_at(&master).args(["--replicas", "1"]).args(&sub));
        assert_eq!(out.code, 78, "{out}");
        assert!(
            began.elapsed() < Duration::from_secs(4),
            "ended at once, not at the end of the wait: {:?}",
            began.elapsed()
        );
        assert!(
            out.stderr.contains("does not offer WAIT")
                && out.stderr.contains("--replicas cannot be used"),
            "{out}"
        );
        assert!(out.stderr.contains("lock 'r'"), "names the lock: {out}");
        assert!(out.stderr.contains("given back"), "{out}");
        assert_eq!(out.stderr.lines().count(), 1, "one line: {out}");
        assert_eq!(out.stdout, "", "no token for a grant given back: {out}");
        assert!(!master.exists("rlock:r"), "the grant was left behind");
        assert!(
            out.stderr.contains("unknown command"),
            "says what the server said: {out}"
        );
    }
    assert!(
        !marker.exists(),
        "exec ran its command without the replicas"
    );
    // Without --replicas the same server serves as ever.
    let out = run(rlock_at(&master).args(["acquire", "-k", "r", "-n"]));
    assert_eq!(out.code, 0, "{out}");
}

#[test]
fn an_acl_without_wait_exits_77_and_gives_the_grant_back() {
    let master = RedisServer::start();
    let _replica = replica_of(&master);
    for (user, rights) in [("nowait", "-wait"), ("withwait", "+wait")] {
        master.cmd(&[
            "ACL", "SETUSER", user, "on", ">pw-2", "~*", "&*", "+@all", rights,
        ]);
    }
    let url = |user: &str| format!("redis://{user}:pw-2@127.0.0.1:{}", master.port());

    let out = run(rlock().args([
        "-u",
        &url("nowait"),
        "--replicas",
        "1",
        "acquire",
        "-k",
        "a",
    ]));
    assert_eq!(out.code, 77, "{out}");
    assert!(out.stderr.contains("ACL"), "names the ACL: {out}");
    // Either the user's rights or a service without the command: both said, and the command.
    assert!(
        out.stderr.contains("the command WAIT") && out.stderr.contains("does not offer WAIT"),
        "names the command and both reasons: {out}"
    );
    assert!(!master.exists("rlock:a"), "the grant was left behind");

    let out = run(rlock().args([
        "-u",
        &url("withwait"),
        "--replicas",
        "1",
        "acquire",
        "-k",
        "a",
    ]));
    assert_eq!(out.code, 0, "{out}");
}

#[test]
fn a_cluster_master_waits_for_its_replica() {
    let cluster = RedisCluster::start_with_replicas();
    let owner = cluster.owner("{rlock:c}");
    let mut cmd = rlock();
    cmd.arg("--cluster");
    for url in cluster.urls() {
        cmd.args(["-u", &url]);
    }
    let out = run(cmd.args(["--replicas", "1", "acquire", "-k", "c", "-n"]));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(waits(cluster.node(owner)), 1, "WAIT on the slot's master");
    let replica = cluster.node(cluster.replica_of(owner));
    let token = out.stdout.trim().to_string();
    // A replica in a cluster answers reads of its master's slots after READONLY.
    let mut conn = replica.conn();
    redis::cmd("READONLY")
        .query::<()>(&mut conn)
        .expect("READONLY");
    let held: Option<String> = redis::cmd("GET")
        .arg("rlock:c")
        .query(&mut conn)
        .expect("GET");
    assert_eq!(
        held,
        Some(token),
        "the replica has the grant when acquire returns"
    );
}

/// A Sentinel failover under `--replicas 1`: the promoted replica has no replica of its own
/// until the old master comes back as one. A waiter waits that out within its `-w`, as any
/// outage, and gets the lock from the new master; a single try (`-n`) meanwhile ends at once
/// (69, the grant given back).
#[test]
fn a_waiter_rides_out_a_failover_until_the_new_master_has_its_replica() {
    let mut set = Sentinels::start("replicated");
    let dir = tempdir();
    let via = || {
        let mut cmd = sentinel_rlock(&set);
        crate::common::acl::suite_login_behind_sentinels(&mut cmd);
        cmd.args(["--replicas", "1"]);
        cmd
    };
    let out = run(via().args(["acquire", "-k", "f", "--ttl", "3s"]));
    assert_eq!(out.code, 0, "the holder, with its replica: {out}");
    let mut waiter = Background::spawn(
        "waiter",
        dir.path(),
        via().args(["-v", "acquire", "-k", "f", "--ttl", "60s", "-w", "60s"]),
    );
    let mut single_try = via();
    single_try.args(["acquire", "-k", "other", "-n"]);

    set.server_mut(0).kill9();
    let promoted = set.server(1).port();
    set.wait_master(promoted, Sentinels::failover_bound());
    // The new master has no replica yet: a single try is given back, at once.
    let started = Instant::now();
    let out = run(&mut single_try);
    assert_eq!(out.code, 69, "{out}");
    assert!(out.stderr.contains("replicas acknowledged"), "{out}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "-n took {:?}, as if riding out an outage: {out}",
        started.elapsed()
    );
    assert!(
        !set.server(1).exists("rlock:other"),
        "the -n grant was left"
    );
    assert!(
        waiter.running(),
        "the waiter gave up on a failover it had 60 s to wait out: {}",
        waiter.describe()
    );

    // The old master comes back, and the Sentinels make it the new master's replica.
    set.server_mut(0).restart();
    let (out, _) = waiter.finish(Duration::from_secs(60));
    assert_eq!(out.code, 0, "the waiter, from the new master: {out}");
    let token = out.stdout.trim();
    assert_eq!(
        set.server(1).get("rlock:f").as_deref(),
        Some(token),
        "the new master holds the waiter's lock"
    );
    // WAIT said the replica has it.
    assert_eq!(set.server(0).get("rlock:f").as_deref(), Some(token));
}
