//! rlock's seams, as the simulation fills them: a `Node` whose requests travel the simulated
//! network to a simulated server, and a `Clock` whose time is the simulation's (at the client's
//! own rate) and whose threads take turns.

use std::os::fd::BorrowedFd;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::{Duration, Instant};

use rlock::backend::{Fault, Node, NodeError, Script, Subscriber};
use rlock::clock::{Clock, Job};
use rlock::lock::seams::{self as planted, Bug};

use super::Micros;
use super::server::{Call, node_error};
use super::world::{Sim, me, set_me};

/// One node of a deployment, as one client names it.
pub struct SimNode {
    pub sim: Arc<Sim>,
    pub node: usize,
    pub name: String,
}

/// A plain INFO (what `Node::info` sends), carried as a script of the simulation's own so that
/// it travels the simulated network like any request. No rlock script reads INFO.
const INFO_AS_SCRIPT: &str =
    "local out = {} for i, s in ipairs(ARGV) do out[i] = redis.call('INFO', s) end return out";

/// SUBSCRIBE, carried so too: the server counts the listener when it runs it (`wake.rs`).
const SUBSCRIBE_AS_SCRIPT: &str = "return 1";

impl Node for SimNode {
    fn eval(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
        timeout: Duration,
    ) -> Result<redis::Value, NodeError> {
        self.send(
            Call {
                name: script.name,
                source: script.source.to_string(),
                sha: script.sha.to_string(),
                keys: keys.iter().map(|k| k.to_string()).collect(),
                args: args.iter().map(|a| a.to_string()).collect(),
                replicated: script.replicated.map(|(_, when)| when),
            },
            timeout,
        )
    }

    fn info(&self, sections: &[&str], timeout: Duration) -> Result<Vec<String>, NodeError> {
        let call = Call {
            name: "INFO",
            source: INFO_AS_SCRIPT.into(),
            sha: sha1_smol::Sha1::from(INFO_AS_SCRIPT.as_bytes())
                .digest()
                .to_string(),
            keys: Vec::new(),
            args: sections.iter().map(|s| s.to_string()).collect(),
            replicated: None,
        };
        match self.send(call, timeout)? {
            redis::Value::Array(texts) => Ok(texts
                .iter()
                .map(|t| match t {
                    redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    _ => String::new(),
                })
                .collect()),
            other => Err(node_error(
                Fault::Other,
                &self.name,
                &format!("unexpected reply to INFO: {other:?}"),
            )),
        }
    }

    fn scan(&self, _pattern: &str, _timeout: Duration) -> Result<Vec<String>, NodeError> {
        Err(node_error(
            Fault::Other,
            &self.name,
            "no SCAN in the simulation",
        ))
    }

    /// A subscriber on a socket pair whose other end the server keeps (`wake.rs`), once
    /// SUBSCRIBE has gone there and back within `timeout`.
    fn subscriber(
        &self,
        _key: &str,
        channel: &str,
        timeout: Duration,
    ) -> Result<Subscriber, NodeError> {
        let call = Call {
            name: "SUBSCRIBE",
            source: SUBSCRIBE_AS_SCRIPT.into(),
            sha: sha1_smol::Sha1::from(SUBSCRIBE_AS_SCRIPT.as_bytes())
                .digest()
                .to_string(),
            keys: Vec::new(),
            args: vec![channel.to_string()],
            replicated: None,
        };
        let answered = self.send(call, timeout);
        let mut w = self.sim.lock();
        let sock = match answered {
            Ok(_) => w.take_subscription(me()),
            Err(e) => {
                w.abandon_subscriptions(me());
                return Err(e);
            }
        };
        drop(w);
        let sock = sock.ok_or_else(|| node_error(Fault::Io, &self.name, "no subscription"))?;
        Subscriber::over(sock, channel, Duration::from_secs(1))
            .map_err(|e| node_error(Fault::Io, &self.name, &e.to_string()))
    }

    fn name(&self) -> &str {
        &self.name
    }
}

impl SimNode {
    /// Sends `call` over the simulated network and parks until its reply or its `timeout`.
    fn send(&self, call: Call, timeout: Duration) -> Result<redis::Value, NodeError> {
        let me = me();
        let mut w = self.sim.lock();
        if w.shutdown {
            return Err(node_error(Fault::Io, &self.name, "the simulation is over"));
        }
        let rate = w.clients[w.client_of(me)].rate;
        let timeout = (timeout.as_micros() as f64 / rate) as Micros;
        let req = w.send(me, self.node, call, timeout.max(1));
        let mut w = self.sim.park(w, me);
        w.result(req)
            .unwrap_or_else(|| Err(node_error(Fault::Io, &self.name, "the simulation is over")))
    }
}

