//! A master, a replica and three Sentinels: discovery, and failovers during `exec`.

use super::*;

// Sentinel: a master, a replica, three Sentinels
// ---------------------------------------------------------------------------------------------

#[test]
fn sentinel_discovery_locks_on_the_master_the_sentinels_name() {
    let set = Sentinels::start("locks");
    let (master, replica) = (set.server(0), set.server(1));
    let out = expect(
        0,
        set.rlock()
            .args(["-v", "acquire", "--json", "-k", KEY, "--ttl", "60s"]),
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
    let out = expect(0, set.rlock().args(["inspect", "--json", "-k", KEY]));
    assert_eq!(json(&out)["token"].as_str(), Some(token.as_str()), "{out}");
    expect(
        0,
        set.rlock().args(["release", "-k", KEY, "--token", &token]),
    );
    assert_eq!(master.get(LOCK), None);

    // A dead Sentinel first in the list costs one refused connection; the next one answers.
    // The environment works as the flags do.
    let mut urls = vec!["redis://127.0.0.1:1".to_string()];
    urls.extend(set.urls());
    let out = expect(
        0,
        suite_login_behind_sentinels(&mut rlock())
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
    let out = expect(
        69,
        cmd.args(["--connect-timeout", "0", "acquire", "-n", "-k", KEY]),
    );
    assert!(out.stdout.is_empty(), "{out}");
    assert_eq!(out.stderr.lines().count(), 1, "one line: {out}");
    assert!(
        out.stderr.contains("no-such-master") && out.stderr.contains("does not know"),
        "the message must say that the Sentinels do not know that master: {out}"
    );
    assert!(
        out.stderr
            .contains("check the master's name given to --sentinel")
            && !out.stderr.contains("--url is right"),
        "a wrong master name is not a down server: {out}"
    );
    assert_eq!(set.server(0).get(LOCK), None);
}

/// Starts `exec` through the Sentinels of `set` with the lock replicated to the replica;
/// returns the process and its token.
fn exec_via_sentinels(set: &Sentinels, dir: &Path, opts: &[&str]) -> (Bg, String) {
    let mut rl = Bg::spawn_group(
        "exec",
        dir,
        set.rlock()
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
    set.wait_master(new_master, Sentinels::failover_bound());
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
    set.wait_master(new_master, Sentinels::failover_bound());

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
    set.wait_master(new_master, Sentinels::failover_bound());

    // Another client asks the Sentinels for the lock, again and again, while exec's child
    // runs: rlock must keep the lock on the new master, or stop its child first.
    let until = Instant::now() + Duration::from_secs(15);
    let mut overlap = None;
    while Instant::now() < until && pid_alive(child) {
        let out = run(set
            .rlock()
            .args(["acquire", "-n", "-k", KEY, "--ttl", "30s"]));
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

/// Rlock over `urls` as Sentinels of the master named `name`.
fn via(name: &str, urls: &[String]) -> Command {
    let mut cmd = rlock();
    suite_login_behind_sentinels(&mut cmd);
    cmd.arg("--sentinel").arg(name);
    for url in urls {
        cmd.arg("--url").arg(url);
    }
    cmd
}

#[test]
fn sentinels_that_disagree_never_send_two_runs_to_two_masters() {
    let set = Sentinels::start("locks");
    // A fourth Sentinel, which names another master under the same name.
    let other = RedisServer::start();
    let lone = crate::common::LoneSentinel::start("locks", other.port());
    let mut first = vec![lone.url()];
    first.extend(set.urls());
    let mut last = set.urls();
    last.push(lone.url());
    // Whatever the order, the master is the one three of four name: a holder found through one
    // order makes the other order busy, never a second holder elsewhere.
    for run in 0..20 {
        let (mine, theirs) = if run % 2 == 0 {
            (&first, &last)
        } else {
            (&last, &first)
        };
        let dir = tempdir();
        let d = dir.path();
        let mut a = Bg::spawn_group(
            "a",
            d,
            via("locks", mine)
                .args(["exec", "-k", KEY, "--ttl", "10s", "--", "sh", "-c"])
                .arg(HOLD_UNTIL_STOP),
        );
        let token = a.ready();
        assert_eq!(
            set.server(0).get(LOCK).as_deref(),
            Some(token.as_str()),
            "run {run}"
        );
        let out = expect(75, via("locks", theirs).args(["acquire", "-n", "-k", KEY]));
        assert!(out.stderr.contains("busy"), "run {run}: {out}");
        assert!(
            !other.exists(LOCK),
            "run {run}: the outvoted Sentinel's master was used"
        );
        touch(d.join("stop"));
        let (out, _) = a.finish(FINISH);
        assert_eq!(out.code, 0, "run {run}: {out}");
    }
    // One against one: no majority. -n fails with 69 naming who said what; -w waits, then 69.
    let split = [lone.url(), set.urls()[0].clone()];
    let out = expect(69, via("locks", &split).args(["acquire", "-n", "-k", KEY]));
    assert!(
        out.stderr.contains("disagree")
            && out.stderr.contains(&format!("127.0.0.1:{}", other.port()))
            && out
                .stderr
                .contains(&format!("127.0.0.1:{}", set.server(0).port())),
        "{out}"
    );
    let started = Instant::now();
    let out = expect(
        69,
        via("locks", &split).args(["exec", "-w", "2s", "-k", KEY, "--", "true"]),
    );
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(5),
        "waited {took:?} within -w 2s: {out}"
    );
    assert!(!other.exists(LOCK) && !set.server(0).exists(LOCK));
}
