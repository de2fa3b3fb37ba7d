//! Unit tests of the reply decoding: Values as the scripts answer them, decoded by name.

use super::*;
use crate::lock::call::Call;
use crate::lock::call::acquire::{Acquire, Attempt};
use crate::lock::call::inspect::{Inspect, LockInfo};
use crate::lock::call::release::{Release, ReleaseReply};
use crate::lock::call::renew::Renew;
use crate::lock::test_request::with_request;
use crate::lock::{LockKey, NotOwner, Renewed};

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

/// Fields as common.lua's `named` sends them: name, value, ...
fn named(fields: &[(&str, Value)]) -> Vec<Value> {
    fields
        .iter()
        .flat_map(|(name, value)| [bulk(name), value.clone()])
        .collect()
}

/// A reply as common.lua's `reply` sends it: the word, then the fields.
fn reply(word: &str, fields: &[(&str, Value)]) -> Vec<Value> {
    let mut out = vec![bulk(word)];
    out.extend(named(fields));
    out
}

fn key() -> LockKey {
    LockKey::new("rlock:", "jobs").unwrap()
}

fn attempt(r: &[Value]) -> Decoded<Attempt> {
    with_request(|req| Acquire::new(req, false, std::time::Instant::now()).decode(r))
}

fn release(r: &[Value]) -> Decoded<ReleaseReply> {
    let key = key();
    let call = Release {
        key: &key,
        token: "tok",
        force: false,
        record: None,
    };
    call.decode(r).map(|said| said.reply)
}

fn renewed(r: &[Value]) -> Decoded<Renewed> {
    let key = key();
    let call = Renew {
        key: &key,
        token: "tok",
        ttl: None,
    };
    call.decode(r)
}

fn inspect(key: &LockKey, r: &[Value]) -> Decoded<LockInfo> {
    Inspect { key }.decode(r)
}

#[test]
fn a_grant_carries_a_fence_of_sixteen_digits_exactly() {
    // A fence is at least the server's time in microseconds: 16 digits, more than cjson's
    // 14 significant digits print exactly (which is why replies are lists, not JSON).
    let fence = 1_787_654_321_098_765;
    let r = reply(
        "ok",
        &[("ttl", Value::Int(30_000)), ("fence", Value::Int(fence))],
    );
    let Ok(Attempt::Granted(grant)) = attempt(&r) else {
        panic!("not a grant: {r:?}");
    };
    assert_eq!(grant.fence, fence);
    assert_eq!(grant.ttl, crate::lock::Ttl::Asked(Duration::from_secs(30)));
    assert_eq!(
        (grant.key.name.as_str(), grant.token.as_str()),
        ("jobs", "tok")
    );
}

#[test]
fn busy_names_the_holder_rlock_wrote() {
    let r = reply(
        "busy",
        &[
            ("pttl", Value::Int(2500)),
            ("now", Value::Int(1_000_000)),
            ("host", bulk("build-7")),
            ("pid", bulk("4411")),
            ("user", bulk("alice")),
            ("since", bulk("990000")),
            ("cmd", bulk("make")),
            ("ttl", bulk("60000")),
            ("place", Value::Int(2)),
        ],
    );
    let Ok(Attempt::Busy {
        pttl,
        now_ms,
        holder,
        lease_ms,
        crowd,
        place,
    }) = attempt(&r)
    else {
        panic!("not busy: {r:?}");
    };
    assert_eq!(
        (pttl, now_ms, lease_ms, crowd, place),
        (2500, 1_000_000, Some(60_000), None, Some(2))
    );
    assert_eq!(holder.host.as_deref(), Some("build-7"));
    assert_eq!(holder.pid, Some(HolderPid::Pid(4411)));
    assert_eq!(holder.user.as_deref(), Some("alice"));
    assert_eq!(holder.since_ms, Some(990_000));
    assert_eq!(holder.command.as_deref(), Some("make"));

    // Another client's lock: no holder fields at all.
    let r = reply("busy", &[("pttl", Value::Int(-1)), ("now", Value::Int(5))]);
    let Ok(Attempt::Busy { pttl, holder, .. }) = attempt(&r) else {
        panic!("not busy: {r:?}");
    };
    assert_eq!(pttl, -1);
    assert!(holder.host.is_none() && holder.pid.is_none());
}

