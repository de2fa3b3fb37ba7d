//! The managed-service profile (`RLOCK_TEST_MANAGED=1`): every `RedisServer` the harness starts
//! looks to rlock the way a managed Redis does (ElastiCache Serverless is the strictest):
//!
//! - TLS only: rlock reaches the server through a front that speaks TLS, with a certificate of a
//!   CA made once per test process (which `rlock()` trusts through `SSL_CERT_FILE`, as a system's
//!   roots trust a service's), and relays to the server (or to its network's proxy);
//! - a user that may not run INFO, CONFIG, DEBUG or KEYS (`managed`), as whom rlock logs in;
//! - no script without keys: an EVAL or EVALSHA with numkeys 0 is refused with an error reply,
//!   written to the log of the test process and counted (`refused`). The refusal is the server's
//!   own answer to a script that raises it, sent in the refused command's place, so that the
//!   replies of a pipeline keep their order.
//!
//! The harness's own connections (`RedisServer::conn`, `cmd`, …) stay plain, on the server's
//! port, as the default user. Like `RLOCK_TEST_ACL`, the profile reaches the tests through
//! `rlock_at` and `acl::suite_url`; a test that builds its URL itself is not run as a managed
//! service's client.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::certs::TestCerts;

/// The user rlock logs in as, and its password.
pub const USER: &str = "managed";
pub const PASSWORD: &str = "mgd-Tst-pw-62";

/// What the front answers a script without keys.
const REFUSAL: &str = "ERR this service runs no script without keys (EVAL/EVALSHA with numkeys 0)";

/// Whether `RLOCK_TEST_MANAGED` asks for the profile. Panics on a value it cannot read: a typo
/// must not run the suite as a plain server's client unnoticed.
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| match std::env::var("RLOCK_TEST_MANAGED").as_deref() {
        Ok("1") => true,
        Ok("" | "0") | Err(_) => false,
        Ok(other) => panic!("RLOCK_TEST_MANAGED={other}: expected 1 (or 0)"),
    })
}

/// The `redis-server` arguments that make the `managed` user: every command and key, but for
/// what managed services keep to themselves. Given at start, so a restarted server has it from
/// its first reply.
pub fn user_args() -> Vec<String> {
    if !enabled() {
        return Vec::new();
    }
    let pass = format!(">{PASSWORD}");
    [
        "--user", USER, "on", &pass, "~*", "&*", "+@all", "-info", "-config", "-debug", "-keys",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The CA every front's certificate is signed by, for rlock to trust; None without the profile.
pub fn ca_file() -> Option<&'static Path> {
    enabled().then(|| shared().certs.ca.as_path())
}

/// `rediss://managed:PASSWORD@127.0.0.1:FRONT` of the server on `port`, if it has a front.
pub fn url(port: u16) -> Option<String> {
    let front = front_port(port)?;
    Some(format!("rediss://{USER}:{PASSWORD}@127.0.0.1:{front}"))
}

/// The port of the front of the server on `port`, if it has one.
pub fn front_port(port: u16) -> Option<u16> {
    fronts().lock().unwrap().get(&port).copied()
}

/// How many scripts without keys the fronts of this process refused.
pub fn refused() -> usize {
    REFUSED.load(Ordering::SeqCst)
}

static REFUSED: AtomicUsize = AtomicUsize::new(0);

struct Shared {
    certs: TestCerts,
    config: Arc<rustls::ServerConfig>,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let certs = TestCerts::new();
        let chain = CertificateDer::pem_file_iter(&certs.server_cert)
            .expect("read the front's certificate")
            .collect::<Result<Vec<_>, _>>()
            .expect("the front's certificate");
        let key = PrivateKeyDer::from_pem_file(&certs.server_key).expect("the front's key");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .expect("the front's TLS settings");
        Shared {
            certs,
            config: Arc::new(config),
        }
    })
}

/// Server port → the port of its front.
fn fronts() -> &'static Mutex<HashMap<u16, u16>> {
    static FRONTS: OnceLock<Mutex<HashMap<u16, u16>>> = OnceLock::new();
    FRONTS.get_or_init(Default::default)
}

/// A TLS front on a free port of 127.0.0.1, relaying to `127.0.0.1:target`; stopped on drop
/// (its connections end as they next wake, within a fifth of a second).
pub struct Front {
    server_port: u16,
    port: u16,
    stop: Arc<AtomicBool>,
    acceptor: Option<thread::JoinHandle<()>>,
}

