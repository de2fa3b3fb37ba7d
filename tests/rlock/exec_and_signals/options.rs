//! The checks on exec's own options.

use super::*;

// ---------------------------------------------------------------------------------------------
// 13. exec's own options
// ---------------------------------------------------------------------------------------------

#[test]
fn bad_exec_options_are_usage_errors() {
    let server = RedisServer::start();
    for (opts, mentions) in [
        // TTL 1 s: usable 988 ms, grace 250 ms, so renewals must come more often than 738 ms.
        (&["--ttl", "1s", "--renew-every", "1s"][..], "--renew-every"),
        (&["--ttl", "1s", "--renew-every", "750ms"], "--renew-every"),
        (
            &["--ttl", "10s", "--grace", "2s", "--renew-every", "8s"],
            "--renew-every",
        ),
        (&["--ttl", "1s", "--grace", "1s"], "--grace"),
        (&["--ttl", "1s", "--grace", "990ms"], "--grace"),
        (&["--ttl", "1s", "--grace", "5s"], "--grace"),
        // Too short to renew at all: no room for a renewal between the first one due and the
        // lost-signal.
        (&["--ttl", "30ms"], "--ttl 30ms is too short for exec"),
        (&["--ttl", "100ms"], "give --ttl 128ms or more"),
        (&["--lost-signal", "BOGUS"], "BOGUS"),
        (&["--lost-signal", "0"], "--lost-signal"),
    ] {
        let out = run(rlock_at(&server)
            .args(["exec", "-k", "k"])
            .args(opts)
            .args(["--", "true"]));
        assert_eq!(out.code, 2, "{opts:?}\n{out}");
        assert!(out.stderr.contains(mentions), "{opts:?}\n{out}");
        assert!(!server.exists(LOCK), "{opts:?} took the lock");
    }
    for opts in [
        &["--lost-signal", "KILL"][..],
        &["--lost-signal", "9"],
        &["--lost-signal", "SIGUSR2"],
        &["--ttl", "1s", "--renew-every", "700ms"],
        &["--ttl", "1s", "--grace", "500ms"],
        &["--ttl", "300ms"],
    ] {
        let out = run(rlock_at(&server)
            .args(["exec", "-k", "k"])
            .args(opts)
            .args(["--", "true"]));
        assert_eq!(out.code, 0, "{opts:?} refused\n{out}");
        assert!(!server.exists(LOCK), "{opts:?}: lock not released");
    }
}
