//! A deterministic simulation of rlock's lock protocol, with its real scripts and its own
//! client code (see docs/tests.md, "The simulation", and docs/safety.md, "The fault model").
//!
//! One seed is one run: a few clients taking, renewing and releasing one lock on one Redis, a
//! Redlock of three or five masters, or a master with a replica (`--replicas`), while the seed's
//! faults happen: messages delayed, lost and duplicated, links cut and slowed, servers frozen,
//! crashed and restarted (with their data or empty), a failover, clients paused, clocks that
//! run at slightly different rates. Every script is the text build.rs sends, run in Lua 5.1
//! against a model of the Redis commands it calls; every decision of the client side (the
//! try, its give-back, the Redlock vote and validity, the renewal schedule, the lease's
//! timeline and the supervisor's deadlines over it, `--once-per`'s window record) is the
//! library's own code, run on simulated time (`rlock::clock`). The invariants (`check.rs`,
//! liveness in `live.rs`, those of `--hold-at-least` and `--once-per` in `terms.rs`) are
//! checked at every grant, after every script and once the run is over; the first broken one ends the run with its seed and the events that
//! led to it.
//!
//! The test target `sim` of the crate rlock-sim (this folder): it drives the library through its
//! public API and the seams of `rlock::lock::seams` (the feature `sim-seams`: one try at a time,
//! planted bugs), and runs the scripts in Lua 5.1 or, with the feature `lua54`, Lua 5.4.

#[cfg(all(feature = "lua51", feature = "lua54"))]
compile_error!("one Lua per build: the feature lua51 (the default) or lua54, not both");

mod check;
mod client;
mod faults;
mod holder;
mod live;
mod lua;
mod model;
mod mutants;
mod net;
mod replies;
mod seams;
mod server;
mod store;
mod terms;
mod wake;
mod world;

#[cfg(test)]
mod answers;
#[cfg(test)]
mod mutation;
#[cfg(test)]
mod planted;
#[cfg(test)]
mod scenes;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rlock::backend::Node;
use rlock::lock::seams::Bug;
use rlock::lock::{Locker, Sharing};

use check::{Allows, Checker};
use model::Model;
use seams::{SimClock, SimNode, spawn};
use server::Server;
use world::{Sim, Weather, World};

/// True time, in microseconds since the simulation began.
pub type Micros = u64;

/// The deployment a run simulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// One Redis.
    Single,
    /// A Redlock of N independent masters.
    Redlock(usize),
    /// One master with one replica, every grant and renewal acknowledged by it (WAIT).
    Replicas,
    /// A master with a replica, failed over, without `--replicas`: outside the model.
    Unreplicated,
    /// A Redlock of three names of which two are one server: refused (78), or, with the planted
    /// bug, counted twice.
    TwoNamesOneServer,
}

/// What a run is made of.
#[derive(Debug, Clone)]
pub struct Setup {
    pub mode: Mode,
    pub sharing: Sharing,
    /// Clients of the run, and whether each of them takes the lock shared (for a mix).
    pub clients: usize,
    pub mixed: bool,
    pub rounds: u32,
    pub model: Model,
    pub weather: Weather,
    /// Clock rates differ from true time by up to this much (0.004: 0.4 %).
    pub rate_error: f64,
    /// A bug planted in the client's code.
    pub bug: Option<Bug>,
    /// A bug planted in the scripts (their text on the way to the servers).
    pub script_bug: Option<fn(&mut server::Call)>,
    /// A mutant of the scripts (mutants.rs), applied as the planted script bugs are.
    pub mutant: Option<Arc<mutants::Mutant>>,
    /// Every script's reply is checked against the data (replies.rs); off only where a planted
    /// test shows another invariant finding a bug those checks would find first.
    pub replies: bool,
    /// How the servers' Lua hands replies to the scripts.
    pub host: lua::Host,
    /// Each client after the first asks for its own TTL, one to two times the run's: holders of
    /// one key with different TTLs (Redlock's restart rule counts the holder's lease).
    pub mixed_ttls: bool,
    /// Every client asks for newest wins (`--newest`): a waiter that joins displaces the others.
    pub newest: rlock::lock::Newest,
    /// Data may be lost within the model: two holders at once are then its documented outcome,
    /// and only the fence is checked across it (`Checker::lossy`).
    pub lossy: bool,
    /// Every client asks for `--hold-at-least` (a hold of half its TTL to twice it).
    pub hold_at_least: bool,
    /// Every client runs `--once-per` (windows of two to six TTLs).
    pub once_per: bool,
}

