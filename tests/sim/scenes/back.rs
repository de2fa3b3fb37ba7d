//! The scenes of give-backs, renewals and displacements: a give-back undoes only a grant that
//! a try up to it took (leave.lua), and hands a reservation on; a renewal never shortens a
//! lease and keeps the TTL the lock was last given (renew.lua); a newer run displaces the
//! older waiters that asked for `--newest`, and a holder that asked for `--cancel-running`
//! hears who did (slot.lua's supersede).

use std::time::Duration;

use rlock::lock::{NotOwner, Renewed, Sharing};

use super::line::{line_is, says, told};
use super::{Scene, want};

impl Scene {
    /// How long the lock's state lives (ms; -1 without expiry, -2 absent).
    pub(super) fn state_pttl(&self) -> i64 {
        let b = self.bench();
        let state = format!("{{rlock:{}}}:state", super::KEY);
        match (b.store.data.get(&state), b.store.expires.get(&state)) {
            (None, _) => -2,
            (Some(_), None) => -1,
            (Some(_), Some(at)) => at - b.now_ms,
        }
    }

    fn renew_to(&self, n: u32, ttl_ms: Option<u64>) -> Result<Renewed, String> {
        let ttl = ttl_ms.map(Duration::from_millis);
        self.locker
            .renew(&self.key, &format!("t{n}"), ttl, Duration::from_millis(200))
            .map_err(|e| format!("a renewal failed: {e:?}"))
    }
}

/// `renewed` is a renewal to a lease of `ms`.
fn renewed(r: Result<Renewed, String>, ms: u64) -> Result<(), String> {
    want(
        matches!(&r, Ok(Renewed::Yes(d)) if *d == Duration::from_millis(ms)),
        || format!("expected a lease of {ms} ms, the renewal said {r:?}"),
    )
}

/// Give-backs of one holder's lock, and of a semaphore's slot.
pub(super) fn give_back(s: &Scene) -> Result<(), String> {
    let (ex, two) = (Sharing::Exclusive, Sharing::Limit(2));
    says(&s.join(1, ex), "ok", &[])?;
    says(&s.join(2, ex), "busy", &[("place", "1")])?;
    // Its try 1 took the lock: a give-back of the tries before it undoes nothing.
    says(&s.leave(1, 0), "left", &[])?;
    want(s.inspect()?.token.as_deref() == Some("t1"), || {
        "a give-back undid a later try's grant".into()
    })?;
    s.heard();
    says(&s.leave(1, 1), "released", &[])?;
    told(s, &[("t2", "go"), ("*", "*")][..1])?;
    s.later(10);
    says(&s.join(3, ex), "queued", &[("wait", "990")])?;
    s.heard();
    // The waiter the lock was handed to gives up: the next is handed it.
    says(&s.leave(2, 99), "left", &[])?;
    told(s, &[("t3", "go")])?;
    line_is(s, &["t3"])?;
    says(&s.join(3, ex), "ok", &[])?;
    says(&s.leave(3, 99), "released", &[])?;
    // The waiter the lock was handed to gives up with nobody behind it: anyone is woken, and
    // a newcomer takes the lock at once, not kept out by the reservation of a waiter gone.
    says(&s.join(7, ex), "ok", &[])?;
    says(&s.join(8, ex), "busy", &[("place", "1")])?;
    s.heard();
    says(&s.leave(7, 99), "released", &[])?;
    told(s, &[("t8", "go")])?;
    says(&s.leave(8, 99), "left", &[])?;
    told(s, &[("*", "*")])?;
    says(&s.join(9, ex), "ok", &[])?;
    says(&s.leave(9, 99), "released", &[])?;
    // A grant given back is released: the token's release after it is a release retried.
    want(s.release(9, "r9").is_ok(), || {
        "a release after a give-back".into()
    })?;
    // A waiter that was not handed the lock leaves a free lock: nobody is woken.
    says(&s.join(10, ex), "ok", &[])?;
    says(&s.join(11, ex), "busy", &[])?;
    says(&s.join(12, ex), "busy", &[])?;
    s.later(10_001);
    s.heard();
    says(&s.leave(12, 99), "left", &[])?;
    says(&s.leave(11, 99), "left", &[])?;
    told(s, &[])?;
    // A semaphore's slot (a scene of its own: a key of another kind).
    s.later(10_000);
    let first = s.bench().tries + 1;
    says(&s.join(4, two), "ok", &[])?;
    says(&s.join(5, two), "ok", &[])?;
    says(&s.join(6, two), "busy", &[("place", "1")])?;
    says(&s.leave(4, first - 1), "left", &[])?;
    let info = s.inspect()?;
    want(
        info.holders
            .iter()
            .any(|h| h.token == "t4" && h.holder.host.as_deref() == Some("host4")),
        || format!("a give-back undid a later try's slot: {info:?}"),
    )?;
    s.heard();
    says(&s.leave(4, first), "released", &[])?;
    told(s, &[("t6", "go")])?;
    let info = s.inspect()?;
    want(info.holders.len() == 1, || {
        format!("a slot given back is held: {info:?}")
    })
}

