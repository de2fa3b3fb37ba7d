//! One simulated `rlock exec`: with `--once-per`, looks at the window first; waits for the lock
//! with the library's own waiter (`Locker::acquire`: its tries, line, wake channel, outages, `-w`
//! deadline and sleeps between tries, a Redlock majority, identities, validity and give-backs
//! included), then holds it (`holder.rs`: "the command" runs while the library's own renewal
//! thread keeps the lease, stopped at the moments of the lease's timeline) and releases.
//!
//! What is the simulation's own: when a client starts, how long its command runs, and what the
//! waiter's seams are made of: its clock, sleep and jitter (`SimClock`), and its subscriptions
//! (`SimNode::subscriber`, `wake.rs`). No signal interrupts a simulated wait but the run's end.

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::Signal;
use rlock::identity::Identity;
use rlock::lock::seams::Bug;
use rlock::lock::{
    Error, Hooks, Interrupt, Lease, LockKey, Locker, Note, Observer, Request, Sharing, WaitPolicy,
};

use super::Micros;
use super::holder::{Who, fired, hold};
use super::seams::SimClock;
use super::world::Sim;

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
    /// `--hold-at-least`.
    pub hold: Option<Duration>,
    /// `--once-per`: the windows' length.
    pub once_per: Option<Duration>,
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
        // --once-per: the window this run fired in; a window already done ends the round here.
        let window = match plan.once_per {
            Some(len) => match fired(&sim, &locker, &key, len, c) {
                Some(window) => Some(window),
                None => continue,
            },
            None => None,
        };
        let req = Request {
            key: &key,
            token: &token,
            ttl: plan.ttl,
            sharing: plan.sharing,
            who: &who,
            hold: plan.hold,
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
            Ok(grant) => {
                let who = Who {
                    client: c,
                    sharing: plan.sharing,
                    plant: plan.plant,
                };
                hold(&sim, &locker, &clock, who, lease, grant, window);
            }
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