/// How a run ended.
#[derive(Debug)]
pub struct Outcome {
    pub seed: u64,
    pub violation: Option<String>,
    /// The last events before the end (all of a short run).
    pub trace: Vec<String>,
    pub grants: usize,
    /// Events handled (messages, timers, faults).
    pub steps: u64,
    /// How much true time the run simulated.
    pub simulated: Micros,
}

impl Outcome {
    /// The seed, the broken invariant and the trace, for a failure message.
    pub fn report(&self) -> String {
        format!(
            "seed {}: {}\n{}",
            self.seed,
            self.violation.as_deref().unwrap_or("no violation"),
            self.trace.join("\n")
        )
    }
}

/// The fault model each mode is proven safe in (docs/safety.md, "The fault model").
pub fn model_of(mode: Mode) -> Model {
    let common = Model {
        freezes: true,
        restarts: true,
        partitions: true,
        slow_links: true,
        pauses: true,
        ..Model::default()
    };
    match mode {
        Mode::Single => Model {
            deletes: true,
            ..common
        },
        Mode::Redlock(_) => common,
        // Refused whatever happens; with the count that counts it twice, a server that
        // forgets takes two votes with it.
        Mode::TwoNamesOneServer => Model {
            empty_restarts: 3,
            ..common
        },
        Mode::Replicas | Mode::Unreplicated => Model {
            failovers: true,
            deletes: true,
            ..common
        },
    }
}

/// Redlock's other fault model: masters restarted empty one at a time (never two within three
/// TTLs), while every master the holder's grant reached stays reachable (no frozen or cut
/// master, no lost message, no delay near the timeout); clients may pause.
pub fn with_empty_restarts(mode: Mode) -> Setup {
    Setup {
        model: Model {
            empty_restarts: 3,
            pauses: true,
            ..Model::default()
        },
        weather: Weather {
            spike: 0,
            spike_chance: 0.0,
            loss: 0.0,
            ..weather()
        },
        ..Setup::new(mode, Sharing::Exclusive)
    }
}

/// Lost data within the one-Redis or replica model (`mode`): restarts empty (one at a time),
/// FLUSHALL and a lost `:state` beside the mode's own faults (a failover that loses writes, for
/// `Mode::Unreplicated`). Two holders at once are then the documented outcome (docs/safety.md);
/// the fence must still rise across every grant.
pub fn with_lost_data(mode: Mode) -> Setup {
    let base = Setup::new(mode, Sharing::Exclusive);
    Setup {
        model: Model {
            empty_restarts: 3,
            flushes: true,
            lost_state: true,
            ..base.model
        },
        lossy: true,
        ..base
    }
}

/// Redlock's restart rule on purpose: client 0 never reaches the last master, so its grants
/// miss it, and a master its grant reached restarts empty within a quarter TTL of the grant
/// (one restart every three TTLs at most): without the rule, a try in that window wins the
/// votes of the restarted master and of the one the grant missed.
pub fn with_restarts_in_the_window(mode: Mode) -> Setup {
    let mut setup = with_empty_restarts(mode);
    setup.model.empty_restarts = 0;
    setup.model.missed_master = true;
    setup.model.restarts_in_window = true;
    setup
}

/// `--hold-at-least` and `--once-per` (`terms.rs`), every client asking for both, in `mode`'s
/// fault model but for locks deleted behind their holders' backs (a forced break ends a hold by
/// design).
pub fn with_terms(mode: Mode) -> Setup {
    let base = Setup::new(mode, Sharing::Exclusive);
    Setup {
        model: Model {
            deletes: false,
            ..base.model
        },
        hold_at_least: true,
        once_per: true,
        ..base
    }
}

/// The weather of every run: sub-millisecond delays, now and then a spike, some loss.
pub fn weather() -> Weather {
    Weather {
        base: (50, 800),
        spike: 150_000,
        spike_chance: 0.02,
        loss: 0.01,
        duplicate: 0.005,
        replication: (100, 5_000),
    }
}

impl Setup {
    pub fn new(mode: Mode, sharing: Sharing) -> Self {
        Setup {
            mode,
            sharing,
            clients: 3,
            mixed: sharing == Sharing::Shared,
            rounds: 4,
            model: model_of(mode),
            weather: weather(),
            rate_error: 0.004,
            bug: None,
            script_bug: None,
            mutant: None,
            replies: true,
            host: lua::Host::Redis,
            mixed_ttls: matches!(mode, Mode::Redlock(_)),
            newest: rlock::lock::Newest::Off,
            lossy: false,
            hold_at_least: false,
            once_per: false,
        }
    }
}

