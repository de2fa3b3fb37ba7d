//! The simulation's CI budget, its planted bugs and its regression seeds.
//!
//! `cargo test` explores a fixed budget of seeds per mode (`CI_SEEDS`); a longer exploration is
//! `RLOCK_SIM_SEEDS=N cargo test --locked -p rlock-sim` (see docs/tests.md), and
//! `RLOCK_SIM_FIRST=S` starts it at seed S. A failing seed prints its trace; pin it in
//! `REGRESSIONS` below once it is understood and fixed.

use super::*;

/// Seeds per mode in a CI run: one Redis (and a master with its replica) is cheap to run;
/// a Redlock renews on every master, and on a master that misses the lock every TTL/60.
const CI_SEEDS: u64 = 150;
const CI_SEEDS_REDLOCK: u64 = 80;
const CI_SEEDS_REDLOCK_OF_FIVE: u64 = 50;
/// The runs that lose data, and those that time restarts inside Redlock's restart rule's
/// window, repeat a mode explored above with more faults: fewer seeds.
const CI_SEEDS_LOST_DATA: u64 = 100;
/// Fewer still inside the window: there the waiters' minority grants, given back, wake every
/// Redlock waiter again and again (each give-back publishes), a storm of tries at round-trip
/// speed that costs the simulation ten times the steps of a run without it (docs/tests.md).
const CI_SEEDS_IN_THE_WINDOW: u64 = 12;

/// The Lua 5.4 build explores a third of each mode's seeds: it is there to show that the
/// scripts answer alike in 5.4 (`answers.rs` compares the runs themselves), and the protocol's
/// races are the 5.1 build's to look for. (The planted bugs are looked for as far as in 5.1.)
const LUA54_SHARE: u64 = if cfg!(feature = "lua54") { 3 } else { 1 };

