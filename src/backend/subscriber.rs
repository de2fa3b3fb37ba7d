//! A connection subscribed to one wake channel, owned by rlock so that a waiter can sleep in
//! `poll(2)` on its socket.
//!
//! The redis crate's `PubSub` hides its socket: the only way to wait on it is a read with a
//! timeout, which wakes the waiter up at every timeout whether anything came or not. A
//! subscriber speaks a tiny part of RESP2 (AUTH, SUBSCRIBE, and the pushes that follow), over
//! TCP, TLS (rustls, with the same roots and client pair as every other connection) or a Unix
//! socket, and after subscribing it is read only when `poll` says its socket is readable.

use std::io::{self, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

/// Where a subscriber connects, and as whom.
#[derive(Clone)]
pub struct Endpoint {
    pub addr: Addr,
    pub username: Option<String>,
    pub password: Option<String>,
}

#[derive(Clone)]
pub enum Addr {
    Tcp(String, u16),
    Tls(String, u16, Arc<rustls::ClientConfig>),
    Unix(PathBuf),
}

enum Stream {
    Tcp(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
    Unix(UnixStream),
}

impl Stream {
    fn io(&mut self) -> &mut dyn ReadWrite {
        match self {
            Stream::Tcp(s) => s,
            Stream::Tls(s) => s.as_mut(),
            Stream::Unix(s) => s,
        }
    }

    fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.set_nonblocking(on),
            Stream::Tls(s) => s.sock.set_nonblocking(on),
            Stream::Unix(s) => s.set_nonblocking(on),
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// The most a subscriber holds of a message not yet whole.
const SUBSCRIBER_BYTES: usize = 64 << 10;

/// A connection subscribed to one channel.
pub struct Subscriber {
    stream: Stream,
    /// Bytes read and not yet parsed into a whole push.
    buf: Vec<u8>,
}

impl Subscriber {
    /// Connects (each step within `timeout`), authenticates when the endpoint has a password,
    /// and subscribes to `channel`. Errors carry the server's words or the system's.
    pub fn subscribe(endpoint: &Endpoint, channel: &str, timeout: Duration) -> io::Result<Self> {
        let stream = match &endpoint.addr {
            Addr::Tcp(host, port) => Stream::Tcp(tcp(host, *port, timeout)?),
            Addr::Tls(host, port, config) => {
                let sock = tcp(host, *port, timeout)?;
                let name = ServerName::try_from(host.clone()).map_err(io::Error::other)?;
                let conn = rustls::ClientConnection::new(config.clone(), name)
                    .map_err(io::Error::other)?;
                Stream::Tls(Box::new(rustls::StreamOwned::new(conn, sock)))
            }
            Addr::Unix(path) => {
                let sock = UnixStream::connect(path)?;
                sock.set_read_timeout(Some(timeout))?;
                sock.set_write_timeout(Some(timeout))?;
                Stream::Unix(sock)
            }
        };
        Self::on(stream, endpoint, channel)
    }

    /// A subscriber on a connection made elsewhere: one end of a socket pair whose other end
    /// plays the server (the simulation's, which has already written the confirmation), reading
    /// within `timeout`. It subscribes to `channel` as `subscribe` does.
    #[cfg(feature = "sim-seams")]
    pub fn over(sock: UnixStream, channel: &str, timeout: Duration) -> io::Result<Self> {
        sock.set_read_timeout(Some(timeout))?;
        let endpoint = Endpoint {
            addr: Addr::Unix(PathBuf::new()),
            username: None,
            password: None,
        };
        Self::on(Stream::Unix(sock), &endpoint, channel)
    }

    /// Authenticates on `stream` when the endpoint has a password, and subscribes to `channel`.
    fn on(stream: Stream, endpoint: &Endpoint, channel: &str) -> io::Result<Self> {
        let mut sub = Subscriber {
            stream,
            buf: Vec::new(),
        };
        if let Some(password) = &endpoint.password {
            let mut auth = vec!["AUTH"];
            auth.extend(endpoint.username.as_deref());
            auth.push(password);
            sub.request(&auth)?;
        }
        sub.request(&["SUBSCRIBE", channel])?;
        sub.stream.set_nonblocking(true)?;
        Ok(sub)
    }

    /// Sends one command and reads its first reply, blocking (within the socket's timeouts).
    fn request(&mut self, words: &[&str]) -> io::Result<Resp> {
        let mut req = format!("*{}\r\n", words.len()).into_bytes();
        for w in words {
            req.extend_from_slice(format!("${}\r\n", w.len()).as_bytes());
            req.extend_from_slice(w.as_bytes());
            req.extend_from_slice(b"\r\n");
        }
        self.stream.io().write_all(&req)?;
        self.stream.io().flush()?;
        loop {
            if let Some((reply, used)) = parse(&self.buf) {
                self.buf.drain(..used);
                return match reply {
                    Resp::Error(e) => Err(io::Error::other(e)),
                    reply => Ok(reply),
                };
            }
            let mut chunk = [0u8; 4096];
            match self.stream.io().read(&mut chunk)? {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n => self.buf.extend_from_slice(&chunk[..n]),
            }
            self.within_limit()?;
        }
    }

    /// Fails once the bytes not yet parsed into a whole reply are more than any reply to a
    /// subscriber (a wake-up names a token) can be: a server that streams without end ends the
    /// subscription, not rlock's memory.
    fn within_limit(&self) -> io::Result<()> {
        match self.buf.len() > SUBSCRIBER_BYTES {
            true => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the server's message is {} of {} KiB for a subscriber",
                    super::OVER_LIMIT,
                    SUBSCRIBER_BYTES >> 10
                ),
            )),
            false => Ok(()),
        }
    }

    /// Reads what has arrived, without blocking, and returns the payloads of the messages
    /// that are complete. An error means the subscription is gone (closed, reset).
    pub fn messages(&mut self) -> io::Result<Vec<Vec<u8>>> {
        let mut chunk = [0u8; 4096];
        let mut payloads = Vec::new();
        loop {
            match self.stream.io().read(&mut chunk) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            // Whole messages are taken out as they come; what is left must fit the limit.
            while let Some((push, used)) = parse(&self.buf) {
                self.buf.drain(..used);
                if let Resp::Array(items) = push
                    && let [Resp::Bulk(kind), _, Resp::Bulk(payload)] = items.as_slice()
                    && kind == b"message"
                {
                    payloads.push(payload.clone());
                }
            }
            self.within_limit()?;
            // A server that sends without pause is answered all the same, with the wake-ups
            // so far.
            if payloads.len() >= SUBSCRIBER_BYTES {
                break;
            }
        }
        Ok(payloads)
    }
}