/// Runs seed `seed` of `setup`.
pub fn run(setup: &Setup, seed: u64) -> Outcome {
    let allows = match setup.sharing {
        Sharing::Exclusive => Allows::One,
        Sharing::Limit(n) => Allows::Up(n as usize),
        Sharing::Shared => Allows::Readers,
    };
    let single = !matches!(setup.mode, Mode::Redlock(_) | Mode::TwoNamesOneServer);
    let mut check = Checker::new(allows, single && allows == Allows::One);
    check.lossy = setup.lossy;
    let mut world = World::new(seed, setup.weather, check);
    world.script_plant = setup.script_bug;
    world.mutant = setup.mutant.clone();
    world.replies = setup.replies;
    let e = setup.rate_error;
    // The servers, their wall clocks apart by up to a second, their rates within the bound.
    let (servers, names): (usize, usize) = match setup.mode {
        Mode::Single => (1, 1),
        Mode::Redlock(n) => (n, n),
        Mode::Replicas | Mode::Unreplicated => (2, 1),
        Mode::TwoNamesOneServer => (2, 3),
    };
    for s in 0..servers {
        let offset = world.rng.range(0, 1_000_000) as i64;
        let rate = world.rng.real(1.0 - e, 1.0 + e);
        let run_id = world.rng.next();
        world.servers.push(Server::new(
            format!("redis://127.0.0.1:{}", 7000 + s),
            1_780_000_000_000_000 + offset,
            rate,
            run_id,
        ));
    }
    for server in &mut world.servers {
        server.host = setup.host;
        server.scripting = lua::Scripting::on(setup.host);
    }
    match setup.mode {
        Mode::Replicas | Mode::Unreplicated => {
            // The replica: the master's clock (replication carries absolute expiry times).
            world.servers[1].epoch_us = world.servers[0].epoch_us;
            world.servers[1].rate = world.servers[0].rate;
            world.servers[1].master = Some(0);
            world.servers[0].replicas.push(1);
            world.nodes = vec![0];
            world.replicas = u32::from(setup.mode == Mode::Replicas);
        }
        Mode::TwoNamesOneServer => world.nodes = vec![0, 1, 1],
        _ => world.nodes = (0..names).collect(),
    }
    let ttl_ms = world.rng.range(600, 3_000);
    let ttl = Duration::from_millis(ttl_ms);
    let op_timeout = Duration::from_millis(world.rng.range(50, 400));
    let ttls: Vec<Duration> = (0..setup.clients)
        .map(|c| match setup.mixed_ttls && c > 0 {
            true => Duration::from_millis(world.rng.range(ttl_ms, 2 * ttl_ms)),
            false => ttl,
        })
        .collect();
    let longest = ttls.iter().copied().max().unwrap_or(ttl);
    let holds: Vec<Option<Duration>> = ttls
        .iter()
        .map(|t| {
            let ms = t.as_millis() as u64;
            setup
                .hold_at_least
                .then(|| Duration::from_millis(world.rng.range(ms / 2, ms * 2)))
        })
        .collect();
    let once_per = setup
        .once_per
        .then(|| Duration::from_millis(world.rng.range(2 * ttl_ms, 6 * ttl_ms)));
    // How long a lock may stay once its last holder has left: its lease, or its hold.
    let lasts = holds.iter().flatten().copied().fold(longest, Duration::max);
    for _ in 0..setup.clients {
        let rate = world.rng.real(1.0 - e, 1.0 + e);
        world.clients.push(world::ClientState {
            rate,
            ..Default::default()
        });
    }
    let ttl_us = ttl.as_micros() as Micros;
    world.live.met = vec![None; setup.clients];
    world.live.op_timeout = (op_timeout.as_micros() as f64 * (1.0 + 2.0 * e)) as Micros;
    world.live.restart_in_window = setup.model.restarts_in_window;
    world.live.spacing = 3 * longest.as_micros() as Micros;
    if setup.model.missed_master {
        // Client 0 never reaches the last master: its grants miss it.
        let last = servers - 1;
        world.at(
            0,
            world::Kind::Fault(model::Fault::Cut {
                client: 0,
                server: last,
            }),
        );
    }
    let length = longest.as_micros() as Micros * 4 * u64::from(setup.rounds);
    faults::plan(&mut world, setup.model, length, ttl_us);
    world.note(format!(
        "seed {seed}: {:?} {:?}, ttls {ttls:?}, op timeout {op_timeout:?}, {} clients",
        setup.mode, setup.sharing, setup.clients
    ));
    if setup.hold_at_least || setup.once_per {
        world.note(format!("holds {holds:?}, once per {once_per:?}"));
    }

    let sim = Arc::new(Sim::new(world));
    let origin = Instant::now();
    for (c, &ttl) in ttls.iter().enumerate() {
        let rate = sim.lock().clients[c].rate;
        let clock = Arc::new(SimClock {
            sim: sim.clone(),
            origin,
            rate,
            plant: setup.bug,
        });
        let nodes: Vec<Box<dyn Node>> = (0..names)
            .map(|n| -> Box<dyn Node> {
                Box::new(SimNode {
                    sim: sim.clone(),
                    node: n,
                    name: format!("redis://127.0.0.1:{}", 7000 + n),
                })
            })
            .collect();
        let locker = Arc::new(Locker::new(nodes, op_timeout).with_clock(clock.clone()));
        let sharing = match (setup.mixed, c % 2) {
            (true, 0) => Sharing::Exclusive,
            _ => setup.sharing,
        };
        let plan = client::Plan {
            client: c,
            rounds: setup.rounds,
            ttl,
            op_timeout,
            sharing,
            max_wait: longest * 4,
            plant: setup.bug,
            newest: setup.newest,
            hold: holds[c],
            once_per,
        };
        let s = sim.clone();
        spawn(&sim, c, setup.bug, move || {
            client::run(s, locker, clock, plan)
        });
    }
    // Long enough for every round, however the faults delay it.
    let all_left = sim.run(length * 4 + 60_000_000);
    sim.join_all();
    let mut w = sim.lock();
    if w.check.violation.is_none() && !all_left {
        w.violation_at_end(format!(
            "a client never ended: the run was cut off at {} us with clients still at work",
            length * 4 + 60_000_000
        ));
    }
    // Every deployment but one refused grants something in a run of several clients and rounds.
    if w.check.violation.is_none() && w.check.grants() == 0 && setup.mode != Mode::TwoNamesOneServer
    {
        w.violation_at_end("nothing was granted in the whole run".into());
    }
    if w.check.violation.is_none() {
        // Every client has left: once every lease could have ended (by the servers' clocks,
        // their rate error and a millisecond allowed), the lock and its line are gone, before
        // anything longer-lived expires.
        let by = w.now + (lasts.as_micros() as f64 * (1.0 + 2.0 * e)) as Micros + 1_000;
        for s in 0..w.servers.len() {
            if !w.servers[s].up || w.servers[s].master.is_some() {
                continue;
            }
            let now_ms = w.servers[s].clock_us(by) / 1000;
            let mut store = w.servers[s].store.clone();
            store.expire_all(now_ms);
            if let Some(v) = live::left_after_leases(&store) {
                let name = w.servers[s].name.clone();
                w.violation_at_end(format!("{name}: {v}"));
            }
        }
    }
    if w.check.violation.is_none() {
        // Once every lease and record could have expired, nothing but the history is left.
        let later = w.now + 200_000_000;
        for s in 0..w.servers.len() {
            if !w.servers[s].up || w.servers[s].master.is_some() {
                continue;
            }
            let now_ms = w.servers[s].clock_us(later) / 1000;
            w.servers[s].store.expire_all(now_ms);
            if let Some(v) = Checker::leftovers(&w.servers[s].store) {
                let name = w.servers[s].name.clone();
                w.violation_at_end(format!("{name}: {v}"));
            }
        }
    }
    Outcome {
        seed,
        violation: w.check.violation.clone(),
        trace: w.trace.iter().cloned().collect(),
        grants: w.check.grants(),
        steps: w.steps,
        simulated: w.now,
    }
}

/// What a clean exploration covered.
#[derive(Debug, Default)]
pub struct Covered {
    pub runs: u64,
    pub grants: usize,
    pub steps: u64,
    pub simulated: Micros,
}

/// Runs seeds `seeds` of `setup`: the first that breaks an invariant, or what all covered.
pub fn explore(setup: &Setup, seeds: std::ops::Range<u64>) -> Result<Covered, Box<Outcome>> {
    let mut covered = Covered::default();
    for seed in seeds {
        let outcome = run(setup, seed);
        if outcome.violation.is_some() {
            return Err(Box::new(outcome));
        }
        covered.runs += 1;
        covered.grants += outcome.grants;
        covered.steps += outcome.steps;
        covered.simulated += outcome.simulated;
    }
    Ok(covered)
}
