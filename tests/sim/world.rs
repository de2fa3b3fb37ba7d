//! The simulated world: one true clock, an event queue keyed by it, the servers, the links
//! between clients and servers, and the threads the clients' code runs on.
//!
//! The clients run rlock's own code (the `Locker`, the renewal thread), synchronous as it is, on
//! real threads; but only one of them runs at a time, and only between two events. A thread
//! that waits (for a reply, a timeout, a timer) parks; the scheduler then takes the next thread
//! that is ready, or else the next event, in the order of (time, creation). So one seed gives
//! one order of everything, whatever the machine's scheduler does.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard};

use crate::backend::{Fault, NodeError};

use super::check::Checker;
use super::lua::{Env, Exec, Scripting};
use super::store::{Resp, Store};

/// True time, in microseconds since the simulation began.
pub type Micros = u64;

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
    /// A message published to a channel a client listens on reaches it.
    Heard { client: usize },
    /// A fault begins or ends.
    Fault(super::faults::Fault),
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Event {
    at: Micros,
    seq: u64,
    kind: Kind,
}

/// One thread the simulation runs.
#[derive(Debug, Default)]
struct Thread {
    /// What it waits on while parked.
    cv: std::sync::Arc<Condvar>,
    client: usize,
    go: bool,
    done: bool,
    /// A timer it waits for: the token of the one that counts.
    timer: u64,
    /// Parked on a timer (or a wake-up), not on a reply: a poke may wake it.
    pokable: bool,
    /// The fan-out this thread runs a job of, by its caller.
    parent: Option<usize>,
    /// Jobs of its fan-out still running.
    children: usize,
    joiners: Vec<usize>,
}

/// A server, as the simulation keeps it.
pub struct Server {
    pub name: String,
    pub store: Store,
    scripting: Scripting,
    pub up: bool,
    pub frozen: bool,
    /// Requests that reached it while frozen, in order.
    backlog: Vec<(usize, bool)>,
    /// Increases at every restart: connections from before are gone.
    pub generation: u64,
    pub run_id: String,
    /// When it last started (true time; before the run began, at first).
    pub started: i64,
    /// Its wall clock: microseconds at true time 0, and its rate.
    pub epoch_us: i64,
    pub rate: f64,
    /// The master it replicates, if any.
    pub master: Option<usize>,
    /// Its replicas (a master's).
    pub replicas: Vec<usize>,
    /// A master's replication offset, and the data after each recent write.
    pub offset: u64,
    snapshots: VecDeque<(u64, Store)>,
    /// A replica's: the master's offset it has.
    pub applied: u64,
    /// A replica's link to its master is cut.
    pub repl_cut: bool,
    /// Clients listening, per channel.
    pub listeners: BTreeMap<String, Vec<usize>>,
}

impl Server {
    pub fn new(name: String, epoch_us: i64, rate: f64, run: u64) -> Self {
        Server {
            name,
            store: Store::default(),
            scripting: Scripting::new(),
            up: true,
            frozen: false,
            backlog: Vec::new(),
            generation: 0,
            run_id: format!("{run:040x}"),
            started: -3_600_000_000,
            epoch_us,
            rate,
            master: None,
            replicas: Vec::new(),
            offset: 0,
            snapshots: VecDeque::new(),
            applied: 0,
            repl_cut: false,
            listeners: BTreeMap::new(),
        }
    }

    /// Its clock at true time `t`, in microseconds.
    pub fn clock_us(&self, t: Micros) -> i64 {
        self.epoch_us + (t as f64 * self.rate) as i64
    }
}

/// The link between a client and a server.
#[derive(Debug, Clone, Default)]
pub struct Link {
    /// Messages are dropped (a partition, a blackhole).
    pub cut: bool,
    /// Added to every message's delay (a slow link).
    pub extra: Micros,
}

/// A client's connection to a node: requests and replies keep their order on it.
#[derive(Debug, Clone)]
struct Conn {
    server: usize,
    generation: u64,
    broken: bool,
    last_deliver: Micros,
    last_reply: Micros,
}

/// What a script call sends.
#[derive(Debug, Clone)]
pub struct Call {
    pub name: &'static str,
    pub source: String,
    pub sha: String,
    pub keys: Vec<String>,
    pub args: Vec<String>,
    /// The replies after which a write must reach the replicas (WAIT), when it must.
    pub replicated: Option<crate::backend::ReplyTest>,
}

