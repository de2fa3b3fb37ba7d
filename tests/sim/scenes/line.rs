//! The scenes of the line: waiters keep their places, first come first served (docs/design.md);
//! a release hands the lock to the first waiter alive and warns the one behind it; a waiter
//! nobody listens for leaves the line; a reservation that is not claimed in time lapses.

use rlock::lock::{Released, Sharing};

use super::{Said, Scene, want};

/// The reply is `word`, with these fields of these values ("-": without the field).
pub(super) fn says(said: &Said, word: &str, fields: &[(&str, &str)]) -> Result<(), String> {
    want(
        said.0 == word
            && fields.iter().all(|(k, v)| match *v {
                "-" => !said.1.contains_key(*k),
                v => said.1.get(*k).map(String::as_str) == Some(v),
            }),
        || format!("expected {word} {fields:?}, the script said {said:?}"),
    )
}

impl Scene {
    /// How long the line lives (ms; -1 without expiry, -2 absent).
    fn queue_pttl(&self) -> i64 {
        let b = self.bench();
        let queue = format!("{{rlock:{}}}:q", super::KEY);
        match (b.store.data.get(&queue), b.store.expires.get(&queue)) {
            (None, _) => -2,
            (Some(_), None) => -1,
            (Some(_), Some(at)) => at - b.now_ms,
        }
    }
}

/// The scripts published exactly `what` (token or "*", message), in this order.
pub(super) fn told(s: &Scene, what: &[(&str, &str)]) -> Result<(), String> {
    let heard = s.heard();
    want(
        heard.len() == what.len()
            && heard
                .iter()
                .zip(what)
                .all(|(h, w)| h.0 == w.0 && h.1 == w.1),
        || format!("expected the wake-ups {what:?}, heard {heard:?}"),
    )
}

pub(super) fn line_is(s: &Scene, tokens: &[&str]) -> Result<(), String> {
    let line = s.line();
    want(line == tokens, || {
        format!("expected the line {tokens:?}, it is {line:?}")
    })
}

/// One holder at a time (acquire.lua, common.lua's hand_off).
pub(super) fn exclusive(s: &Scene) -> Result<(), String> {
    let ex = Sharing::Exclusive;
    s.take(1, ex, 10_000, None)
        .map_err(|e| format!("a free lock refused: {e:?}"))?;
    for (n, place) in [(2, "1"), (3, "2"), (4, "3")] {
        s.later(1);
        says(
            &s.join(n, ex),
            "busy",
            &[("place", place), ("host", "host1")],
        )?;
    }
    s.later(1);
    // A waiter's try again keeps its place.
    says(&s.join(3, ex), "busy", &[("place", "2"), ("pttl", "9996")])?;
    line_is(s, &["t2", "t3", "t4"])?;
    // Who waits, as inspect shows it (slot.lua's wait_in_line).
    let info = s.inspect()?;
    let hosts: Vec<Option<&str>> = info.line.iter().map(|w| w.host.as_deref()).collect();
    want(
        hosts == [Some("host2"), Some("host3"), Some("host4")],
        || format!("inspect's line: {:?}", info.line),
    )?;
    // A waiter whose who-record is missing (an older rlock's, say) has it written again.
    if let Some(super::super::store::Data::Hash(h)) = s
        .bench()
        .store
        .data
        .get_mut(&format!("{{rlock:{}}}:state", super::KEY))
    {
        h.remove("w:t3");
    }
    says(&s.join(3, ex), "busy", &[("place", "2")])?;
    let info = s.inspect()?;
    want(
        info.line.get(1).and_then(|w| w.host.as_deref()) == Some("host3"),
        || format!("inspect's line: {:?}", info.line),
    )?;
    s.heard();
    s.later(100);
    want(matches!(s.release(1, "r1"), Ok(Released::Done)), || {
        "a release".into()
    })?;
    // The first is handed the lock; the one behind it told when that reservation ends.
    told(s, &[("t2", "go"), ("t3", "1000")])?;
    s.later(200);
    says(&s.join(3, ex), "queued", &[("wait", "800")])?;
    says(&s.join(5, ex), "queued", &[("wait", "800")])?;
    s.later(1);
    says(&s.join(2, ex), "ok", &[("ttl", "10000")])?;
    line_is(s, &["t3", "t4", "t5"])?;
    s.heard();
    // A waiter nobody listens for any more leaves the line at the next handoff.
    s.deaf(3);
    s.later(100);
    want(matches!(s.release(2, "r2"), Ok(Released::Done)), || {
        "a release".into()
    })?;
    told(s, &[("t4", "go"), ("t5", "1000")])?;
    line_is(s, &["t4", "t5"])?;
    // The first does not claim the lock in time: it loses its turn.
    s.later(1_001);
    says(&s.join(5, ex), "ok", &[])?;
    line_is(s, &[])?;
    s.heard();
    s.later(10);
    want(matches!(s.release(5, "r5"), Ok(Released::Done)), || {
        "a release".into()
    })?;
    // Nobody in line: anyone is woken, on the lock's own channel.
    told(s, &[("*", "*")])?;
    // A grant of a free lock with nobody in line wakes nobody.
    says(&s.join(6, ex), "ok", &[])?;
    told(s, &[])?;
    // The line lives as long as the waiter may wait, and a while more (slot.lua's
    // wait_in_line: the lease left, then KEEP_MS).
    says(&s.join(7, ex), "busy", &[("pttl", "10000")])?;
    let left = s.queue_pttl();
    want(left >= 70_000, || format!("the line lives {left} ms more"))?;
    // A waiter ahead that died: a newcomer, once the lease ran out (no release, so no
    // handoff), is not kept out by it.
    s.deaf(7);
    s.later(10_001);
    says(&s.join(8, ex), "ok", &[])?;
    line_is(s, &[])
}

