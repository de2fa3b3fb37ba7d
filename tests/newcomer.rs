mod common;

// What a newcomer trips over (issue 14): a blank key, a whole command line given as one word,
// -q meaning "only errors" for release --force too, -v saying why a run skipped with -E 0 did
// nothing, a port that is not Redis (or is Redis behind TLS), and a password not given or wrong.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::{Output, RedisServer, TestCerts, TlsServer, rlock, rlock_at, run};

#[test]
fn a_key_of_blanks_is_a_usage_error() {
    let server = RedisServer::start();
    for key in [" ", "  ", "\u{a0}"] {
        let out = run(rlock_at(&server).args(["acquire", "-n", "-k", key]));
        assert_eq!(out.code, 2, "{key:?}: {out}");
        assert!(out.stderr.contains("blanks"), "{key:?}: {out}");
    }
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut server.conn())
        .expect("KEYS");
    assert!(keys.is_empty(), "a blank key reached Redis: {keys:?}");
}

#[test]
fn a_command_line_in_one_word_gets_the_shell_hint() {
    let server = RedisServer::start();
    let out = run(rlock_at(&server).args(["exec", "-k", "hint", "--", "echo hi"]));
    assert_eq!(out.code, 127, "{out}");
    assert!(
        out.stderr.contains("without a shell") && out.stderr.contains("sh -c 'echo hi'"),
        "{out}"
    );
    assert_eq!(out.stderr.lines().count(), 1, "{out}");
    // A plain missing command gets no such hint.
    let out = run(rlock_at(&server).args(["exec", "-k", "hint", "--", "no-such-command-x"]));
    assert_eq!(out.code, 127, "{out}");
    assert!(!out.stderr.contains("without a shell"), "{out}");
}

#[test]
fn quiet_force_release_says_nothing() {
    let server = RedisServer::start();
    let out = run(rlock_at(&server).args(["acquire", "-k", "q"]));
    assert_eq!(out.code, 0, "{out}");
    let out = run(rlock_at(&server).args(["-q", "release", "-k", "q", "--force"]));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(
        (out.stdout.as_str(), out.stderr.as_str()),
        ("", ""),
        "{out}"
    );
    assert!(!server.exists("rlock:q"), "the lock was not broken");
    // Without -q it says whom it broke.
    let out = run(rlock_at(&server).args(["acquire", "-k", "q"]));
    assert_eq!(out.code, 0, "{out}");
    let out = run(rlock_at(&server).args(["release", "-k", "q", "--force"]));
    assert!(out.stdout.contains("broke lock 'q' held by"), "{out}");
}

/// `exec -w 20m -- ./deplyo.sh` (a typo) must not wait 20 minutes to say so: the command is
/// looked up before the wait, a line says it cannot run now, and the wait goes on (the command
/// may appear meanwhile, built by the holder).
#[test]
fn a_command_that_cannot_run_is_told_before_the_wait() {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let out = run(rlock_at(&server).args(["acquire", "-k", "typo", "--ttl", "60s"]));
    assert_eq!(out.code, 0, "{out}");
    let holder = out.stdout.trim().to_string();
    let script = dir.path().join("deploy.sh");
    let mut waiter = common::Background::spawn(
        "waiter",
        dir.path(),
        rlock_at(&server)
            .args(["exec", "-w", "20s", "-k", "typo", "--"])
            .arg(&script),
    );
    let stderr = dir.path().join("waiter.stderr");
    waiter.wait_for(
        "the line about the command",
        std::time::Duration::from_secs(5),
        || std::fs::read_to_string(&stderr).is_ok_and(|e| e.contains("does not exist")),
    );
    assert!(
        waiter.running(),
        "the waiter stopped waiting: {}",
        waiter.describe()
    );
    // The holder builds the command meanwhile, then releases: the waiter runs it.
    std::fs::write(&script, "#!/bin/sh\necho built\n").expect("write script");
    let mut perms = std::fs::metadata(&script).expect("stat").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&script, perms).expect("chmod");
    let out = run(rlock_at(&server).args(["release", "-k", "typo", "--token", &holder]));
    assert_eq!(out.code, 0, "{out}");
    let (out, _) = waiter.finish(std::time::Duration::from_secs(10));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(out.stdout.trim(), "built");
    // -q: no line; -n: no wait, so no line either (the 127 after the grant says it).
    let out = run(rlock_at(&server).args(["-q", "exec", "-w", "1s", "-k", "t2", "--", "./nope"]));
    assert_eq!(out.code, 127, "{out}");
    assert_eq!(out.stderr.lines().count(), 1, "{out}");
}

