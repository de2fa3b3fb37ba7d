//! One simulated `rlock exec`: waits for the lock with the library's own waiter
//! (`Locker::acquire`: its tries, line, wake channel, outages, `-w` deadline and sleeps between
//! tries, a Redlock majority, identities, validity and give-backs included), runs "the command"
//! while the library's own renewal thread (`watchdog::renew_loop`) keeps the lease, and releases.
//!
//! What is the simulation's own: when a client starts, how long its command runs, and what the
//! waiter's seams are made of: its clock, sleep and jitter (`SimClock`), and its subscriptions
//! (`SimNode::subscriber`, `wake.rs`). No signal interrupts a simulated wait but the run's end.

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use nix::sys::signal::Signal;
use rlock::identity::Identity;
use rlock::lock::seams::Bug;
use rlock::lock::{
    Error, Hooks, Interrupt, Lease, LockKey, Locker, Note, Observer, Request, Sharing, WaitPolicy,
};
use rlock::watchdog::{self, Report};

use super::Micros;
use super::seams::{SimClock, spawn};
use super::world::{Sim, me};

/// What one client does.
#[derive(Debug, Clone)]
pub struct Plan {
    pub client: usize,
    pub rounds: u32,
    pub ttl: Duration,
    pub op_timeout: Duration,
    pub sharing: Sharing,
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
            record: None,
        };
        let (began, paused_then) = {
            let w = sim.lock();
            (w.now, w.clients[c].paused_for)
        };
        let policy = WaitPolicy {
            wait: Some(plan.max_wait),
            no_wait: false,
        };
        let heard = Heard { sim: &sim, c };
        let hooks = Hooks {
            interrupt: &RunOver(&sim),
            observer: &heard,
        };
        let waited = locker.acquire(&req, policy, hooks);
        {
            let mut w = sim.lock();
            if w.shutdown {
                return;
            }
            let deadline = clock.true_of(clock.at(began) + plan.max_wait);
            w.wait_ended(c, began, paused_then, deadline);
        }
        match waited {
            Ok(grant) => hold(&sim, &locker, &clock, &plan, lease, grant),
            // A newer client displaced this one (--newest): it leaves for good.
            Err(Error::Superseded { .. }) => sim.lock().displaced(c, &token),
            Err(e) => sim.lock().note(format!("c{c} {token}: {e:?}")),
        }
    }
}

/// What a client's waiter tells: noted in the trace.
struct Heard<'a> {
    sim: &'a Sim,
    c: usize,
}

impl Observer for Heard<'_> {
    fn observe(&self, note: Note<'_>) {
        self.sim
            .lock()
            .note(format!("c{} waiter: {note:?}", self.c));
    }
}

/// No signal comes to a simulated client, but the end of the run ends its wait as SIGTERM would
/// (simulated time stands still then: a waiter's sleep would never end).
struct RunOver<'a>(&'a Sim);

impl Interrupt for RunOver<'_> {
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    fn take(&self) -> Option<Signal> {
        self.0.lock().shutdown.then_some(Signal::SIGTERM)
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
    let (holder, sent) = {
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
        w.restart_in_window(&grant.token, ttl_us);
        (id, sent)
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
                    // Stopped for a newer run (`--cancel-running`): its lease ends by design,
                    // which the liveness check must not count as a lease lost to no fault.
                    Report::Lost(rlock::watchdog::Loss::Superseded(by)) => {
                        w.live.met[c] = Some(now);
                        w.note(format!("c{c} superseded by {by:?}"));
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
        // Stopped at its deadline before its command ended: the lease was lost.
        if now >= w.check.deadline(holder) && now < ends {
            w.lease_lost(c, holder, sent);
        }
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
