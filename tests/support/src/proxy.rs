//! `Proxy`: a fault-injecting TCP relay on 127.0.0.1 in front of one server, switched at run
//! time, per direction and per source process, between passing, delaying, blackholing and
//! resetting its links. It is how the tests make *network* faults between live processes: a
//! master cut off from its replicas and Sentinels while a client still reaches it, a holder
//! whose link drops everything, links slowed with jitter.
//!
//! Every party that should see a fault must talk through a proxy: rlock through `-u` with the
//! proxy's port, replicas through `replicaof` the proxy's port, Sentinels and Cluster nodes
//! through Redis's announce options (`replica-announce-port`, `cluster-announce-port` and
//! `cluster-announce-bus-port`) set to proxy ports.
//!
//! A blackhole reads and drops what is sent, in the blackholed direction, and says nothing: both
//! ends see their writes succeed and no reply come, as with a link that drops packets. Bytes
//! dropped mid-stream would leave the two ends out of step once the link heals, so a connection
//! that lost bytes is closed when its link heals (as TCP gives up on a connection whose packets
//! were dropped for long enough); new connections then pass.
//!
//! A side that closes its end closes it as TCP does: what it sent before is still delivered (at
//! its delayed time), and then the other end reads the end of the stream. A client that gives up
//! on a delayed request does not take the request back: the server still runs it, late.
//!
//! Rules can name source processes (by pid): a connection's source is the process that owns its
//! client socket, found through `/proc/net/tcp` and `/proc/PID/fd` when a rule asks for it.

use std::collections::HashSet;
use std::fs;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// What a link does with the bytes sent over it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward at once.
    Pass,
    /// Forward `base` plus up to `jitter` later, in order.
    Delay { base: Duration, jitter: Duration },
    /// Read and drop; answer nothing.
    Blackhole,
    /// Close every connection, and every new one as soon as it is accepted.
    Reset,
}

/// One direction of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// From the client to the server behind the proxy.
    ToServer,
    /// From the server back to the client.
    ToClient,
}

impl Dir {
    fn index(self) -> usize {
        match self {
            Dir::ToServer => 0,
            Dir::ToClient => 1,
        }
    }
}

/// The modes of both directions: `[to server, to client]`.
type Modes = [Mode; 2];

/// A rule for the connections of some source processes.
struct Rule {
    pids: HashSet<i32>,
    modes: Modes,
}

/// One relayed connection.
struct Conn {
    client: TcpStream,
    server: TcpStream,
    /// The pid of the process that owns the client end, once a rule asked for it.
    source: Mutex<Option<i32>>,
    /// Bytes were dropped (blackhole): the stream is out of step and is closed on healing.
    lost_bytes: AtomicBool,
    /// The client has sent something.
    sent: AtomicBool,
    /// How many directions have ended (read to the end, and all of it written on).
    ended: AtomicUsize,
    closed: AtomicBool,
}

impl Conn {
    fn close(&self) {
        if !self.closed.swap(true, Ordering::SeqCst) {
            let _ = self.client.shutdown(Shutdown::Both);
            let _ = self.server.shutdown(Shutdown::Both);
        }
    }
}

struct State {
    default: Modes,
    rules: Vec<Rule>,
    conns: Vec<Arc<Conn>>,
}

impl State {
    fn modes_of(&self, conn: &Conn) -> Modes {
        let source = *conn.source.lock().unwrap();
        source
            .and_then(|pid| self.rules.iter().rev().find(|r| r.pids.contains(&pid)))
            .map_or(self.default, |r| r.modes)
    }

    /// Closes what the current modes say must go: connections in Reset, and connections that
    /// lost bytes whose link no longer blackholes.
    fn enforce(&mut self) {
        for conn in &self.conns {
            let modes = self.modes_of(conn);
            let reset = modes.contains(&Mode::Reset);
            let healed =
                conn.lost_bytes.load(Ordering::SeqCst) && !modes.contains(&Mode::Blackhole);
            if reset || healed {
                conn.close();
            }
        }
        self.conns.retain(|c| !c.closed.load(Ordering::SeqCst));
    }

    /// Finds the source pid of every open connection not yet placed, among `pids`: the socket
    /// table and each pid's descriptors are read once for them all, since every relay waits
    /// for this lock (a proxy that stalls for long would look like a dead server to all).
    fn place(&self, pids: &HashSet<i32>, proxy_port: u16) {
        let unplaced: Vec<&Arc<Conn>> = self
            .conns
            .iter()
            .filter(|c| c.source.lock().unwrap().is_none())
            .collect();
        if unplaced.is_empty() {
            return;
        }
        let owners = Owners::read(proxy_port, pids);
        for conn in unplaced {
            *conn.source.lock().unwrap() = owners.of(&conn.client);
        }
    }

    fn watched(&self) -> HashSet<i32> {
        self.rules
            .iter()
            .flat_map(|r| r.pids.iter().copied())
            .collect()
    }
}

