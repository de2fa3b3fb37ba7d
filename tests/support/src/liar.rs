//! `Liar`: a relay on 127.0.0.1 in front of one real server that lies in answer to chosen
//! requests. Every request still reaches the server and runs there (a grant the liar hides is
//! a real grant, whose give-back a test checks against the real key); the server's reply to a
//! chosen request is then replaced by the lie: other bytes, the same trickled, or a header
//! followed by endless data.
//!
//! The relay works one request at a time per connection, in order: it reads a whole request
//! (RESP arrays of bulk strings, as every client sends), forwards it, reads the server's whole
//! reply, and passes it on or lies. Pipelined requests are served one after the other, as the
//! server itself would.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// What the liar sends instead of the server's reply.
#[derive(Debug, Clone)]
pub enum Lie {
    /// These bytes, at once.
    Reply(Vec<u8>),
    /// These bytes, one at a time, `every` apart; then the connection stays open and silent.
    Trickle(Vec<u8>, Duration),
    /// `head`, then `filler` over and over for as long as the client reads.
    Stream { head: Vec<u8>, filler: Vec<u8> },
}

/// Which requests are lied to: given the request's words.
pub type Chosen = fn(&[Vec<u8>]) -> bool;

/// An acquire.lua request (an EVALSHA or EVAL with the argument `join`, which no other script
/// of rlock's takes).
pub fn grant_request(words: &[Vec<u8>]) -> bool {
    is_script(words) && words.iter().any(|w| w == b"join")
}

/// A script request that carries an argument named `name` (rlock's scripts take their
/// arguments by name).
pub fn script_with_argument(words: &[Vec<u8>], name: &[u8]) -> bool {
    is_script(words) && words.iter().skip(3).any(|w| w == name)
}

fn is_script(words: &[Vec<u8>]) -> bool {
    words
        .first()
        .is_some_and(|w| w.eq_ignore_ascii_case(b"EVALSHA") || w.eq_ignore_ascii_case(b"EVAL"))
}

struct Shared {
    target: u16,
    chosen: Chosen,
    lie: Lie,
    /// How many lies were told (a trickle or a stream counts when it starts).
    told: AtomicUsize,
    stop: AtomicBool,
    /// Every socket of every link, to close on drop.
    sockets: Mutex<Vec<TcpStream>>,
}

/// A lying relay from a free port on 127.0.0.1 to `127.0.0.1:target`. Every connection is
/// closed on drop.
pub struct Liar {
    port: u16,
    shared: Arc<Shared>,
}

