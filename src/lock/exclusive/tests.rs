//! Unit tests of the Redlock arithmetic: the majority, the validity, the answers without a grant.
use super::*;
use crate::exit::{Code, Failure};

fn key() -> LockKey {
    LockKey::new("rlock:", "jobs").unwrap()
}

fn granted(fence: i64) -> NodeAttempt {
    Ok(Attempt::Granted(Grant {
        key: key(),
        token: "tok".into(),
        fence,
        ttl: Ttl::Asked(Duration::from_secs(10)),
        sent: Instant::now(),
    }))
}

fn busy(pttl: i64) -> NodeAttempt {
    busy_for(pttl, None)
}

/// Busy, with the holder's record saying its lease was `lease_ms`.
fn busy_for(pttl: i64, lease_ms: Option<i64>) -> NodeAttempt {
    Ok(Attempt::Busy {
        pttl,
        now_ms: pttl,
        holder: Holder::default(),
        lease_ms,
        crowd: None,
        place: None,
    })
}

fn failed(kind: Fault) -> NodeAttempt {
    Err(NodeError {
        kind,
        node: "redis://n".into(),
        detail: "gone".into(),
    })
}

fn busy_pttl(a: &Result<Attempt, Error>) -> Option<i64> {
    match a {
        Ok(Attempt::Busy { pttl, .. }) => Some(*pttl),
        _ => None,
    }
}

#[test]
fn a_majority_grants_with_the_highest_fence() {
    let three = Quorum::of(3);
    let all = [true; 5];
    assert_eq!(
        majority_fence(three, &[granted(5), busy(100), granted(7)], &all),
        Some(7)
    );
    assert_eq!(
        majority_fence(
            three,
            &[granted(5), busy(100), failed(Fault::Timeout)],
            &all
        ),
        None
    );
    let five = Quorum::of(5);
    let results = [granted(1), granted(2), granted(3), busy(1), busy(1)];
    assert_eq!(majority_fence(five, &results, &all), Some(3));
    assert_eq!(majority_fence(five, &results[1..], &all), None);
}

fn secs(s: u64) -> Option<Duration> {
    Some(Duration::from_secs(s))
}

#[test]
fn a_recent_master_votes_only_where_no_master_says_another_holds_the_lock() {
    let three = Quorum::of(3);
    // The second master restarted 2 s ago, the others long ago.
    let uptimes = [secs(3600), secs(2), secs(3600)];
    // Another holder on the first: the restarted master may have lost that holder's lock.
    let results = [busy(5_000), granted(5), granted(7)];
    assert_eq!(votes(&results, &uptimes), vec![true, false, true]);
    assert_eq!(
        majority_fence(three, &results, &votes(&results, &uptimes)),
        None
    );
    // Nobody else holds it anywhere that answered (a fresh start of every master): it counts.
    let results = [failed(Fault::Timeout), granted(5), granted(7)];
    assert_eq!(votes(&results, &uptimes), vec![true; 3]);
    assert_eq!(
        majority_fence(three, &results, &votes(&results, &uptimes)),
        Some(7)
    );
    // A master that did not say how long it has run never counts as restarted.
    let results = [busy(5_000), granted(5), granted(7)];
    assert_eq!(votes(&results, &[None; 3]), vec![true; 3]);
}

#[test]
fn the_restart_rule_counts_the_holders_lease_not_the_askers() {
    let three = Quorum::of(3);
    let uptimes = [secs(3600), secs(2), secs(3600)];
    // The holder asked for 60 s and has 57 s left: a master up for 2 s may have lost its lock,
    // however short a TTL the asker wants.
    let results = [busy_for(57_000, Some(60_000)), granted(5), granted(7)];
    assert_eq!(votes(&results, &uptimes), vec![true, false, true]);
    assert_eq!(
        majority_fence(three, &results, &votes(&results, &uptimes)),
        None
    );
    // The lease its record holds counts even when the PTTL is shorter (renewed just before the
    // restart elsewhere), and a record without a lease leaves the PTTL.
    assert_eq!(
        longest_lease(&[busy_for(1_000, Some(60_000)), granted(1)]),
        Some(Duration::from_secs(60))
    );
    assert_eq!(
        longest_lease(&[busy(2_500), busy_for(900, Some(1_000))]),
        Some(Duration::from_millis(2_500))
    );
    // A lock without expiry: no recent master votes while it is held.
    assert_eq!(longest_lease(&[busy(-1), granted(1)]), Some(Duration::MAX));
    assert_eq!(longest_lease(&[granted(1), failed(Fault::Io)]), None);
    // A master up for longer than the longest lease reported has nothing left to lose.
    let results = [busy_for(1_500, Some(1_800)), granted(5), granted(7)];
    assert_eq!(votes(&results, &uptimes), vec![true; 3]);
    assert_eq!(
        majority_fence(three, &results, &votes(&results, &uptimes)),
        Some(7)
    );
}

#[test]
fn validity_is_what_is_left_after_the_round_trip_and_the_drift() {
    let ttl = Duration::from_secs(10);
    let t0 = Instant::now();
    // drift: 1% of the TTL and 2 ms.
    assert_eq!(
        validity(ttl, t0, t0 + Duration::from_secs(1)),
        Some(Duration::from_millis(10_000 - 1_000 - 102))
    );
    assert_eq!(
        validity(ttl, t0, t0 + Duration::from_millis(9_898)),
        Some(Duration::ZERO)
    );
    assert_eq!(validity(ttl, t0, t0 + Duration::from_millis(9_899)), None);
    assert_eq!(validity(ttl, t0, t0 + ttl * 2), None);
}

