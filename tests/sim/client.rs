//! One simulated `rlock exec`: tries for the lock with the library's own `Locker` (a Redlock
//! majority, identities, validity and give-backs included), then holds it (`holder.rs`: "the
//! command" runs while the library's own renewal thread keeps the lease, stopped at the moments
//! of the lease's timeline) and releases. With `--once-per`, looks at the window first.
//!
//! What is the simulation's own: when a client starts, how long its command runs, and how a
//! waiter sleeps between tries (until the holder's lease would end, or until a published
//! wake-up reaches it: a model of `wait.rs`, whose sleeping is file descriptors and signals).

use std::sync::Arc;
use std::time::Duration;

use rlock::identity::Identity;
use rlock::lock::seams::{Attempt, Bug, attempt, channel as wake_channel};
use rlock::lock::{Lease, LockKey, Locker, Request, Sharing};

use super::Micros;
use super::holder::{Who, fired, hold};
use super::seams::SimClock;
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
                    let who = Who {
                        client: c,
                        sharing: plan.sharing,
                        plant: plan.plant,
                    };
                    hold(&sim, &locker, &clock, who, lease, grant, window);
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
