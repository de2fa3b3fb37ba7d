//! What each script's reply says of the lock, checked against the server's data once the script
//! has run: a reply that tells the client something the data does not bear out is a broken
//! invariant, whatever the client then does with it. (The scripts' replies are described at the
//! top of each of src/lock/acquire.lua, release.lua, renew.lua and leave.lua.)

use super::server::Call;
use super::store::{Data, Resp, Store};

/// Whether `token` holds `lock` in `store` at `now_ms`, and until when (server ms; None for a
/// key without expiry).
fn held(store: &Store, lock: &str, token: &str, now_ms: i64) -> Option<Option<i64>> {
    let expiry = store.expires.get(lock).copied();
    if expiry.is_some_and(|at| at < now_ms) {
        return None;
    }
    match store.data.get(lock)? {
        Data::Str(v) if v == token => Some(expiry),
        Data::ZSet(z) => z
            .iter()
            .find(|(_, m)| m == token)
            .filter(|(ends, _)| *ends > now_ms as f64)
            .map(|(ends, _)| Some(expiry.map_or(*ends as i64, |e| e.min(*ends as i64)))),
        _ => None,
    }
}

/// Whether anyone holds `lock` at `now_ms`.
fn anyone(store: &Store, lock: &str, now_ms: i64) -> bool {
    if store.expires.get(lock).is_some_and(|at| *at < now_ms) {
        return false;
    }
    match store.data.get(lock) {
        Some(Data::Str(_)) => true,
        Some(Data::ZSet(z)) => z.iter().any(|(ends, _)| *ends > now_ms as f64),
        _ => false,
    }
}

fn in_line(store: &Store, queue: &str, token: &str) -> bool {
    matches!(store.data.get(queue), Some(Data::ZSet(z)) if z.iter().any(|(_, m)| m == token))
}

/// The reply's word and its fields by name.
fn read(reply: &Resp) -> Option<(&str, impl Fn(&str) -> Option<i64> + '_)> {
    let Resp::Array(items) = reply else {
        return None;
    };
    let Some(Resp::Bulk(word)) = items.first() else {
        return None;
    };
    let field = move |name: &str| {
        items[1..].chunks(2).find_map(|p| match p {
            [Resp::Bulk(n), v] if n == name => match v {
                Resp::Int(i) => Some(*i),
                Resp::Bulk(s) => s.parse::<f64>().ok().map(|f| f as i64),
                _ => None,
            },
            _ => None,
        })
    };
    Some((word.as_str(), field))
}

/// What `call`'s reply says that the data before and after it does not bear out.
pub fn contradiction(
    call: &Call,
    before: &Store,
    after: &Store,
    reply: &Resp,
    now_ms: i64,
) -> Option<String> {
    // Every key rlock writes expires (common.lua): none is left without.
    if let Some(key) = after
        .data
        .keys()
        .find(|k| !after.expires.contains_key(*k) && before.data.get(*k) != after.data.get(*k))
    {
        return Some(format!("{} left {key} without expiry", call.name));
    }
    if let Some(v) = shape(call, after, now_ms) {
        return Some(v);
    }
    if let Some(v) = forgotten(call, before, after, now_ms) {
        return Some(v);
    }
    let (lock, token) = (call.keys.first()?, call.arg("token")?);
    let (word, field) = read(reply)?;
    let record = |name: &str| match call.keys.get(1).and_then(|k| after.data.get(k)) {
        Some(Data::Hash(h)) => h.get(name).cloned(),
        _ => None,
    };
    // The token's own release, kept as a hold (release.lua's `released`, cleared by a grant).
    let released = |s: &Store| match call.keys.get(1).and_then(|k| s.data.get(k)) {
        Some(Data::Hash(h)) => {
            h.get("token").map(String::as_str) == Some(token) && h.contains_key("released")
        }
        _ => false,
    };
    let was = held(before, lock, token, now_ms);
    let is = held(after, lock, token, now_ms);
    let says = |what: &str| {
        Some(format!(
            "{} said {word:?} for {token}, but {what}",
            call.name
        ))
    };
    match (call.name, word) {
        ("acquire", "ok") => {
            let Some(until) = is else {
                return says("it does not hold the lock");
            };
            let ttl = field("ttl").unwrap_or(0);
            // (A lock without expiry is the liveness invariants' to find: live.rs.)
            if ttl <= 0 || until.is_some_and(|u| u < now_ms + ttl) {
                return says(&format!(
                    "its lease of {ttl} ms ends at {until:?}, now {now_ms}"
                ));
            }
            let fence = field("fence").unwrap_or(0);
            if fence <= 0 {
                return says("no fence");
            }
            // The lock of one holder has its record, for inspect and the next try to read.
            let one = matches!(after.data.get(lock), Some(Data::Str(_)));
            if one
                && (record("token").as_deref() != Some(token)
                    || record("fence").and_then(|f| f.parse::<f64>().ok()) != Some(fence as f64))
            {
                return says("the state does not record its grant and fence");
            }
        }
        // ("superseded" may come to a holder's late duplicate of its try: --cancel-running asks
        // it to stop, and its lease is left to end.)
        ("acquire", "busy" | "queued" | "mismatch") if is.is_some() => {
            return says("it holds the lock");
        }
        ("acquire", "busy") if !anyone(after, lock, now_ms) => {
            return says("nobody holds the lock");
        }
        // "queued": free, but an earlier waiter goes first: someone else is in line or the
        // lock is reserved for another.
        ("acquire", "queued") => {
            let queue = call.keys.get(2)?;
            let others = |s: &Store| match s.data.get(queue) {
                Some(Data::ZSet(z)) => z.iter().any(|(_, m)| m != token),
                _ => false,
            };
            let next = match before.data.get(call.keys.get(1)?) {
                Some(Data::Hash(h)) => h.get("next").is_some_and(|n| n != token),
                _ => false,
            };
            if !others(before) && !others(after) && !next {
                return says("nobody else waits");
            }
        }
        ("renew", "renewed") => {
            let Some(until) = is else {
                return says("it does not hold the lock");
            };
            let ttl = field("ttl").unwrap_or(0);
            if ttl <= 0 || until.is_some_and(|u| u + 1 < now_ms + ttl) {
                return says(&format!(
                    "its lease of {ttl} ms ends at {until:?}, now {now_ms}"
                ));
            }
            if was.is_none() {
                return says("it did not hold the lock before");
            }
            // A renewal of one holder's lock writes when, in its own record.
            let one = matches!(after.data.get(lock), Some(Data::Str(_)));
            if one
                && record("token").as_deref() == Some(token)
                && record("renewed").and_then(|r| r.parse::<f64>().ok()) != Some(now_ms as f64)
            {
                return says("its record does not say it was renewed now");
            }
        }
        ("renew", "free" | "other") if was.is_some() || is.is_some() => {
            return says("it holds the lock");
        }
        ("renew", "other") if !anyone(after, lock, now_ms) => {
            return says("nobody holds the lock");
        }
        ("release", "released") if is.is_some() && field("until").is_none() => {
            return says("it still holds the lock");
        }
        ("release", "released") if was.is_none() => {
            return says("it did not hold the lock");
        }
        // (A release that kept the lock for its --hold-at-least leaves it the token's, marked
        // released: a duplicate of that release finds it "already" given back.)
        ("release", "already" | "expired" | "other") if was.is_some() && !released(before) => {
            return says("it held the lock");
        }
        ("release", "other") if !anyone(after, lock, now_ms) => {
            return says("nobody holds the lock");
        }
        // (A semaphore's leave may give back a lease that had already ended.)
        ("leave", "released") if is.is_some() => {
            return says("it still holds the lock");
        }
        ("leave", "left") if is != was => {
            return says("its hold changed");
        }
        _ => {}
    }
    if call.name == "leave"
        && let Some(queue) = call.keys.get(2)
        && in_line(after, queue, token)
    {
        return says("it is still in line");
    }
    None
}

