//! The scenes of a lock of one holder: what a grant writes of its holder, a forced break and what
//! the holder then hears, `--hold-at-least`, the history of each hold, keys of other types.

use std::time::Duration;

use rlock::lock::{
    Error, Holder, HolderPid, NotOwner, Refused, Released, Renewed, RunRecord, Seen, Sharing,
};

use super::super::store::Data;
use super::{Scene, T0, want, who};

/// What inspect and a busy answer say of a holder is what its grant wrote of its process
/// (acquire.lua: host, pid, user, cmd, since; docs/design.md, "inspect").
pub(super) fn same_holder(h: &Holder, n: u32, since: i64) -> Result<(), String> {
    let id = who(n);
    want(
        h.host.as_deref() == Some(id.host.as_str())
            && h.pid == Some(HolderPid::Pid(id.pid))
            && h.user.as_deref() == Some(id.user.as_str())
            && h.command.as_deref() == Some(id.command.as_str())
            && h.since_ms == Some(since),
        || format!("the holder record of process {n}, granted at {since}, reads {h:?}"),
    )
}

/// What the history keeps of a hold that a release ended (release.lua's record_hold).
pub(super) fn same_entry(
    e: &RunRecord,
    n: u32,
    granted: i64,
    ended: i64,
    outcome: &str,
) -> Result<(), String> {
    let id = who(n);
    want(
        e.host.as_deref() == Some(id.host.as_str())
            && e.pid == Some(i64::from(id.pid))
            && e.user.as_deref() == Some(id.user.as_str())
            && e.command.as_deref() == Some(id.command.as_str())
            && e.granted_ms == Some(granted)
            && e.ended_ms == Some(ended)
            && e.held_ms == Some(ended - granted)
            && e.outcome.as_deref() == Some(outcome)
            && e.by.as_deref() == (outcome == "broken").then_some("root@admin pid 9"),
        || {
            format!(
                "the history's entry of process {n}'s hold ({granted} to {ended}, {outcome}) \
                 reads {e:?}"
            )
        },
    )
}

