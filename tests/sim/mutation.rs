//! The mutation pass over the scripts (mutants.rs): each mutant runs against the kill budget,
//! a few seeds of each deployment and way of sharing, and is killed by the first broken
//! invariant (a script that fails is one: `net.rs`). In CI a fixed sample of the mutants runs,
//! and every one of it must be killed; `RLOCK_SIM_MUTANTS=all` runs every mutant and prints
//! each one's fate and the share killed (`RLOCK_SIM_MUTANTS=acquire.lua:` those whose ID
//! begins so). docs/tests.md, "The mutation pass", has the figures and the survivors.

use std::sync::Arc;

use super::mutants::{self, Mutant};
use super::scenes;
use super::*;

/// The kill budget: setups, and how many seeds of each (from 0), tried seed by seed across
/// them so that the cheap kills come first.
fn kill_budget() -> Vec<(&'static str, Setup, u64)> {
    let newest = |n| Setup {
        clients: 4,
        newest: n,
        ..Setup::new(Mode::Single, Sharing::Exclusive)
    };
    vec![
        ("one Redis", Setup::new(Mode::Single, Sharing::Exclusive), 8),
        ("--limit 2", Setup::new(Mode::Single, Sharing::Limit(2)), 6),
        ("--shared", Setup::new(Mode::Single, Sharing::Shared), 6),
        ("--newest", newest(rlock::lock::Newest::Waiters), 3),
        ("--cancel-running", newest(rlock::lock::Newest::Running), 3),
        (
            "replicas",
            Setup::new(Mode::Replicas, Sharing::Exclusive),
            3,
        ),
        ("lost data", with_lost_data(Mode::Single), 3),
        // A Redlock run costs as much as a dozen on one Redis.
        (
            "Redlock of 3",
            Setup::new(Mode::Redlock(3), Sharing::Exclusive),
            1,
        ),
    ]
}

/// Mutants that behave as the shipped scripts do, whatever the run: none can kill them.
const EQUIVALENT: &[(&str, &str)] = &[
    ("acquire.lua:161:inc:2", ABSENT_END),
    ("acquire.lua:161:dec:2", ABSENT_END),
    ("acquire.lua:172:inc:1", FIRST),
    ("acquire.lua:172:dec:1", FIRST),
    ("acquire.lua:182:inc:1", FIRST),
    ("acquire.lua:182:dec:1", FIRST),
    ("slot.lua:39:inc:1", FIRST),
    ("slot.lua:39:dec:1", FIRST),
    ("multi.lua:51:inc:1", FIRST),
    ("multi.lua:51:dec:1", FIRST),
    ("multi.lua:121:drop:0", EMPTIED),
    ("common.lua:130:inc:0", FENCE_FLOOR),
    ("common.lua:130:dec:0", FENCE_FLOOR),
    ("acquire.lua:91:drop:0", EMPTIED),
    ("release.lua:130:dec:0", SUB_FROM_0),
    ("common.lua:134:dec:0", SUB_FROM_0),
    ("slot.lua:102:dec:0", SUB_FROM_0),
    ("slot.lua:154:dec:0", SUB_FROM_0),
];

/// Why a substring from 0 is the one from 1.
const SUB_FROM_0: &str = "string.sub takes a start of 0 as 1: string.sub(s, 0, n) is \
                          string.sub(s, 1, n)";

/// Why a wider end of a ZRANGE that reads its first member (and score) changes nothing.
const FIRST: &str = "ZRANGE 0 1 or 0 -1 begins with the member (and score) ZRANGE 0 0 gives, the \
                     only one read";
/// Why the count of an absent fence counter (0, or 1 or -1) changes nothing.
const FENCE_FLOOR: &str = "a grant's fence is at least the server's time in microseconds, far \
                           above 2: max(c + 1, now_us) is now_us for c of -1, 0 or 1";
/// Why a DEL of a sorted set just found empty changes nothing.
const EMPTIED: &str = "Redis deletes a sorted set whose last member goes: a lock key whose ZCARD \
                       is 0 is already gone";
/// Why the default of a reservation's end changes nothing.
const ABSENT_END: &str = "a reservation's end is written with it (hand_off): absent, 0, 1 and -1 \
                          are all before now";

/// The last whole run's fates (`RLOCK_SIM_MUTANTS=all`, see docs/tests.md): one line per
/// mutant, `killed ID ...` or `survived ID ...`. CI's sample is drawn from those it killed.
const RECORD: &str = include_str!("mutants.txt");

