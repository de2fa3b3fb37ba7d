//! An ACL user with only the rights rlock needs: every command works with them, and nothing more
//! is asked.

use super::*;
use crate::common::acl::{AclLine, acl_user_of, documented_acl, documented_acl_lines};

// ACL: a user with only the rights rlock needs
// ---------------------------------------------------------------------------------------------

/// One user's rlock runs against one server, every output kept.
struct Session<'a> {
    server: &'a RedisServer,
    user: &'a str,
    outputs: Vec<Output>,
    /// The user may write and read the history.
    history: bool,
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
        // First in line, gives up: it leaves the queue and, being first, checks the lock. (The
        // wait bounds its first contact too, which a loaded machine can take 300 ms over.)
        self.step(
            "waiter that gives up",
            75,
            &["acquire", "-w", "1s", "-k", "life"],
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
        if !self.history {
            self.step(
                "no history to read",
                77,
                &["inspect", "--history", "-k", "life"],
            )?;
            return Ok(());
        }
        // The exec runs and the holds releases ended are on record (XADD, in the release
        // script), and read back (XREVRANGE), newest first.
        let out = self.step(
            "history",
            0,
            &["inspect", "--history", "--json", "-k", "life"],
        )?;
        let runs = json(&out);
        let outcomes: Vec<&str> = runs
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["outcome"].as_str())
            .collect();
        if outcomes != ["ok", "broken", "released", "ok", "released"] {
            return Err(format!(
                "the history does not hold the two exec runs and the three holds that ended: {out}"
            ));
        }
        // A semaphore and a shared lock.
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
        history: true,
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
            history: true,
        }
        .lifecycle();
        let denials = acl_denials(&server, &user);
        // ZREMRANGEBYSCORE runs only when a semaphore holder has expired, which the lifecycle
        // never sees; Redis 7 asks for the right in advance (redis.acl_check_cmd), Redis 6
        // cannot, so there only the lifecycle's own commands show as needed.
        let asked_in_advance = crate::common::redis_version().0 >= 7;
        // XDEL runs at each exec's end: its run is on record from its grant, and that entry
        // gives way to how it ended.
        if result.is_ok()
            && denials.is_empty()
            && (asked_in_advance || missing != "+zremrangebyscore")
        {
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
        rlock().args([
            "-v",
            "--url",
            &unreachable,
            "--connect-timeout",
            "0",
            "acquire",
            "-n",
            "-k",
            KEY,
        ]),
    );
    let malformed = format!("redis://locker:{SECRET}@127.0.0.1:notaport");
    check(
        78,
        rlock().args(["-v", "--url", &malformed, "acquire", "-n", "-k", KEY]),
    );
    // Two different dead masters (the same one twice is refused as not independent: 78), and
    // a user with the Redlock rights on the live one.
    set_user(&server, "locker", &LOCK_PATTERNS, &redlock_commands());
    let unreachable_too = format!("redis://locker:{SECRET}@127.0.0.1:2");
    let redlock = [&user_url, &unreachable, &unreachable_too];
    check(
        69,
        rlock()
            .args(redlock.iter().flat_map(|u| ["--url", u.as_str()]))
            .args(["-v", "--connect-timeout", "0", "acquire", "-n", "-k", KEY]),
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

// ACL: the documented lines, verbatim
// ---------------------------------------------------------------------------------------------

// The lines of docs/connecting.md as written.
mod documented;
