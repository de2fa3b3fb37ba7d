//! The liveness invariants (`live.rs`) and the fences across lost data, each shown catching a
//! bug of its kind, planted in the shipped code (src/lock/planted.rs) or the shipped scripts (on
//! their way to the servers), within the CI budget. Each asserts which invariant found it: a
//! bug found by another invariant, or only by a test's own set-up, does not count.

use super::tests::{finds, replace};
use super::*;

/// A try whose reply was lost is left to sit out its TTL: the give-back (leave.lua) is never
/// sent. Nobody holds two at once; only the liveness invariant sees it.
#[test]
fn planted_a_try_whose_reply_was_lost_never_given_back_is_found() {
    finds(
        Setup {
            bug: Some(Bug::NoGiveBack),
            ..Setup::new(Mode::Single, Sharing::Exclusive)
        },
        "a grant nobody saw was not given back",
    );
}

/// A release that deletes the waiters' line with the lock: they wait out the lock's TTL instead
/// of being handed it (fewer grants, no two holders).
#[test]
fn planted_a_release_that_drops_the_line_is_found() {
    fn plant(call: &mut server::Call) {
        replace(
            call,
            "release",
            "    redis.call(\"DEL\", lock)\n    redis.call(\"HSET\", state, \"released\", now)\n",
            "    redis.call(\"DEL\", lock, queue)\n    redis.call(\"HSET\", state, \"released\", now)\n",
        );
    }
    finds(
        Setup {
            script_bug: Some(plant),
            ..Setup::new(Mode::Single, Sharing::Exclusive)
        },
        "the line did not survive a release",
    );
}

/// Renewals due only after the lease has ended: every holder that holds longer than a lease
/// loses it, fault or none.
#[test]
fn planted_a_renewal_interval_above_the_lease_is_found() {
    finds(
        Setup {
            bug: Some(Bug::SlowRenewal),
            ..Setup::new(Mode::Single, Sharing::Exclusive)
        },
        "a holder lost its lease to no fault",
    );
}

/// A fence minted from the counter alone, without the server's clock as its floor: it starts
/// again from 1 once the counter is lost (an empty restart, FLUSHALL, a lost `:state`).
#[test]
fn planted_a_fence_from_the_counter_alone_on_one_redis_is_found() {
    fn plant(call: &mut server::Call) {
        replace(
            call,
            "acquire",
            "fence = math.max(fence + 1, now_us)\nlocal record",
            "fence = fence + 1\nlocal record",
        );
    }
    finds(
        Setup {
            script_bug: Some(plant),
            ..with_lost_data(Mode::Single)
        },
        "the fence went back",
    );
}

/// Redlock without its restart rule: a master restarted empty under a holder whose grant
/// missed another master votes with that one for a second holder.
#[test]
fn planted_redlock_without_the_restart_rule_is_found() {
    finds(
        Setup {
            bug: Some(Bug::NoRestartRule),
            ..with_restarts_in_the_window(Mode::Redlock(3))
        },
        "two holders",
    );
}

/// A try granted past the head of the line (acquire.lua without its look at the line): a waiter
/// overtaken where the docs promise none is.
#[test]
fn planted_a_grant_past_the_head_of_the_line_is_found() {
    fn plant(call: &mut server::Call) {
        replace(
            call,
            "acquire",
            "if head and head ~= token then",
            "if false then",
        );
    }
    finds(
        Setup {
            script_bug: Some(plant),
            ..Setup::new(Mode::Single, Sharing::Exclusive)
        },
        "out of line",
    );
}

/// A lock written without expiry: one whose release was lost stays after every lease could
/// have ended.
#[test]
fn planted_a_lock_without_expiry_is_found_left_behind() {
    fn plant(call: &mut server::Call) {
        replace(
            call,
            "acquire",
            "redis.call(\"SET\", lock, token, \"PX\", math.max(ttl, hold))",
            "redis.call(\"SET\", lock, token)",
        );
    }
    finds(
        Setup {
            script_bug: Some(plant),
            // (replies.rs finds it first, from the script's reply.)
            replies: false,
            ..Setup::new(Mode::Single, Sharing::Exclusive)
        },
        "every lease could have ended",
    );
}

/// SIGKILL's moment counted back from the TTL without the drift allowance
/// (`Lease::timeline`'s `kill_at`, the moment the supervisor and the guardian both count down
/// to): the command outlives the key on a client whose clock runs slow.
#[test]
fn planted_a_kill_moment_without_the_drift_allowance_is_found() {
    finds(
        Setup {
            bug: Some(Bug::KillWithoutDrift),
            ..Setup::new(Mode::Single, Sharing::Exclusive)
        },
        "two holders",
    );
}

/// A renewal thread that never hears its stop: its rlock, which waits for it once the command
/// has ended, never ends, and renews the lock for ever. No two holders, no lost lease: only
/// "every client ends" sees it.
#[test]
fn planted_renewals_that_never_stop_are_found() {
    finds(
        Setup {
            bug: Some(Bug::DeafRenewals),
            ..Setup::new(Mode::Single, Sharing::Exclusive)
        },
        "a client never ended",
    );
}

/// A release that forgets `--hold-at-least` (release.lua deletes the lock before the hold
/// ends): the next waiter is granted inside the hold.
#[test]
fn planted_a_release_that_cuts_a_hold_short_is_found() {
    fn plant(call: &mut server::Call) {
        replace(
            call,
            "release",
            "if hold_until and hold_until > now then",
            "if false then",
        );
    }
    finds(
        Setup {
            script_bug: Some(plant),
            ..with_terms(Mode::Single)
        },
        "a hold was cut short",
    );
}

/// A window mark that writes nothing (once.lua): every run of a window does its work again.
#[test]
fn planted_a_window_mark_that_writes_nothing_is_found() {
    fn plant(call: &mut server::Call) {
        replace(
            call,
            "once",
            "if not done or tonumber(done) < tonumber(a.window) then",
            "if false then",
        );
    }
    finds(
        Setup {
            script_bug: Some(plant),
            ..with_terms(Mode::Single)
        },
        "a window done was run again",
    );
}

/// The waiter (src/lock/wait.rs, which every simulated client runs) ignores its `-w` deadline:
/// a wait that should have given up busy goes on until it is granted, long after.
#[test]
fn planted_a_waiter_that_ignores_its_deadline_is_found() {
    finds(
        Setup {
            bug: Some(Bug::NoDeadline),
            ..Setup::new(Mode::Single, Sharing::Exclusive)
        },
        "a wait ran past its deadline",
    );
}
