//! The simulated world: one true clock, an event queue keyed by it, the servers, the links
//! between clients and servers, and the threads the clients' code runs on.
//!
//! The clients run rlock's own code (the `Locker`, the renewal thread), synchronous as it is, on
//! real threads; but only one of them runs at a time, and only between two events. A thread
//! that waits (for a reply, a timeout, a timer) parks; the scheduler then takes the next thread
//! that is ready, or else the next event, in the order of (time, creation). So one seed gives
//! one order of everything, whatever the machine's scheduler does.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard};

use rlock::backend::Fault;

use super::Micros;
use super::check::Checker;
use super::server::{Call, Conn, Link, Request, Server, node_error};

/// A small, seeded random source (SplitMix64): the only source of chance in a run.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x5DEE_CE66_D1CE_4E5B)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo + 1)
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    /// A number in `lo..hi`.
    pub fn real(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * ((self.next() >> 11) as f64 / (1u64 << 53) as f64)
    }
}

/// What happens at an instant.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A thread's timer (stale when its token has moved on).
    Wake { thread: usize, token: u64 },
    /// A request reaches its server (`copy`: a duplicate of it).
    Deliver { req: usize, copy: bool },
    /// A request's reply reaches its client.
    Reply { req: usize },
    /// A request's client stops waiting for its reply.
    Timeout { req: usize },
    /// A WAIT gives up.
    WaitOver { req: usize },
    /// A master's write `offset` reaches replica `replica`.
    Replicate { replica: usize, offset: u64 },
    /// A message published to a channel a client listens on reaches its subscription.
    Heard { ear: usize, message: String },
    /// A fault begins or ends.
    Fault(super::model::Fault),
    /// The time for a give-back of a grant nobody saw is up (`live.rs`).
    GiveBack { orphan: usize },
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Event {
    at: Micros,
    seq: u64,
    kind: Kind,
}

/// One thread the simulation runs.
#[derive(Debug, Default)]
pub(super) struct Thread {
    /// What it waits on while parked.
    pub(super) cv: std::sync::Arc<Condvar>,
    pub(super) client: usize,
    pub(super) go: bool,
    pub(super) done: bool,
    /// A timer it waits for: the token of the one that counts.
    pub(super) timer: u64,
    /// Parked on a timer (or a wake-up), not on a reply: a poke may wake it.
    pub(super) pokable: bool,
    /// The fan-out this thread runs a job of, by its caller.
    pub(super) parent: Option<usize>,
    /// Jobs of its fan-out still running.
    pub(super) children: usize,
    pub(super) joiners: Vec<usize>,
}

/// How often the network misbehaves.
#[derive(Debug, Clone, Copy)]
pub struct Weather {
    /// One-way delay of a message, in microseconds: usually `base`, sometimes up to `spike`.
    pub base: (Micros, Micros),
    pub spike: Micros,
    pub spike_chance: f64,
    pub loss: f64,
    pub duplicate: f64,
    /// Replication delay to a replica.
    pub replication: (Micros, Micros),
}

/// A client, as the world sees it.
#[derive(Debug, Default)]
pub struct ClientState {
    pub rate: f64,
    /// Paused (its rlock stopped) until then.
    pub paused_until: Micros,
    /// When its last pause began, and how long its pauses have lasted so far in all.
    pub paused_at: Micros,
    pub paused_for: Micros,
    pub deferred: Vec<usize>,
    /// Its thread that sleeps until a published wake-up (in `SimClock::poll`).
    pub listening: Option<usize>,
}