impl Front {
    /// The front of the server on `server_port`, relaying to `target` (the server's port, or
    /// its network's proxy).
    pub fn start(server_port: u16, target: u16) -> Front {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the front");
        let port = listener.local_addr().expect("the front's address").port();
        let stop = Arc::new(AtomicBool::new(false));
        let acceptor = {
            let stop = stop.clone();
            thread::spawn(move || {
                for client in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(client) = client else { continue };
                    let stop = stop.clone();
                    thread::spawn(move || {
                        let _ = relay(client, target, &stop);
                    });
                }
            })
        };
        fronts().lock().unwrap().insert(server_port, port);
        Front {
            server_port,
            port,
            stop,
            acceptor: Some(acceptor),
        }
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        fronts().lock().unwrap().remove(&self.server_port);
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the acceptor up to see the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// One client's connection: TLS with the client, plain with the server, requests read whole
/// and passed on (a script without keys refused), replies passed back as they come. A server that
/// hangs up (a full one, after its refusal) has what it said delivered once the handshake is
/// done, and then the client's connection ends too.
fn relay(mut client: TcpStream, target: u16, stop: &AtomicBool) -> io::Result<()> {
    let mut server = TcpStream::connect(("127.0.0.1", target))?;
    let mut tls =
        rustls::ServerConnection::new(shared().config.clone()).map_err(io::Error::other)?;
    let mut requests = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    let mut server_open = true;
    loop {
        while tls.wants_write() {
            tls.write_tls(&mut client)?;
        }
        if !server_open && !tls.is_handshaking() {
            tls.send_close_notify();
            while tls.wants_write() {
                tls.write_tls(&mut client)?;
            }
            return Ok(());
        }
        let (from_client, from_server) = {
            let wanted = PollFlags::POLLIN;
            let mut fds = [
                PollFd::new(client.as_fd(), wanted),
                PollFd::new(server.as_fd(), wanted),
            ];
            let watched = if server_open { 2 } else { 1 };
            poll(&mut fds[..watched], PollTimeout::from(200u16))?;
            let ready = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
            (ready(&fds[0]), server_open && ready(&fds[1]))
        };
        if stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        if from_client {
            if tls.read_tls(&mut client)? == 0 {
                return Ok(());
            }
            tls.process_new_packets().map_err(io::Error::other)?;
            loop {
                match tls.reader().read(&mut buf) {
                    Ok(0) => return Ok(()),
                    Ok(n) => requests.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e),
                }
            }
            let passed = pass_on(&mut requests);
            if server_open {
                server.write_all(&passed)?;
            }
        }
        if from_server {
            match server.read(&mut buf) {
                Ok(0) | Err(_) => server_open = false,
                Ok(n) => tls.writer().write_all(&buf[..n])?,
            }
        }
    }
}

/// The whole requests at the start of `requests`, taken off it, as the server gets them: a
/// script without keys replaced by one that raises the refusal.
fn pass_on(requests: &mut Vec<u8>) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some((len, args)) = request(requests) {
        let arg = |i: usize| args.get(i).map(|&(s, e)| &requests[s..e]);
        let script = arg(0)
            .is_some_and(|a| a.eq_ignore_ascii_case(b"EVAL") || a.eq_ignore_ascii_case(b"EVALSHA"));
        if script && arg(2) == Some(b"0") {
            REFUSED.fetch_add(1, Ordering::SeqCst);
            eprintln!(
                "managed-service front: refused {} with no keys",
                String::from_utf8_lossy(arg(0).unwrap_or_default())
            );
            let raise = format!("return redis.error_reply('{REFUSAL}')");
            out.extend_from_slice(&encode(&["EVAL", &raise, "0"]));
        } else {
            out.extend_from_slice(&requests[..len]);
        }
        requests.drain(..len);
    }
    out
}

/// The length of the whole request at the start of `buf` and where its arguments lie; None
/// until it has all come. An inline request (no `*`) is its line, with no arguments read.
fn request(buf: &[u8]) -> Option<(usize, Vec<(usize, usize)>)> {
    match buf.first()? {
        b'*' => {}
        _ => return Some((buf.iter().position(|&b| b == b'\n')? + 1, Vec::new())),
    }
    let (n, mut at) = number(buf, 1)?;
    let mut args = Vec::new();
    for _ in 0..n {
        if *buf.get(at)? != b'$' {
            // Not what a client sends: passed on as it is, for the server to refuse.
            return Some((buf.len(), Vec::new()));
        }
        let (len, start) = number(buf, at + 1)?;
        let end = start + len as usize;
        if buf.len() < end + 2 {
            return None;
        }
        args.push((start, end));
        at = end + 2;
    }
    Some((at, args))
}

/// The number written at `from`, up to its `\r\n`, and where what follows starts.
fn number(buf: &[u8], from: usize) -> Option<(i64, usize)> {
    let end = from + buf.get(from..)?.iter().position(|&b| b == b'\r')?;
    buf.get(end + 1)?;
    let n = std::str::from_utf8(&buf[from..end]).ok()?.parse().ok()?;
    Some((n, end + 2))
}

/// A request as a client sends it.
fn encode(words: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", words.len()).into_bytes();
    for w in words {
        out.extend_from_slice(format!("${}\r\n{w}\r\n", w.len()).as_bytes());
    }
    out
}