/// The cron recipe: `-E 0` turns a skipped run into a success that says nothing, and `-v` still
/// says why it was skipped (on stderr, one line naming the lock and its holder).
#[test]
fn verbose_says_why_a_busy_lock_exited_0() {
    let server = RedisServer::start();
    let out = run(rlock_at(&server).args(["acquire", "-k", "cron", "--ttl", "60s"]));
    assert_eq!(out.code, 0, "{out}");
    for sub in [
        &["exec", "-n", "-E", "0", "-k", "cron", "--", "echo", "ran"][..],
        &["acquire", "-n", "-E", "0", "-k", "cron"],
    ] {
        let out = run(rlock_at(&server).arg("-v").args(sub));
        assert_eq!(out.code, 0, "{sub:?}: {out}");
        assert_eq!(out.stdout, "", "{sub:?}: nothing ran, no token: {out}");
        let why: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| l.starts_with("rlock: lock 'cron' is busy (held by "))
            .collect();
        assert_eq!(why.len(), 1, "{sub:?}: -v says why, once: {out}");
        // Without -v: silent, as the recipe promises.
        let out = run(rlock_at(&server).args(sub));
        assert_eq!(
            (out.code, out.stdout.as_str(), out.stderr.as_str()),
            (0, "", ""),
            "{sub:?}: {out}"
        );
    }
}

/// A TCP server on 127.0.0.1 that answers every connection like an HTTP server refusing a bad
/// request, then closes it. Stopped (and its thread joined) on drop.
struct HttpLike {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl HttpLike {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local_addr").port();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = thread::spawn(move || {
            for conn in listener.incoming() {
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                // Read what the client sent (whatever it is), as a server reads a request.
                let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                let mut request = [0u8; 4096];
                let _ = conn.read(&mut request);
                let _ = conn.write_all(
                    b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            }
        });
        HttpLike {
            port,
            stop,
            thread: Some(thread),
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }
}