/// Renewals of one holder's lock and of a semaphore's slot.
pub(super) fn renewals(s: &Scene) -> Result<(), String> {
    let (ex, two) = (Sharing::Exclusive, Sharing::Limit(2));
    s.take(1, ex, 10_000, None)
        .map_err(|e| format!("a free lock refused: {e:?}"))?;
    s.later(1_000);
    // Never shorter: a shorter TTL leaves the lease, and the TTL the lock was last given.
    renewed(s.renew_to(1, Some(5_000)), 9_000)?;
    let info = s.inspect()?;
    want(info.ttl_ms == Some(10_000) && info.pttl == 9_000, || {
        format!("after a shorter renewal: {info:?}")
    })?;
    renewed(s.renew_to(1, Some(20_000)), 20_000)?;
    s.later(1_000);
    renewed(s.renew_to(1, None), 20_000)?;
    let info = s.inspect()?;
    want(
        info.ttl_ms == Some(20_000) && info.renewed_ms == Some(s.now()),
        || format!("after a longer renewal: {info:?}"),
    )?;
    // A renewal to a year, then to less: the state outlives the lock all along (checked after
    // every script), and once the lock is gone it lives no longer than a default grant's
    // state would (common.lua's AFTER_RELEASE_MS: 30 s and KEEP_MS).
    let year = 365 * 86_400_000;
    renewed(s.renew_to(1, Some(year)), year)?;
    s.later(1_000);
    renewed(s.renew_to(1, Some(5_000)), year - 1_000)?;
    want(s.force("f1").is_ok(), || "a forced release".into())?;
    let left = s.state_pttl();
    want((0..=90_000).contains(&left), || {
        format!("a broken lock's state lives {left} ms more")
    })?;
    // Another token hears that the lock is free, not that it was broken.
    want(
        matches!(s.renew_to(9, None), Ok(Renewed::NotOwner(NotOwner::Gone))),
        || "a renewal of a token that held nothing".into(),
    )?;
    s.later(1_000);
    for n in [2, 3] {
        s.take(n, two, 10_000, None)
            .map_err(|e| format!("a free slot refused: {e:?}"))?;
    }
    s.later(1_000);
    renewed(s.renew_to(2, Some(5_000)), 9_000)?;
    renewed(s.renew_to(2, Some(20_000)), 20_000)?;
    s.later(1_000);
    renewed(s.renew_to(2, None), 20_000)?;
    let info = s.inspect()?;
    want(
        info.holders.iter().any(|h| {
            h.token == "t2"
                && h.ttl_ms == Some(20_000)
                && h.renewed_ms == Some(s.now())
                && h.ends_ms == s.now() + 20_000
        }),
        || format!("a slot renewed: {info:?}"),
    )?;
    want(
        matches!(s.renew_to(4, None), Ok(Renewed::NotOwner(NotOwner::Taken))),
        || "a renewal of a token that holds no slot".into(),
    )?;
    renewed(s.renew_to(3, Some(year)), year)?;
    want(s.release(2, "r2").is_ok(), || "a release".into())?;
    // One other holder left: still not this token's.
    want(
        matches!(s.renew_to(4, None), Ok(Renewed::NotOwner(NotOwner::Taken))),
        || "a renewal of a token that holds no slot, beside one holder".into(),
    )?;
    want(s.release(3, "r3").is_ok(), || "a release".into())?;
    let left = s.state_pttl();
    want((0..=90_000).contains(&left), || {
        format!("once a year's lease is released, the state lives {left} ms more")
    })?;
    s.later(30_000);
    want(
        matches!(s.renew_to(2, None), Ok(Renewed::NotOwner(NotOwner::Gone))),
        || "a renewal after every lease ran out".into(),
    )
}

