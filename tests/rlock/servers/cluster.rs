//! A three-master Redis Cluster: keys on every master, helper keys in the lock's slot, listing
//! across masters, one seed, a slot migrating under a held lock, waking a waiter.

use super::*;

// Redis Cluster: three masters
// ---------------------------------------------------------------------------------------------

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
    let seed = cluster.urls().swap_remove(0);
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

        // Without cluster mode the seed is one Redis, which refuses a key it does not serve: a
        // configuration mistake (78), which says to add --cluster.
        let out = run(rlock()
            .env("RLOCK_URL", &seed)
            .args(["acquire", "-n", "-k", &name]));
        assert!(
            out.code == 78 && out.stderr.contains("MOVED") && out.stderr.contains("--cluster"),
            "a single-Redis acquire of a key served elsewhere must fail with MOVED: {out}"
        );
        assert!(!here(node, &lock));
    }
}

/// Starts moving `slot` from master `from` to master `to`: IMPORTING on `to`, MIGRATING on
/// `from` (what `redis-cli --cluster reshard` does first).
pub(super) fn begin_migration(cluster: &RedisCluster, slot: u16, from: usize, to: usize) {
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
pub(super) fn move_keys(cluster: &RedisCluster, from: usize, to: usize, keys: &[&str]) {
    let port = cluster.node(to).port().to_string();
    let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
    args.extend_from_slice(keys);
    let reply = cluster.node(from).cmd(&args);
    assert_eq!(reply, redis::Value::Okay, "MIGRATE {keys:?}");
}

/// Ends the move: every master is told that `to` serves `slot`, the new owner first.
pub(super) fn end_migration(cluster: &RedisCluster, slot: u16, to: usize) {
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
    // The run's start on record too (a stream in the lock's slot), from its grant.
    let history = format!("{{rlock:{name}}}:history");
    move_keys(&cluster, 0, 1, &[&lock, &state, &history]);
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
    let history = format!("{{rlock:{name}}}:history");
    move_keys(&cluster, 0, 1, &[&lock, &state, &queue, &history]);
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
        clustered(&cluster).args([
            "--op-timeout",
            "500ms",
            "--connect-timeout",
            "0",
            "acquire",
            "-n",
            "-k",
            &name,
        ]),
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
fn cluster_the_final_release_takes_at_most_the_op_timeout_with_every_master_frozen() {
    let cluster = RedisCluster::start();
    let name = key_on(&cluster, 0);
    let dir = tempdir();
    let mut rl = Bg::spawn_group(
        "exec",
        dir.path(),
        clustered(&cluster)
            .args(["--op-timeout", "1s", "exec", "-k", &name, "--ttl", "60s"])
            .args(["--", "sh", "-c"])
            .arg(HOLD_UNTIL_STOP),
    );
    rl.ready();
    // The lock's master, and the nodes asked for the slot map after it fails.
    for node in cluster.nodes() {
        node.freeze();
    }
    let stopped = Instant::now();
    touch(dir.path().join("stop"));
    let (out, at) = rl.finish(FINISH);
    for node in cluster.nodes() {
        node.thaw();
    }
    assert_eq!(out.code, 0, "{out}");
    assert!(
        at - stopped < Duration::from_millis(1000 + 600),
        "the final release took {:?} with --op-timeout 1s: {out}",
        at - stopped
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
