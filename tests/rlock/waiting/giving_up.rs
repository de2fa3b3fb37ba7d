//! Giving up: signals and `-w` end a wait and leave nothing behind.

use super::*;

// Giving up: signals and -w
// ---------------------------------------------------------------------------------------------

/// A waiting `rlock acquire` (or `rlock exec`) gets `sig`: within a second it dies of SIGINT
/// (as an interrupted command does, so that the caller's shell loop stops too) or exits 128+N
/// for another signal, and leaves nothing of its own in Redis; the holder's lock is untouched;
/// exec's child never ran.
fn interrupted_waiter(exec: bool, sig: Signal) {
    let server = RedisServer::start();
    let dir = tempdir();
    let holder = hold(&server, "60s");
    let held = state(&server);

    let ran = dir.path().join("child-ran");
    let mut cmd = rlock_at(&server);
    if exec {
        cmd.args(["exec", "-k", KEY, "--", "touch"]).arg(&ran);
    } else {
        cmd.args(["acquire", "-k", KEY, "--ttl", "5s"]);
    }
    let mut waiter = [Bg::spawn("waiter", dir.path(), &mut cmd)];
    let token = wait_queued(&server, 1, &mut waiter).remove(0);
    assert_eq!(
        reserved(&server),
        None,
        "nothing was handed to the waiter yet"
    );

    waiter[0].kill(sig);
    let sent = Instant::now();
    let (out, exited_at) = waiter[0].finish(Duration::from_secs(10));
    // `code` is -N for a death by signal N.
    let expected = if sig == Signal::SIGINT {
        -(sig as i32)
    } else {
        128 + sig as i32
    };
    assert_eq!(
        out.code, expected,
        "a waiter interrupted by {sig} should end as {expected}: {out}"
    );
    let took = exited_at - sent;
    assert!(
        took < Duration::from_secs(1),
        "the waiter took {took:?} to exit after {sig}"
    );
    assert!(
        out.stderr.contains("interrupted"),
        "no message saying why it stopped: {out}"
    );

    let q = queue(&server);
    assert!(
        !q.contains(&token),
        "the waiter is still in the queue: {q:?}"
    );
    let after = state(&server);
    assert_no_waiters_left(&server);
    // The holder's lock and record are untouched.
    assert_eq!(server.get(LOCK).as_deref(), Some(holder.as_str()));
    let pttl = server.pttl(LOCK);
    assert!(pttl > 45_000, "the holder's lock now has PTTL {pttl}");
    for field in ["token", "fence", "since", "pid", "ttl"] {
        assert_eq!(
            after.get(field),
            held.get(field),
            "state field {field} changed"
        );
    }
    if exec {
        assert!(!ran.exists(), "the waiting exec ran its command");
    }
}

/// Ctrl-C at a terminal sends SIGINT to the whole foreground job: a shell script waiting in
/// `rlock acquire` (or `rlock exec`) must stop there, as it does when any command of its own is
/// interrupted. bash goes on after a child that exited (130) but not after one that died of
/// SIGINT, so rlock must die of it.
fn ctrl_c_stops_the_callers_script(exec: bool) {
    let server = RedisServer::start();
    let dir = tempdir();
    hold(&server, "60s");
    let rlock = env!("CARGO_BIN_EXE_rlock");
    let waiter = if exec {
        format!("{rlock} -u {} exec -k {KEY} -- true", server.url())
    } else {
        format!("{rlock} -u {} acquire -k {KEY}", server.url())
    };
    let mut cmd = std::process::Command::new("bash");
    cmd.arg("-c")
        .arg(format!(r#"{waiter}; echo "went on after $?" > "$D/after""#));
    let mut script = [Bg::spawn_group("script", dir.path(), &mut cmd)];
    wait_queued(&server, 1, &mut script);
    let pgid = nix::unistd::Pid::from_raw(script[0].pid());
    nix::sys::signal::killpg(pgid, Signal::SIGINT).expect("killpg SIGINT");
    let (out, _) = script[0].finish(Duration::from_secs(10));
    assert_eq!(out.code, -2, "the script did not die of SIGINT: {out}");
    let after = dir.path().join("after");
    assert!(
        !after.exists(),
        "the script went on after Ctrl-C: {}",
        fs::read_to_string(&after).unwrap_or_default()
    );
    assert_no_waiters_left(&server);
}

#[test]
fn ctrl_c_stops_a_script_waiting_in_acquire() {
    ctrl_c_stops_the_callers_script(false);
}

#[test]
fn ctrl_c_stops_a_script_waiting_in_exec() {
    ctrl_c_stops_the_callers_script(true);
}

#[test]
fn sigint_ends_a_waiting_acquire_cleanly() {
    interrupted_waiter(false, Signal::SIGINT);
}

#[test]
fn sigterm_ends_a_waiting_acquire_cleanly() {
    interrupted_waiter(false, Signal::SIGTERM);
}

#[test]
fn sigint_ends_a_waiting_exec_cleanly() {
    interrupted_waiter(true, Signal::SIGINT);
}

#[test]
fn sigterm_ends_a_waiting_exec_cleanly() {
    interrupted_waiter(true, Signal::SIGTERM);
}

/// A waiter with `-w 1500ms` gives up with the busy code and leaves the queue.
fn wait_timeout_leaves_the_queue(exec: bool) {
    let server = RedisServer::start();
    let dir = tempdir();
    let holder = hold(&server, "60s");

    let ran = dir.path().join("child-ran");
    let mut cmd = rlock_at(&server);
    if exec {
        cmd.args(["exec", "-k", KEY, "-w", "1500ms", "--", "touch"])
            .arg(&ran);
    } else {
        cmd.args(["acquire", "-k", KEY, "--ttl", "5s", "-w", "1500ms"]);
    }
    let started = Instant::now();
    let mut waiter = [Bg::spawn("waiter", dir.path(), &mut cmd)];
    let token = wait_queued(&server, 1, &mut waiter).remove(0);
    let (out, exited_at) = waiter[0].finish(Duration::from_secs(10));
    assert_eq!(out.code, 75, "-w ran out: the busy code 75 expected: {out}");
    let waited = exited_at - started;
    assert!(
        waited >= Duration::from_millis(1500),
        "gave up after {waited:?}, before -w 1500ms"
    );
    assert!(
        waited < Duration::from_millis(1500) + Duration::from_secs(1),
        "gave up only after {waited:?} with -w 1500ms"
    );
    assert!(out.stderr.contains("busy"), "no busy message: {out}");

    let q = queue(&server);
    assert!(
        !q.contains(&token),
        "the waiter is still in the queue: {q:?}"
    );
    assert_no_waiters_left(&server);
    assert_eq!(server.get(LOCK).as_deref(), Some(holder.as_str()));
    if exec {
        assert!(!ran.exists(), "exec ran its command without the lock");
    }
}

#[test]
fn an_acquire_that_times_out_leaves_the_queue() {
    wait_timeout_leaves_the_queue(false);
}

#[test]
fn an_exec_that_times_out_leaves_the_queue() {
    wait_timeout_leaves_the_queue(true);
}

// ---------------------------------------------------------------------------------------------