pub struct World {
    pub now: Micros,
    /// Events handled so far.
    pub steps: u64,
    seq: u64,
    events: BinaryHeap<Reverse<Event>>,
    pub(super) threads: Vec<Thread>,
    ready: VecDeque<usize>,
    running: Option<usize>,
    pub shutdown: bool,
    pub rng: Rng,
    pub servers: Vec<Server>,
    /// Each node a client names: the server it reaches now (its group's master).
    pub nodes: Vec<usize>,
    pub(super) links: HashMap<(usize, usize), Link>,
    pub(super) conns: Vec<Conn>,
    pub(super) current: HashMap<(usize, usize), usize>,
    pub(super) requests: Vec<Request>,
    pub clients: Vec<ClientState>,
    pub weather: Weather,
    /// Replicas that must acknowledge a grant or renewal (--replicas).
    pub replicas: u32,
    pub check: Checker,
    pub trace: VecDeque<String>,
    /// The lock's key (what a `Delete` fault deletes).
    pub lock_key: String,
    /// How the scripts are changed on their way to the servers (planted bugs).
    pub script_plant: Option<fn(&mut Call)>,
    pub mutant: Option<std::sync::Arc<super::mutants::Mutant>>,
    /// Whether the replies are checked against the data (replies.rs).
    pub replies: bool,
    /// What the liveness invariants keep track of.
    pub live: super::check::Live,
    /// What the invariants of `--hold-at-least` and `--once-per` keep track of.
    pub terms: super::check::Terms,
    /// The servers' ends of the clients' subscriptions (`wake.rs`).
    pub ears: Vec<super::server::Ear>,
}

/// The world, its lock, and what the scheduler waits on (each thread waits on its own).
pub struct Sim {
    world: Mutex<World>,
    cv: Condvar,
    /// The threads' handles, joined once the run is over.
    handles: Mutex<Vec<std::thread::JoinHandle<()>>>,
}