impl AsFd for Subscriber {
    /// Readable when something arrived (a push, or the end of the connection).
    fn as_fd(&self) -> BorrowedFd<'_> {
        match &self.stream {
            Stream::Tcp(s) => s.as_fd(),
            Stream::Tls(s) => s.sock.as_fd(),
            Stream::Unix(s) => s.as_fd(),
        }
    }
}

/// The TLS settings of every rlock connection: the roots of `ca` (PEM) or the system's, and the
/// client pair `cert` + `key` (PEM) when given.
pub fn tls_config(
    ca: Option<&Path>,
    client: Option<(&Path, &Path)>,
) -> io::Result<Arc<rustls::ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(ca) => {
            for cert in CertificateDer::pem_file_iter(ca).map_err(io::Error::other)? {
                roots
                    .add(cert.map_err(io::Error::other)?)
                    .map_err(io::Error::other)?;
            }
        }
        None => {
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = roots.add(cert);
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(io::Error::other)?
        .with_root_certificates(roots);
    let config = match client {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .map_err(io::Error::other)?
                .collect::<Result<Vec<_>, _>>()
                .map_err(io::Error::other)?;
            let key = PrivateKeyDer::from_pem_file(key).map_err(io::Error::other)?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(io::Error::other)?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// A TCP connection to the first of `host`'s addresses that takes one within `timeout`, without
/// Nagle's delay, each read and write within `timeout`: how every connection rlock opens itself
/// (a subscriber's, a `Wire`'s) starts.
pub(super) fn tcp(host: &str, port: u16, timeout: Duration) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the host name resolved to nothing");
    for addr in (host, port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => {
                s.set_nodelay(true)?;
                s.set_read_timeout(Some(timeout))?;
                s.set_write_timeout(Some(timeout))?;
                return Ok(s);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// The part of RESP2 a subscriber sees.
#[derive(Debug, PartialEq)]
enum Resp {
    Simple,
    Error(String),
    Int,
    Bulk(Vec<u8>),
    Nil,
    Array(Vec<Resp>),
}

/// One whole value at the start of `buf`, and how many bytes it took; None if incomplete.
fn parse(buf: &[u8]) -> Option<(Resp, usize)> {
    let end = buf.windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&buf[1..end]).ok()?;
    let after = end + 2;
    match buf.first()? {
        b'+' => Some((Resp::Simple, after)),
        b'-' => Some((Resp::Error(line.to_string()), after)),
        b':' => Some((Resp::Int, after)),
        b'$' => {
            let Ok(len) = usize::try_from(line.parse::<i64>().ok()?) else {
                return Some((Resp::Nil, after));
            };
            let data = buf.get(after..after + len)?;
            (buf.get(after + len..after + len + 2)? == b"\r\n")
                .then(|| (Resp::Bulk(data.to_vec()), after + len + 2))
        }
        b'*' => {
            let Ok(n) = usize::try_from(line.parse::<i64>().ok()?) else {
                return Some((Resp::Nil, after));
            };
            let mut items = Vec::with_capacity(n.min(16));
            let mut at = after;
            for _ in 0..n {
                let (item, used) = parse(&buf[at..])?;
                items.push(item);
                at += used;
            }
            Some((Resp::Array(items), at))
        }
        // Not RESP2: treat as a line to skip (it cannot be a push rlock waits for).
        _ => Some((Resp::Simple, after)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_message_push_and_waits_for_the_rest() {
        let push = b"*3\r\n$7\r\nmessage\r\n$4\r\nchan\r\n$2\r\ngo\r\n";
        let (value, used) = parse(push).expect("a whole push");
        assert_eq!(used, push.len());
        assert_eq!(
            value,
            Resp::Array(vec![
                Resp::Bulk(b"message".to_vec()),
                Resp::Bulk(b"chan".to_vec()),
                Resp::Bulk(b"go".to_vec()),
            ])
        );
        for cut in 1..push.len() {
            assert_eq!(parse(&push[..cut]), None, "incomplete at {cut}");
        }
    }

    #[test]
    fn parses_replies_around_a_subscription() {
        assert_eq!(parse(b"+OK\r\n"), Some((Resp::Simple, 5)));
        assert_eq!(
            parse(b"-WRONGPASS invalid\r\n"),
            Some((Resp::Error("WRONGPASS invalid".into()), 20))
        );
        let confirm = b"*3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n";
        let (value, used) = parse(confirm).expect("the confirmation");
        assert_eq!(used, confirm.len());
        assert!(matches!(value, Resp::Array(ref v) if v[2] == Resp::Int));
        assert_eq!(parse(b"$-1\r\n"), Some((Resp::Nil, 5)));
    }
}