#[test]
fn no_grant_reports_the_lease_that_ends_soonest() {
    let three = Quorum::of(3);
    let said = no_grant(three, &key(), vec![busy(-1), busy(900), busy(300)]);
    assert_eq!(busy_pttl(&said), Some(300));
    // A lock without expiry says when only if nothing else does.
    let said = no_grant(three, &key(), vec![busy(-1), granted(4), busy(-2)]);
    assert_eq!(busy_pttl(&said), Some(-1));
    // A majority granted, too slowly: busy, with nothing to say but to try again soon.
    let said = no_grant(three, &key(), vec![granted(4), granted(5), granted(6)]);
    assert_eq!(busy_pttl(&said), Some(0));
}

#[test]
fn no_grant_without_a_majority_answering() {
    let three = Quorum::of(3);
    // One node down: the others still decide.
    let said = no_grant(
        three,
        &key(),
        vec![failed(Fault::Connect), busy(5), busy(9)],
    );
    assert_eq!(busy_pttl(&said), Some(5));
    // Two down: no quorum, which time may cure...
    let said = no_grant(
        three,
        &key(),
        vec![failed(Fault::Connect), failed(Fault::Timeout), busy(9)],
    );
    let Err(failure) = said else {
        panic!("a quorum without a majority: {said:?}");
    };
    assert!(failure.is_transient());
    assert!(
        matches!(&failure, Error::NoQuorum { nodes: 3, errors, .. } if errors.len() == 2),
        "{failure:?}"
    );
    // Its code and words are exit's.
    let failure = Failure::from(failure);
    assert_eq!(failure.exit_code(75), 69);
    assert_eq!(
        failure.to_string(),
        "no quorum for lock 'jobs': 2 of 3 Redis nodes unavailable \
         (redis://n: gone; redis://n: gone); a majority must answer"
    );
    // ...unless a name does not resolve.
    let said = no_grant(
        three,
        &key(),
        vec![failed(Fault::Unresolved), failed(Fault::Timeout), busy(9)],
    );
    assert!(matches!(said, Err(f) if !f.is_transient()));
    // A key that is not a lock, on any node, is said first.
    let said = no_grant(
        three,
        &key(),
        vec![busy(5), failed(Fault::WrongType), busy(9)],
    );
    let Err(failure) = said else {
        panic!("a key that is not a lock: {said:?}");
    };
    assert!(!failure.is_transient());
    assert!(
        matches!(&failure, Error::Redis { error, .. } if error.kind == Fault::WrongType),
        "{failure:?}"
    );
    assert_eq!(Failure::from(failure).code(), Some(Code::NotALock));
}

#[test]
fn a_redlock_release_counts_a_majority() {
    use super::super::redlock::release_verdict;
    let three = Quorum::of(3);
    let code = |r: Result<Released, Error>| match r {
        Ok(_) => 0,
        Err(f) => Failure::from(f).exit_code(75),
    };
    let gone = || Ok(ReleaseReply::Expired);
    let other = || Ok(ReleaseReply::Other);
    let done = || Ok(ReleaseReply::Released);
    let down = || {
        Err(NodeError {
            kind: Fault::Timeout,
            node: "redis://n".into(),
            detail: "gone".into(),
        })
    };
    assert_eq!(
        code(release_verdict(
            three,
            &key(),
            vec![done(), done(), other()]
        )),
        0
    );
    assert_eq!(
        code(release_verdict(
            three,
            &key(),
            vec![Ok(ReleaseReply::Already), done(), down()]
        )),
        0
    );
    // Released on one master, the majority someone else's (or gone): lost, not released.
    assert_eq!(
        code(release_verdict(
            three,
            &key(),
            vec![done(), other(), other()]
        )),
        77
    );
    assert_eq!(
        code(release_verdict(three, &key(), vec![done(), gone(), gone()])),
        77
    );
    // Too few answers to tell.
    assert_eq!(
        code(release_verdict(three, &key(), vec![done(), down(), down()])),
        69
    );
    // Five masters: released on two, expired on two, one down: gone from a majority.
    let five = Quorum::of(5);
    assert_eq!(
        code(release_verdict(
            five,
            &key(),
            vec![done(), done(), gone(), gone(), down()]
        )),
        0
    );
    assert_eq!(
        code(release_verdict(
            five,
            &key(),
            vec![done(), done(), other(), other(), down()]
        )),
        69
    );
    assert_eq!(
        code(release_verdict(
            three,
            &key(),
            vec![done(), other(), down()]
        )),
        69
    );
}

/// The validity a Redlock grant carries ends where exec's timeline does: one answer to "how
/// long do I hold".
#[test]
fn validity_ends_where_the_timeline_does() {
    let ttl = Duration::from_secs(10);
    let t0 = Instant::now();
    let now = t0 + Duration::from_millis(37);
    let lease = crate::lock::Lease::new(ttl, None, None, Duration::from_secs(2)).unwrap();
    let left = validity(ttl, t0, now).unwrap();
    assert_eq!(now + left, lease.timeline(t0).ends);
}