/// One holder at a time: a grant, what a busy try and inspect say of its holder, a renewal, a
/// forced break and what the holder then hears, the history of it, a fence that rises, a
/// release retried, a release after the lease ran out.
pub(super) fn exclusive(s: &Scene) -> Result<(), String> {
    let ex = Sharing::Exclusive;
    let first = s
        .take(1, ex, 10_000, None)
        .map_err(|e| format!("a free lock refused: {e:?}"))?;
    want(
        first.fence >= 1 && first.ttl.length() == Duration::from_secs(10),
        || format!("the first grant: {first:?}"),
    )?;
    let t1 = s.now();
    s.later(1_000);
    match s.take(2, ex, 10_000, None) {
        Err(Error::Busy {
            seen:
                Seen::Held {
                    pttl,
                    holder,
                    crowd,
                    ..
                },
            ..
        }) => {
            same_holder(&holder, 1, t1)?;
            want(pttl == 9_000 && crowd.is_none(), || {
                format!("a busy lock held 1 s of 10 s: pttl {pttl}, {crowd:?}")
            })?;
        }
        other => return Err(format!("a held lock answered {other:?}")),
    }
    let info = s.inspect()?;
    same_holder(&info.holder, 1, t1)?;
    want(
        info.token.as_deref() == Some("t1")
            && info.fence == Some(first.fence)
            && info.ttl_ms == Some(10_000)
            && info.pttl == 9_000
            && info.limit.is_none(),
        || format!("inspect of a lock held 1 s of 10 s: {info:?}"),
    )?;
    s.later(2_000);
    want(
        matches!(s.renew(1), Ok(Renewed::Yes(d)) if d == Duration::from_secs(10)),
        || "the holder's renewal".into(),
    )?;
    let info = s.inspect()?;
    want(
        info.renewed_ms == Some(s.now()) && info.pttl == 10_000,
        || format!("inspect after a renewal at {}: {info:?}", s.now()),
    )?;
    want(
        matches!(s.renew(2), Ok(Renewed::NotOwner(NotOwner::Taken))),
        || "another token's renewal".into(),
    )?;
    want(
        matches!(
            s.release(2, "r0"),
            Err(Error::NotPermitted {
                refused: Refused::ReleaseHeldByOther,
                ..
            })
        ),
        || "another token's release".into(),
    )?;
    s.no_entry("r0")?;
    let ended = s.now();
    match s.force("f1") {
        Ok(Released::Broken(Some(who))) => want(who.contains("host1"), || {
            format!("a forced release says it broke {who}")
        })?,
        other => return Err(format!("a forced release of a held lock: {other:?}")),
    }
    let info = s.inspect()?;
    want(!info.held(), || {
        format!("a broken lock is still held: {info:?}")
    })?;
    same_entry(&s.entry("f1")?, 1, t1, ended, "broken")?;
    // The holder hears that it lost the lock, and to a break (renew.lua's "free" broken).
    want(
        matches!(s.renew(1), Ok(Renewed::NotOwner(NotOwner::Broken))),
        || format!("a broken holder's renewal: {:?}", s.renew(1)),
    )?;
    want(
        matches!(
            s.release(1, "r1"),
            Err(Error::NotPermitted {
                refused: Refused::ReleaseNotHeld,
                ..
            })
        ),
        || "a broken holder's release says it released".into(),
    )?;
    // The break recorded the hold; the holder's release records nothing more.
    s.no_entry("r1")?;
    want(matches!(s.force("f2"), Ok(Released::Broken(None))), || {
        "a forced release of a free lock".into()
    })?;
    s.later(500);
    let second = s
        .take(2, ex, 5_000, None)
        .map_err(|e| format!("a broken lock refused: {e:?}"))?;
    want(second.fence > first.fence, || {
        format!("fences {} then {}", first.fence, second.fence)
    })?;
    let t2 = s.now();
    s.later(1_500);
    let lived = s.state_pttl();
    want(matches!(s.release(2, "r2"), Ok(Released::Done)), || {
        "a release".into()
    })?;
    same_entry(&s.entry("r2")?, 2, t2, s.now(), "released")?;
    // A release never lengthens the state's shorter life (common.lua's keep_at_most).
    let left = s.state_pttl();
    want(lived < 90_000 && left <= lived, || {
        format!("a state that lived {lived} ms more lives {left} ms more once released")
    })?;
    want(matches!(s.release(2, "r2b"), Ok(Released::Done)), || {
        "a release retried".into()
    })?;
    s.no_entry("r2b")?;
    // exec's run, said in place of the hold when its release gives the lock back.
    s.take(4, ex, 5_000, None)
        .map_err(|e| format!("a released lock refused: {e:?}"))?;
    s.later(100);
    want(matches!(s.release_run(4, "x4"), Ok(Released::Done)), || {
        "exec's release".into()
    })?;
    let e = s.entry("x4")?;
    want(
        e.outcome.as_deref() == Some("ok") && e.code == Some(0) && e.host.is_none(),
        || format!("exec's run on record: {e:?}"),
    )?;
    // A lease that ran out before its release: lost, ending when the lease did (its last
    // renewal and TTL), recorded once, and only by a release that records; not for exec's
    // run, which records a lost run itself.
    s.take(3, ex, 1_000, None)
        .map_err(|e| format!("a released lock refused: {e:?}"))?;
    let t3 = s.now();
    s.later(500);
    want(matches!(s.renew(3), Ok(Renewed::Yes(_))), || {
        "a renewal".into()
    })?;
    s.later(3_000);
    want(s.release_run(3, "x3").is_err(), || {
        "exec's release after the lease ran out".into()
    })?;
    s.no_entry("x3")?;
    want(
        matches!(
            s.locker.release(&s.key, "t3"),
            Err(Error::NotPermitted {
                refused: Refused::ReleaseNotHeld,
                ..
            })
        ),
        || "a release after the lease ran out".into(),
    )?;
    want(s.release(3, "r3").is_err(), || {
        "a release after the lease ran out".into()
    })?;
    same_entry(&s.entry("r3")?, 3, t3, t3 + 1_500, "lost")?;
    want(s.release(3, "r3b").is_err(), || "a release retried".into())?;
    s.no_entry("r3b")
}