/// The IDs the record says were killed.
fn recorded_killed() -> Vec<&'static str> {
    RECORD
        .lines()
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            (words.next() == Some("killed"))
                .then(|| words.next())
                .flatten()
        })
        .collect()
}

/// How many mutants CI's sample has, and the seed it is drawn with.
const CI_SAMPLE: usize = 48;
const SAMPLE_SEED: u64 = 59;

/// What became of a mutant.
enum Fate {
    Killed {
        by: &'static str,
        seed: u64,
        what: String,
    },
    Survived,
}

fn try_to_kill(mutant: &Arc<Mutant>) -> Fate {
    // First the scenes (scenes.rs): a few dozen scripts, what the runs never ask for.
    if let Some(what) = scenes::play(Some(mutant.clone())) {
        return Fate::Killed {
            by: "scenes",
            seed: 0,
            what,
        };
    }
    let budget = kill_budget();
    let most = budget.iter().map(|b| b.2).max().unwrap_or(0);
    for seed in 0..most {
        for (label, setup, seeds) in &budget {
            if seed >= *seeds {
                continue;
            }
            let setup = Setup {
                mutant: Some(mutant.clone()),
                ..setup.clone()
            };
            let outcome = run(&setup, seed);
            if let Some(what) = outcome.violation {
                return Fate::Killed {
                    by: label,
                    seed,
                    what,
                };
            }
        }
    }
    Fate::Survived
}

fn listed(table: &[(&str, &str)], id: &str) -> bool {
    table.iter().any(|(i, _)| *i == id)
}

/// A fixed draw of `n` of `from` (xorshift from `seed`), in their order.
fn sample(from: Vec<Arc<Mutant>>, n: usize, seed: u64) -> Vec<Arc<Mutant>> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut keys: Vec<(u64, Arc<Mutant>)> = from
        .into_iter()
        .map(|m| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x, m)
        })
        .collect();
    keys.sort_by_key(|k| k.0);
    keys.truncate(n);
    let mut out: Vec<Arc<Mutant>> = keys.into_iter().map(|k| k.1).collect();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

/// The sample CI runs: drawn from the mutants the last whole run killed, each of which must
/// still be killed (a change of the scripts that moves their lines calls for a new record).
#[test]
fn a_sample_of_the_scripts_mutants_is_killed() {
    let which = std::env::var("RLOCK_SIM_MUTANTS").unwrap_or_default();
    let all = mutants::all();
    let total = all.len();
    let chosen: Vec<Arc<Mutant>> = match which.as_str() {
        "" => sample(
            all.into_iter()
                .filter(|m| recorded_killed().contains(&m.id.as_str()))
                .collect(),
            CI_SAMPLE / LUA54_SHARE_OF_MUTANTS,
            SAMPLE_SEED,
        ),
        "all" => all,
        prefix => all
            .into_iter()
            .filter(|m| m.id.starts_with(prefix))
            .collect(),
    };
    let started = std::time::Instant::now();
    // On demand, first the lines of the scripts the kill budget runs at all.
    let reached = (!which.is_empty()).then(reached_by_the_budget);
    let fates = fates_of(&chosen, reached.as_ref());
    let (mut killed, mut equivalent, mut unreached, mut unexpected) = (0, 0, 0, Vec::new());
    for (m, fate) in chosen.iter().zip(&fates) {
        match fate {
            Fate::Killed { .. } => killed += 1,
            Fate::Survived => {
                equivalent += usize::from(listed(EQUIVALENT, &m.id));
                let off = reached
                    .as_ref()
                    .is_some_and(|r| !r.contains(&(m.file, m.line)));
                unreached += usize::from(off && !listed(EQUIVALENT, &m.id));
                if !listed(EQUIVALENT, &m.id) {
                    unexpected.push(m.id.clone());
                }
            }
        }
    }
    let counted = chosen.len() - equivalent;
    eprintln!(
        "mutants: {} run of {total}, {equivalent} equivalent, {killed} of {counted} others killed \
         ({:.1} %); of the survivors, {unreached} on lines the kill budget never runs; {:.1?}",
        chosen.len(),
        100.0 * killed as f64 / counted.max(1) as f64,
        started.elapsed()
    );
    if which.is_empty() {
        assert!(
            unexpected.is_empty(),
            "mutants of the scripts the record says were killed, not killed now: {unexpected:?} \
             (if the scripts changed, run the whole set again: docs/tests.md)"
        );
        assert!(
            chosen.len() == CI_SAMPLE / LUA54_SHARE_OF_MUTANTS,
            "the record (mutants.txt) names too few mutants that are still there"
        );
    }
}