/// How many seeds, from which: `ci` unless the environment asks for more.
fn budget(ci: u64) -> std::ops::Range<u64> {
    let first = std::env::var("RLOCK_SIM_FIRST")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let n = std::env::var("RLOCK_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(ci);
    first..first + n
}

/// Explores `setup` over the budget: every invariant must hold.
pub(super) fn holds(setup: Setup) {
    let ci = match setup.mode {
        Mode::Redlock(3) => CI_SEEDS_REDLOCK,
        Mode::Redlock(_) => CI_SEEDS_REDLOCK_OF_FIVE,
        _ => CI_SEEDS,
    };
    holds_within(setup, ci);
}

/// As `holds`, over `ci` seeds in CI.
pub(super) fn holds_within(setup: Setup, ci: u64) {
    let ci = ci / LUA54_SHARE;
    let started = std::time::Instant::now();
    let seeds = budget(ci);
    match explore(&setup, seeds.clone()) {
        Ok(c) => eprintln!(
            "{:?} {:?}: {} seeds, {} grants, {} steps, {} s simulated, no violation ({:.1?})",
            setup.mode,
            setup.sharing,
            c.runs,
            c.grants,
            c.steps,
            c.simulated / 1_000_000,
            started.elapsed()
        ),
        Err(outcome) => panic!("{:?} {:?}, {}", setup.mode, setup.sharing, outcome.report()),
    }
}

/// Explores `setup` until a seed breaks an invariant, which must happen within the budget.
pub(super) fn found(setup: Setup) -> Box<Outcome> {
    let seeds = budget(CI_SEEDS);
    match explore(&setup, seeds.clone()) {
        Ok(c) => panic!(
            "{:?} with {:?}: no violation in {} seeds ({} grants)",
            setup.mode, setup.bug, c.runs, c.grants
        ),
        Err(outcome) => {
            eprintln!("found at {}", outcome.report());
            outcome
        }
    }
}

/// As `found`, and the violation found is `what`.
pub(super) fn finds(setup: Setup, what: &str) {
    let outcome = found(setup);
    let v = outcome.violation.as_deref().unwrap_or_default();
    assert!(v.contains(what), "not {what:?}: {}", outcome.report());
}

#[test]
fn one_redis_holds_every_invariant() {
    holds(Setup::new(Mode::Single, Sharing::Exclusive));
}

/// Newest wins: waiters displace each other, the displaced never hold, the line goes on.
#[test]
fn one_redis_newest_wins_holds_every_invariant() {
    holds(Setup {
        clients: 4,
        newest: rlock::lock::Newest::Waiters,
        ..Setup::new(Mode::Single, Sharing::Exclusive)
    });
}

/// And holders asked to stop for a newer client (`--cancel-running`): a holder so asked stops
/// renewing, and the lock goes on to the next only once its lease or its command has ended.
#[test]
fn one_redis_newest_cancelling_holders_holds_every_invariant() {
    holds(Setup {
        clients: 4,
        newest: rlock::lock::Newest::Running,
        ..Setup::new(Mode::Single, Sharing::Exclusive)
    });
}

#[test]
fn one_redis_semaphore_holds_every_invariant() {
    holds(Setup::new(Mode::Single, Sharing::Limit(2)));
}

#[test]
fn one_redis_shared_beside_exclusive_holds_every_invariant() {
    holds(Setup::new(Mode::Single, Sharing::Shared));
}

#[test]
fn redlock_of_three_holds_every_invariant() {
    holds(Setup::new(Mode::Redlock(3), Sharing::Exclusive));
}

#[test]
fn redlock_of_five_holds_every_invariant() {
    holds(Setup::new(Mode::Redlock(5), Sharing::Exclusive));
}

#[test]
fn replicas_with_wait_hold_every_invariant_across_a_failover() {
    holds(Setup::new(Mode::Replicas, Sharing::Exclusive));
}

/// The clients wait with the library's own waiter, woken through their subscriptions: a release
/// hands the lock to the waiter first in line with "go" on its channel, which its subscriber
/// reads, and the waiter then holds the lock.
#[test]
fn a_waiter_is_handed_the_lock_through_its_subscription() {
    let setup = Setup {
        clients: 2,
        rounds: 2,
        model: model::Model::default(),
        ..Setup::new(Mode::Single, Sharing::Exclusive)
    };
    let handed = (0..10)
        .filter(|&seed| {
            let outcome = run(&setup, seed);
            assert!(outcome.violation.is_none(), "{}", outcome.report());
            let lines = &outcome.trace;
            lines.iter().enumerate().any(|(i, line)| {
                let Some((who, _)) = line.split_once(" hears \"go\"") else {
                    return false;
                };
                let c = who.rsplit(' ').next().unwrap_or_default();
                // Its next try follows at once, granted.
                lines[i..]
                    .iter()
                    .take(15)
                    .any(|l| l.contains(&format!("{c} HOLDS")))
            })
        })
        .count();
    assert!(
        handed > 0,
        "no waiter was handed the lock through its subscription"
    );
}

#[test]
fn two_names_of_one_server_are_refused() {
    let setup = Setup::new(Mode::TwoNamesOneServer, Sharing::Exclusive);
    let mut refused = 0;
    for seed in 0..10 {
        let outcome = run(&setup, seed);
        assert!(outcome.violation.is_none(), "{}", outcome.report());
        refused += usize::from(
            outcome
                .trace
                .iter()
                .any(|l| l.contains("are the same Redis server")),
        );
    }
    assert!(refused > 0, "no run was refused");
}

#[test]
fn redlock_of_three_survives_empty_restarts_one_at_a_time() {
    holds(with_empty_restarts(Mode::Redlock(3)));
}

#[test]
fn redlock_of_five_survives_empty_restarts_one_at_a_time() {
    holds(with_empty_restarts(Mode::Redlock(5)));
}

/// One Redis that loses data (restarted empty, FLUSHALL, its `:state` deleted): two holders at
/// once are documented, but every grant's fence rises above every hold that ended before it.
#[test]
fn one_redis_fence_survives_lost_data() {
    holds_within(with_lost_data(Mode::Single), CI_SEEDS_LOST_DATA);
}

/// A failover to a replica that missed writes (without --replicas), with the master's data
/// lost as on one Redis: the fence still rises.
#[test]
fn a_failovers_fence_survives_lost_writes() {
    holds_within(with_lost_data(Mode::Unreplicated), CI_SEEDS_LOST_DATA);
}

/// A master with its replica, every grant acknowledged by it (--replicas), the master's data
/// lost (restarted empty, FLUSHALL, its `:state` deleted) beside the failover: the fence rises.
#[test]
fn replicas_fence_survives_lost_data() {
    holds_within(with_lost_data(Mode::Replicas), CI_SEEDS_LOST_DATA);
}

/// Redlock's restart rule, exercised: grants that miss a master, and a master they reached
/// restarted empty inside the rule's window.
#[test]
fn redlock_of_three_survives_empty_restarts_inside_the_restart_rule_s_window() {
    holds_within(
        with_restarts_in_the_window(Mode::Redlock(3)),
        CI_SEEDS_IN_THE_WINDOW,
    );
}

/// `--hold-at-least` and `--once-per`: no grant inside another's hold, no window run again once
/// marked done, beside every other invariant.
#[test]
fn one_redis_with_holds_and_windows_holds_every_invariant() {
    holds(with_terms(Mode::Single));
}

/// `--once-per` over a master and its replica (--replicas: a mark reaches the replica before it
/// is answered), across a failover: no window acknowledged done is run again.
#[test]
fn replicas_with_windows_hold_every_invariant() {
    holds(Setup {
        hold_at_least: false,
        ..with_terms(Mode::Replicas)
    });
}

// Outside the fault model (docs/safety.md): the simulation shows each unsafe, with its seed.

/// A Redlock holder whose grant missed one master, that master's neighbour restarted empty, and
/// the next process unable to reach the third: nobody answers "held", and the restarted master's
/// vote counts.
#[test]
fn outside_redlock_an_empty_restart_beside_unreachable_holders_makes_two_holders() {
    let mut setup = Setup::new(Mode::Redlock(3), Sharing::Exclusive);
    setup.model.empty_restarts = 3;
    // Seed 44 was found with one TTL for every client.
    setup.mixed_ttls = false;
    // Found by exploring: the holder c0's lock is missing from 7002, 7001 restarts empty, and
    // c1's INFO to 7000, the one master left with c0's lock, times out; the two that grant have
    // both run for less than a TTL, but nobody answered "held".
    let outcome = run(&setup, 44);
    let v = outcome.violation.as_deref().unwrap_or_default();
    assert!(v.starts_with("two holders"), "{}", outcome.report());
}

/// One Redis restarted empty forgets the lock.
#[test]
fn outside_one_redis_restarted_empty_makes_two_holders() {
    let mut setup = Setup::new(Mode::Single, Sharing::Exclusive);
    setup.model.empty_restarts = 3;
    finds(setup, "two holders");
}

/// A failover to a replica that missed the grant, without --replicas.
#[test]
fn outside_a_failover_without_replicas_makes_two_holders() {
    finds(
        Setup::new(Mode::Unreplicated, Sharing::Exclusive),
        "two holders",
    );
}

// Planted bugs: each must be found within the CI budget.

/// Replaces `from` with `to` in the script `name`, which must contain it (so that a change of
/// the script that moves the line fails here, not silently).
pub(super) fn replace(call: &mut server::Call, name: &str, from: &str, to: &str) {
    if call.name == name {
        assert!(call.source.contains(from), "{name} no longer has {from:?}");
        call.source = call.source.replacen(from, to, 1);
        call.sha = sha1_smol::Sha1::from(call.source.as_bytes())
            .digest()
            .to_string();
    }
}

#[test]
fn planted_a_release_without_the_owner_check_is_found() {
    fn plant(call: &mut server::Call) {
        replace(
            call,
            "release",
            "local current = redis.call(\"GET\", lock)\nif current == token then",
            "local current = redis.call(\"GET\", lock)\nif current then",
        );
    }
    finds(
        Setup {
            script_bug: Some(plant),
            // (replies.rs finds it first, from the script's reply.)
            replies: false,
            ..Setup::new(Mode::Single, Sharing::Exclusive)
        },
        "two holders",
    );
}

#[test]
fn planted_a_renewal_without_the_token_check_is_found() {
    fn plant(call: &mut server::Call) {
        replace(
            call,
            "renew",
            "local current = redis.call(\"GET\", lock)\nif current ~= token then",
            "local current = redis.call(\"GET\", lock)\nif not current then",
        );
    }
    finds(
        Setup {
            script_bug: Some(plant),
            // (replies.rs finds it first, from the script's reply.)
            replies: false,
            ..Setup::new(Mode::Single, Sharing::Exclusive)
        },
        "renewed a lock deleted behind its back",
    );
}

#[test]
fn planted_a_deadline_without_the_drift_allowance_is_found() {
    finds(
        Setup {
            bug: Some(Bug::NoDrift),
            ..Setup::new(Mode::Single, Sharing::Exclusive)
        },
        "two holders",
    );
}

#[test]
fn planted_a_give_back_without_its_try_number_is_found() {
    fn plant(call: &mut server::Call) {
        if call.name == "leave" {
            let at = call
                .args
                .iter()
                .position(|a| a == "upto")
                .expect("leave sends upto");
            call.args.drain(at..at + 2);
        }
    }
    finds(
        Setup {
            script_bug: Some(plant),
            ..Setup::new(Mode::Single, Sharing::Exclusive)
        },
        "two holders",
    );
}

#[test]
fn planted_a_redlock_count_that_counts_one_server_twice_is_found() {
    finds(
        Setup {
            bug: Some(Bug::CountTwice),
            ..Setup::new(Mode::TwoNamesOneServer, Sharing::Exclusive)
        },
        "two holders",
    );
}

/// Seeds that once broke an invariant, each with what it found; every one must hold now.
const REGRESSIONS: &[(Mode, Sharing, u64, &str)] = &[
    // A semaphore slot granted by a try whose reply was lost, confirmed by a later try after
    // another holder had come and gone with a higher fence: the confirmation told the old,
    // lower fence. slot.lua now mints a new one when the key's counter has moved past it.
    (Mode::Single, Sharing::Limit(2), 1212, "the fence went back"),
    // The lock deleted behind rlock's back between the grant and its reply: the checker now
    // knows a deletion breaks the grant the key held, whether or not its client has heard of
    // it yet (no fault of rlock's: a forced break lets the next holder in by design).
    (Mode::Single, Sharing::Exclusive, 1249, "two holders"),
    // The same, the grant's client learning of it only after another was granted.
    (Mode::Single, Sharing::Exclusive, 5510, "two holders"),
];

#[test]
fn regressions_hold() {
    for &(mode, sharing, seed, found) in REGRESSIONS {
        let outcome = run(&Setup::new(mode, sharing), seed);
        assert!(
            outcome.violation.is_none(),
            "{mode:?} {sharing:?} seed {seed} (once: {found}): {}",
            outcome.report()
        );
        assert!(outcome.grants > 0, "seed {seed} granted nothing");
    }
}

/// docs/safety.md's fault model names its tests: each is one of these, and every test of a
/// mode's invariants or of a fault outside the model is named there.
#[test]
fn the_fault_model_in_the_docs_names_these_tests() {
    let docs = include_str!("../../docs/safety.md");
    let section = docs
        .split("## The fault model")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("docs/safety.md has a fault model");
    let here = include_str!("tests.rs");
    let named: Vec<&str> = section
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|w| {
            w.contains("every_invariant")
                || w.starts_with("outside_")
                || w.contains("survives_")
                || w.ends_with("_refused")
        })
        .collect();
    for name in &named {
        assert!(
            here.contains(&format!("fn {name}(")),
            "docs/safety.md names {name}, which is no test here"
        );
    }
    for line in here.lines() {
        if let Some(name) = line.strip_prefix("fn ").and_then(|l| l.split('(').next())
            && (name.contains("every_invariant")
                || name.starts_with("outside_")
                || name.contains("survives_"))
        {
            assert!(
                named.contains(&name),
                "docs/safety.md's fault model does not name {name}"
            );
        }
    }
}