#[test]
fn busy_with_several_holders_reports_the_crowd() {
    let r = reply(
        "busy",
        &[
            ("pttl", Value::Int(100)),
            ("now", Value::Int(5)),
            ("holders", Value::Int(3)),
            ("limit", Value::Int(0)),
            ("ahead", Value::Int(1)),
        ],
    );
    let Ok(Attempt::Busy { crowd, .. }) = attempt(&r) else {
        panic!("not busy: {r:?}");
    };
    let want = Crowd {
        holders: 3,
        limit: 0,
        exclusive_ahead: true,
    };
    assert_eq!(crowd, Some(want));
    let r = reply(
        "busy",
        &[
            ("pttl", Value::Int(5)),
            ("now", Value::Int(1)),
            ("holders", Value::Int(2)),
            ("limit", Value::Int(2)),
        ],
    );
    let Ok(Attempt::Busy { crowd, .. }) = attempt(&r) else {
        panic!("not busy: {r:?}");
    };
    assert_eq!(
        crowd.map(|c| (c.limit, c.exclusive_ahead)),
        Some((2, false))
    );
    // Fields every busy reply carries, and the limit of a crowd, are not made up when missing.
    let r = reply(
        "busy",
        &[("holders", Value::Int(2)), ("limit", Value::Int(2))],
    );
    assert_eq!(attempt(&r).err(), Some(Refusal::Missing("pttl")));
    let r = reply(
        "busy",
        &[
            ("pttl", Value::Int(5)),
            ("now", Value::Int(1)),
            ("holders", Value::Int(2)),
        ],
    );
    assert_eq!(attempt(&r).err(), Some(Refusal::Missing("limit")));
}

#[test]
fn refusals_say_what_is_there() {
    let queued = attempt(&reply("queued", &[("wait", Value::Int(900))]));
    assert!(matches!(queued, Ok(Attempt::Queued { wait_ms: 900 })));
    let held = |fields: &[(&str, Value)]| attempt(&reply("mismatch", fields)).err();
    assert_eq!(
        held(&[("held", bulk("limit")), ("limit", Value::Int(3))]),
        Some(Refusal::Mismatch(Sharing::Limit(3)))
    );
    assert_eq!(
        held(&[("held", bulk("shared"))]),
        Some(Refusal::Mismatch(Sharing::Shared))
    );
    assert_eq!(
        held(&[("held", bulk("exclusive"))]),
        Some(Refusal::Mismatch(Sharing::Exclusive))
    );
    assert_eq!(held(&[("held", bulk("?"))]), Some(Refusal::Unexpected));
    assert_eq!(
        attempt(&reply("wrongtype", &[("type", bulk("list"))])).err(),
        Some(Refusal::WrongType("list".into()))
    );
    // Nothing a script answers: a word no script says, a name without its value, nothing.
    assert_eq!(
        attempt(&reply("granted", &[])).err(),
        Some(Refusal::Unexpected)
    );
    assert_eq!(
        attempt(&[bulk("ok"), bulk("fence")]).err(),
        Some(Refusal::Unexpected)
    );
    assert_eq!(attempt(&[]).err(), Some(Refusal::Unexpected));
}