/// `--newest` and `--cancel-running`.
pub(super) fn newest(s: &Scene) -> Result<(), String> {
    let ex = Sharing::Exclusive;
    says(&s.join_as(1, ex, Some("2")), "ok", &[])?;
    says(&s.join_as(2, ex, Some("1")), "busy", &[("place", "1")])?;
    s.heard();
    s.later(10);
    says(&s.join_as(3, ex, Some("2")), "busy", &[("place", "1")])?;
    told(s, &[("t2", "x"), ("t1", "x")])?;
    line_is(s, &["t3"])?;
    let by = [
        ("host", "host3"),
        ("pid", "103"),
        ("user", "user3"),
        ("cmd", "job 3"),
    ];
    says(&s.join_as(2, ex, Some("1")), "superseded", &by)?;
    line_is(s, &["t3"])?;
    // A try that does not wait (`-n`) joins no line, and so displaces nobody.
    says(&s.try_as(9, ex, Some("1")), "busy", &[])?;
    line_is(s, &["t3"])?;
    match s.renew_to(1, None) {
        Ok(Renewed::Superseded { by, .. }) => want(by.host.as_deref() == Some("host3"), || {
            format!("the holder is told it was displaced by {by:?}")
        }),
        other => Err(format!("a displaced holder's renewal: {other:?}")),
    }
}

