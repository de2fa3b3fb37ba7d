//! Redis unavailable, misconfigured or refusing: nothing listening or a frozen server is 69
//! within the op timeout, malformed URLs are 78, a refused password is 77 from every password
//! source, a port that is not Redis (or is Redis behind TLS) and a password not given or wrong say
//! so; and the database, `--op-timeout` from the environment and Unix sockets work.

use crate::common::basic::*;
use crate::common::{RedisServer, TestCerts, TlsServer, rlock, rlock_at, run};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// Redis unavailable, misconfigured or refusing
// ---------------------------------------------------------------------------------------------

/// The subcommands that talk to Redis, on lock `name`; `token` does not own it.
fn every_subcommand<'a>(name: &'a str, token: &'a str) -> Vec<Vec<&'a str>> {
    vec![
        // -n retries a server it never reached for --connect-timeout; 0: one try.
        vec!["--connect-timeout", "0", "acquire", "-k", name, "-n"],
        // A wait rides out an outage until it ends (-q: no lines about the outage itself).
        vec!["-q", "acquire", "-k", name, "-w", "1s"],
        vec!["release", "-k", name, "--token", token],
        vec!["renew", "-k", name, "--token", token],
        vec!["inspect", "-k", name],
        vec!["inspect"],
    ]
}

#[test]
fn nothing_listening_is_unavailable_promptly() {
    let port = dead_port();
    let url = format!("redis://127.0.0.1:{port}");
    let mut cases = every_subcommand("jobs", "t");
    cases.push(vec!["release", "-k", "jobs", "--force"]);
    for args in cases {
        let (out, took) = run_within(
            rlock()
                .args(["--url", &url, "--op-timeout", "500ms"])
                .args(&args),
            Duration::from_secs(10),
        );
        assert_fails(&out, 69, &[&format!("127.0.0.1:{port}")]);
        assert!(took < Duration::from_secs(3), "{args:?} took {took:?}");
    }
}

#[test]
fn frozen_server_is_unavailable_within_the_op_timeout() {
    let server = RedisServer::start();
    let token = acquire(&server, "jobs", &["--ttl", "60s"]);
    server.freeze();
    for args in [
        &["--connect-timeout", "0", "acquire", "-k", "jobs", "-n"][..],
        &["--connect-timeout", "0", "acquire", "-k", "other", "-n"],
        &["release", "-k", "jobs", "--token", "not-the-owner"],
        &["release", "-k", "other", "--force"],
        &["renew", "-k", "jobs", "--token", "not-the-owner"],
        &["inspect", "-k", "jobs"],
        &["inspect"],
    ] {
        let (out, took) = run_within(
            rlock_at(&server).args(["--op-timeout", "500ms"]).args(args),
            Duration::from_secs(10),
        );
        assert_fails(&out, 69, &[&server.url()]);
        assert!(took < Duration::from_secs(3), "{args:?} took {took:?}");
    }
    server.thaw();
    assert_eq!(server.get(&lock_key("jobs")), Some(token));
    assert!(server.pttl(&lock_key("jobs")) <= 60_000);
}

#[test]
fn frozen_server_is_unavailable_to_a_waiting_acquire_when_its_wait_ends() {
    // A wait rides out the outage until the wait ends, then exits 69.
    let server = RedisServer::start();
    acquire(&server, "jobs", &["--ttl", "60s"]);
    server.freeze();
    for args in [
        &["-q", "acquire", "-k", "jobs", "-w", "1s"][..],
        &["-q", "acquire", "-k", "other", "-w", "1s"],
    ] {
        let (out, took) = run_within(
            rlock_at(&server).args(["--op-timeout", "500ms"]).args(args),
            Duration::from_secs(10),
        );
        assert_fails(&out, 69, &[&server.url()]);
        assert!(took < Duration::from_secs(3), "{args:?} took {took:?}");
    }
}