/// One seed is one run: the same events in the same order, whatever the machine's threads do
/// (a Redlock fans out to a thread per master).
#[test]
fn a_seed_replays_exactly() {
    for setup in [
        Setup::new(Mode::Single, Sharing::Exclusive),
        Setup::new(Mode::Redlock(3), Sharing::Exclusive),
    ] {
        let (a, b) = (run(&setup, 7), run(&setup, 7));
        assert!(a.grants > 0, "{}", a.report());
        assert_eq!(
            (a.steps, a.simulated, a.grants),
            (b.steps, b.simulated, b.grants)
        );
        assert_eq!(a.trace, b.trace);
    }
}

/// A script that leans on Lua 5.1 (one kind of number: a whole float is an integer to it)
/// answers otherwise in Lua 5.4, and the simulation's run shows it: the 5.4 build is what finds
/// such a script, for the 5.1 build cannot.
#[test]
fn a_script_that_leans_on_lua_5_1_answers_otherwise_in_lua_5_4() {
    fn plant(call: &mut server::Call) {
        replace(
            call,
            "acquire",
            "KEEP_MS)\nreturn reply(\"ok\", \"fence\", fence, \"ttl\", ttl)",
            "KEEP_MS)\nreturn reply(\"ok\", \"fence\", fence, \"ttl\", ttl / 1)",
        );
    }
    let setup = Setup::new(Mode::Single, Sharing::Exclusive);
    let leaning = Setup {
        script_bug: Some(plant),
        ..setup.clone()
    };
    let (a, b) = (run(&setup, 0), run(&leaning, 0));
    assert!(a.grants > 0, "{}", a.report());
    let alike = (a.steps, &a.trace) == (b.steps, &b.trace);
    assert_eq!(
        alike,
        cfg!(feature = "lua51"),
        "in Lua {}, the script that divides its TTL answers {}:\n{}",
        if cfg!(feature = "lua51") {
            "5.1"
        } else {
            "5.4"
        },
        if alike { "alike" } else { "otherwise" },
        b.report()
    );
}