/// One client's clock: true time at the client's rate, from a fixed origin.
pub struct SimClock {
    pub sim: Arc<Sim>,
    pub origin: Instant,
    pub rate: f64,
    pub plant: Option<Bug>,
}

impl SimClock {
    /// The client's reading at true time `t`.
    pub fn at(&self, t: Micros) -> Instant {
        self.origin + Duration::from_nanos((t as f64 * 1000.0 * self.rate) as u64)
    }

    /// The true time at which the client reads `i`.
    pub fn true_of(&self, i: Instant) -> Micros {
        let ns = i.saturating_duration_since(self.origin).as_nanos() as f64;
        (ns / 1000.0 / self.rate).ceil() as Micros
    }

    /// True time now.
    pub fn now_true(&self) -> Micros {
        self.sim.lock().now
    }

    /// Sleeps the calling thread until the client reads `until`, or until it is poked.
    pub fn sleep(&self, until: Instant) {
        let me = me();
        let mut w = self.sim.lock();
        if w.shutdown || self.at(w.now) >= until {
            return;
        }
        // The first true instant at which the client reads `until` or later (rounding must not
        // leave it a nanosecond short, or the wait would never end).
        let mut t = self.true_of(until);
        while self.at(t) < until {
            t += 1;
        }
        w.timer(me, t);
        drop(self.sim.park(w, me));
    }
}

impl Clock for SimClock {
    fn now(&self) -> Instant {
        let w = self.sim.lock();
        self.at(w.now)
    }

    fn wait(&self, stop: &Receiver<()>, until: Instant) -> bool {
        loop {
            if !matches!(stop.try_recv(), Err(TryRecvError::Empty)) {
                return true;
            }
            {
                let w = self.sim.lock();
                if w.shutdown {
                    return true;
                }
                if self.at(w.now) >= until {
                    return false;
                }
            }
            self.sleep(until);
        }
    }

    /// Sleeps for `timeout` by this clock, or until a published message reaches one of the
    /// client's subscriptions (`wake.rs`) or one of them ends (which `fds` are, the world
    /// knows: a waiter's sleep is the only poll of a client).
    fn poll(&self, fds: &[BorrowedFd<'_>], timeout: Duration) {
        let me = me();
        let until = {
            let mut w = self.sim.lock();
            let c = w.client_of(me);
            if !fds.is_empty() {
                w.clients[c].listening = Some(me);
            }
            self.at(w.now) + timeout
        };
        self.sleep(until);
        let mut w = self.sim.lock();
        let c = w.client_of(me);
        if w.clients[c].listening == Some(me) {
            w.clients[c].listening = None;
        }
    }

    fn jitter(&self, below: Duration) -> Duration {
        let below = (below.as_micros() as u64).max(1);
        Duration::from_micros(self.sim.lock().rng.range(0, below - 1))
    }

    fn fan_out(&self, jobs: Vec<Job<'_>>) {
        let me = me();
        let ids = self.sim.fan_out_begin(me, jobs.len());
        let sim = &self.sim;
        let plant = self.plant;
        std::thread::scope(|s| {
            for (id, job) in ids.into_iter().zip(jobs) {
                s.spawn(move || {
                    set_me(id);
                    planted::plant(plant);
                    let _ends = Ending(sim, id);
                    drop(sim.wait_go(sim.lock(), id));
                    job();
                });
            }
            sim.fan_out_wait(me);
        });
    }
}

/// Ends a simulation thread when it returns or panics: the scheduler must never wait on a
/// thread that is gone, and a panic is a failure of the run, not a hang.
struct Ending<'a>(&'a Sim, usize);

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let mut w = self.0.lock();
            w.violation(format!("thread {} panicked", self.1));
        }
        self.0.exit(self.1);
    }
}

/// Starts `f` on a new simulation thread of client `client`, ready to run at once; the world
/// keeps its handle, to join it once the run is over.
pub fn spawn(
    sim: &Arc<Sim>,
    client: usize,
    plant: Option<Bug>,
    f: impl FnOnce() + Send + 'static,
) -> usize {
    let id = {
        let mut w = sim.lock();
        let id = w.new_thread(client, None);
        w.ready(id);
        id
    };
    let sim2 = sim.clone();
    let handle = std::thread::Builder::new()
        .name(format!("sim-c{client}-t{id}"))
        .stack_size(256 * 1024)
        .spawn(move || {
            set_me(id);
            planted::plant(plant);
            let _ends = Ending(&sim2, id);
            drop(sim2.wait_go(sim2.lock(), id));
            f();
        })
        .expect("a thread");
    sim.keep(handle);
    id
}