#[test]
fn malformed_urls_and_unreadable_password_files_are_configuration_errors() {
    let server = RedisServer::start();
    for url in [
        "foo://x".to_string(),
        "redis://host:notaport".to_string(),
        format!("redis://:{SECRET}@127.0.0.1:notaport"),
        // No scheme (port 1: should it be taken as an address, nothing is there).
        "127.0.0.1:1".to_string(),
    ] {
        for args in [&["acquire", "-k", "jobs", "-n"][..], &["inspect"]] {
            let out = run(rlock().args(["--url", &url]).args(args));
            assert_fails(&out, 78, &["URL"]);
            assert!(!out.stderr.contains(SECRET), "password shown:\n{out}");
        }
    }
    // What is wrong is said in words, not in the client library's ("InvalidClientConfig").
    for (url, why) in [
        ("redis://127.0.0.1:99999".to_string(), "invalid port number"),
        (
            format!("{}/abc", server.url()),
            "the database after the host must be a number",
        ),
        ("rediss://[::1".to_string(), "invalid IPv6 address"),
    ] {
        let out = run(rlock().args(["--url", &url, "inspect"]));
        assert_fails(&out, 78, &["malformed URL", why]);
        assert!(!out.stderr.contains("InvalidClientConfig"), "{out}");
    }
    let missing = "/nonexistent/rlock-password";
    let out = run(rlock_at(&server).args(["--password-file", missing, "acquire", "-k", "jobs"]));
    assert_fails(&out, 78, &[missing]);
    let dbsize: i64 = q(&server, &["DBSIZE"]);
    assert_eq!(dbsize, 0, "a configuration error must not reach Redis");
}

#[test]
fn auth_refused_is_77_and_every_password_source_works() {
    let server = RedisServer::start_with(&["--requirepass", SECRET]);
    let port = server.port();
    let (_good_dir, good_file) = file_with(&format!("{SECRET}\n"));
    let (_bad_dir, bad_file) = file_with("wrongpw\n");
    let good_file = good_file.to_str().expect("utf-8 path");
    let bad_file = bad_file.to_str().expect("utf-8 path");
    let secret_url = format!("redis://:{SECRET}@127.0.0.1:{port}");
    let wrong_url = format!("redis://:wrongpw@127.0.0.1:{port}");

    let url = server.url();
    let plain_url = url.as_str();

    // Refused: no password, a wrong one from a file, from the environment, in the URL.
    let refused: [Source; 5] = [
        // (no password at all: see acquire_without_a_password_is_refused)
        (&["--url", plain_url], &[], "no password"),
        (
            &["--url", plain_url, "--password-file", bad_file],
            &[],
            "wrong password file",
        ),
        (
            &["--url", plain_url],
            &[("RLOCK_PASSWORD", "wrongpw")],
            "wrong $RLOCK_PASSWORD",
        ),
        (
            &["--url", plain_url],
            &[("REDISCLI_AUTH", "wrongpw")],
            "wrong $REDISCLI_AUTH",
        ),
        (&["--url", &wrong_url], &[], "wrong password in the URL"),
    ];
    for (global, env, what) in refused {
        for args in [
            &["acquire", "-k", "jobs", "-n"][..],
            &["acquire", "-k", "jobs"],
            &["release", "-k", "jobs", "--token", "t"],
            &["renew", "-k", "jobs", "--token", "t"],
            &["inspect", "-k", "jobs"],
        ] {
            if what == "no password" && args[0] == "acquire" {
                continue;
            }
            let out = run(rlock().args(global).envs(env.iter().copied()).args(args));
            assert_fails(&out, 77, &[]);
            assert!(
                !out.stderr.contains("wrongpw"),
                "{what}: password shown:\n{out}"
            );
            assert_no_secret(&out, SECRET);
        }
        assert_eq!(
            q::<i64>(&server, &["DBSIZE"]),
            0,
            "{what}: nothing may be written"
        );
    }

    // Accepted: the right password from each source, also with -v, which must not show it.
    let sources: [Source; 5] = [
        (
            &["--url", plain_url, "--password-file", good_file],
            &[],
            "password file",
        ),
        (
            &["--url", plain_url],
            &[("RLOCK_PASSWORD", SECRET)],
            "$RLOCK_PASSWORD",
        ),
        (
            &["--url", plain_url],
            &[("REDISCLI_AUTH", SECRET)],
            "$REDISCLI_AUTH",
        ),
        (&["--url", &secret_url], &[], "URL"),
        (&[], &[("RLOCK_URL", &secret_url)], "$RLOCK_URL"),
    ];
    for (global, env, what) in sources {
        for verbose in [false, true] {
            let with = |args: &[&str]| {
                let mut cmd = rlock();
                cmd.args(global).envs(env.iter().copied());
                if verbose {
                    cmd.arg("-v");
                }
                let out = run(cmd.args(args));
                assert_no_secret(&out, SECRET);
                assert_eq!(out.code, 0, "{what} (-v {verbose}) {args:?}:\n{out}");
                out
            };
            let out = with(&["acquire", "-k", "jobs", "-n"]);
            let token = out.stdout.trim().to_string();
            assert_eq!(server.get(&lock_key("jobs")), Some(token.clone()), "{what}");
            if verbose {
                assert!(!out.stderr.is_empty(), "-v says something:\n{out}");
            }
            if verbose && what.ends_with("URL") {
                assert!(
                    out.stderr
                        .contains(&format!("redis://:***@127.0.0.1:{port}")),
                    "-v shows the URL with the password as ***:\n{out}"
                );
            }
            with(&["inspect", "-k", "jobs"]);
            with(&["inspect"]);
            with(&["renew", "-k", "jobs", "--token", &token]);
            with(&["release", "-k", "jobs", "--token", &token]);
            assert!(!server.exists(&lock_key("jobs")), "{what}: released");
        }
    }

    // Errors that quote the URL still hide the password.
    for verbose in [&[][..], &["-v"]] {
        let out = run(rlock()
            .args([
                "--url",
                &format!("redis://:{SECRET}@127.0.0.1:{}", dead_port()),
            ])
            // One try: the bound itself is outages::a_run_against_a_closed_port….
            .args(["--connect-timeout", "0"])
            .args(verbose)
            .args(["acquire", "-k", "jobs", "-n"]));
        assert_eq!(out.code, 69, "{out}");
        assert_no_secret(&out, SECRET);
        let out = run(rlock().args(["--url", &secret_url]).args(verbose).args([
            "renew",
            "-k",
            "jobs",
            "--token",
            "not-the-owner",
        ]));
        assert_eq!(out.code, 77, "{out}");
        assert_no_secret(&out, SECRET);
        let out = run(rlock()
            .args(["--url", &secret_url])
            .args(verbose)
            .args(["acquire", "-k", "jobs", "-n", "--ttl", "30x"]));
        assert_eq!(out.code, 2, "{out}");
        assert_no_secret(&out, SECRET);
    }
}

