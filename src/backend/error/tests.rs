//! Unit tests of the node and set-up errors: which kind each failure is (a mistake, an outage, a
//! reply to wait on), and how their details are cut and made plain.

use super::{Fault, MAX_DETAIL, NodeError, SetupError, cut, plain};

#[test]
fn a_settings_mistake_met_at_a_new_master_stays_a_settings_mistake() {
    let e = SetupError::Config("--tls-ca '/gone' cannot be read: not found".into())
        .at("master 'm' of sentinels redis://s:26379 at 10.0.0.2:6379".into());
    assert_eq!(e.kind, Fault::Setup);
    assert!(!e.is_transient());
    assert_eq!(e.detail, "--tls-ca '/gone' cannot be read: not found");
}

#[test]
fn a_name_that_does_not_resolve_is_no_outage() {
    let io =
        std::io::Error::other("failed to lookup address information: Name or service not known");
    let err = NodeError::from_redis("redis://no-such-host.invalid:6379", &io.into());
    assert_eq!(err.kind, Fault::Unresolved);
    assert!(err.is_transport() && !err.is_transient());
    // A resolver that cannot answer now is an outage, waited out like a refused connection.
    let io = std::io::Error::other(
        "failed to lookup address information: Temporary failure in name resolution",
    );
    let err = NodeError::from_redis("redis://db.example:6379", &io.into());
    assert!(err.is_transient(), "{err:?}");
    let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    let err = NodeError::from_redis("redis://127.0.0.1:1", &refused.into());
    assert!(err.is_transient(), "{err:?}");
}

#[test]
fn replies_that_ask_for_a_retry_have_kinds_of_their_own() {
    for (code, kind) in [
        ("TRYAGAIN", Fault::Migrating),
        ("CLUSTERDOWN", Fault::ClusterDown),
        ("LOADING", Fault::NotServing),
    ] {
        let err = redis::make_extension_error(code.to_string(), Some("some words".into()));
        let err = NodeError::from_redis("redis://127.0.0.1:7000", &err);
        assert_eq!(err.kind, kind, "{code}: {err:?}");
        assert!(err.is_transient(), "{code} is waited on");
    }
}

#[test]
fn a_full_server_is_waited_on() {
    let err = redis::make_extension_error(
        "ERR".to_string(),
        Some("max number of clients reached".into()),
    );
    let err = NodeError::from_redis("redis://127.0.0.1:7000", &err);
    assert_eq!(err.kind, Fault::Full, "{err:?}");
    assert!(err.is_transient(), "a full server is waited on");
    assert_eq!(err.detail, "max number of clients reached");
}

#[test]
fn a_subscription_refused_by_the_acl_is_no_outage() {
    use super::of_subscription;
    let acl = "noperm this user has no permissions to access one of the channels used as arguments";
    assert_eq!(of_subscription(acl), Fault::Denied);
    assert_eq!(
        of_subscription("err max number of clients reached"),
        Fault::Full
    );
    assert_eq!(
        of_subscription("connection refused (os error 111)"),
        Fault::Connect
    );
}

#[test]
fn a_script_refused_as_by_redis_before_4_is_a_server_too_old() {
    // Redis 3.2's words for an HSET of several fields inside a script.
    let err = redis::RedisError::from((
        redis::ErrorKind::Extension,
        "ERR",
        "Error running script (call to f_1d6a2b): @user_script:537: @user_script: 537: Wrong number of args calling Redis command From Lua script".to_string(),
    ));
    let err = NodeError::from_redis("redis://127.0.0.1:6379", &err);
    assert_eq!(err.kind, Fault::TooOld);
    assert!(!err.is_transient(), "no wait cures an old server");
}

#[test]
fn a_long_error_is_cut_at_a_line_a_person_reads() {
    let long = "é".repeat(10_000);
    let got = cut(&long);
    assert_eq!(got.chars().count(), MAX_DETAIL + 1);
    assert!(got.ends_with('…'));
    assert_eq!(cut("short"), "short");
}

#[test]
fn plain_error_text() {
    assert_eq!(
        plain(
            r#""WRONGTYPE": rlock's state key '{rlock:s}:state' holds a list, not a hash script: a723a9e63875973492cd322229b4d137dc085f2e, on @user_script:18."#
        ),
        "rlock's state key '{rlock:s}:state' holds a list, not a hash"
    );
    assert_eq!(
        plain("NoPerm: this user has no permissions to run the 'publish' command"),
        "this user has no permissions to run the 'publish' command"
    );
    assert_eq!(
        plain(
            "Error running script (call to f_9c89551fd8c13d4301fbde6b2bee6e7945e397f1): @user_script:95: WRONGTYPE rlock's fence counter in '{rlock:h}:state' is 'x', not a whole number below 2^53"
        ),
        "rlock's fence counter in '{rlock:h}:state' is 'x', not a whole number below 2^53"
    );
    assert_eq!(
        plain("Connection refused (os error 111)"),
        "Connection refused (os error 111)"
    );
}