impl Liar {
    /// Relays to the server on `target`, telling `lie` in answer to every request `chosen`
    /// picks.
    pub fn start(target: u16, chosen: Chosen, lie: Lie) -> Liar {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the liar's port");
        let port = listener.local_addr().expect("the liar's address").port();
        let shared = Arc::new(Shared {
            target,
            chosen,
            lie,
            told: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            sockets: Mutex::new(Vec::new()),
        });
        let accepting = Arc::clone(&shared);
        thread::spawn(move || {
            for client in listener.incoming() {
                if accepting.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(client) = client else { continue };
                let shared = Arc::clone(&accepting);
                thread::spawn(move || relay(&shared, client));
            }
        });
        Liar { port, shared }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// How many lies were told so far.
    pub fn told(&self) -> usize {
        self.shared.told.load(Ordering::SeqCst)
    }
}

impl Drop for Liar {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        for s in self.shared.sockets.lock().unwrap().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
        // Wakes the accepting thread, which then sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Serves one client connection until either end closes it.
fn relay(shared: &Shared, mut client: TcpStream) {
    let Ok(mut server) = TcpStream::connect(("127.0.0.1", shared.target)) else {
        return;
    };
    {
        let mut sockets = shared.sockets.lock().unwrap();
        sockets.extend(client.try_clone().ok());
        sockets.extend(server.try_clone().ok());
    }
    let _ = client.set_nodelay(true);
    let (mut from_client, mut from_server) = (Vec::new(), Vec::new());
    while let Some((words, len)) = fill_until(&mut client, &mut from_client, request) {
        let req: Vec<u8> = from_client.drain(..len).collect();
        if server.write_all(&req).is_err() {
            break;
        }
        let Some((_, len)) = fill_until(&mut server, &mut from_server, reply) else {
            break;
        };
        let answer: Vec<u8> = from_server.drain(..len).collect();
        let told = match (shared.chosen)(&words) {
            true => {
                shared.told.fetch_add(1, Ordering::SeqCst);
                tell(&shared.lie, &mut client, &shared.stop)
            }
            false => client.write_all(&answer).is_ok(),
        };
        if !told {
            break;
        }
    }
    let _ = client.shutdown(Shutdown::Both);
    let _ = server.shutdown(Shutdown::Both);
}

/// Sends `lie` to `client`; false once the client is gone (or the liar stops).
fn tell(lie: &Lie, client: &mut TcpStream, stop: &AtomicBool) -> bool {
    match lie {
        Lie::Reply(bytes) => client.write_all(bytes).is_ok(),
        Lie::Trickle(bytes, every) => {
            for b in bytes {
                if stop.load(Ordering::SeqCst) || client.write_all(&[*b]).is_err() {
                    return false;
                }
                thread::sleep(*every);
            }
            // Silent from here on: the client waits for the rest of a reply that never comes.
            let mut sink = [0u8; 4096];
            while !stop.load(Ordering::SeqCst) && matches!(client.read(&mut sink), Ok(n) if n > 0) {
            }
            false
        }
        Lie::Stream { head, filler } => {
            if client.write_all(head).is_err() {
                return false;
            }
            let chunk = filler.repeat((64 * 1024 / filler.len().max(1)).max(1));
            while !stop.load(Ordering::SeqCst) {
                if client.write_all(&chunk).is_err() {
                    return false;
                }
            }
            false
        }
    }
}

/// Reads from `from` into `buf` until `parse` finds a whole value at its start: the value and
/// its length. None when the connection ends first.
fn fill_until<T>(
    from: &mut TcpStream,
    buf: &mut Vec<u8>,
    parse: fn(&[u8]) -> Option<(T, usize)>,
) -> Option<(T, usize)> {
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some(found) = parse(buf) {
            return Some(found);
        }
        match from.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// One line at `at` (without its CRLF), and where the next starts.
fn line(buf: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = buf.get(at..)?;
    let end = rest.windows(2).position(|w| w == b"\r\n")?;
    Some((&rest[..end], at + end + 2))
}

fn number(text: &[u8]) -> Option<i64> {
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// A whole request at the start of `buf` (an array of bulk strings): its words, its length.
fn request(buf: &[u8]) -> Option<(Vec<Vec<u8>>, usize)> {
    let (head, mut at) = line(buf, 0)?;
    let n = number(head.strip_prefix(b"*")?)?;
    let mut words = Vec::new();
    for _ in 0..n {
        let (head, start) = line(buf, at)?;
        let len = usize::try_from(number(head.strip_prefix(b"$")?)?).ok()?;
        words.push(buf.get(start..start + len)?.to_vec());
        at = start + len + 2;
        if buf.len() < at {
            return None;
        }
    }
    Some((words, at))
}

/// The length of a whole RESP2 reply at `at` in `buf`, counted to its end.
fn reply_end(buf: &[u8], at: usize) -> Option<usize> {
    let (head, next) = line(buf, at)?;
    let n = || number(&head[1..]);
    match head.first()? {
        b'$' => match usize::try_from(n()?) {
            Ok(len) => (buf.len() >= next + len + 2).then_some(next + len + 2),
            Err(_) => Some(next),
        },
        b'*' => {
            let mut at = next;
            for _ in 0..n()?.max(0) {
                at = reply_end(buf, at)?;
            }
            Some(at)
        }
        _ => Some(next),
    }
}

fn reply(buf: &[u8]) -> Option<((), usize)> {
    reply_end(buf, 0).map(|len| ((), len))
}