#[test]
fn acquire_without_a_password_is_refused() {
    let server = RedisServer::start_with(&["--requirepass", SECRET]);
    for args in [
        &["acquire", "-k", "jobs", "-n"][..],
        &["acquire", "-k", "jobs"],
    ] {
        let (out, took) = run_within(rlock_at(&server).args(args), Duration::from_secs(10));
        assert_fails(&out, 77, &["password"]);
        assert!(took < Duration::from_secs(3), "{args:?} took {took:?}");
        assert_eq!(q::<i64>(&server, &["DBSIZE"]), 0, "nothing may be written");
    }
}

// ---------------------------------------------------------------------------------------------

#[test]
fn an_out_of_range_database_is_a_configuration_error() {
    let server = RedisServer::start();
    let url = format!("{}/999", server.url());
    for args in [
        &["acquire", "-k", "jobs", "-n"][..],
        &["acquire", "-k", "jobs"],
        &["release", "-k", "jobs", "--token", "t"],
        &["inspect", "-k", "jobs"],
    ] {
        let out = run(rlock().args(["-u", &url]).args(args));
        assert_fails(&out, 78, &["database"]);
    }
    assert_eq!(q::<i64>(&server, &["DBSIZE"]), 0, "nothing may be written");
}

/// `--op-timeout` is also read from $RLOCK_OP_TIMEOUT.
#[test]
fn op_timeout_comes_from_the_environment_too() {
    let server = RedisServer::start();
    acquire(&server, "jobs", &["--ttl", "60s"]);
    server.freeze();
    let (out, took) = run_within(
        rlock_at(&server).env("RLOCK_OP_TIMEOUT", "300ms").args([
            "--connect-timeout",
            "0",
            "acquire",
            "-k",
            "other",
            "-n",
        ]),
        Duration::from_secs(10),
    );
    server.thaw();
    assert_fails(&out, 69, &[&server.url()]);
    // One timed-out attempt plus the give-back, each 300 ms: well under the 2 s default.
    assert!(took < Duration::from_millis(1500), "took {took:?}");
}