struct Shared {
    state: Mutex<State>,
    stop: AtomicBool,
    /// How many connections have sent the server something, ever.
    senders: AtomicUsize,
    /// How many pieces were read in each direction, ever (`Dir::index`).
    pieces: [AtomicUsize; 2],
}

/// A relay from a free port on 127.0.0.1 to `127.0.0.1:target`. Every connection is closed on
/// drop.
pub struct Proxy {
    port: u16,
    shared: Arc<Shared>,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl Proxy {
    /// Listens on a free port and relays to `target`, passing everything.
    pub fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let port = listener.local_addr().expect("the proxy's address").port();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                default: [Mode::Pass; 2],
                rules: Vec::new(),
                conns: Vec::new(),
            }),
            stop: AtomicBool::new(false),
            senders: AtomicUsize::new(0),
            pieces: [AtomicUsize::new(0), AtomicUsize::new(0)],
        });
        let acceptor = {
            let shared = shared.clone();
            thread::spawn(move || accept_loop(listener, port, target, shared))
        };
        Proxy {
            port,
            shared,
            acceptor: Some(acceptor),
        }
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT` of the proxy.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Both directions of every link (sources that a rule names excepted) to `mode`.
    pub fn set(&self, mode: Mode) {
        self.update(|s| s.default = [mode; 2]);
    }

    /// One direction of every link (sources that a rule names excepted) to `mode`.
    pub fn set_dir(&self, dir: Dir, mode: Mode) {
        self.update(|s| s.default[dir.index()] = mode);
    }

    /// Both directions of the links of the processes `pids` to `mode` (a later rule for the
    /// same pid wins).
    pub fn set_for(&self, pids: &[i32], mode: Mode) {
        let pids: HashSet<i32> = pids.iter().copied().collect();
        let port = self.port;
        self.update(|s| {
            s.place(&pids, port);
            s.rules.push(Rule {
                pids,
                modes: [mode; 2],
            });
        });
    }

    /// Every link passes again, every rule forgotten; connections that lost bytes are closed.
    pub fn heal(&self) {
        self.update(|s| {
            s.default = [Mode::Pass; 2];
            s.rules.clear();
        });
    }

    /// A switch for the soak engine's link: `true` blackholes the link both ways, `false` heals
    /// it. The proxy lives as long as the switch.
    pub fn blackhole_switch(self: &Arc<Self>) -> impl Fn(bool) + Send + Sync + 'static {
        let proxy = Arc::clone(self);
        move |cut| {
            if cut {
                proxy.set(Mode::Blackhole);
            } else {
                proxy.heal();
            }
        }
    }

    /// How many connections are open through the proxy now.
    pub fn open_connections(&self) -> usize {
        let mut state = self.shared.state.lock().unwrap();
        state.conns.retain(|c| !c.closed.load(Ordering::SeqCst));
        state.conns.len()
    }

    /// How many connections have sent the server something since the proxy started, closed ones
    /// included: a client's next request on a connection of its own shows as one more.
    pub fn senders(&self) -> usize {
        self.shared.senders.load(Ordering::SeqCst)
    }

    /// How many pieces have been read in direction `dir` since the proxy started, and passed on
    /// (at once, or later when delayed): a reply read to the client counts once it is read.
    pub fn pieces(&self, dir: Dir) -> usize {
        self.shared.pieces[dir.index()].load(Ordering::SeqCst)
    }

    fn update(&self, change: impl FnOnce(&mut State)) {
        let mut state = self.shared.state.lock().unwrap();
        change(&mut state);
        state.enforce();
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wake the acceptor.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        let state = self.shared.state.lock().unwrap();
        for conn in &state.conns {
            conn.close();
        }
    }
}

fn accept_loop(listener: TcpListener, port: u16, target: u16, shared: Arc<Shared>) {
    for client in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            return;
        }
        let Ok(client) = client else { continue };
        let _ = client.set_nodelay(true);
        let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
            // Nothing behind the proxy: the client sees its connection closed.
            let _ = client.shutdown(Shutdown::Both);
            continue;
        };
        let _ = server.set_nodelay(true);
        let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
            continue;
        };
        let conn = Arc::new(Conn {
            client,
            server,
            source: Mutex::new(None),
            lost_bytes: AtomicBool::new(false),
            sent: AtomicBool::new(false),
            ended: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        });
        {
            let mut state = shared.state.lock().unwrap();
            let watched = state.watched();
            if !watched.is_empty() {
                *conn.source.lock().unwrap() = Owners::read(port, &watched).of(&conn.client);
            }
            if state.modes_of(&conn).contains(&Mode::Reset) {
                conn.close();
                continue;
            }
            state.conns.push(conn.clone());
        }
        pump(conn.clone(), shared.clone(), Dir::ToServer, c2);
        pump(conn, shared.clone(), Dir::ToClient, s2);
    }
}

/// Relays one direction of `conn`: a reader that applies the direction's mode, and a writer
/// that sends each piece at its time (so that delays keep the bytes in order). The end of the
/// stream is passed on after the last piece; the connection closes once both directions ended.
fn pump(conn: Arc<Conn>, shared: Arc<Shared>, dir: Dir, mut from: TcpStream) {
    let (tx, rx) = channel::<(Instant, Vec<u8>)>();
    let mut to = match dir {
        Dir::ToServer => conn.server.try_clone(),
        Dir::ToClient => conn.client.try_clone(),
    }
    .expect("clone a relayed socket");
    let writer_conn = conn.clone();
    thread::spawn(move || {
        for (at, bytes) in rx {
            let now = Instant::now();
            if at > now {
                thread::sleep(at - now);
            }
            if to.write_all(&bytes).is_err() {
                writer_conn.close();
                return;
            }
        }
        // The reader came to the end of the stream, and everything before it is written on.
        let _ = to.shutdown(Shutdown::Write);
        if writer_conn.ended.fetch_add(1, Ordering::SeqCst) == 1 {
            writer_conn.close();
        }
    });
    thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        let mut last = Instant::now();
        loop {
            let n = match from.read(&mut buf) {
                // The end of the stream (or of the connection): the writer passes it on.
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if dir == Dir::ToServer && !conn.sent.swap(true, Ordering::SeqCst) {
                shared.senders.fetch_add(1, Ordering::SeqCst);
            }
            let mode = {
                let state = shared.state.lock().unwrap();
                state.modes_of(&conn)[dir.index()]
            };
            let at = match mode {
                Mode::Reset => break,
                Mode::Blackhole => {
                    conn.lost_bytes.store(true, Ordering::SeqCst);
                    continue;
                }
                _ if conn.lost_bytes.load(Ordering::SeqCst) => break,
                Mode::Pass => Instant::now(),
                Mode::Delay { base, jitter } => Instant::now() + base + random_upto(jitter),
            };
            // Never before what was sent earlier in this direction.
            last = last.max(at);
            if tx.send((last, buf[..n].to_vec())).is_err() {
                break;
            }
            shared.pieces[dir.index()].fetch_add(1, Ordering::SeqCst);
        }
        conn.close();
    });
}

/// A duration in `[0, max]`, different on every call.
fn random_upto(max: Duration) -> Duration {
    if max.is_zero() {
        return max;
    }
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let r = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    Duration::from_nanos(r % (max.as_nanos() as u64 + 1))
}

/// Which of some processes own the client ends of the connections to a proxy: the kernel's
/// socket table names each client socket's inode (by its port), and the owner's descriptor
/// table holds it.
struct Owners {
    /// Client port → socket inode, for the connections to the proxy's port.
    inodes: std::collections::HashMap<u16, String>,
    /// Each process's socket descriptors (`socket:[INODE]`).
    sockets: Vec<(i32, HashSet<String>)>,
}

impl Owners {
    /// Reads the socket tables and the descriptors of `pids` once.
    fn read(proxy_port: u16, pids: &HashSet<i32>) -> Owners {
        let port_of = |addr: &str| {
            addr.rsplit_once(':')
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
        };
        let mut inodes = std::collections::HashMap::new();
        for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
            let text = fs::read_to_string(table).unwrap_or_default();
            for line in text.lines().skip(1) {
                let mut fields = line.split_whitespace();
                let (Some(local), Some(remote), Some(inode)) =
                    (fields.nth(1), fields.next(), fields.nth(6))
                else {
                    continue;
                };
                // A socket in TIME_WAIT has inode 0 and no owner.
                if port_of(remote) == Some(proxy_port)
                    && inode != "0"
                    && let Some(local) = port_of(local)
                {
                    inodes.entry(local).or_insert_with(|| inode.to_string());
                }
            }
        }
        let sockets = pids
            .iter()
            .map(|&pid| {
                let fds = fs::read_dir(format!("/proc/{pid}/fd"))
                    .map(|fds| {
                        fds.flatten()
                            .filter_map(|fd| fs::read_link(fd.path()).ok())
                            .map(|t| t.to_string_lossy().into_owned())
                            .filter(|t| t.starts_with("socket:"))
                            .collect()
                    })
                    .unwrap_or_default();
                (pid, fds)
            })
            .collect();
        Owners { inodes, sockets }
    }

    /// The pid, among those read, of the process that owns the client end of `accepted` (a
    /// socket the proxy accepted).
    fn of(&self, accepted: &TcpStream) -> Option<i32> {
        let inode = self.inodes.get(&accepted.peer_addr().ok()?.port())?;
        let wanted = format!("socket:[{inode}]");
        self.sockets
            .iter()
            .find(|(_, fds)| fds.contains(&wanted))
            .map(|(pid, _)| *pid)
    }
}
