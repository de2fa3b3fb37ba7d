//! The managed-service profile (`RLOCK_TEST_MANAGED=1`; `.ci/run` runs the locking, exec, waiting
//! and history tests so): the tests' rlock reaches every server over TLS only, through a front, as
//! a user without INFO, CONFIG, DEBUG or KEYS, and the front refuses scripts without keys, as
//! ElastiCache Serverless does. Without the profile, rlock reaches the server plain.

use super::*;
use crate::common::managed;
use crate::common::redis_cli_bin;

/// `redis-cli` over TLS through the front on `front`, as the managed user, running `args`.
fn through_front(front: u16, args: &[&str]) -> Output {
    let ca = managed::ca_file().expect("the profile's CA");
    let mut cmd = Command::new(redis_cli_bin());
    cmd.env("REDISCLI_AUTH", managed::PASSWORD)
        .args(["--tls", "--cacert"])
        .arg(ca)
        .args(["-h", "127.0.0.1", "-p", &front.to_string()])
        .args(["--user", managed::USER])
        .args(args);
    run(&mut cmd)
}

#[test]
fn the_tests_reach_a_server_as_a_managed_services_client_when_the_profile_is_on() {
    let server = RedisServer::start();
    let out =
        run(crate::common::rlock_at(&server).args(["-v", "acquire", "-k", KEY, "--ttl", "9s"]));
    assert_eq!(out.code, 0, "{out}");
    let Some(front) = managed::front_port(server.port()) else {
        assert!(
            !managed::enabled(),
            "every server has a front under the profile"
        );
        assert!(out.stderr.contains("using redis://"), "{out}");
        return;
    };
    assert!(
        out.stderr.contains(&format!(
            "using rediss://{}:***@127.0.0.1:{front}",
            managed::USER
        )),
        "rlock reaches the front over TLS as the managed user: {out}"
    );
    for refused in [
        &["INFO"][..],
        &["CONFIG", "GET", "maxmemory"],
        &["DEBUG", "SLEEP", "0"],
        &["KEYS", "*"],
    ] {
        let out = through_front(front, refused);
        assert!(out.stdout.contains("NOPERM"), "{refused:?}: {out}");
    }
    let before = managed::refused();
    let out = through_front(front, &["EVAL", "return 1", "0"]);
    assert!(
        out.stdout.contains("runs no script without keys"),
        "a script without keys is refused: {out}"
    );
    assert_eq!(managed::refused(), before + 1);
    let out = through_front(front, &["EVAL", "return KEYS[1]", "1", "rlock:k"]);
    assert_eq!(
        out.stdout.trim(),
        "rlock:k",
        "a script with a key runs: {out}"
    );
}
