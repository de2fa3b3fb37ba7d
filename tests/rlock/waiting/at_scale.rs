//! Waiting at scale: a line longer than the server's connection limit (maxclients) drains, a
//! waiter that dies in line leaves no hole in it, and `-n` takes a full server for an
//! unreachable one.

use super::*;

/// Each waiter's command: fails (and says so) if another holder is inside at the same time.
const ALONE: &str = r#"
mkdir "$1/inside" 2>/dev/null || { echo overlap >> "$1/overlaps"; exit 3; }
rmdir "$1/inside"
"#;

/// 120 waiters with `-w 60s` behind a 2 s holder, on a server that takes 50 clients: each
/// waiter refused a connection for maxclients waits for room as for a busy lock, so all of them
/// run (none exits 69), one at a time, and the line drains soon after the holder ends.
#[test]
fn a_line_longer_than_maxclients_drains_and_nobody_fails() {
    const WAITERS: usize = 120;
    let _heavy = crate::common::heavy();
    let server = RedisServer::start_with(&["--maxclients", "50"]);
    let dir = tempdir();
    let cs = dir.path().join("cs");
    fs::create_dir(&cs).unwrap();
    let mut holder = Bg::spawn(
        "holder",
        dir.path(),
        rlock_at(&server).args(["exec", "-k", KEY, "--", "sleep", "2"]),
    );
    holder.wait_for(
        "the holder to take the lock",
        Duration::from_secs(10),
        || server.exists(LOCK),
    );
    let mut waiters: Vec<Bg> = (0..WAITERS)
        .map(|i| {
            Bg::spawn(
                &format!("w{i}"),
                dir.path(),
                rlock_at(&server)
                    .args(["-v", "exec", "-k", KEY, "-w", "60s", "--"])
                    .args(["sh", "-c", ALONE, "sh"])
                    .arg(&cs),
            )
        })
        .collect();
    let (out, held_until) = holder.finish(Duration::from_secs(30));
    assert_eq!(out.code, 0, "the holder failed: {out}");

    let deadline = Instant::now() + Duration::from_secs(60);
    let mut last = held_until;
    let mut codes = HashMap::new();
    for w in &mut waiters {
        let (out, at) = w.finish(deadline.saturating_duration_since(Instant::now()));
        *codes.entry(out.code).or_insert(0) += 1;
        assert!(
            out.code == 0,
            "{} exited {} (codes so far: {codes:?}): {out}",
            w.name(),
            out.code
        );
        last = last.max(at);
    }
    let drained = last - held_until;
    assert!(
        drained < Duration::from_secs(15),
        "the last of {WAITERS} waiters finished {drained:?} after the holder's end"
    );
    assert!(
        !cs.join("overlaps").exists(),
        "two holders were inside at once"
    );
    // The scenario happened: some waiter was refused for maxclients, and waited for room.
    let refused = waiters
        .iter()
        .filter(|w| w.output(0).stderr.contains("max number of clients reached"))
        .count();
    assert!(
        refused > 0,
        "no waiter met a full server: the test did not test it"
    );
    assert!(!server.exists(LOCK), "the lock is still held");
    assert_no_waiters_left(&server);
    eprintln!(
        "{WAITERS} waiters, maxclients 50: all exited 0, {refused} met a full server, the last \
         {drained:?} after the holder's end"
    );
}