/// One request in flight (or done).
struct Request {
    thread: usize,
    client: usize,
    server: usize,
    conn: usize,
    generation: u64,
    call: Call,
    /// How long WAIT may take (the request's timeout).
    wait_for: Micros,
    /// Replicas that must acknowledge its write.
    replicas: u32,
    /// The reply on its way back, decided when the server ran it.
    reply: Option<Result<redis::Value, NodeError>>,
    /// A WAIT in progress: the write's offset.
    waiting: Option<u64>,
    result: Option<Result<redis::Value, NodeError>>,
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
    pub deferred: Vec<usize>,
    /// Its main thread waits for a published wake-up.
    pub listening: Option<usize>,
}

pub struct World {
    pub now: Micros,
    /// Events handled so far.
    pub steps: u64,
    seq: u64,
    events: BinaryHeap<Reverse<Event>>,
    threads: Vec<Thread>,
    ready: VecDeque<usize>,
    running: Option<usize>,
    pub shutdown: bool,
    pub rng: Rng,
    pub servers: Vec<Server>,
    /// Each node a client names: the server it reaches now (its group's master).
    pub nodes: Vec<usize>,
    links: HashMap<(usize, usize), Link>,
    conns: Vec<Conn>,
    current: HashMap<(usize, usize), usize>,
    requests: Vec<Request>,
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
            lock_key: "rlock:jobs".into(),
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