/// A semaphore whose last holder left while two waited: the first is handed the key, the
/// next told a slot is free; a newcomer waits for the reservation's end, and once the first
/// claims its slot, for a claim window of its own.
pub(super) fn reserved(s: &Scene) -> Result<(), String> {
    let two = Sharing::Limit(2);
    for n in [1, 2] {
        s.take(n, two, 10_000, None)
            .map_err(|e| format!("a free slot refused: {e:?}"))?;
    }
    says(&s.join(3, two), "busy", &[("place", "1")])?;
    s.later(1);
    says(&s.join(4, two), "busy", &[("place", "2")])?;
    want(s.release(1, "r1").is_ok(), || "a release".into())?;
    want(s.release(2, "r2").is_ok(), || "a release".into())?;
    s.heard();
    s.later(10);
    says(&s.join(5, two), "queued", &[("wait", "990")])?;
    says(&s.join(3, two), "ok", &[])?;
    s.later(10);
    says(&s.join(6, two), "queued", &[("wait", "1000")])?;
    line_is(s, &["t4", "t5", "t6"])
}

/// A semaphore of two: a freed slot goes to the first in line; the next is warned.
pub(super) fn semaphore(s: &Scene) -> Result<(), String> {
    let two = Sharing::Limit(2);
    for n in [1, 2] {
        s.take(n, two, 10_000, None)
            .map_err(|e| format!("a free slot refused: {e:?}"))?;
        s.later(1);
    }
    for (n, place) in [(3, "1"), (4, "2"), (5, "3")] {
        says(
            &s.join(n, two),
            "busy",
            &[
                ("place", place),
                ("holders", "2"),
                ("limit", "2"),
                ("host", "host1"),
                ("since", "1780000000000"),
                ("ahead", "-"),
            ],
        )?;
        s.later(1);
    }
    s.heard();
    want(matches!(s.release(1, "r1"), Ok(Released::Done)), || {
        "a release".into()
    })?;
    told(s, &[("t3", "go"), ("t4", "1000")])?;
    s.later(10);
    // The slot is the first waiter's: the second waits.
    says(&s.join(4, two), "queued", &[])?;
    line_is(s, &["t3", "t4", "t5"])?;
    // A waiter told of a free slot that did not claim it in time loses its place.
    s.later(1_000);
    says(&s.join(4, two), "ok", &[])?;
    line_is(s, &["t5"])?;
    s.heard();
    // Both slots taken again: a newcomer waits behind the line, for the first lease to end.
    says(
        &s.join(3, two),
        "busy",
        &[
            ("place", "2"),
            ("holders", "2"),
            ("pttl", "8986"),
            ("host", "host2"),
        ],
    )?;
    s.deaf(5);
    want(matches!(s.release(2, "r2"), Ok(Released::Done)), || {
        "a release".into()
    })?;
    // The waiter told is dead: it leaves the line, and the next is told to come in at once.
    told(s, &[("t3", "0")])?;
    line_is(s, &["t3"])?;
    says(&s.join(3, two), "ok", &[])?;
    line_is(s, &[])
}

/// Shared holders: a shared request waits behind an exclusive one ahead of it in line.
pub(super) fn shared(s: &Scene) -> Result<(), String> {
    let (sh, ex) = (Sharing::Shared, Sharing::Exclusive);
    s.take(1, sh, 10_000, None)
        .map_err(|e| format!("a free lock refused: {e:?}"))?;
    s.later(1);
    says(
        &s.join(2, ex),
        "busy",
        &[("place", "1"), ("holders", "1"), ("limit", "0")],
    )?;
    s.later(1);
    says(&s.join(3, sh), "busy", &[("place", "2"), ("ahead", "1")])?;
    s.heard();
    s.later(10);
    want(matches!(s.release(1, "r1"), Ok(Released::Done)), || {
        "a release".into()
    })?;
    told(s, &[("t2", "go"), ("t3", "1000")])?;
    s.later(10);
    says(&s.join(3, sh), "queued", &[])?;
    says(&s.join(2, ex), "ok", &[])?;
    line_is(s, &["t3"])
}
