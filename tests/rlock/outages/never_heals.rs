//! Only what heals is waited on: errors that need a person
//! end every wait at once with one line and their code, also without `-w` (a wait as long as it
//! takes). Before this, an untrusted certificate made `acquire` wait forever, saying "still
//! waiting".

use super::*;
use crate::common::{TestCerts, TlsServer};
use std::process::Command;

/// Runs `acquire -k t` with no -w and no -n: it must end within a few seconds.
fn ends_at_once(cmd: &mut Command, code: i32, says: &str, why: &str) {
    let dir = tempfile::tempdir().expect("temp dir");
    cmd.args(["--op-timeout", "500ms", "acquire", "-k", "t"]);
    let started = Instant::now();
    let mut bg = Bg::spawn("acquire", dir.path(), cmd);
    let (out, _) = bg.finish(Duration::from_secs(10));
    assert_eq!(out.code, code, "{why}: {out}");
    assert_eq!(out.stderr.lines().count(), 1, "{why}: one line: {out}");
    assert!(
        out.stderr.to_lowercase().contains(says),
        "{why}: the message must say '{says}': {out}"
    );
    assert!(!out.stderr.contains("still waiting"), "{why}: {out}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{why}: took {:?}",
        started.elapsed()
    );
}

#[test]
fn tls_trust_and_host_name_failures_are_configuration_errors() {
    if !crate::common::tls_or_skip() {
        return;
    }
    let certs = TestCerts::new();
    let tls = TlsServer::start(&certs, "no");
    ends_at_once(
        rlock().arg("--url").arg(tls.url()),
        78,
        "certificate",
        "a certificate the system roots do not trust",
    );
    let stranger = TestCerts::new();
    ends_at_once(
        rlock()
            .arg("--url")
            .arg(tls.url())
            .arg("--tls-ca")
            .arg(&stranger.ca),
        78,
        "certificate",
        "a certificate another CA signed",
    );
    let elsewhere = TestCerts::for_server_names(&["db.example.com"]);
    let wrong_name = TlsServer::start(&elsewhere, "no");
    ends_at_once(
        rlock()
            .arg("--url")
            .arg(wrong_name.url())
            .arg("--tls-ca")
            .arg(&elsewhere.ca),
        78,
        "certificate",
        "a certificate for another host name",
    );
    let strict = TlsServer::start(&certs, "yes");
    ends_at_once(
        rlock()
            .arg("--url")
            .arg(strict.url())
            .arg("--tls-ca")
            .arg(&certs.ca),
        78,
        "client certificate",
        "a server that wants a client certificate, and none given",
    );
    for server in [&tls.server, &wrong_name.server, &strict.server] {
        assert_eq!(server.get("rlock:t"), None, "nothing may be written");
    }
}

#[test]
fn refused_credentials_and_acl_are_not_permitted() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]);
    ends_at_once(
        rlock().arg("--url").arg(server.url()),
        77,
        "password",
        "no password (NOAUTH)",
    );
    ends_at_once(
        rlock()
            .arg("--url")
            .arg(format!("redis://:wrong@127.0.0.1:{}", server.port())),
        77,
        "password",
        "a wrong password (WRONGPASS)",
    );
    server.cmd(&[
        "ACL", "SETUSER", "lim", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval",
    ]);
    ends_at_once(
        rlock()
            .arg("--url")
            .arg(format!("redis://lim:pw@127.0.0.1:{}", server.port())),
        77,
        "acl",
        "a user the ACL does not let run scripts (NOPERM)",
    );
}

#[test]
fn a_service_that_does_not_speak_redis_is_named() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            use std::io::Write;
            let mut conn = conn;
            let _ = conn.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    ends_at_once(
        rlock()
            .arg("--url")
            .arg(format!("redis://127.0.0.1:{port}")),
        69,
        "http/1.1 400",
        "an HTTP server",
    );
}
