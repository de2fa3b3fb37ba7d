//! The servers and what travels to them, as the simulation keeps them: a server's state, a
//! client's link and connection to it, a script call and a request in flight. How they move is
//! `net.rs`'s.

use std::collections::{BTreeMap, VecDeque};

use rlock::backend::{Fault, NodeError};

use super::Micros;
use super::lua::{Host, Scripting};
use super::store::Store;

/// A server, as the simulation keeps it.
pub struct Server {
    pub name: String,
    pub store: Store,
    pub scripting: Scripting,
    /// How its Lua hands replies to scripts (kept across restarts).
    pub host: Host,
    pub up: bool,
    pub frozen: bool,
    /// Requests that reached it while frozen, in order.
    pub backlog: Vec<(usize, bool)>,
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
    pub snapshots: VecDeque<(u64, Store)>,
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
            host: Host::Redis,
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
pub struct Conn {
    pub server: usize,
    pub generation: u64,
    pub broken: bool,
    pub last_deliver: Micros,
    pub last_reply: Micros,
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
    pub replicated: Option<rlock::backend::ReplyTest>,
}

/// One request in flight (or done).
pub struct Request {
    pub thread: usize,
    pub client: usize,
    pub server: usize,
    pub conn: usize,
    pub generation: u64,
    pub call: Call,
    /// How long WAIT may take (the request's timeout).
    pub wait_for: Micros,
    /// Replicas that must acknowledge its write.
    pub replicas: u32,
    /// The reply on its way back, decided when the server ran it.
    pub reply: Option<Result<redis::Value, NodeError>>,
    /// A WAIT in progress: the write's offset.
    pub waiting: Option<u64>,
    pub result: Option<Result<redis::Value, NodeError>>,
}

impl Call {
    /// The value of its argument `name` (ARGV by name).
    pub fn arg(&self, name: &str) -> Option<&String> {
        self.args
            .chunks(2)
            .find(|p| p[0] == name)
            .and_then(|p| p.get(1))
    }
}

/// The server's end of one subscription.
pub struct Ear {
    pub client: usize,
    pub server: usize,
    pub channel: String,
    /// The request that subscribed, and the thread that sent it.
    pub req: usize,
    pub thread: usize,
    /// The server's end; None once closed.
    pub sock: Option<std::os::unix::net::UnixStream>,
    /// The client's end, until its thread takes it (on SUBSCRIBE's reply).
    pub theirs: Option<std::os::unix::net::UnixStream>,
}

pub fn node_error(kind: Fault, node: &str, detail: &str) -> NodeError {
    NodeError {
        kind,
        node: node.to_string(),
        detail: detail.to_string(),
    }
}
