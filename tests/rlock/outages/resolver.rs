//! A resolver that cannot answer is an outage: a run retries it for --connect-timeout, as it
//! does a refused connection. The test runs rlock in a mount namespace of its own (`unshare -m`)
//! whose /etc/resolv.conf names a nameserver nobody serves (127.0.0.1:53: every lookup fails
//! with "Temporary failure in name resolution") and whose /etc/hosts is a file of the test's;
//! once rlock is retrying, the name is added to that hosts file, and the next try reaches Redis.

use super::*;
use std::io::Write;

#[test]
fn a_resolver_that_cannot_answer_is_retried_for_the_connect_timeout() {
    let ok = std::process::Command::new("unshare")
        .args(["-m", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipped: `unshare -m` is not allowed here (it needs root)");
        return;
    }
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let resolv = dir.path().join("resolv.conf");
    std::fs::write(
        &resolv,
        "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
    )
    .unwrap();
    let hosts = dir.path().join("hosts");
    std::fs::write(&hosts, "127.0.0.1 localhost\n").unwrap();
    let name = "rlock-resolver-test.example";
    let script = r#"mount --bind "$R" /etc/resolv.conf && mount --bind "$H" /etc/hosts &&
        exec "$RL" -u "redis://$NAME:$PORT" --connect-timeout 30s acquire -n -k dns --ttl 1m"#;
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["-m", "sh", "-c", script])
        .env("R", &resolv)
        .env("H", &hosts)
        .env("RL", env!("CARGO_BIN_EXE_rlock"))
        .env("NAME", name)
        .env("PORT", server.port().to_string());
    let started = Instant::now();
    let mut run = Bg::spawn("resolver", dir.path(), &mut cmd);
    let stderr = dir.path().join("resolver.stderr");
    run.wait_for(
        "rlock to say it retries the lookup",
        Duration::from_secs(10),
        || {
            std::fs::read_to_string(&stderr).is_ok_and(|e| {
                e.contains("Temporary failure in name resolution") && e.contains("trying again")
            })
        },
    );
    // The name now resolves (the same file: the bind mount holds its inode).
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&hosts)
        .unwrap();
    writeln!(file, "127.0.0.1 {name}").unwrap();
    drop(file);
    let (out, _) = run.finish(Duration::from_secs(40));
    assert_eq!(out.code, 0, "{out}");
    assert!(server.exists("rlock:dns"), "the lock was not taken: {out}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}