impl Drop for HttpLike {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A typo gets clap's suggestion, and a usage error names the help page of its subcommand,
/// where the option it is about is described; all on one line, exit 2.
#[test]
fn usage_errors_suggest_and_point_at_the_right_help() {
    for (args, says) in [
        (
            &["aquire", "-k", "x"][..],
            &[
                "a similar subcommand exists: 'acquire'",
                "(see 'rlock --help')",
            ][..],
        ),
        (
            &["acquire", "--tll", "30s", "-k", "x"],
            &[
                "a similar argument exists: '--ttl'",
                "(see 'rlock acquire --help')",
            ],
        ),
        (
            &["acquire", "--ttl", "30", "-k", "x"],
            &["'30' has no unit", "(see 'rlock acquire --help')"],
        ),
        (
            &["acquire", "--ttl", "30x", "-k", "x"],
            &["unknown unit 'x': use ms, s, m, h or d", "try e.g. 30s"],
        ),
        (
            &["acquire", "-E", "-1", "-k", "x"],
            &["-1 is not in 0..=255", "(see 'rlock acquire --help')"],
        ),
        (
            &["exec", "-k", "x", "--lost-signal", "FOO", "--", "true"],
            &["'FOO' is not a signal", "(see 'rlock exec --help')"],
        ),
        (
            &["inspect", "--bogus"],
            &[
                "unexpected argument '--bogus'",
                "(see 'rlock inspect --help')",
            ],
        ),
        (
            &[],
            &["a subcommand is needed: acquire, release, renew, inspect or exec"],
        ),
    ] {
        let out = run(rlock().args(args));
        assert_eq!(out.code, 2, "{args:?}: {out}");
        assert_eq!(out.stdout, "", "{args:?}: {out}");
        assert_eq!(out.stderr.lines().count(), 1, "{args:?}: {out}");
        for s in says {
            assert!(out.stderr.contains(s), "{args:?}: wants {s:?}: {out}");
        }
    }
}

/// A usage error about an argument that is not UTF-8 is still one line and exit 2 (not a
/// panic), and one about a stray URL does not show its password.
#[test]
fn usage_errors_survive_odd_arguments_and_hide_passwords() {
    use std::os::unix::ffi::OsStrExt;
    let odd = std::ffi::OsStr::from_bytes(b"caf\xe9");
    for args in [vec![odd], vec![std::ffi::OsStr::new("--bogus"), odd]] {
        let out = run(rlock().args(&args));
        assert_one_line(&out, 2);
    }
    let out = run(rlock().args(["acquire", "-k", "x", "redis://:hunter2@db"]));
    assert_one_line(&out, 2);
    assert!(!out.stderr.contains("hunter2"), "{out}");
}

/// One line on stderr, starting with "rlock: ", stdout empty, the given exit code.
fn assert_one_line(out: &Output, code: i32) {
    assert_eq!(out.code, code, "{out}");
    assert_eq!(out.stdout, "", "{out}");
    assert_eq!(out.stderr.lines().count(), 1, "{out}");
    assert!(out.stderr.starts_with("rlock: "), "{out}");
}

/// An HTTP server where Redis was expected: said in words, not in the parser's, at once (no
/// wait rides it out: it will not turn into Redis), and unavailable (69).
#[test]
fn an_http_server_does_not_look_like_redis() {
    let http = HttpLike::start();
    let endpoint = format!("127.0.0.1:{}", http.port);
    for args in [
        &["acquire", "-n", "-k", "x"][..],
        &["acquire", "-w", "30s", "-k", "x"],
        &["inspect"],
        &["release", "-k", "x", "--token", "t"],
    ] {
        let started = Instant::now();
        let out = run(rlock().args(["--url", &http.url()]).args(args));
        assert_one_line(&out, 69);
        assert!(
            out.stderr.contains("does not look like a Redis server")
                && out.stderr.contains(&endpoint)
                && out.stderr.contains("HTTP/1.1 400 Bad Request"),
            "{args:?}: {out}"
        );
        assert!(
            !out.stderr.contains("Parse error") && !out.stderr.contains("Unexpected"),
            "{args:?}: raw parser words: {out}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{args:?}: took {:?}, as if waiting out an outage: {out}",
            started.elapsed()
        );
    }
}

/// redis:// to a Redis's TLS port: the port is asked whether it speaks TLS, and the message
/// says to use rediss://, with and without a password (AUTH is then the first thing sent).
#[test]
fn a_tls_port_spoken_to_in_plain_text_suggests_rediss() {
    let certs = TestCerts::new();
    let tls = TlsServer::start(&certs, "no");
    let plain = format!("redis://127.0.0.1:{}", tls.tls_port);
    let suggested = format!("rediss://127.0.0.1:{}", tls.tls_port);
    for (args, password) in [
        (&["acquire", "-n", "-k", "x"][..], None),
        (&["acquire", "-w", "30s", "-k", "x"], None),
        (&["inspect", "-k", "x"], Some("s3cret")),
    ] {
        let started = Instant::now();
        let mut cmd = rlock();
        cmd.args(["--url", &plain]).args(args);
        if let Some(p) = password {
            cmd.env("RLOCK_PASSWORD", p);
        }
        let out = run(&mut cmd);
        assert_one_line(&out, 69);
        assert!(
            out.stderr.contains("does not look like a Redis server")
                && out.stderr.contains(&suggested),
            "{args:?}: {out}"
        );
        assert!(
            !out.stderr.contains("reset by peer") && !out.stderr.contains("end of file"),
            "{args:?}: raw words: {out}"
        );
        assert!(!out.stderr.contains("s3cret"), "password shown: {out}");
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{args:?}: took {:?}, as if waiting out an outage: {out}",
            started.elapsed()
        );
    }
    // The suggestion works.
    let out = run(rlock()
        .args(["--url", &suggested, "--tls-ca"])
        .arg(&certs.ca)
        .args(["acquire", "-n", "-k", "x"]));
    assert_eq!(out.code, 0, "{out}");
}