/// `--hold-at-least`: a release before the hold's end leaves the lock held until then (by the
/// server's clock), told as "until"; nobody else gets it sooner; a forced break ends it.
pub(super) fn held_at_least(s: &Scene) -> Result<(), String> {
    let ex = Sharing::Exclusive;
    s.take(1, ex, 2_000, Some(5_000))
        .map_err(|e| format!("a free lock refused: {e:?}"))?;
    let t1 = s.now();
    s.later(500);
    // A renewal to a lease past the hold's end (`renew --ttl`): the release still frees the
    // lock at the hold's end.
    let renewed = s.locker.renew(
        &s.key,
        "t1",
        Some(Duration::from_secs(10)),
        Duration::from_millis(200),
    );
    want(matches!(renewed, Ok(Renewed::Yes(_))), || {
        format!("a renewal: {renewed:?}")
    })?;
    s.later(500);
    want(matches!(s.release(1, "r1"), Ok(Released::Done)), || {
        "a release".into()
    })?;
    let info = s.inspect()?;
    want(
        info.held_until_ms == Some(t1 + 5_000) && info.pttl == 4_000,
        || format!("inspect of a hold released 4 s early: {info:?}"),
    )?;
    let e = s.entry("r1")?;
    same_entry(&e, 1, t1, s.now(), "released")?;
    want(e.held_until_ms == Some(t1 + 5_000), || {
        format!("a held release's entry: {e:?}")
    })?;
    want(matches!(s.release(1, "r1b"), Ok(Released::Done)), || {
        "a release retried".into()
    })?;
    s.no_entry("r1b")?;
    s.later(2_000);
    want(s.take(2, ex, 2_000, None).is_err(), || {
        "a grant before the hold's end".into()
    })?;
    s.later(2_001);
    s.take(2, ex, 2_000, Some(10_000))
        .map_err(|e| format!("refused after the hold: {e:?}"))?;
    s.later(100);
    want(matches!(s.release(2, "r2"), Ok(Released::Done)), || {
        "a release".into()
    })?;
    // Broken, not released: the holder's release again hears that it lost the lock.
    match s.force("f1") {
        Ok(Released::Broken(Some(who))) => want(who.contains("host2"), || format!("broke {who}"))?,
        other => return Err(format!("a forced release of a hold: {other:?}")),
    }
    want(
        matches!(
            s.release(2, "r2b"),
            Err(Error::NotPermitted {
                refused: Refused::ReleaseNotHeld,
                ..
            })
        ),
        || "a broken hold's release".into(),
    )?;
    s.take(3, ex, 2_000, None)
        .map_err(|e| format!("a broken hold's lock refused: {e:?}"))?;
    Ok(())
}

