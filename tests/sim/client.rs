//! One simulated `rlock exec`: tries for the lock with the library's own `Locker` (a Redlock
//! majority, identities, validity and give-backs included), runs "the command" while the
//! library's own renewal thread (`watchdog::renew_loop`) keeps the lease, and releases.
//!
//! What is the simulation's own: when a client starts, how long its command runs, and how a
//! waiter sleeps between tries (until the holder's lease would end, or until a published
//! wake-up reaches it: a model of `wait.rs`, whose sleeping is file descriptors and signals).

use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use rlock::identity::Identity;
use rlock::lock::seams::{Attempt, Bug, attempt, channel as wake_channel};
use rlock::lock::{Lease, LockKey, Locker, Request, Sharing};
use rlock::watchdog::{self, Report};

use super::Micros;
use super::seams::{SimClock, spawn};
use super::world::{Sim, me};

/// What one client does.
#[derive(Debug, Clone)]
pub struct Plan {
    pub client: usize,
    /// How many nodes the client names.
    pub nodes: usize,
    pub rounds: u32,
    pub ttl: Duration,
    pub op_timeout: Duration,
    pub sharing: Sharing,
    /// Waits in line (one Redis) rather than trying again later.
    pub join: bool,
    /// How long a round waits for the lock at most.
    pub max_wait: Duration,
    /// A bug planted in the client's code (on every thread it runs on).
    pub plant: Option<Bug>,
    /// Newest wins (`--newest`).
    pub newest: rlock::lock::Newest,
}

pub fn run(sim: Arc<Sim>, locker: Arc<Locker>, clock: Arc<SimClock>, plan: Plan) {
    let key = LockKey::new("rlock:", "jobs").expect("a key");
    let c = plan.client;
    let who = Identity {
        host: format!("host{c}"),
        pid: 1000 + c as u32,
        user: "sim".into(),
        command: "job".into(),
        pidns: String::new(),
    };
    let lease = Lease::new(plan.ttl, None, None, plan.op_timeout).expect("a lease");
    let ttl_us = plan.ttl.as_micros() as Micros;
    for round in 0..plan.rounds {
        if sim.lock().shutdown {
            return;
        }
        let gap = sim.lock().rng.range(0, ttl_us * 2);
        let now = clock.now_true();
        clock.sleep(clock.at(now + gap));
        let token = format!("c{c}-r{round}");
        let req = Request {
            key: &key,
            token: &token,
            ttl: plan.ttl,
            sharing: plan.sharing,
            who: &who,
            hold: None,
            newest: plan.newest,
        };
        let give_up = clock.now_instant() + plan.max_wait;
        let channel = match locker.is_quorum() {
            true => wake_channel(&key).to_string(),
            false => format!("{}:{token}", wake_channel(&key)),
        };
        // As wait.rs: a try takes a place in line only once its client listens for its wake-up;
        // the first busy answer subscribes, and the next try follows at once.
        let mut listening = false;
        loop {
            if sim.lock().shutdown {
                return;
            }
            let left = give_up.saturating_duration_since(clock.now_instant());
            let answer = attempt(&locker, &req, plan.join && listening, Some(left));
            let pause = match answer {
                Ok(Attempt::Granted(grant)) => {
                    listen(&sim, plan.nodes, c, &channel, false);
                    hold(&sim, &locker, &clock, &plan, lease, grant);
                    break;
                }
                Ok(Attempt::Busy { .. } | Attempt::Queued { .. }) if !listening => {
                    listening = true;
                    listen(&sim, plan.nodes, c, &channel, true);
                    continue;
                }
                Ok(Attempt::Busy { pttl, .. }) => match pttl {
                    p if p >= 0 => Duration::from_millis(p as u64 + 1),
                    _ => rlock::lock::CHECK_WITHOUT_EXPIRY,
                },
                Ok(Attempt::Queued { wait_ms }) => Duration::from_millis(wait_ms.max(0) as u64 + 1),
                Ok(Attempt::Superseded { .. }) => {
                    // A newer client displaced this one (--newest): it leaves for good.
                    listen(&sim, plan.nodes, c, &channel, false);
                    sim.lock().displaced(c, &token);
                    break;
                }
                Err(e) => {
                    sim.lock().note(format!("c{c} {token}: {e:?}"));
                    if !e.is_transient() {
                        listen(&sim, plan.nodes, c, &channel, false);
                        break;
                    }
                    lease.retry_every()
                }
            };
            let jitter = Duration::from_micros(sim.lock().rng.range(0, 5_000));
            let until = (clock.now_instant() + pause + jitter).min(give_up);
            if clock.now_instant() >= give_up {
                listen(&sim, plan.nodes, c, &channel, false);
                let _ = locker.leave(&key, &token);
                sim.lock().note(format!("c{c} {token}: gave up waiting"));
                break;
            }
            // (A server restarted meanwhile lost the subscription: subscribe again.)
            listen(&sim, plan.nodes, c, &channel, true);
            clock.sleep(until);
        }
    }
}