/// unix:// URLs reach a server over its socket, for every subcommand.
#[test]
fn a_unix_socket_url_works() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("redis.sock");
    let sock_arg = sock.to_str().unwrap().to_string();
    let server = RedisServer::start_with(&["--unixsocket", &sock_arg, "--unixsocketperm", "700"]);
    let url = format!("unix://{sock_arg}");
    let out = run(rlock().args(["--url", &url, "acquire", "-k", "jobs"]));
    assert_eq!(out.code, 0, "{out}");
    let token = out.stdout.trim().to_string();
    assert_eq!(server.get(&lock_key("jobs")), Some(token.clone()));
    let out = run(rlock().args(["--url", &url, "inspect", "-k", "jobs"]));
    assert_eq!(out.code, 0, "{out}");
    let out = run(rlock().args(["--url", &url, "release", "-k", "jobs", "--token", &token]));
    assert_eq!(out.code, 0, "{out}");
    assert!(!server.exists(&lock_key("jobs")));
    let out = run(rlock().args(["--url", &url, "exec", "-k", "jobs", "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    // A waiter subscribes over the socket too, and is woken by the release (not by the TTL).
    let out = run(rlock().args(["--url", &url, "acquire", "-k", "jobs", "--ttl", "60s"]));
    let token = out.stdout.trim().to_string();
    let mut waiter = crate::common::Background::spawn(
        "waiter",
        dir.path(),
        rlock().args(["--url", &url, "exec", "-k", "jobs", "--", "true"]),
    );
    waiter.wait_for("the waiter to queue", Duration::from_secs(10), || {
        matches!(
            server.try_cmd(&["ZCARD", "{rlock:jobs}:q"]),
            Ok(redis::Value::Int(1))
        )
    });
    let out = run(rlock().args(["--url", &url, "release", "-k", "jobs", "--token", &token]));
    assert_eq!(out.code, 0, "{out}");
    let (out, _) = waiter.finish(Duration::from_secs(5));
    assert_eq!(out.code, 0, "the waiter over the socket: {out}");
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
    if !crate::common::tls_or_skip() {
        return;
    }
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
    if !crate::common::tls_or_skip() {
        return;
    }
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
    // A frozen one times out, as any frozen server (one try: --connect-timeout 0).
    tls.server.freeze();
    let out = run(rlock()
        .args([
            "--url",
            &real,
            "--op-timeout",
            "500ms",
            "--connect-timeout",
            "0",
        ])
        .arg("--tls-ca")
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

/// A statically linked rlock takes host names from /etc/hosts and DNS and user names from
/// /etc/passwd, whatever nsswitch.conf names (`src/names.rs`; pinned only before a lookup is
/// made, `identity` reading /etc/passwd itself). In a mount namespace whose nsswitch.conf names
/// only services that do not exist, `redis://localhost` still connects, and with neither `$USER`
/// nor `$LOGNAME` the holder is named as /etc/passwd names the uid. The dynamic build follows
/// nsswitch.conf, as the C library does: with `hosts: files` it connects, and with a `passwd`
/// service that does not exist the holder is named by uid.
#[test]
fn names_come_from_the_files_and_dns_whatever_nsswitch_conf_names() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "this test bind-mounts over /etc in a namespace of its own: run cargo test as root"
    );
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let is_static = cfg!(target_feature = "crt-static");
    let nsswitch = if is_static {
        "passwd: nosuch\nhosts: nosuch\n"
    } else {
        "passwd: nosuch\nhosts: files\n"
    };
    std::fs::write(d.join("nsswitch.conf"), nsswitch).unwrap();
    std::fs::write(d.join("passwd"), "rlock-named:x:0:0::/root:/bin/sh\n").unwrap();
    let script = format!(
        r#"mount --bind "$D/nsswitch.conf" /etc/nsswitch.conf && mount --bind "$D/passwd" /etc/passwd && exec "$RL" -u redis://localhost:{} exec -k names -- true"#,
        server.port()
    );
    // rlock's environment as the harness cleans it (no RLOCK_*), around `unshare`.
    let cleaned = rlock();
    let mut unshared = std::process::Command::new("unshare");
    for (name, value) in cleaned.get_envs() {
        match value {
            Some(value) => unshared.env(name, value),
            None => unshared.env_remove(name),
        };
    }
    unshared
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .env("D", d)
        .env("RL", cleaned.get_program())
        .env_remove("USER")
        .env_remove("LOGNAME");
    let out = run(&mut unshared);
    assert_eq!(
        out.code, 0,
        "rlock with nsswitch.conf naming no real service: {out}"
    );
    let state = server.hgetall("{rlock:names}:state");
    assert_eq!(
        state.get("user").map(String::as_str),
        Some(if is_static { "rlock-named" } else { "0" }),
        "the holder's user, with no $USER: {state:?}"
    );
}