#[test]
fn releases_and_renewals() {
    assert!(matches!(
        release(&reply("already", &[])),
        Ok(ReleaseReply::Already)
    ));
    assert!(matches!(
        release(&reply("other", &[("pttl", Value::Int(5))])),
        Ok(ReleaseReply::Other)
    ));
    let r = reply(
        "broken",
        &[
            ("type", bulk("hash")),
            ("pttl", Value::Int(5)),
            ("now", Value::Int(77)),
        ],
    );
    let Ok(ReleaseReply::Broken {
        kind,
        value,
        holder,
        now_ms,
    }) = release(&r)
    else {
        panic!("not broken: {r:?}");
    };
    assert_eq!((kind, value, now_ms), (KeyType::Hash, None, 77));
    assert!(holder.host.is_none());
    assert_eq!(
        renewed(&reply("renewed", &[("ttl", Value::Int(4000))])),
        Ok(Renewed::Yes(Duration::from_secs(4)))
    );
    assert_eq!(
        renewed(&reply("other", &[("pttl", Value::Int(9))])),
        Ok(Renewed::NotOwner(NotOwner::Taken))
    );
    assert_eq!(
        renewed(&reply("free", &[])),
        Ok(Renewed::NotOwner(NotOwner::Gone))
    );
    assert_eq!(
        renewed(&reply("free", &[("broken", Value::Int(1))])),
        Ok(Renewed::NotOwner(NotOwner::Broken))
    );
    assert_eq!(
        renewed(&reply("wrongtype", &[])),
        Err(Refusal::WrongType("value of another type".into()))
    );
}

/// One holder of a multi-holder lock, as multi.lua's holders_field sends it.
fn lease(token: &str, ends: i64, record: &str) -> Value {
    Value::Array(named(&[
        ("token", bulk(token)),
        ("ends", Value::Int(ends)),
        ("record", bulk(record)),
    ]))
}

#[test]
fn a_forced_release_of_a_semaphore_names_every_holder() {
    let record = r#"{"fence":"1787654321098765","host":"a","pid":"12","user":"","cmd":"job","since":900,"ttl":30000,"renewed":950,"pidns":"pid:[1]"}"#;
    let holders = vec![lease("t1", 2000, record), lease("t2", 3000, "{")];
    let r = reply(
        "brokenall",
        &[
            ("now", Value::Int(1000)),
            ("holders", Value::Array(holders)),
        ],
    );
    let Ok(ReleaseReply::BrokenAll { now_ms, holders }) = release(&r) else {
        panic!("not brokenall: {r:?}");
    };
    assert_eq!(now_ms, 1000);
    assert_eq!(holders.len(), 2);
    let first = &holders[0];
    assert_eq!((first.token.as_str(), first.ends_ms), ("t1", 2000));
    assert_eq!(first.fence, Some(1_787_654_321_098_765));
    assert_eq!((first.ttl_ms, first.renewed_ms), (Some(30_000), Some(950)));
    assert_eq!(first.holder.host.as_deref(), Some("a"));
    assert_eq!(first.holder.user, None, "an empty user is no user");
    assert_eq!(first.holder.since_ms, Some(900));
    assert_eq!(first.holder.pidns.as_deref(), Some("pid:[1]"));
    // A record that cannot be read leaves the holder unknown, not the reply.
    assert_eq!((holders[1].token.as_str(), holders[1].fence), ("t2", None));
    assert!(holders[1].holder.host.is_none());
}

#[test]
fn inspect_of_a_lock_rlock_holds() {
    let r = reply(
        "string",
        &[
            ("pttl", Value::Int(25_000)),
            ("now", Value::Int(1_000_000)),
            ("waiters", Value::Int(2)),
            ("value", bulk("tok")),
            ("fence", bulk("1787654321098765")),
            ("host", bulk("build-7")),
            ("pid", bulk("4411")),
            ("user", bulk("alice")),
            ("since", bulk("990000")),
            ("cmd", bulk("make")),
            ("ttl", bulk("30000")),
            ("renewed", bulk("980000")),
            ("pidns", bulk("pid:[4026531836]")),
        ],
    );
    let info = inspect(&key(), &r).unwrap();
    assert_eq!(
        (info.name.as_str(), info.redis_key.as_str()),
        ("jobs", "rlock:jobs")
    );
    assert_eq!(info.kind, KeyType::String);
    assert_eq!(
        (info.pttl, info.now_ms, info.waiters),
        (25_000, 1_000_000, 2)
    );
    assert_eq!(info.token.as_deref(), Some("tok"));
    assert_eq!(info.fence, Some(1_787_654_321_098_765));
    assert_eq!(info.ttl_ms, Some(30_000));
    assert_eq!(info.renewed_ms, Some(990_000), "never before the grant");
    assert_eq!(info.holder.pidns.as_deref(), Some("pid:[4026531836]"));
    assert_eq!(info.limit, None);
    assert!(info.holders.is_empty() && info.ours() && info.held());
}