/// A key that is not a lock, and a helper key of another type: refused, nothing changed
/// (acquire.lua's and release.lua's "wrongtype", WRONGTYPE errors); a forced release breaks a
/// hash (e.g. Redisson's lock).
pub(super) fn other_types(s: &Scene) -> Result<(), String> {
    // A lock key of another type is answered, never an error; a helper key's is an error.
    let plant = |key: &str, data: Data| {
        let mut b = s.bench();
        b.store.data.insert(key.to_string(), data);
        b.store.expires.insert(key.to_string(), T0 + 60_000);
        b.errors_expected = key != s.key.redis_key;
    };
    let hash = || Data::Hash([("x".to_string(), "1".to_string())].into_iter().collect());
    plant(&s.key.redis_key, hash());
    for sharing in [Sharing::Exclusive, Sharing::Limit(2), Sharing::Shared] {
        let r = s.take(1, sharing, 1_000, None);
        want(r.is_err(), || format!("a hash granted as a lock: {r:?}"))?;
    }
    want(!matches!(s.renew(1), Ok(Renewed::Yes(_))), || {
        "a hash renewed".into()
    })?;
    want(s.release(1, "r1").is_err(), || "a hash released".into())?;
    match s.force("f1") {
        Ok(Released::Broken(Some(who))) => want(who.contains("hash"), || format!("broke {who}"))?,
        other => return Err(format!("a forced release of a hash: {other:?}")),
    }
    want(!s.bench().store.data.contains_key(&s.key.redis_key), || {
        "the hash is left".into()
    })?;
    plant(&s.key.redis_key, Data::Str("v".into()));
    match s.force("f2") {
        Ok(Released::Broken(Some(who))) => {
            want(who.contains("token v"), || format!("broke {who}"))?
        }
        other => {
            return Err(format!(
                "a forced release of another client's lock: {other:?}"
            ));
        }
    }
    // A renewal gets through whatever happened to the helper keys (renew.lua).
    let state = format!("{{{}}}:state", s.key.redis_key);
    s.bench().store = Default::default();
    s.take(1, Sharing::Exclusive, 1_000, None)
        .map_err(|e| format!("a free lock refused: {e:?}"))?;
    plant(&state, Data::Str("x".into()));
    let r = s.renew(1);
    want(matches!(r, Ok(Renewed::Yes(_))), || {
        format!("a renewal beside a state of another type: {r:?}")
    })?;
    s.bench().store = Default::default();
    for helper in [
        format!("{{{}}}:state", s.key.redis_key),
        format!("{{{}}}:q", s.key.redis_key),
    ] {
        plant(&helper, Data::Str("x".into()));
        let before = s.bench().store.clone();
        for sharing in [Sharing::Exclusive, Sharing::Limit(2)] {
            let r = s.take(1, sharing, 1_000, None);
            want(r.is_err(), || {
                format!("granted beside a {helper} of another type: {r:?}")
            })?;
        }
        want(s.force("f3").is_err(), || {
            format!("broken beside a {helper} of another type")
        })?;
        want(s.bench().store == before, || {
            format!("a refusal beside {helper} changed the data")
        })?;
        s.bench().store.data.remove(&helper);
    }
    // A fence counter that cannot be raised (not a whole number below 2^53): refused.
    for (fence, refused) in [
        ("x1", true),
        ("12345678901234567", true),
        ("9007199254740991", true),
        ("9007199254740990", false),
    ] {
        let counter = [("fence".to_string(), fence.to_string())];
        plant(&state, Data::Hash(counter.into_iter().collect()));
        let before = s.bench().store.clone();
        let r = s.take(1, Sharing::Exclusive, 1_000, None);
        // Refused before anything is written.
        let kept = s.bench().store == before;
        want(r.is_err() == refused && kept == refused, || {
            format!("a fence counter of {fence}: {r:?}, the data kept: {kept}")
        })?;
        let mut b = s.bench();
        b.store = Default::default();
    }
    // An ACL user without a right: refused before anything is written (NOPERM), told which.
    s.bench().lua.deny("PUBLISH");
    s.bench().errors_expected = true;
    for sharing in [Sharing::Exclusive, Sharing::Limit(2)] {
        let r = s.take(1, sharing, 1_000, None);
        let said = format!("{r:?}");
        want(
            said.contains("NOPERM") && said.contains("'publish' command on '{rlock:jobs}:wake'"),
            || format!("a try without the right to PUBLISH: {said}"),
        )?;
    }
    let said = format!("{:?}", s.force("f4"));
    want(
        said.contains("'publish' command on '{rlock:jobs}:wake'"),
        || format!("a forced release without the right to PUBLISH: {said}"),
    )?;
    want(s.bench().store.data.is_empty(), || {
        "a refused script wrote".into()
    })?;
    // A right that only a lock of several holders needs: an exclusive lock is granted, a
    // semaphore refused.
    s.bench().lua.deny("ZREMRANGEBYSCORE");
    s.take(1, Sharing::Exclusive, 1_000, None)
        .map_err(|e| format!("refused a right it does not need: {e:?}"))?;
    want(s.release(1, "r1").is_ok(), || "a release".into())?;
    let said = format!("{:?}", s.take(2, Sharing::Limit(2), 1_000, None));
    want(said.contains("'zremrangebyscore' command"), || {
        format!("a semaphore's try without the right to ZREMRANGEBYSCORE: {said}")
    })?;
    Ok(())
}
