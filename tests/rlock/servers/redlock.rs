//! Redlock over five independent masters: frozen minorities and majorities, partial grants given
//! back, release everywhere, exec's deadline from the validity, fencing across changing
//! majorities, waking a waiter.

use super::*;

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
        "--connect-timeout",
        "0",
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

    // The frozen nodes never said which server they are (each master is asked before the
    // grant: one server, one vote), so no grant was sent to them (and no give-back needed).
    for n in &nodes[2..] {
        n.thaw();
    }
    wait_until(
        "every node to be free of the failed acquire's token (its TTL is 30 s)",
        Duration::from_secs(3),
        || values(&nodes, LOCK).iter().all(Option::is_none),
    );
    for n in &nodes[2..] {
        assert_eq!(
            state_token(n, STATE),
            None,
            "port {} got a grant without saying which server it is",
            n.port()
        );
    }
}

#[test]
fn redlock_release_reaches_every_node_including_one_that_does_not_answer() {
    let nodes = start_nodes(5);
    warm_scripts(&nodes);
    let opts = ["--op-timeout", "300ms"];

    let out = expect(
        0,
        redlock(&nodes)
            .args(["acquire", "-n", "--json", "-k", KEY, "--ttl", "30s"])
            .args(opts),
    );
    let token = token_of(&out);
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

    // Held on two of five only: the other three are a majority (once they have run for longer
    // than the lease the holder's masters report: a master that may have restarted empty under
    // the holder does not vote). The foreign lease is shortened so that they soon have.
    nodes[0].cmd(&["DEL", LOCK]);
    for n in &nodes[1..3] {
        n.cmd(&["PEXPIRE", LOCK, "8000"]);
    }
    outlasted(&nodes);
    let out = expect(
        0,
        redlock(&nodes).args(["acquire", "-n", "--json", "-k", KEY, "--ttl", "3s"]),
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

#[test]
fn redlock_a_wait_with_a_blackholed_master_ends_at_its_bound() {
    let nodes = start_nodes(3);
    // The lock is busy: another client's lock on two of three.
    for n in &nodes[..2] {
        n.cmd(&["SET", LOCK, "foreign", "PX", "60000"]);
    }
    // The third master answers nothing: connections are accepted and every byte dropped.
    let proxy = blackholed(&nodes[2]);
    for (args, bound) in [
        (&["exec", "-w", "2.5s", "-k", KEY, "--", "true"][..], 2500),
        (&["acquire", "-w", "3s", "-k", KEY][..], 3000),
    ] {
        let started = Instant::now();
        let out = run(redlock_via(&nodes, &proxy).args(args));
        let took = started.elapsed();
        assert_eq!(out.code, 75, "{out}");
        // The try in flight when the wait ends finishes: the silent master costs it its
        // timeout (--op-timeout, 2 s, below a tenth of the 30 s TTL), and no more.
        assert!(
            took >= Duration::from_millis(bound) && took < Duration::from_millis(bound + 2700),
            "{args:?} ended after {took:?}"
        );
    }
}