/// A waiter SIGKILLed in the middle of a line of 20 leaves no hole: nobody listens on its wake
/// channel any more, so the handoff that reaches it passes it by, and the waiter behind it runs
/// right after the one ahead (not a claim window later).
#[test]
fn a_waiter_killed_in_the_middle_of_the_line_leaves_no_hole() {
    const WAITERS: usize = 20;
    const KILLED: usize = 10;
    let server = RedisServer::start();
    let dir = tempdir();
    let log = dir.path().join("ran");
    let holder = hold(&server, "60s");
    let mut line: Vec<Bg> = Vec::new();
    for i in 0..WAITERS {
        line.push(Bg::spawn(
            &format!("w{i:02}"),
            dir.path(),
            rlock_at(&server)
                .args(["exec", "-k", KEY, "-w", "60s", "--"])
                .args(["sh", "-c", "echo \"$1 $(date +%s%N)\" >> \"$2\"", "sh"])
                .arg(format!("w{i:02}"))
                .arg(&log),
        ));
        wait_queued(&server, i + 1, &mut line);
    }
    let tokens = queue(&server);
    line[KILLED].kill(Signal::SIGKILL);
    let (out, _) = line[KILLED].finish(Duration::from_secs(5));
    assert_eq!(out.code, -9, "{out}");
    release(&server, &holder);
    for (i, w) in line.iter_mut().enumerate() {
        if i != KILLED {
            let (out, _) = w.finish(Duration::from_secs(30));
            assert_eq!(out.code, 0, "{} failed: {out}", w.name());
        }
    }
    let ran = fs::read_to_string(&log).expect("the commands ran");
    let ran: Vec<(String, u128)> = ran
        .lines()
        .map(|l| {
            let (name, ns) = l.split_once(' ').expect("NAME NS");
            (name.to_string(), ns.parse().expect("nanoseconds"))
        })
        .collect();
    let names: Vec<&str> = ran.iter().map(|(n, _)| n.as_str()).collect();
    let expected: Vec<String> = (0..WAITERS)
        .filter(|&i| i != KILLED)
        .map(|i| format!("w{i:02}"))
        .collect();
    assert_eq!(names, expected, "the line's order");
    let gaps: Vec<Duration> = ran
        .windows(2)
        .map(|w| Duration::from_nanos((w[1].1 - w[0].1) as u64))
        .collect();
    let across = gaps[KILLED - 1];
    assert!(
        across < CLAIM,
        "the waiter behind the dead one ran {across:?} after the one ahead of it: the dead one \
         held up the line (gaps: {gaps:?})"
    );
    assert!(
        !queue(&server).contains(&tokens[KILLED]),
        "the dead waiter is still in line"
    );
    assert_no_waiters_left(&server);
    eprintln!("across the dead waiter: {across:?}; gaps: {gaps:?}");
}

/// `-n` is about the lock, not the server: a full server is tried again for --connect-timeout,
/// like an unreachable one, and then it is 69, naming maxclients.
#[test]
fn no_wait_against_a_full_server_is_unavailable_after_the_connect_timeout() {
    let server = RedisServer::start_with(&["--maxclients", "1"]);
    // The one client the server takes: once the harness's own connection (its readiness check)
    // is gone, which the server may learn only after it has refused the next one.
    let until = Instant::now() + Duration::from_secs(5);
    let mut filler = loop {
        let mut conn = server.conn();
        match redis::cmd("PING").query::<String>(&mut conn) {
            Ok(_) => break conn,
            Err(e) if Instant::now() < until => {
                assert!(e.to_string().contains("max number of clients"), "PING: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("PING: {e}"),
        }
    };
    let started = Instant::now();
    let out = run(rlock_at(&server).args(["--connect-timeout", "2s", "acquire", "-k", KEY, "-n"]));
    let took = started.elapsed();
    assert_eq!(out.code, 69, "{out}");
    assert!(
        out.stderr.contains("max number of clients reached"),
        "{out}"
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(5),
        "gave up after {took:?}, not after --connect-timeout (2s)"
    );
    // Asked on the one connection the server takes: another could be refused while the server
    // has not yet seen the filler go.
    let taken: bool = redis::cmd("EXISTS")
        .arg(LOCK)
        .query(&mut filler)
        .expect("EXISTS");
    assert!(!taken, "a lock was taken");
}

/// The same for a semaphore: a waiter killed while in line is passed by when a slot frees (one
/// holder left, one still in), and the one behind it takes the slot at once, not a claim window
/// later.
#[test]
fn a_semaphore_waiter_killed_in_line_leaves_no_hole() {
    let server = RedisServer::start();
    let dir = tempdir();
    let semaphore = ["-k", KEY, "--limit", "2", "--ttl", "60s"];
    let holders: Vec<String> = (0..2)
        .map(|_| {
            let out = run(rlock_at(&server).arg("acquire").args(semaphore));
            assert_eq!(out.code, 0, "{out}");
            out.stdout.trim().to_string()
        })
        .collect();
    let mut line: Vec<Bg> = Vec::new();
    for name in ["doomed", "next"] {
        line.push(Bg::spawn(
            name,
            dir.path(),
            rlock_at(&server).arg("acquire").args(semaphore),
        ));
        wait_queued(&server, line.len(), &mut line);
    }
    let tokens = queue(&server);
    line[0].kill(Signal::SIGKILL);
    line[0].finish(Duration::from_secs(5));
    release(&server, &holders[0]);
    let released = Instant::now();
    let (out, got) = line[1].finish(Duration::from_secs(10));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        out.stdout.trim(),
        tokens[1],
        "the waiter behind took the slot"
    );
    let took = got - released;
    assert!(
        took < CLAIM,
        "the waiter behind a dead one got the slot {took:?} after a slot freed: the dead one held \
         up the line"
    );
    assert!(
        !queue(&server).contains(&tokens[0]),
        "the dead waiter is still in line"
    );
}
