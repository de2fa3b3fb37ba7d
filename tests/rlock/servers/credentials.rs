//! Credentials that change (docs/connecting.md, "Passwords that change"): `--password-file` is
//! read again and `--password-command` run again for every new connection, so a long `exec` whose
//! connection is cut after the password changed renews with the new one; a command that fails,
//! hangs or prints nothing ends the run with one line (77) within `--connect-timeout`; the
//! command's output is found nowhere (Redis, inspect, history, /proc, messages).
//!
//! The server's password changes as a managed service's token does: the user `rotor`'s password is
//! replaced (`ACL SETUSER … resetpass`), and its connections are cut (`CLIENT KILL USER`).

use super::*;
use crate::common::basic::{assert_fails, assert_no_secret, run_within};

/// The user whose password changes; rlock logs in as it with `--user`.
const USER: &str = "rotor";
const OLD: &str = "Old-pw-41q";
const NEW: &str = "New-pw-93z";

/// Gives `rotor` every right and `password` as its only password.
fn set_password(server: &RedisServer, password: &str) {
    let pass = format!(">{password}");
    let args = [
        "ACL",
        "SETUSER",
        USER,
        "on",
        "resetpass",
        &pass,
        "~*",
        "&*",
        "+@all",
    ];
    assert_eq!(server.cmd(&args), redis::Value::Okay, "{args:?}");
}

/// `rlock --url redis://127.0.0.1:PORT --user rotor SOURCE…`: the password from `source` only
/// (whatever `RLOCK_TEST_ACL` says: the suite's URL carries a password of its own).
fn rotating(server: &RedisServer, source: &[String]) -> Command {
    let mut cmd = rlock();
    cmd.arg("--url")
        .arg(server.url())
        .args(["--user", USER])
        .args(source);
    cmd
}

/// `--password-command` that notes each run in `DIR/runs` and prints `DIR/pw`.
fn command_source(dir: &Path) -> Vec<String> {
    let d = dir.display();
    vec![
        "--password-command".into(),
        format!("echo run >> '{d}/runs'; cat '{d}/pw'"),
    ]
}

fn file_source(dir: &Path) -> Vec<String> {
    vec![
        "--password-file".into(),
        dir.join("pw").display().to_string(),
    ]
}

/// Replaces the file at `path` whole (a reader sees the old or the new password, never half).
fn write_whole(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    fs::write(&tmp, text).expect("write the new password");
    fs::rename(&tmp, path).expect("move the new password in place");
}