/// A request of another kind than the lock held is refused ("mismatch", and what is held);
/// once every lease of the other kind has run out, it is granted. A try again of a holder
/// confirms its grant (the same fence; a give-back of the tries before it undoes nothing);
/// a state lost under the lock gets a record and a fence anew; every grant's fence rises,
/// within one millisecond too.
pub(super) fn kinds(s: &Scene) -> Result<(), String> {
    let (ex, two, three, sh) = (
        Sharing::Exclusive,
        Sharing::Limit(2),
        Sharing::Limit(3),
        Sharing::Shared,
    );
    says(&s.join(1, ex), "ok", &[])?;
    let fence = |said: &super::Said| said.1.get("fence").and_then(|f| f.parse::<i64>().ok());
    let again = s.join(1, ex);
    says(&again, "ok", &[])?;
    let confirmed = s.bench().tries;
    says(&s.leave(1, confirmed - 1), "left", &[])?;
    says(&s.join(2, two), "mismatch", &[("held", "exclusive")])?;
    // The state lost under the lock (evicted, deleted): the fence rises as the server's clock
    // does.
    s.later(1);
    s.bench()
        .store
        .data
        .remove(&format!("{{rlock:{}}}:state", super::KEY));
    let anew = s.join(1, ex);
    says(&anew, "ok", &[])?;
    want(fence(&anew) > fence(&again), || {
        format!("a fence minted anew after the state was lost: {again:?}, then {anew:?}")
    })?;
    let info = s.inspect()?;
    want(info.holder.host.as_deref() == Some("host1"), || {
        format!("the record written anew: {info:?}")
    })?;
    says(&s.leave(1, 99), "released", &[])?;
    // In the same millisecond, a grant after a grant: the fence still rises.
    let same = s.join(13, ex);
    says(&same, "ok", &[])?;
    want(fence(&same) > fence(&anew), || {
        format!("fences {anew:?}, then {same:?}")
    })?;
    // A record of another token under this one's lock (another client wrote it): the grant
    // confirmed is told a fence minted anew, above the state's counter.
    let counter = fence(&same).unwrap_or(0) + 1_000;
    if let Some(super::super::store::Data::Hash(h)) = s
        .bench()
        .store
        .data
        .get_mut(&format!("{{rlock:{}}}:state", super::KEY))
    {
        h.insert("token".into(), "other".into());
        h.insert("fence".into(), counter.to_string());
    }
    let minted = s.join(13, ex);
    want(fence(&minted) > Some(counter), || {
        format!("a fence minted over a counter of {counter}: {minted:?}")
    })?;
    says(&s.leave(13, 99), "released", &[])?;
    // In the same millisecond: the fence still rises.
    let next = s.join(3, two);
    says(&next, "ok", &[])?;
    want(fence(&next) > fence(&anew), || {
        format!("fences {anew:?}, then {next:?}")
    })?;
    s.later(100);
    let retried = s.join(3, two);
    says(&retried, "ok", &[])?;
    // A retried try's lease is the TTL from now, never shorter (slot.lua).
    let info = s.inspect()?;
    want(
        info.holders
            .iter()
            .any(|h| h.token == "t3" && h.ends_ms == s.now() + 10_000),
        || format!("a retried try's lease: {info:?}"),
    )?;
    want(fence(&retried) == fence(&next), || {
        format!("a retried try's fence: {next:?}, then {retried:?}")
    })?;
    let confirmed = s.bench().tries;
    says(&s.leave(3, confirmed - 1), "left", &[])?;
    // Another grant since: a retry of the first is told a fence above it, and the counter
    // follows it (the next grant's is above both).
    let other = s.join(5, two);
    says(&other, "ok", &[])?;
    let third = s.join(3, two);
    want(fence(&third) > fence(&other), || {
        format!("a retry after another grant ({other:?}): {third:?}")
    })?;
    says(&s.leave(5, 99), "released", &[])?;
    let after = s.join(6, two);
    want(fence(&after) > fence(&third), || {
        format!("a grant after a retry told {third:?}: {after:?}")
    })?;
    says(&s.leave(6, 99), "released", &[])?;
    says(
        &s.join(4, ex),
        "mismatch",
        &[("held", "limit"), ("limit", "2")],
    )?;
    says(
        &s.join(4, three),
        "mismatch",
        &[("held", "limit"), ("limit", "2")],
    )?;
    says(&s.join(4, sh), "mismatch", &[("held", "limit")])?;
    s.later(10_001);
    // Every lease of the other kind has run out.
    let shared = s.join(4, sh);
    says(&shared, "ok", &[])?;
    want(fence(&shared) > fence(&retried), || {
        "a fence after a semaphore's".into()
    })?;
    // The records of the holders of the key's earlier life are gone with it (multi.lua: one
    // record per holder).
    let records: Vec<String> = match s
        .bench()
        .store
        .data
        .get(&format!("{{rlock:{}}}:state", super::KEY))
    {
        Some(super::super::store::Data::Hash(h)) => {
            h.keys().filter(|f| f.starts_with("h:")).cloned().collect()
        }
        _ => Vec::new(),
    };
    want(records == ["h:t4"], || {
        format!("the holder records: {records:?}")
    })?;
    says(&s.join(5, two), "mismatch", &[("held", "shared")])?;
    says(&s.join(5, ex), "busy", &[("holders", "1"), ("limit", "0")])?;
    Ok(())
}