#[test]
fn inspect_of_free_and_foreign_keys() {
    let free = reply("none", &[("pttl", Value::Int(-2)), ("now", Value::Int(1))]);
    assert_eq!(
        inspect(&key(), &free).err(),
        Some(Refusal::Missing("waiters")),
        "a field inspect.lua always sends"
    );
    let free = reply(
        "none",
        &[
            ("pttl", Value::Int(-2)),
            ("now", Value::Int(1)),
            ("waiters", Value::Int(0)),
        ],
    );
    let info = inspect(&key(), &free).unwrap();
    assert!(!info.held() && !info.ours());
    assert_eq!((info.waiters, info.fence), (0, None));

    // A sorted set rlock did not write: no mode.
    let zset = reply(
        "zset",
        &[
            ("pttl", Value::Int(-1)),
            ("now", Value::Int(1)),
            ("waiters", Value::Int(0)),
        ],
    );
    let info = inspect(&key(), &zset).unwrap();
    assert_eq!(info.kind, KeyType::Other("zset".into()));
}

#[test]
fn inspect_of_multi_holder_locks() {
    let record = r#"{"fence":"41","host":"b","pid":"7","user":"bob","cmd":"read","since":5,"ttl":9000,"renewed":6}"#;
    let shared = reply(
        "zset",
        &[
            ("pttl", Value::Int(9000)),
            ("now", Value::Int(10)),
            ("waiters", Value::Int(0)),
            ("fence", Value::Int(41)),
            ("mode", bulk("shared")),
            ("limit", Value::Int(0)),
            ("holders", Value::Array(vec![lease("t1", 9010, record)])),
        ],
    );
    let info = inspect(&key(), &shared).unwrap();
    assert_eq!(info.kind, KeyType::Holders);
    assert_eq!(info.limit, Some(0));
    assert_eq!(info.renewed_ms, None, "each holder has its own");
    assert_eq!(info.holder.user.as_deref(), Some("bob"), "the first holder");
    assert_eq!(info.holders[0].fence, Some(41));

    let semaphore = reply(
        "zset",
        &[
            ("pttl", Value::Int(9000)),
            ("now", Value::Int(10)),
            ("waiters", Value::Int(2)),
            ("mode", bulk("limit")),
            ("limit", Value::Int(3)),
            ("holders", Value::Array(vec![])),
        ],
    );
    let info = inspect(&key(), &semaphore).unwrap();
    assert_eq!((info.limit, info.holders.len()), (Some(3), 0));
    assert_eq!(
        inspect(&key(), &[Value::Nil]).err(),
        Some(Refusal::Unexpected)
    );
}

#[test]
fn a_pid_is_a_number_and_an_odd_one_is_kept_as_written() {
    let pid = |text: &str| HolderPid::parse(text.to_string());
    assert_eq!(pid("4411"), HolderPid::Pid(4411));
    assert_eq!(pid("4294967295"), HolderPid::Pid(u32::MAX));
    // Shown as written, never as a number it is not, and never an error.
    for odd in [
        "",
        "abc",
        "007",
        "+42",
        "-1",
        "4411x",
        " 4411",
        "4294967296",
        "7.0",
    ] {
        assert_eq!(pid(odd), HolderPid::Other(odd.to_string()), "{odd:?}");
        assert_eq!(pid(odd).to_string(), odd);
    }
    // The number an odd record gives, as the JSON output shows it.
    assert_eq!(pid("4411").number(), Some(4411));
    assert_eq!(pid("007").number(), Some(7));
    assert_eq!(pid("-1").number(), Some(-1));
    assert_eq!(pid("4294967296").number(), Some(4_294_967_296));
    assert_eq!(pid("abc").number(), None);
    assert_eq!(pid("7.0").number(), None);
}