/// A long `exec` holds; the password changes and the holder's connection is cut; its next
/// renewal logs in with the new password, and the command runs on to its end (exit 0).
fn renews_with_the_new_password(source: fn(&Path) -> Vec<String>) -> Vec<String> {
    let server = RedisServer::start();
    set_password(&server, OLD);
    let dir = tempdir();
    let pw = dir.path().join("pw");
    fs::write(&pw, format!("{OLD}\n")).expect("write the password");
    let mut holder = Bg::spawn_group(
        "holder",
        dir.path(),
        rotating(&server, &source(dir.path())).args([
            "exec",
            "-k",
            KEY,
            "--ttl",
            "3s",
            "--",
            "sh",
            "-c",
            HOLD_UNTIL_STOP,
        ]),
    );
    holder.ready();
    write_whole(&pw, &format!("{NEW}\n"));
    set_password(&server, NEW);
    let cut = server.cmd(&["CLIENT", "KILL", "USER", USER]);
    assert!(
        matches!(cut, redis::Value::Int(n) if n >= 1),
        "the holder's connection was cut: {cut:?}"
    );
    // A renewal after the cut was made on a new connection: with the old password it would be
    // refused, and the lease would run out (76).
    let mut renewals = Renewals::new();
    holder.wait_for("a renewal on a new connection", SOON, || {
        renewals.sample(server.pttl(LOCK), "after the cut");
        renewals.seen >= 1
    });
    touch(dir.path().join("stop"));
    let (out, _) = holder.finish(FINISH);
    assert_eq!(out.code, 0, "the command ran to its end: {out}");
    assert!(!server.exists(LOCK), "released at the end");
    assert_no_secret(&out, OLD);
    assert_no_secret(&out, NEW);
    fs::read_to_string(dir.path().join("runs"))
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn a_long_exec_renews_with_the_password_command_run_again_after_the_password_changed() {
    let runs = renews_with_the_new_password(command_source);
    assert!(
        runs.len() >= 2,
        "the command ran at the start and after the cut: {runs:?}"
    );
}

#[test]
fn a_long_exec_renews_with_the_password_file_read_again_after_the_password_changed() {
    renews_with_the_new_password(file_source);
}

#[test]
fn a_password_command_that_fails_hangs_or_prints_nothing_ends_the_run_within_connect_timeout() {
    let server = RedisServer::start();
    set_password(&server, OLD);
    let dir = tempdir();
    let hung = dir.path().join("hung");
    let cases = [
        (format!("echo {OLD}; exit 3"), "exited with status 3"),
        ("true".to_string(), "printed nothing"),
        // The command's child holds the pipe open: only the whole group's death ends it.
        (
            format!("sleep 30 & echo $! > '{}'; wait", hung.display()),
            "did not finish within 1s and was stopped",
        ),
    ];
    for (line, says) in &cases {
        for args in [
            &["acquire", "-k", KEY, "-w", "20s"][..],
            &["exec", "-k", KEY, "--", "true"],
            &["inspect"],
        ] {
            let source = [
                "--connect-timeout".to_string(),
                "1s".into(),
                "--password-command".into(),
                line.clone(),
            ];
            let (out, took) = run_within(rotating(&server, &source).args(args), FINISH);
            let what = format!("{line} / {args:?}");
            assert_fails(&out, 77, &["--password-command", says, "sh -c"]);
            assert_no_secret(&out, OLD);
            let most = match says.contains("did not finish") {
                true => Duration::from_millis(2500),
                false => Duration::from_millis(1500),
            };
            assert!(took < most, "{what}: took {took:?}");
            if says.contains("did not finish") {
                assert!(took >= Duration::from_secs(1), "{what}: took {took:?}");
                let pid: i32 = fs::read_to_string(&hung)
                    .expect("the hung command's child")
                    .trim()
                    .parse()
                    .expect("a pid");
                wait_until("the hung command's child to be killed", SOON, || {
                    !pid_alive(pid)
                });
            }
        }
    }
    assert!(!server.exists(LOCK), "nothing was written");
}

#[test]
fn a_password_command_goes_with_no_other_password() {
    let server = RedisServer::start();
    let (_dir, file) = crate::common::basic::file_with("pw\n");
    let file = file.display().to_string();
    let with = |cmd: &mut Command| run(cmd.args(["acquire", "-k", KEY]));
    let mut both = rotating(&server, &[]);
    both.args(["--password-command", "echo pw", "--password-file", &file]);
    let out = with(&mut both);
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("--password-file"), "{out}");
    for var in ["RLOCK_PASSWORD", "REDISCLI_AUTH"] {
        let mut cmd = rotating(&server, &[]);
        cmd.env(var, "pw").args(["--password-command", "echo pw"]);
        let out = with(&mut cmd);
        assert_eq!(out.code, 2, "{var}: {out}");
        assert!(out.stderr.contains(&format!("${var}")), "{out}");
    }
    let mut env = rotating(&server, &[]);
    env.env("RLOCK_PASSWORD_COMMAND", "echo pw")
        .env("RLOCK_PASSWORD_FILE", &file);
    assert_eq!(with(&mut env).code, 2);
    assert!(!server.exists(LOCK), "nothing was written");
}

/// Every value under the server's keys, as text: strings, hashes, sorted sets, streams.
fn everything_stored(server: &RedisServer) -> String {
    let mut conn = server.conn();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut conn).expect("KEYS");
    let mut all = String::new();
    for key in keys {
        let value = match server.key_type(&key).as_str() {
            "string" => server.get(&key).unwrap_or_default(),
            "hash" => format!("{:?}", server.hgetall(&key)),
            "zset" => format!(
                "{:?}",
                server.cmd(&["ZRANGE", &key, "0", "-1", "WITHSCORES"])
            ),
            "stream" => format!("{:?}", server.cmd(&["XRANGE", &key, "-", "+"])),
            other => panic!("{key} is a {other}, which this test does not read"),
        };
        all.push_str(&format!("{key} {value}\n"));
    }
    all
}

