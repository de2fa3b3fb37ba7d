//! TLS with a CA made in the test: verification on, and mTLS.

use super::*;

// TLS: a CA made in the test
// ---------------------------------------------------------------------------------------------

/// `rlock --url rediss://… --tls-ca CA`.
fn over_tls(server: &TlsServer, certs: &TestCerts) -> Command {
    let mut cmd = rlock();
    cmd.arg("--url")
        .arg(server.url())
        .arg("--tls-ca")
        .arg(&certs.ca);
    cmd
}

#[test]
fn tls_with_the_test_ca_works_for_the_whole_lifecycle() {
    if !crate::common::tls_or_skip() {
        return;
    }
    let certs = TestCerts::new();
    let tls = TlsServer::start(&certs, "no");
    let plain = &tls.server;
    let out = expect(
        0,
        over_tls(&tls, &certs).args(["acquire", "--json", "-k", KEY, "--ttl", "60s"]),
    );
    let token = token_of(&out);
    let first_fence = fence_of(&out);
    assert_eq!(plain.get(LOCK).as_deref(), Some(token.as_str()));
    expect(
        0,
        over_tls(&tls, &certs).args(["renew", "-k", KEY, "--token", &token]),
    );
    let out = expect(0, over_tls(&tls, &certs).args(["inspect", "--json"]));
    assert_eq!(
        json(&out)[0]["token"].as_str(),
        Some(token.as_str()),
        "{out}"
    );

    // A waiter subscribes over TLS too, and is woken by the release.
    let dir = tempdir();
    let mut waiter = Bg::spawn_group(
        "waiter",
        dir.path(),
        over_tls(&tls, &certs).args(["exec", "-w", "30s", "-k", KEY, "--", "true"]),
    );
    waiter.wait_for("the waiter to queue", SOON, || {
        matches!(plain.try_cmd(&["ZCARD", QUEUE]), Ok(redis::Value::Int(1)))
    });
    expect(
        0,
        over_tls(&tls, &certs).args(["release", "-k", KEY, "--token", &token]),
    );
    let (out, _) = waiter.finish(Duration::from_secs(1));
    assert_eq!(out.code, 0, "{out}");

    // The environment, and the certificate's other name.
    let out = expect(
        0,
        rlock()
            .env("RLOCK_URL", format!("rediss://localhost:{}", tls.tls_port))
            .env("RLOCK_TLS_CA", &certs.ca)
            .args(["exec", "-k", KEY, "--", "sh", "-c", "echo $RLOCK_FENCE"]),
    );
    printed_fence_above(&out, first_fence);
    assert_eq!(plain.get(LOCK), None);
}

#[test]
fn tls_certificates_are_verified_by_default() {
    if !crate::common::tls_or_skip() {
        return;
    }
    let certs = TestCerts::new();
    let tls = TlsServer::start(&certs, "no");
    let refused = |cmd: &mut Command, why: &str| {
        let out = run(cmd.args(["acquire", "-n", "-k", KEY]));
        assert_eq!(out.code, 78, "{why}: {out}");
        assert_eq!(out.stderr.lines().count(), 1, "{why}: one line: {out}");
        assert!(
            out.stderr.to_lowercase().contains("certificate"),
            "{why}: the message must say the certificate was the problem: {out}"
        );
        assert_eq!(tls.server.get(LOCK), None, "{why}: nothing may be written");
    };
    // The system roots do not know the test CA.
    refused(
        rlock().arg("--url").arg(tls.url()),
        "no --tls-ca (system roots)",
    );
    // A CA that did not sign the server's certificate.
    let stranger = TestCerts::new();
    refused(
        rlock()
            .arg("--url")
            .arg(tls.url())
            .arg("--tls-ca")
            .arg(&stranger.ca),
        "another CA",
    );
    // A certificate signed by the right CA, for another name.
    let elsewhere = TestCerts::for_server_names(&["db.example.com"]);
    let wrong_name = TlsServer::start(&elsewhere, "no");
    let out = run(rlock()
        .arg("--url")
        .arg(wrong_name.url())
        .arg("--tls-ca")
        .arg(&elsewhere.ca)
        .args(["acquire", "-n", "-k", KEY]));
    assert_eq!(
        out.code, 78,
        "a certificate for db.example.com at 127.0.0.1: {out}"
    );
    assert!(out.stderr.to_lowercase().contains("certificate"), "{out}");
    assert_eq!(wrong_name.server.get(LOCK), None);
    // And the good case, so the failures above are about verification only.
    expect(0, over_tls(&tls, &certs).args(["acquire", "-n", "-k", KEY]));
}