thread_local! {
    static ME: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// The simulation thread this is.
pub fn me() -> usize {
    ME.with(|m| m.get()).expect("a simulation thread")
}

pub fn set_me(id: usize) {
    ME.with(|m| m.set(Some(id)));
}

const TRACE_LINES: usize = 300;

impl World {
    pub fn new(seed: u64, weather: Weather, check: Checker) -> Self {
        World {
            now: 0,
            steps: 0,
            seq: 0,
            events: BinaryHeap::new(),
            threads: Vec::new(),
            ready: VecDeque::new(),
            running: None,
            shutdown: false,
            rng: Rng::new(seed),
            servers: Vec::new(),
            nodes: Vec::new(),
            links: HashMap::new(),
            conns: Vec::new(),
            current: HashMap::new(),
            requests: Vec::new(),
            clients: Vec::new(),
            weather,
            replicas: 0,
            check,
            trace: VecDeque::new(),
            script_plant: None,
            mutant: None,
            replies: true,
            lock_key: "rlock:jobs".into(),
            live: Default::default(),
            terms: Default::default(),
            ears: Vec::new(),
        }
    }

    /// Notes a line in the trace (the last few hundred are kept).
    /// Nothing is noted once the run is over: the threads then end side by side, in any order.
    pub fn note(&mut self, line: impl AsRef<str>) {
        if self.shutdown {
            return;
        }
        if self.trace.len() == TRACE_LINES {
            self.trace.pop_front();
        }
        let t = self.now;
        self.trace.push_back(format!(
            "{:>6}.{:03} ms  {}",
            t / 1000,
            t % 1000,
            line.as_ref()
        ));
    }

    pub fn at(&mut self, at: Micros, kind: Kind) {
        self.seq += 1;
        let seq = self.seq;
        self.events.push(Reverse(Event { at, seq, kind }));
    }

    pub fn link(&mut self, client: usize, server: usize) -> &mut Link {
        self.links.entry((client, server)).or_default()
    }

    pub fn delay(&mut self, client: usize, server: usize) -> Option<Micros> {
        let w = self.weather;
        let link = self.link(client, server).clone();
        if link.cut || self.rng.chance(w.loss) {
            self.met(client);
            return None;
        }
        let mut d = self.rng.range(w.base.0, w.base.1);
        if self.rng.chance(w.spike_chance) {
            d += self.rng.range(0, w.spike);
            self.met(client);
        }
        if link.extra > 0 {
            self.met(client);
        }
        Some(d + link.extra)
    }

    /// A new thread for `client` (a job of `parent`'s fan-out, if any); not yet ready.
    pub fn new_thread(&mut self, client: usize, parent: Option<usize>) -> usize {
        self.threads.push(Thread {
            client,
            parent,
            ..Thread::default()
        });
        self.threads.len() - 1
    }

    /// Makes `thread` run as soon as nothing else does (unless its client is paused).
    pub fn ready(&mut self, thread: usize) {
        self.ready.push_back(thread);
    }

    /// Wakes a thread parked on a timer or a wake-up (not one waiting for a reply).
    pub fn poke(&mut self, thread: usize) {
        if self.threads[thread].pokable && !self.threads[thread].go {
            self.threads[thread].timer += 1;
            self.threads[thread].pokable = false;
            self.ready(thread);
        }
    }

    /// Sets `thread`'s timer for `at`.
    pub fn timer(&mut self, thread: usize, at: Micros) {
        self.threads[thread].timer += 1;
        self.threads[thread].pokable = true;
        let token = self.threads[thread].timer;
        self.at(at.max(self.now), Kind::Wake { thread, token });
    }

    /// The client `thread` works for.
    pub fn client_of(&self, thread: usize) -> usize {
        self.threads[thread].client
    }

    /// A script call from `thread` to node `node`, its reply awaited for `timeout`: sends it.
    pub fn handle(&mut self, kind: Kind) {
        match kind {
            Kind::Wake { thread, token } => {
                if self.threads[thread].timer == token && !self.threads[thread].go {
                    self.threads[thread].pokable = false;
                    self.ready(thread);
                }
            }
            Kind::Deliver { req, copy } => self.deliver(req, copy),
            Kind::Reply { req } => {
                let (client, server) = (self.requests[req].client, self.requests[req].server);
                if self.link(client, server).cut {
                    return;
                }
                if let Some(reply) = self.requests[req].reply.take() {
                    self.finish(req, reply);
                }
            }
            Kind::Timeout { req } => {
                let name = self.servers[self.requests[req].server].name.clone();
                if self.requests[req].result.is_none() && self.requests[req].thread != usize::MAX {
                    self.note(format!(
                        "c{} timeout on {name} (req {req})",
                        self.requests[req].client
                    ));
                    self.timed_out(req);
                    self.finish(req, Err(node_error(Fault::Timeout, &name, "timed out")));
                }
            }
            Kind::WaitOver { req } => self.wait_over(req),
            Kind::Replicate { replica, offset } => self.replicate(replica, offset),
            Kind::Heard { ear, message } => self.heard(ear, &message),
            Kind::Fault(f) => self.strike(f),
            Kind::GiveBack { orphan } => self.check_give_back(orphan),
        }
    }

    /// Client `client`'s try for `token` was displaced by a newer one (`--newest`): that token
    /// must never hold the lock (`Checker::displacement`).
    pub fn displaced(&mut self, client: usize, token: &str) {
        self.note(format!("c{client} {token}: displaced by a newer client"));
        self.check.displaced.insert(token.to_string());
    }

    /// Records a broken invariant (the first one ends the run).
    pub fn violation(&mut self, what: String) {
        if self.shutdown {
            return;
        }
        self.note(format!("VIOLATION: {what}"));
        if self.check.violation.is_none() {
            self.check.violation = Some(what);
        }
    }

    /// The client `client` stops running for `d` (its rlock stopped).
    pub fn pause(&mut self, client: usize, until: Micros) {
        self.clients[client].paused_until = until;
        self.clients[client].paused_at = self.now;
    }

    pub fn unpause(&mut self, client: usize) {
        self.clients[client].paused_until = 0;
        self.clients[client].paused_for += self.now - self.clients[client].paused_at;
        for t in std::mem::take(&mut self.clients[client].deferred) {
            self.ready.push_back(t);
        }
    }
}

impl Sim {
    pub fn new(world: World) -> Self {
        Sim {
            world: Mutex::new(world),
            cv: Condvar::new(),
            handles: Mutex::new(Vec::new()),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Parks thread `id` (which runs now) until the scheduler makes it run again.
    pub fn park<'a>(&'a self, mut w: MutexGuard<'a, World>, id: usize) -> MutexGuard<'a, World> {
        w.threads[id].go = false;
        w.running = None;
        self.cv.notify_one();
        self.wait_go(w, id)
    }

    /// Waits (without having run) until thread `id` may run.
    pub fn wait_go<'a>(&'a self, mut w: MutexGuard<'a, World>, id: usize) -> MutexGuard<'a, World> {
        let cv = w.threads[id].cv.clone();
        while !w.threads[id].go && !w.shutdown {
            w = cv.wait(w).unwrap_or_else(|p| p.into_inner());
        }
        w
    }

    /// Thread `id` has ended: whoever waits for it may run.
    pub fn exit(&self, id: usize) {
        let mut w = self.lock();
        w.threads[id].done = true;
        for j in std::mem::take(&mut w.threads[id].joiners) {
            w.ready(j);
        }
        if let Some(parent) = w.threads[id].parent {
            w.threads[parent].children -= 1;
            if w.threads[parent].children == 0 {
                w.ready(parent);
            }
        }
        if w.running == Some(id) {
            w.running = None;
        }
        self.cv.notify_one();
    }

    /// Thread `me` waits until thread `other` has ended.
    pub fn join(&self, me: usize, other: usize) {
        let mut w = self.lock();
        if w.threads[other].done || w.shutdown {
            return;
        }
        w.threads[other].joiners.push(me);
        drop(self.park(w, me));
    }

    /// Thread `me` starts `children` jobs and waits for them all.
    pub fn fan_out_begin(&self, me: usize, n: usize) -> Vec<usize> {
        let mut w = self.lock();
        let client = w.threads[me].client;
        w.threads[me].children = n;
        (0..n)
            .map(|_| {
                let t = w.new_thread(client, Some(me));
                w.ready(t);
                t
            })
            .collect()
    }

    pub fn fan_out_wait(&self, me: usize) {
        let w = self.lock();
        if w.threads[me].children == 0 || w.shutdown {
            return;
        }
        drop(self.park(w, me));
    }

    /// Runs the world until `until` (true time), until nothing is left to do or until an
    /// invariant breaks; then lets every thread run to its end (each wait returns at once).
    /// Whether every thread had ended by itself.
    pub fn run(&self, until: Micros) -> bool {
        let mut w = self.lock();
        loop {
            while w.running.is_some() {
                w = self.cv.wait(w).unwrap_or_else(|p| p.into_inner());
            }
            if w.check.violation.is_some() {
                break;
            }
            if let Some(t) = w.ready.pop_front() {
                if w.threads[t].done || w.threads[t].go {
                    continue;
                }
                let client = w.threads[t].client;
                if w.clients[client].paused_until > w.now {
                    w.clients[client].deferred.push(t);
                    continue;
                }
                w.threads[t].go = true;
                w.running = Some(t);
                w.threads[t].cv.notify_one();
                continue;
            }
            let Some(Reverse(event)) = w.events.pop() else {
                break;
            };
            if event.at > until {
                break;
            }
            w.now = event.at;
            w.steps += 1;
            w.handle(event.kind);
        }
        let all_ended = w.threads.iter().all(|t| t.done);
        w.shutdown = true;
        for t in &w.threads {
            t.cv.notify_all();
        }
        all_ended
    }

    /// Keeps a thread's handle, to join it once the run is over.
    pub fn keep(&self, handle: std::thread::JoinHandle<()>) {
        self.handles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(handle);
    }

    /// Joins every thread (and those they start meanwhile).
    pub fn join_all(&self) {
        loop {
            let next = self.handles.lock().unwrap_or_else(|p| p.into_inner()).pop();
            match next {
                Some(h) => {
                    let _ = h.join();
                }
                None => return,
            }
        }
    }
}