/// The lines of the files that the kill budget's runs (unmutated) run.
fn reached_by_the_budget() -> std::collections::BTreeSet<(&'static str, usize)> {
    lua::COVERAGE.store(true, std::sync::atomic::Ordering::Relaxed);
    scenes::play(None);
    for (_, setup, seeds) in kill_budget() {
        for seed in 0..seeds {
            run(&setup, seed);
        }
    }
    lua::COVERAGE.store(false, std::sync::atomic::Ordering::Relaxed);
    mutants::reached()
}

/// A mutant's fate, as a line.
fn describe(
    m: &Mutant,
    fate: &Fate,
    reached: Option<&std::collections::BTreeSet<(&str, usize)>>,
) -> String {
    match fate {
        Fate::Killed { by, seed, what } => {
            let what = what.lines().next().unwrap_or_default();
            format!("killed   {} by {by} seed {seed}: {what}", m.id)
        }
        Fate::Survived => {
            let why = EQUIVALENT
                .iter()
                .find(|(i, _)| *i == m.id)
                .map(|(_, why)| format!(" ({why})"))
                .unwrap_or_default();
            let off = match reached {
                Some(r) if !r.contains(&(m.file, m.line)) => " [line never run]",
                _ => "",
            };
            format!(
                "survived {}: `{}` -> `{}`{off}{why}",
                m.id, m.before, m.after
            )
        }
    }
}

/// The Lua 5.4 build runs a third of the sample, as it explores a third of the seeds.
const LUA54_SHARE_OF_MUTANTS: usize = if cfg!(feature = "lua54") { 3 } else { 1 };

/// Each mutant's fate (each printed as it is known), over `RLOCK_SIM_JOBS` threads (one unless asked).
fn fates_of(
    chosen: &[Arc<Mutant>],
    reached: Option<&std::collections::BTreeSet<(&'static str, usize)>>,
) -> Vec<Fate> {
    let jobs: usize = std::env::var("RLOCK_SIM_JOBS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
        .max(1);
    let mut fates: Vec<Option<Fate>> = chosen.iter().map(|_| None).collect();
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..jobs)
            .map(|j| {
                s.spawn(move || {
                    chosen
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| i % jobs == j)
                        .map(|(i, m)| {
                            let fate = try_to_kill(m);
                            eprintln!("{}", describe(m, &fate, reached));
                            (i, fate)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        for h in handles {
            for (i, fate) in h.join().expect("a mutant's runs") {
                fates[i] = Some(fate);
            }
        }
    });
    fates.into_iter().map(|f| f.expect("every fate")).collect()
}

/// The tables name mutants that exist, and the generator makes the same ones every time.
#[test]
fn the_mutants_are_stable_and_the_tables_name_them() {
    let (a, b) = (mutants::all(), mutants::all());
    let ids: Vec<&str> = a.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, b.iter().map(|m| m.id.as_str()).collect::<Vec<_>>());
    let mut unique = ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), ids.len(), "two mutants with one ID");
    for (id, why) in EQUIVALENT {
        assert!(ids.contains(id), "{id} is no mutant ({why})");
    }
    for op in ["cmp", "and", "or", "drop", "inc", "dec"] {
        assert!(
            ids.iter().any(|i| i.contains(&format!(":{op}:"))),
            "no {op}"
        );
    }
}

/// Every file mutated is in a script the clients send: a mutant of each changes what runs.
#[test]
fn every_file_mutated_is_sent() {
    let all = mutants::all();
    for (file, _) in mutants::FILES {
        let first = all
            .iter()
            .find(|m| m.id.starts_with(&format!("{file}:")))
            .expect("a mutant of every file");
        for sharing in [Sharing::Exclusive, Sharing::Limit(2)] {
            let setup = Setup {
                mutant: Some(first.clone()),
                ..Setup::new(Mode::Single, sharing)
            };
            run(&setup, 0);
        }
        assert!(first.applied() > 0, "{file} is in no script sent");
    }
}