/// rediss:// to a plain Redis port: the TLS handshake gets no answer (Redis waits for the end of
/// a line), so the port is asked a plain PING, and the message says to use redis://, at once
/// even with -w. A real TLS port that is frozen, or whose certificate is not trusted, is not
/// mistaken for a plain one.
#[test]
fn a_plain_port_spoken_to_in_tls_suggests_redis() {
    let server = RedisServer::start();
    let guarded = RedisServer::start_with(&["--requirepass", "s3cret"]);
    for (url, suggested, args) in [
        (
            format!("rediss://127.0.0.1:{}", server.port()),
            format!("redis://127.0.0.1:{}", server.port()),
            &["acquire", "-n", "-k", "x"][..],
        ),
        (
            format!("rediss://127.0.0.1:{}", server.port()),
            format!("redis://127.0.0.1:{}", server.port()),
            &["acquire", "-w", "30s", "-k", "x"][..],
        ),
        (
            format!("rediss://:s3cret@127.0.0.1:{}", guarded.port()),
            format!("redis://:***@127.0.0.1:{}", guarded.port()),
            &["inspect", "-k", "x"][..],
        ),
    ] {
        let started = Instant::now();
        let out = run(rlock()
            .args(["--url", &url, "--op-timeout", "500ms"])
            .args(args));
        assert_one_line(&out, 69);
        assert!(
            out.stderr.contains("does not speak TLS") && out.stderr.contains(&suggested),
            "{args:?}: {out}"
        );
        assert!(!out.stderr.contains("s3cret"), "password shown: {out}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{args:?}: took {:?}, as if waiting out an outage: {out}",
            started.elapsed()
        );
    }
    // The suggestion works.
    let out = run(rlock_at(&server).args(["acquire", "-n", "-k", "x"]));
    assert_eq!(out.code, 0, "{out}");

    // A TLS port whose certificate is not trusted says so.
    let certs = TestCerts::new();
    let tls = TlsServer::start(&certs, "no");
    let real = format!("rediss://127.0.0.1:{}", tls.tls_port);
    let out = run(rlock().args(["--url", &real, "acquire", "-n", "-k", "x"]));
    assert_ne!(out.code, 0, "{out}");
    assert!(!out.stderr.contains("does not speak TLS"), "{out}");
    assert!(out.stderr.to_lowercase().contains("certificate"), "{out}");
    // A frozen one times out, as any frozen server.
    tls.server.freeze();
    let out = run(rlock()
        .args(["--url", &real, "--op-timeout", "500ms", "--tls-ca"])
        .arg(&certs.ca)
        .args(["acquire", "-n", "-k", "x"]));
    tls.server.thaw();
    assert_one_line(&out, 69);
    assert!(!out.stderr.contains("does not speak TLS"), "{out}");
    assert!(out.stderr.contains("timed out"), "{out}");
}

/// A server that needs a password, and none given: said in words, with where a password goes,
/// never Redis's "NOAUTH" or "unauthenticated multibulk length"; refused auth is 77.
#[test]
fn no_password_says_where_one_goes() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    for args in [
        // EVALSHA with more than 10 arguments: "unauthenticated multibulk length".
        &["acquire", "-n", "-k", "x"][..],
        &["exec", "-n", "-k", "x", "--", "true"],
        // Fewer: "NOAUTH Authentication required".
        &["inspect", "-k", "x"],
        &["inspect"],
        &["release", "-k", "x", "--token", "t"],
        &["renew", "-k", "x", "--token", "t"],
    ] {
        let out = run(rlock_at(&server).args(args));
        assert_one_line(&out, 77);
        assert!(
            out.stderr.contains("the server needs a password")
                && out.stderr.contains("--password-file")
                && out.stderr.contains("$RLOCK_PASSWORD")
                && out.stderr.contains("redis://:PASS@host"),
            "{args:?}: {out}"
        );
        for raw in [
            "NOAUTH",
            "multibulk",
            "unauthenticated",
            "Authentication required",
        ] {
            assert!(!out.stderr.contains(raw), "{args:?}: raw {raw:?}: {out}");
        }
    }
}

/// A wrong password, from each place one can come from: refused in words, 77, not shown.
#[test]
fn a_wrong_password_is_said_to_be_refused() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let wrong_url = format!("redis://:wr0ng@127.0.0.1:{}", server.port());
    let mut in_url = rlock();
    in_url
        .args(["--url", &wrong_url])
        .args(["acquire", "-n", "-k", "x"]);
    let mut in_env = rlock_at(&server);
    in_env
        .env("RLOCK_PASSWORD", "wr0ng")
        .args(["inspect", "-k", "x"]);
    for mut cmd in [in_url, in_env] {
        let out = run(&mut cmd);
        assert_one_line(&out, 77);
        assert!(out.stderr.contains("refused the password"), "{out}");
        assert!(
            !out.stderr.contains("wr0ng") && !out.stderr.contains("AuthenticationFailed"),
            "{out}"
        );
    }
}
