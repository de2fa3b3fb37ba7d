//! The scenes of a lock of several holders: a semaphore of two, shared holders.

use std::time::Duration;

use rlock::lock::{Error, Refused, Released, Renewed, RunRecord, Seen, Sharing};

use super::one::{same_entry, same_holder};
use super::{Scene, want, who};

/// A semaphore of two, or shared holders: each holder's own record, its renewal and release,
/// a busy answer's count, and a forced release that breaks them all ("brokenall"), each on
/// record.
pub(super) fn several(s: &Scene, sharing: Sharing) -> Result<(), String> {
    let limit = match sharing {
        Sharing::Limit(n) => i64::from(n),
        _ => 0,
    };
    s.take(1, sharing, 10_000, None)
        .map_err(|e| format!("a free lock refused: {e:?}"))?;
    let t1 = s.now();
    s.later(1_000);
    s.take(2, sharing, 20_000, None)
        .map_err(|e| format!("a second holder refused: {e:?}"))?;
    let t2 = s.now();
    s.later(1_000);
    let info = s.inspect()?;
    want(info.limit == Some(limit) && info.holders.len() == 2, || {
        format!("inspect of two holders: {info:?}")
    })?;
    let h1 = &info.holders[0];
    same_holder(&h1.holder, 1, t1)?;
    same_holder(&info.holders[1].holder, 2, t2)?;
    want(
        h1.token == "t1"
            && h1.ends_ms == t1 + 10_000
            && h1.ttl_ms == Some(10_000)
            && h1.renewed_ms == Some(t1)
            && info.holders[1].ends_ms == t2 + 20_000
            // The key lives exactly as long as its last lease (multi.lua).
            && info.pttl == t2 + 20_000 - s.now(),
        || format!("inspect of two holders: {info:?}"),
    )?;
    let other = if limit == 0 {
        Sharing::Exclusive
    } else {
        sharing
    };
    match s.take(3, other, 10_000, None) {
        Err(Error::Busy {
            seen:
                Seen::Held {
                    holder,
                    crowd: Some(c),
                    pttl,
                    ..
                },
            ..
        }) => {
            // The holder whose lease ends first; the wait, until a slot is free (the first
            // lease's end) or, for an exclusive request, until no holder is left (the last).
            same_holder(&holder, 1, t1)?;
            let free_in = if limit == 0 { 19_000 } else { 8_000 };
            want(
                c.holders == 2 && c.limit == limit && pttl == free_in,
                || format!("a busy answer of two holders: {c:?}, pttl {pttl}"),
            )?;
        }
        other => return Err(format!("a full lock answered {other:?}")),
    }
    let r = s.renew(1);
    want(
        matches!(r, Ok(Renewed::Yes(d)) if d == Duration::from_secs(10)),
        || format!("a renewal: {r:?}"),
    )?;
    let info = s.inspect()?;
    want(
        info.holders.iter().any(|h| {
            h.token == "t1" && h.renewed_ms == Some(s.now()) && h.ends_ms == s.now() + 10_000
        }),
        || format!("inspect after a renewal: {info:?}"),
    )?;
    s.later(1_000);
    want(matches!(s.release(1, "r1"), Ok(Released::Done)), || {
        "a release".into()
    })?;
    same_entry(&s.entry("r1")?, 1, t1, s.now(), "released")?;
    want(matches!(s.release(1, "r1b"), Ok(Released::Done)), || {
        "a release retried".into()
    })?;
    s.take(3, sharing, 10_000, None)
        .map_err(|e| format!("a freed slot refused: {e:?}"))?;
    let t3 = s.now();
    s.later(500);
    let ended = s.now();
    match s.force("f1") {
        Ok(Released::Broken(Some(who))) => {
            want(who.contains("host2") && who.contains("host3"), || {
                format!("a forced release says it broke {who}")
            })?
        }
        other => return Err(format!("a forced release of a held lock: {other:?}")),
    }
    let all = s.history()?;
    let broken: Vec<&RunRecord> = all
        .iter()
        .filter(|r| r.outcome.as_deref() == Some("broken"))
        .collect();
    want(broken.len() == 2, || {
        format!("two holders broken, the history: {all:?}")
    })?;
    for (n, since) in [(2, t2), (3, t3)] {
        let e = broken
            .iter()
            .find(|r| r.host.as_deref() == Some(who(n).host.as_str()))
            .ok_or_else(|| format!("no broken entry of process {n}: {all:?}"))?;
        same_entry(e, n, since, ended, "broken")?;
    }
    want(!s.inspect()?.held(), || {
        "a broken lock is still held".into()
    })?;
    want(
        matches!(
            s.release(2, "r2"),
            Err(Error::NotPermitted {
                refused: Refused::ReleaseNotHeld,
                ..
            })
        ),
        || "a broken holder's release".into(),
    )?;
    s.no_entry("r2")?;
    want(matches!(s.force("f2"), Ok(Released::Broken(None))), || {
        "breaking a free lock".into()
    })?;
    // A lease that ran out, its key with it: lost, when the lease ended.
    s.take(4, sharing, 1_000, None)
        .map_err(|e| format!("a broken lock refused: {e:?}"))?;
    let t4 = s.now();
    s.later(500);
    want(matches!(s.renew(4), Ok(Renewed::Yes(_))), || {
        "a renewal".into()
    })?;
    s.later(2_000);
    want(s.release(4, "r4").is_err(), || {
        "a release after the lease ran out".into()
    })?;
    same_entry(&s.entry("r4")?, 4, t4, t4 + 1_500, "lost")?;
    want(s.release(4, "r4b").is_err(), || "a release retried".into())?;
    s.no_entry("r4b")?;
    // A lone holder, broken.
    s.take(5, sharing, 1_000, None)
        .map_err(|e| format!("a free lock refused: {e:?}"))?;
    match s.force("f3") {
        Ok(Released::Broken(Some(who))) => want(who.contains("host5"), || format!("broke {who}")),
        other => Err(format!("a forced release of one holder: {other:?}")),
    }
}