/// What the data must look like after any script: the state outlives the lock, and a lock of
/// several holders outlives its last lease and keeps a record of each holder.
fn shape(call: &Call, after: &Store, now_ms: i64) -> Option<String> {
    let (lock, state) = (call.keys.first()?, call.keys.get(1)?);
    let live =
        |k: &str| after.data.contains_key(k) && after.expires.get(k).is_none_or(|at| *at >= now_ms);
    if !live(lock) {
        return None;
    }
    let lock_ends = after.expires.get(lock).copied();
    if live(state)
        && let (Some(l), Some(s)) = (lock_ends, after.expires.get(state))
        && *s < l
    {
        return Some(format!(
            "{} left the state ending at {s}, before the lock at {l}",
            call.name
        ));
    }
    let Some(Data::ZSet(holders)) = after.data.get(lock) else {
        return None;
    };
    let last = holders.iter().map(|(ends, _)| *ends as i64).max()?;
    if lock_ends.is_some_and(|l| l < last) {
        return Some(format!(
            "{} left the lock ending at {lock_ends:?}, before its last lease at {last}",
            call.name
        ));
    }
    let records = match after.data.get(state) {
        Some(Data::Hash(h)) if live(state) => h,
        _ => {
            return Some(format!(
                "{} left a lock of several holders without its state",
                call.name
            ));
        }
    };
    holders
        .iter()
        .filter(|(ends, _)| *ends > now_ms as f64)
        .find(|(_, t)| !records.contains_key(&format!("h:{t}")))
        .map(|(_, t)| format!("{} left holder {t} without its record", call.name))
}

/// What the state keeps of a holder of several, or of a waiter, goes with it: a holder that a
/// script takes out of a lock of several holders leaves no record ("h:", multi.lua), a waiter
/// it takes out of the line leaves no record of who it is ("w:": slot.lua's wait_in_line,
/// common.lua's leave_line; a claim window, "go:", may stay until the state expires). A key
/// that expired takes its members without a script: not counted.
fn forgotten(call: &Call, before: &Store, after: &Store, now_ms: i64) -> Option<String> {
    let state = match call.keys.get(1).and_then(|k| after.data.get(k)) {
        Some(Data::Hash(h)) => h,
        _ => return None,
    };
    let members = |s: &Store, key: &str| -> Vec<String> {
        match s.data.get(key) {
            Some(Data::ZSet(z)) if s.expires.get(key).is_none_or(|at| *at >= now_ms) => {
                z.iter().map(|(_, m)| m.clone()).collect()
            }
            _ => Vec::new(),
        }
    };
    let gone = |key: &String| {
        let now = members(after, key);
        members(before, key)
            .into_iter()
            .filter(move |t| !now.contains(t))
    };
    if let Some(t) = call
        .keys
        .first()
        .into_iter()
        .flat_map(gone)
        .find(|t| state.contains_key(&format!("h:{t}")))
    {
        return Some(format!(
            "{} took holder {t} out and left its record",
            call.name
        ));
    }
    let kept = |t: String| -> Vec<String> {
        Some(format!("w:{t}"))
            .filter(|f| state.contains_key(f))
            .into_iter()
            .collect()
    };
    call.keys
        .get(2)
        .into_iter()
        .flat_map(gone)
        .map(kept)
        .find(|k| !k.is_empty())
        .map(|k| format!("{} took a waiter out of the line and left {k:?}", call.name))
}