/// Client `c` listens on `channel` on every server it names (or stops listening).
fn listen(sim: &Sim, nodes: usize, c: usize, channel: &str, on: bool) {
    let mut w = sim.lock();
    w.clients[c].listening = on.then(me);
    for node in 0..nodes {
        let s = w.nodes[node];
        let who = w.servers[s]
            .listeners
            .entry(channel.to_string())
            .or_default();
        who.retain(|x| *x != c);
        if on {
            who.push(c);
        }
    }
}

/// Holds a grant: the command runs until it ends or until the lease deadline, the renewal
/// thread renews, then the lock is released.
fn hold(
    sim: &Arc<Sim>,
    locker: &Arc<Locker>,
    clock: &Arc<SimClock>,
    plan: &Plan,
    lease: Lease,
    grant: rlock::lock::Grant,
) {
    let c = plan.client;
    let ttl_us = plan.ttl.as_micros() as Micros;
    let first = clock.true_of(lease.timeline(grant.sent).ends);
    let holder = {
        let mut w = sim.lock();
        if w.shutdown {
            return;
        }
        let now = w.now;
        let shared = plan.sharing == Sharing::Shared;
        let sent = clock.true_of(grant.sent);
        let (id, broken) = w
            .check
            .granted(now, sent, c, &grant.token, shared, grant.fence, first);
        w.note(format!(
            "c{c} HOLDS {} (fence {}) until {first} us",
            grant.token, grant.fence
        ));
        if let Some(v) = broken {
            w.violation(v);
        }
        id
    };
    let length = {
        let mut w = sim.lock();
        match w.rng.range(0, 2) {
            0 => w.rng.range(ttl_us / 20, ttl_us / 2),
            1 => w.rng.range(ttl_us, ttl_us * 3),
            _ => w.rng.range(ttl_us * 3, ttl_us * 6),
        }
    };
    let (stop, stopped) = mpsc::channel::<()>();
    let renewer = {
        let (sim2, locker, clock2, grant) =
            (sim.clone(), locker.clone(), clock.clone(), grant.clone());
        spawn(sim, c, plan.plant, move || {
            let report = |r: Report| {
                let mut w = sim2.lock();
                let now = w.now;
                match r {
                    Report::Renewed { lease: moments } => {
                        let deadline = moments.ends;
                        let d = clock2.true_of(deadline);
                        let usable = lease.ttl - rlock::lock::drift(lease.ttl);
                        let sent = clock2.true_of(deadline - usable);
                        w.note(format!("c{c} renewed until {d} us"));
                        if let Some(v) = w.check.renewed(holder, now, sent, d) {
                            w.violation(v);
                        }
                    }
                    other => w.note(format!("c{c} renewal: {other:?}")),
                }
            };
            watchdog::renew_loop(&locker, &grant, lease, stopped, report);
        })
    };
    let ends = clock.now_true() + length;
    loop {
        let (now, deadline, over) = {
            let w = sim.lock();
            (w.now, w.check.deadline(holder), w.shutdown)
        };
        if over || now >= ends || now >= deadline {
            break;
        }
        clock.sleep(clock.at(ends.min(deadline)));
    }
    {
        let mut w = sim.lock();
        let now = w.now;
        w.check.ended(holder, now);
        w.note(format!("c{c} command of {} ended", grant.token));
    }
    drop(stop);
    sim.lock().poke(renewer);
    sim.join(me(), renewer);
    let released = locker.release(&grant.key, &grant.token);
    sim.lock()
        .note(format!("c{c} release of {}: {released:?}", grant.token));
}