/// The scripts give the same answers whether the host hands them status replies wrapped
/// (`{ok = word}`, Redis's Lua 5.1) or as the plain word with `table.unpack` only (as Lua 5.4
/// hosts with 5.1 shims do): the same seed makes the same run, reply for reply.
#[test]
fn the_scripts_answer_alike_on_a_host_with_plain_status_replies() {
    for setup in [
        Setup::new(Mode::Single, Sharing::Exclusive),
        Setup::new(Mode::Single, Sharing::Limit(2)),
        Setup::new(Mode::Single, Sharing::Shared),
        Setup::new(Mode::Redlock(3), Sharing::Exclusive),
    ] {
        let plain = Setup {
            host: lua::Host::Plain,
            ..setup.clone()
        };
        for seed in 0..4 {
            let (a, b) = (run(&setup, seed), run(&plain, seed));
            assert!(b.violation.is_none(), "{}", b.report());
            assert!(a.grants > 0, "{}", a.report());
            let differ = a.trace.iter().zip(&b.trace).find(|(x, y)| x != y);
            assert!(
                (a.steps, a.grants, &a.trace) == (b.steps, b.grants, &b.trace),
                "{:?} {:?} seed {seed}: the runs differ, first at {differ:?}",
                setup.mode,
                setup.sharing
            );
        }
    }
}