    fn delay(&mut self, client: usize, server: usize) -> Option<Micros> {
        let w = self.weather;
        let link = self.link(client, server).clone();
        if link.cut || self.rng.chance(w.loss) {
            return None;
        }
        let mut d = self.rng.range(w.base.0, w.base.1);
        if self.rng.chance(w.spike_chance) {
            d += self.rng.range(0, w.spike);
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
    pub fn send(&mut self, thread: usize, node: usize, call: Call, timeout: Micros) -> usize {
        let client = self.threads[thread].client;
        let server = self.nodes[node];
        let generation = self.servers[server].generation;
        let conn = match self.current.get(&(client, node)) {
            Some(&c)
                if !self.conns[c].broken
                    && self.conns[c].server == server
                    && self.conns[c].generation == generation =>
            {
                c
            }
            _ => {
                self.conns.push(Conn {
                    server,
                    generation,
                    broken: false,
                    last_deliver: 0,
                    last_reply: 0,
                });
                let c = self.conns.len() - 1;
                self.current.insert((client, node), c);
                c
            }
        };
        let mut call = call;
        if let Some(plant) = self.script_plant {
            plant(&mut call);
        }
        let req = self.requests.len();
        let replicas = if call.replicated.is_some() {
            self.replicas
        } else {
            0
        };
        self.requests.push(Request {
            thread,
            client,
            server,
            conn,
            generation,
            call,
            wait_for: timeout,
            replicas,
            reply: None,
            waiting: None,
            result: None,
        });
        let name = self.requests[req].call.name;
        self.note(format!(
            "c{client} -> {} {name} (req {req})",
            self.servers[server].name
        ));
        if !self.servers[server].up {
            // Refused at once, if the refusal gets back.
            if let Some(d) = self.delay(client, server) {
                self.requests[req].reply = Some(Err(node_error(
                    Fault::Connect,
                    &self.servers[server].name,
                    "Connection refused",
                )));
                self.at(self.now + 2 * d, Kind::Reply { req });
            }
        } else if let Some(d) = self.delay(client, server) {
            let at = (self.now + d).max(self.conns[conn].last_deliver);
            self.conns[conn].last_deliver = at;
            self.at(at, Kind::Deliver { req, copy: false });
            if self.rng.chance(self.weather.duplicate)
                && let Some(d2) = self.delay(client, server)
            {
                // Replayed on the same connection, in its order.
                let again = (at + d2).max(self.conns[conn].last_deliver);
                self.conns[conn].last_deliver = again;
                self.at(again, Kind::Deliver { req, copy: true });
            }
        }
        self.at(self.now + timeout, Kind::Timeout { req });
        req
    }

    /// The result of request `req` (once it is done).
    pub fn result(&mut self, req: usize) -> Option<Result<redis::Value, NodeError>> {
        self.requests[req].result.take()
    }

    fn finish(&mut self, req: usize, result: Result<redis::Value, NodeError>) {
        let r = &mut self.requests[req];
        if r.result.is_some() || r.thread == usize::MAX {
            return;
        }
        let (thread, conn) = (r.thread, r.conn);
        r.thread = usize::MAX;
        if let Err(e) = &result
            && matches!(e.kind, Fault::Timeout | Fault::Io | Fault::Connect)
        {
            self.conns[conn].broken = true;
        }
        self.requests[req].result = Some(result);
        self.threads[thread].pokable = false;
        self.ready(thread);
    }

    /// Handles one event.
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
                    self.finish(req, Err(node_error(Fault::Timeout, &name, "timed out")));
                }
            }
            Kind::WaitOver { req } => self.wait_over(req),
            Kind::Replicate { replica, offset } => self.replicate(replica, offset),
            Kind::Heard { client } => {
                if let Some(thread) = self.clients[client].listening {
                    self.poke(thread);
                }
            }
            Kind::Fault(f) => super::faults::apply(self, f),
        }
    }

    fn deliver(&mut self, req: usize, copy: bool) {
        let (client, server, generation) = {
            let r = &self.requests[req];
            (r.client, r.server, r.generation)
        };
        let s = &self.servers[server];
        if !s.up || s.generation != generation || self.link(client, server).cut {
            return;
        }
        if self.servers[server].frozen {
            self.servers[server].backlog.push((req, copy));
            return;
        }
        self.execute(req, copy);
    }

    /// A server thaws: what reached it meanwhile runs, in order.
    pub fn thaw(&mut self, server: usize) {
        self.servers[server].frozen = false;
        for (req, copy) in std::mem::take(&mut self.servers[server].backlog) {
            if self.servers[server].generation == self.requests[req].generation {
                self.execute(req, copy);
            }
        }
    }

    /// Forgets what a server held in memory for its connections (a crash).
    pub fn crash(&mut self, server: usize) {
        let s = &mut self.servers[server];
        s.up = false;
        s.frozen = false;
        s.backlog.clear();
        s.generation += 1;
        s.listeners.clear();
    }

    /// Starts a crashed server again, empty unless `keep`.
    pub fn restart(&mut self, server: usize, keep: bool) {
        let run = self.rng.next();
        let now = self.now;
        let s = &mut self.servers[server];
        s.up = true;
        s.run_id = format!("{run:040x}");
        s.started = now as i64;
        s.scripting = Scripting::new();
        if !keep {
            s.store = Store::default();
        }
    }

    fn info(&self, server: usize) -> (String, String) {
        let s = &self.servers[server];
        let uptime = (self.now as i64 - s.started) / 1_000_000;
        let info_server = format!(
            "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\nrun_id:{}\r\nuptime_in_seconds:{uptime}\r\n",
            s.run_id
        );
        let info_replication = match s.master {
            Some(m) => format!(
                "# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\nmaster_port:{}\r\n",
                7000 + m
            ),
            None => "# Replication\r\nrole:master\r\n".into(),
        };
        (info_server, info_replication)
    }

    fn execute(&mut self, req: usize, copy: bool) {
        let server = self.requests[req].server;
        let (client, conn) = (self.requests[req].client, self.requests[req].conn);
        let (info_server, info_replication) = self.info(server);
        let now_us = self.servers[server].clock_us(self.now);
        let listeners = self.servers[server]
            .listeners
            .iter()
            .map(|(ch, who)| (ch.clone(), who.len() as i64))
            .collect();
        let call = self.requests[req].call.clone();
        let exec = Exec {
            store: std::mem::take(&mut self.servers[server].store),
            env: Env {
                now_us,
                listeners,
                published: Vec::new(),
                info_server,
                info_replication,
            },
        };
        let before = exec.store.clone();
        let s = &mut self.servers[server];
        let (reply, exec) = s
            .scripting
            .eval(&call.sha, &call.source, &call.keys, &call.args, exec);
        s.store = exec.store;
        let name = s.name.clone();
        self.note(format!(
            "{name} runs {} for c{client}{}: {}",
            call.name,
            if copy { " (a duplicate)" } else { "" },
            short(&reply)
        ));
        self.check_store(server, &call, &before, &reply);
        for (channel, _) in exec.env.published {
            let who = self.servers[server]
                .listeners
                .get(&channel)
                .cloned()
                .unwrap_or_default();
            for c in who {
                if let Some(d) = self.delay(c, server) {
                    self.at(self.now + d, Kind::Heard { client: c });
                }
            }
        }
        // Replication: every script's effects, in order.
        if !self.servers[server].replicas.is_empty() && self.servers[server].store != before {
            let s = &mut self.servers[server];
            s.offset += 1;
            let offset = s.offset;
            s.snapshots.push_back((offset, s.store.clone()));
            if s.snapshots.len() > 64 {
                s.snapshots.pop_front();
            }
            for replica in self.servers[server].replicas.clone() {
                let (lo, hi) = self.weather.replication;
                let d = self.rng.range(lo, hi);
                self.at(self.now + d, Kind::Replicate { replica, offset });
            }
        }
        if copy {
            return;
        }
        let result = match reply {
            Resp::Err(e) => Err(node_error(classify(&e), &name, &e)),
            r => Ok(value(r)),
        };
        let must_wait = self.requests[req].replicas > 0
            && matches!((&result, self.requests[req].call.replicated), (Ok(v), Some(when)) if when(v));
        self.requests[req].reply = Some(result);
        if must_wait {
            let offset = self.servers[server].offset;
            self.requests[req].waiting = Some(offset);
            let wait = self.requests[req].wait_for;
            self.at(self.now + wait, Kind::WaitOver { req });
            self.check_wait(req);
            return;
        }
        self.send_reply(req, client, server, conn);
    }

    fn send_reply(&mut self, req: usize, client: usize, server: usize, conn: usize) {
        if let Some(d) = self.delay(client, server) {
            let at = (self.now + d).max(self.conns[conn].last_reply);
            self.conns[conn].last_reply = at;
            self.at(at, Kind::Reply { req });
        }
    }

    /// How many replicas of `server` have its write `offset`.
    fn acked(&self, server: usize, offset: u64) -> u32 {
        self.servers[server]
            .replicas
            .iter()
            .filter(|r| self.servers[**r].up && self.servers[**r].applied >= offset)
            .count() as u32
    }

    /// A WAIT that has its replicas answers at once.
    fn check_wait(&mut self, req: usize) {
        let Some(offset) = self.requests[req].waiting else {
            return;
        };
        let server = self.requests[req].server;
        if self.acked(server, offset) >= self.requests[req].replicas {
            self.requests[req].waiting = None;
            let (client, conn) = (self.requests[req].client, self.requests[req].conn);
            self.send_reply(req, client, server, conn);
        }
    }

    fn wait_over(&mut self, req: usize) {
        let Some(offset) = self.requests[req].waiting.take() else {
            return;
        };
        let server = self.requests[req].server;
        let acked = self.acked(server, offset);
        let name = self.servers[server].name.clone();
        self.requests[req].reply = Some(Err(node_error(
            Fault::Replicas,
            &name,
            &format!(
                "only {acked} of {} replicas acknowledged",
                self.requests[req].replicas
            ),
        )));
        let (client, conn) = (self.requests[req].client, self.requests[req].conn);
        self.send_reply(req, client, server, conn);
    }

    fn replicate(&mut self, replica: usize, offset: u64) {
        let Some(master) = self.servers[replica].master else {
            return;
        };
        if !self.servers[replica].up || self.servers[replica].repl_cut || !self.servers[master].up {
            return;
        }
        // The stream brings everything up to the master's latest write it has sent.
        let Some(store) = self.servers[master]
            .snapshots
            .iter()
            .rev()
            .find(|(o, _)| *o <= offset)
            .map(|(o, s)| (*o, s.clone()))
        else {
            return;
        };
        if store.0 > self.servers[replica].applied {
            self.servers[replica].applied = store.0;
            self.servers[replica].store = store.1;
        }
        let waiting: Vec<usize> = (0..self.requests.len())
            .filter(|r| self.requests[*r].waiting.is_some() && self.requests[*r].server == master)
            .collect();
        for req in waiting {
            self.check_wait(req);
        }
    }

    /// The store-level invariants after a script ran.
    fn check_store(&mut self, server: usize, call: &Call, before: &Store, reply: &Resp) {
        let now_ms = self.servers[server].clock_us(self.now) / 1000;
        if call.name == "acquire"
            && matches!(reply, Resp::Array(items) if items.first() == Some(&Resp::Bulk("ok".into())))
            && let Some(token) = super::check::arg(&call.args, "token")
        {
            self.check.regranted(token);
        }
        if let Some(v) =
            self.check
                .line_order(call, before, &self.servers[server].store, reply, now_ms)
        {
            self.violation(v);
        }
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
    }

    pub fn unpause(&mut self, client: usize) {
        self.clients[client].paused_until = 0;
        for t in std::mem::take(&mut self.clients[client].deferred) {
            self.ready.push_back(t);
        }
    }
}

fn short(r: &Resp) -> String {
    let s = format!("{r:?}");
    s.chars().take(160).collect()
}

pub fn node_error(kind: Fault, node: &str, detail: &str) -> NodeError {
    NodeError {
        kind,
        node: node.to_string(),
        detail: detail.to_string(),
    }
}

fn classify(e: &str) -> Fault {
    if e.contains("WRONGTYPE") {
        Fault::WrongType
    } else if e.contains("NOPERM") {
        Fault::Denied
    } else {
        Fault::Other
    }
}

/// A reply as the redis crate gives it.
pub fn value(r: Resp) -> redis::Value {
    match r {
        Resp::Nil => redis::Value::Nil,
        Resp::Int(i) => redis::Value::Int(i),
        Resp::Bulk(s) => redis::Value::BulkString(s.into_bytes()),
        Resp::Status(s) => redis::Value::SimpleString(s),
        Resp::Err(e) => redis::Value::SimpleString(e),
        Resp::Array(items) => redis::Value::Array(items.into_iter().map(value).collect()),
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