#[test]
fn tls_option_mistakes_are_configuration_errors() {
    let certs = TestCerts::new();
    let url = "rediss://127.0.0.1:1";
    let missing = certs.dir().join("no-such-ca.pem");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--tls-ca".into(), missing.display().to_string()],
            "no-such-ca.pem",
        ),
        (
            vec!["--tls-cert".into(), certs.client_cert.display().to_string()],
            "--tls-key",
        ),
        (
            vec!["--tls-key".into(), certs.client_key.display().to_string()],
            "--tls-cert",
        ),
    ];
    for (args, says) in cases {
        let out = run(rlock()
            .args(["--url", url])
            .args(&args)
            .args(["acquire", "-n", "-k", KEY]));
        assert_eq!(out.code, 78, "{args:?}: {out}");
        assert!(
            out.stderr.contains(says),
            "{args:?}: the message must name {says}: {out}"
        );
        assert_eq!(out.stderr.lines().count(), 1, "{out}");
    }
    // TLS files for a URL that is not rediss://.
    let out = run(rlock()
        .args(["--url", "redis://127.0.0.1:1", "--tls-ca"])
        .arg(&certs.ca)
        .args(["acquire", "-n", "-k", KEY]));
    assert_eq!(out.code, 78, "{out}");
    assert!(out.stderr.contains("rediss://"), "{out}");
    // Through the environment too.
    let out = run(rlock()
        .env("RLOCK_URL", url)
        .env("RLOCK_TLS_CA", &missing)
        .args(["acquire", "-n", "-k", KEY]));
    assert_eq!(out.code, 78, "RLOCK_TLS_CA: {out}");
}

#[test]
fn tls_client_certificates_for_a_server_that_requires_them() {
    if !crate::common::tls_or_skip() {
        return;
    }
    let certs = TestCerts::new();
    let tls = TlsServer::start(&certs, "yes");
    let out = expect(
        0,
        over_tls(&tls, &certs)
            .arg("--tls-cert")
            .arg(&certs.client_cert)
            .arg("--tls-key")
            .arg(&certs.client_key)
            .args(["acquire", "--json", "-k", KEY]),
    );
    let token = token_of(&out);
    assert_eq!(tls.server.get(LOCK).as_deref(), Some(token.as_str()));
    expect(
        0,
        rlock()
            .env("RLOCK_URL", tls.url())
            .env("RLOCK_TLS_CA", &certs.ca)
            .env("RLOCK_TLS_CERT", &certs.client_cert)
            .env("RLOCK_TLS_KEY", &certs.client_key)
            .args(["release", "-k", KEY, "--token", &token]),
    );
    assert_eq!(tls.server.get(LOCK), None);

    // Without a client certificate the server refuses the handshake.
    let out = run(over_tls(&tls, &certs).args(["acquire", "-n", "-k", KEY]));
    assert_eq!(out.code, 78, "{out}");
    assert_eq!(out.stderr.lines().count(), 1, "{out}");
    assert_eq!(tls.server.get(LOCK), None);
    // Nor with one the server's CA did not sign.
    let stranger = TestCerts::new();
    let out = run(over_tls(&tls, &certs)
        .arg("--tls-cert")
        .arg(&stranger.client_cert)
        .arg("--tls-key")
        .arg(&stranger.client_key)
        .args(["acquire", "-n", "-k", KEY]));
    assert_eq!(out.code, 78, "{out}");
    assert_eq!(tls.server.get(LOCK), None);
}

// ---------------------------------------------------------------------------------------------

#[test]
fn tls_no_wait_against_a_frozen_server_ends_within_twice_the_op_timeout() {
    if !crate::common::tls_or_skip() {
        return;
    }
    let certs = TestCerts::new();
    let tls = TlsServer::start(&certs, "no");
    tls.server.freeze();
    let started = Instant::now();
    // One try (`-n` tries a server it has not reached yet for --connect-timeout).
    let out =
        run(over_tls(&tls, &certs).args(["--connect-timeout", "0", "acquire", "-n", "-k", KEY]));
    let took = started.elapsed();
    tls.server.thaw();
    assert_eq!(out.code, 69, "{out}");
    // The documented bound: the try and its give-back, one --op-timeout (2 s) each.
    assert!(
        took < Duration::from_millis(4000),
        "-n against a frozen TLS server took {took:?}: {out}"
    );
}