/// A process's command line and environment, NULs as spaces.
fn proc_text(pid: i32) -> String {
    ["cmdline", "environ"]
        .iter()
        .map(|f| {
            let bytes = fs::read(format!("/proc/{pid}/{f}"))
                .unwrap_or_else(|e| panic!("read /proc/{pid}/{f}: {e}"));
            String::from_utf8_lossy(&bytes).replace('\0', " ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The parent of `pid`, from /proc/PID/status.
fn parent_of(pid: i32) -> i32 {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("PPid:"))
        .and_then(|v| v.trim().parse().ok())
        .expect("PPid")
}

#[test]
fn the_password_commands_output_is_found_nowhere() {
    let server = RedisServer::start();
    set_password(&server, NEW);
    let dir = tempdir();
    fs::write(dir.path().join("pw"), format!("{NEW}\n")).expect("write the password");
    let source = command_source(dir.path());
    let mut holder = Bg::spawn_group(
        "holder",
        dir.path(),
        rotating(&server, &source).args([
            "-v",
            "exec",
            "-k",
            KEY,
            "--",
            "sh",
            "-c",
            HOLD_UNTIL_STOP,
        ]),
    );
    holder.ready();
    let command: i32 = fs::read_to_string(dir.path().join("pid"))
        .expect("the command's pid")
        .trim()
        .parse()
        .expect("a pid");
    let guardian = parent_of(command);
    let rlock_pid = holder.pid();
    assert_eq!(
        parent_of(guardian),
        rlock_pid,
        "rlock, its guardian, the command"
    );
    for (what, pid) in [
        ("rlock", rlock_pid),
        ("guardian", guardian),
        ("command", command),
    ] {
        let text = proc_text(pid);
        assert!(
            !text.contains(NEW),
            "{what}'s /proc shows the password: {text}"
        );
    }
    let stored = everything_stored(&server);
    assert!(
        stored.contains(USER) || stored.contains("rlock"),
        "{stored}"
    );
    assert!(!stored.contains(NEW), "stored in Redis: {stored}");
    for args in [
        &["inspect"][..],
        &["inspect", "--json"],
        &["-v", "inspect", "-k", KEY],
    ] {
        let out = run(rotating(&server, &source).args(args));
        assert_eq!(out.code, 0, "{args:?}: {out}");
        assert_no_secret(&out, NEW);
    }
    touch(dir.path().join("stop"));
    let (out, _) = holder.finish(FINISH);
    assert_eq!(out.code, 0, "{out}");
    assert_no_secret(&out, NEW);
    let history = run(rotating(&server, &source).args(["inspect", "--history", "-k", KEY]));
    assert_eq!(history.code, 0, "{history}");
    assert!(
        history.stdout.lines().any(|l| l.contains(" ok ")),
        "the run is on record: {history}"
    );
    assert_no_secret(&history, NEW);
    assert!(
        !everything_stored(&server).contains(NEW),
        "stored after the run"
    );
}

/// A full server (maxclients) answers the login with its refusal: that is a full server, waited
/// on for --connect-timeout and then 69, not a refused password (77, which no wait cures).
#[test]
fn a_full_server_that_answers_the_login_is_full_not_a_refused_password() {
    let server = RedisServer::start_with(&["--maxclients", "1"]);
    set_password(&server, OLD);
    let dir = tempdir();
    fs::write(dir.path().join("pw"), format!("{OLD}\n")).expect("write the password");
    // The one client the server takes: once the harness's own earlier connections are gone,
    // which the server may learn only after it has refused the next one.
    let until = Instant::now() + SOON;
    let _filler = loop {
        let mut conn = server.conn();
        match redis::cmd("PING").query::<String>(&mut conn) {
            Ok(_) => break conn,
            Err(e) if Instant::now() < until => {
                assert!(e.to_string().contains("max number of clients"), "PING: {e}");
                thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("PING: {e}"),
        }
    };
    let mut cmd = rotating(&server, &file_source(dir.path()));
    cmd.args(["--connect-timeout", "1s", "acquire", "-n", "-k", KEY]);
    let (out, took) = run_within(&mut cmd, FINISH);
    assert_eq!(out.code, 69, "{out}");
    assert!(
        out.stderr.contains("max number of clients reached"),
        "{out}"
    );
    assert!(
        took >= Duration::from_secs(1),
        "tried for --connect-timeout: {took:?}"
    );
}
