//! The connection to one server, owned by rlock so that every reply is bounded as a whole: in
//! time (`--op-timeout` from its first byte to its last, not between two bytes) and in size
//! (a bulk string, the elements of the lists, the bytes of the whole reply), before any of it
//! is held. The redis crate's own connection reads with a timeout per read and holds whatever a
//! header announces, so a server that trickles a reply or announces 4 GiB kept rlock as long
//! and as large as the server liked.
//!
//! A `Wire` speaks what the crate's connection spoke for rlock (AUTH or HELLO, SELECT) over TCP,
//! TLS (rustls, the configuration every rlock connection uses) or a Unix socket; a reply is
//! framed here, within the limits, and only then parsed by the crate's parser, so its values
//! and errors are the crate's own.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{ConnectionAddr, ConnectionInfo, ErrorKind, RedisError, RedisResult, Value};
use rustls::pki_types::ServerName;

use crate::backend::subscriber::tcp;

/// How much of a reply rlock holds: more is an error, found as soon as a header announces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The bytes of the whole reply, as sent (a bulk string's announced length counts at once).
    pub bytes: usize,
    /// Values in the reply, every element of every list counted.
    pub elements: usize,
}

/// Every reply but a long one (`LONG_REPLY_LIMITS`): a grant, a renewal or a release is a
/// few hundred bytes, a listing's SCAN a thousand keys at a time.
pub const REPLY_LIMITS: Limits = Limits {
    bytes: 4 << 20,
    elements: 1 << 16,
};

/// A reply that may be long: `inspect --history`'s (up to --history-limit's largest, 100,000
/// runs of a dozen fields), `inspect`'s of a semaphore (every holder and waiter), and a Redis
/// Cluster's slot map (up to 16,384 ranges).
pub const LONG_REPLY_LIMITS: Limits = Limits {
    bytes: 64 << 20,
    elements: 4 << 20,
};

/// The words of a reply over its limits, which error.rs sorts as a reply rlock cannot use.
pub const OVER_LIMIT: &str = "over rlock's limit";

enum Stream {
    Tcp(TcpStream),
    Tls(Box<(rustls::ClientConnection, TcpStream)>),
    Unix(UnixStream),
}

impl Stream {
    fn set_timeouts(&self, t: Duration) -> io::Result<()> {
        let t = Some(t.max(Duration::from_millis(1)));
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t).and(s.set_write_timeout(t)),
            Stream::Tls(tls) => tls.1.set_read_timeout(t).and(tls.1.set_write_timeout(t)),
            Stream::Unix(s) => s.set_read_timeout(t).and(s.set_write_timeout(t)),
        }
    }

    fn set_read_timeout(&self, t: Duration) -> io::Result<()> {
        let t = Some(t.max(Duration::from_millis(1)));
        match self {
            Stream::Tcp(s) => s.set_read_timeout(t),
            Stream::Tls(tls) => tls.1.set_read_timeout(t),
            Stream::Unix(s) => s.set_read_timeout(t),
        }
    }

    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Stream::Tcp(s) => s.write_all(bytes),
            Stream::Unix(s) => s.write_all(bytes),
            Stream::Tls(tls) => {
                let (conn, sock) = &mut **tls;
                conn.writer().write_all(bytes)?;
                // The handshake first, when it is due (it reads the server's part too).
                while conn.is_handshaking() || conn.wants_write() {
                    conn.complete_io(sock)?;
                }
                Ok(())
            }
        }
    }

    /// Reads what has come into `buf`: at most one read of the socket. Over TLS, a read of the
    /// socket that completes no record yet gives Interrupted, so that the caller checks its
    /// deadline before the next.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Stream::Tcp(s) => s.read(buf),
            Stream::Unix(s) => s.read(buf),
            Stream::Tls(tls) => {
                let (conn, sock) = &mut **tls;
                match conn.reader().read(buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    done => return done,
                }
                if conn.read_tls(sock)? == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                conn.process_new_packets().map_err(io::Error::other)?;
                match conn.reader().read(buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        Err(io::ErrorKind::Interrupted.into())
                    }
                    done => done,
                }
            }
        }
    }
}

/// The most one read of the socket takes.
const READ_SIZE: usize = 16 << 10;

/// A connection to one server, set up and ready for commands.
pub struct Wire {
    stream: Stream,
    /// Bytes read and not yet part of a reply handed out.
    buf: Vec<u8>,
    /// Where each read lands before it joins `buf`: zeroed once, at the connection, rather
    /// than `buf`'s room for a read being zeroed before every read.
    landing: Box<[u8]>,
    /// A reply's whole budget (and each write's), as the caller set it.
    budget: Duration,
    /// The socket's read timeout now: the budget, or what was left of it for a reply read in
    /// pieces.
    read_timeout: Duration,
    db: i64,
    /// What a reply may hold.
    pub limits: Limits,
}

impl Wire {
    /// Connects to `info`'s server within `timeout` and sets the connection up as the redis
    /// crate would for rlock: HELLO 3 for a RESP3 URL, else AUTH when there is a password,
    /// then SELECT for a database other than 0.
    pub fn connect(
        info: &ConnectionInfo,
        tls: Option<Arc<rustls::ClientConfig>>,
        timeout: Duration,
    ) -> RedisResult<Wire> {
        let started = Instant::now();
        let stream = match info.addr() {
            ConnectionAddr::Tcp(host, port) => Stream::Tcp(tcp(host, *port, timeout)?),
            ConnectionAddr::TcpTls { host, port, .. } => {
                let config = tls.ok_or((ErrorKind::InvalidClientConfig, "no TLS settings"))?;
                let sock = tcp(host, *port, timeout)?;
                let name = ServerName::try_from(host.clone()).map_err(io::Error::other)?;
                let conn = rustls::ClientConnection::new(config, name).map_err(io::Error::other)?;
                Stream::Tls(Box::new((conn, sock)))
            }
            ConnectionAddr::Unix(path) => Stream::Unix(UnixStream::connect(path)?),
            _ => fail("this kind of address is not supported")?,
        };
        let left = timeout.checked_sub(started.elapsed()).ok_or_else(|| {
            RedisError::from(io::Error::new(
                io::ErrorKind::TimedOut,
                "Connection timed out",
            ))
        })?;
        stream.set_timeouts(left)?;
        let settings = info.redis_settings();
        let mut wire = Wire {
            stream,
            buf: Vec::new(),
            landing: vec![0; READ_SIZE].into_boxed_slice(),
            budget: left,
            read_timeout: left,
            db: settings.db(),
            limits: REPLY_LIMITS,
        };
        wire.set_up(settings)?;
        Ok(wire)
    }

    fn set_up(&mut self, settings: &redis::RedisConnectionInfo) -> RedisResult<()> {
        if settings.protocol() != redis::ProtocolVersion::RESP2 {
            let mut hello = redis::cmd("HELLO");
            hello.arg("3");
            if let Some(password) = settings.password() {
                hello
                    .arg("AUTH")
                    .arg(settings.username().unwrap_or("default"))
                    .arg(password);
            }
            if let Value::ServerError(e) = self.ask(&hello)? {
                return Err(e.into());
            }
        } else if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            auth.arg(settings.username()).arg(password);
            let mut answer = self.ask(&auth)?;
            // A server before Redis 6 knows no users: AUTH with the password alone.
            if settings.username().is_some() && wrong_arity(&answer) {
                answer = self.ask(redis::cmd("AUTH").arg(password))?;
            }
            match answer {
                Value::Okay => {}
                // A server that cannot take the client now (maxclients, LOADING) says so in
                // AUTH's place: its words, not a refused password (which no wait cures).
                Value::ServerError(e)
                    if e.code() != "WRONGPASS"
                        && !e.details().unwrap_or_default().contains("password") =>
                {
                    return Err(e.into());
                }
                _ => {
                    return Err((
                        ErrorKind::AuthenticationFailed,
                        "Password authentication failed",
                    )
                        .into());
                }
            }
        }
        if self.db != 0
            && let Value::ServerError(e) = self.ask(redis::cmd("SELECT").arg(self.db))?
        {
            let detail = e.details().unwrap_or_default().to_string();
            return Err((
                ErrorKind::Server(redis::ServerErrorKind::ResponseError),
                "Redis server refused to switch database",
                detail,
            )
                .into());
        }
        Ok(())
    }

    /// One command and its reply, as it came (an error reply included).
    fn ask(&mut self, cmd: &redis::Cmd) -> RedisResult<Value> {
        self.send_packed_command(&cmd.get_packed_command())?;
        self.recv_response()
    }

    /// Sets the budget of each reply (and of each write) from now on.
    pub fn set_timeout(&mut self, timeout: Duration) -> RedisResult<()> {
        if timeout != self.budget {
            self.stream.set_timeouts(timeout)?;
            self.budget = timeout;
            self.read_timeout = timeout;
        }
        Ok(())
    }

    pub fn send_packed_command(&mut self, bytes: &[u8]) -> RedisResult<()> {
        Ok(self.stream.write_all(bytes)?)
    }

    /// The next reply, whole, within the timeout and the limits; pushes (RESP3) are replies
    /// too, for the caller to skip. A reply that breaks either leaves the connection out of
    /// step: the caller drops it.
    pub fn recv_response(&mut self) -> RedisResult<Value> {
        let deadline = Instant::now() + self.budget;
        let mut frame = Frame::default();
        let mut reads = 0;
        let len = loop {
            if let Some(len) = frame.advance(&self.buf, self.limits)? {
                break len;
            }
            // The first read may wait the whole budget (the socket's timeout, set once per
            // request in the common case); every later one only for what is left of it.
            let wait = match reads {
                0 => self.budget,
                _ => deadline.saturating_duration_since(Instant::now()),
            };
            if wait.is_zero() {
                return Err(timed_out());
            }
            if wait != self.read_timeout {
                self.stream.set_read_timeout(wait)?;
                self.read_timeout = wait;
            }
            reads += 1;
            self.fill()?;
        };
        let value = redis::parse_redis_value(&self.buf[..len]);
        self.buf.drain(..len);
        if self.buf.capacity() > REPLY_LIMITS.bytes {
            self.buf.shrink_to(64 << 10);
        }
        value
    }

    /// Reads what the server sent next onto `buf`.
    fn fill(&mut self) -> RedisResult<()> {
        let read = self.stream.read(&mut self.landing);
        let n = *read.as_ref().unwrap_or(&0);
        self.buf.extend_from_slice(&self.landing[..n]);
        match read {
            Ok(0) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed the connection",
            )
            .into()),
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(timed_out()),
            Err(e) => Err(e.into()),
        }
    }
}

impl redis::ConnectionLike for Wire {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.send_packed_command(cmd)?;
        loop {
            match self.recv_response()? {
                Value::Push { .. } => continue,
                value => return Ok(value),
            }
        }
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.send_packed_command(cmd)?;
        let mut replies = Vec::with_capacity(count);
        let mut seen = 0;
        while replies.len() < count {
            match self.recv_response()? {
                Value::Push { .. } => continue,
                value if seen >= offset => replies.push(value),
                _ => {}
            }
            seen += 1;
        }
        Ok(replies)
    }

    fn get_db(&self) -> i64 {
        self.db
    }

    fn check_connection(&mut self) -> bool {
        redis::cmd("PING").query::<String>(self).is_ok()
    }

    fn is_open(&self) -> bool {
        true
    }
}

fn fail<T>(what: &'static str) -> RedisResult<T> {
    Err((ErrorKind::InvalidClientConfig, what).into())
}

fn timed_out() -> RedisError {
    io::Error::new(io::ErrorKind::TimedOut, "no whole reply within the timeout").into()
}

fn wrong_arity(answer: &Value) -> bool {
    matches!(answer, Value::ServerError(e)
        if e.details().is_some_and(|d| d.contains("wrong number of arguments for 'auth' command")))
}

/// Where the framing of one reply stands: how far it is read, and how many values each list
/// that is open still waits for.
#[derive(Default)]
struct Frame {
    at: usize,
    /// How far a line's end was looked for, in vain.
    scanned: usize,
    open: Vec<usize>,
    values: usize,
}

impl Frame {
    /// The length of the whole reply at the start of `buf`, once it is all there; an error as
    /// soon as it is known to break `limits`. A reply that is not RESP is handed on as it is
    /// (up to its bad line) for the parser to say so.
    fn advance(&mut self, buf: &[u8], limits: Limits) -> RedisResult<Option<usize>> {
        loop {
            // The end of the line at `at`, looked for only where it was not looked for yet.
            let from = self.at.max(self.scanned);
            let Some(newline) = buf[from..].iter().position(|&b| b == b'\n') else {
                self.scanned = buf.len();
                return match buf.len() > limits.bytes {
                    true => Err(over(limits.bytes, "bytes in a reply")),
                    false => Ok(None),
                };
            };
            let newline = from + newline;
            let next = newline + 1;
            let line = match buf
                .get(self.at + 1..newline)
                .and_then(|l| l.strip_suffix(b"\r"))
            {
                Some(line) => line,
                // Not RESP: the parser says so.
                None => return Ok(Some(next)),
            };
            self.values += 1;
            if self.values > limits.elements {
                return Err(over(limits.elements, "values in a reply"));
            }
            let n = || std::str::from_utf8(line).ok()?.parse::<i64>().ok();
            let kind = buf[self.at];
            let done_at = match kind {
                b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => next,
                b'$' | b'=' | b'!' => match n() {
                    None => return Ok(Some(next)),
                    Some(len) if len < 0 => next,
                    Some(len) => {
                        let len = usize::try_from(len).unwrap_or(usize::MAX);
                        if len > limits.bytes {
                            return Err(over(limits.bytes, "bytes in a bulk string"));
                        }
                        if buf.len() < next + len + 2 {
                            return Ok(None);
                        }
                        next + len + 2
                    }
                },
                b'*' | b'~' | b'>' | b'%' | b'|' => {
                    let Some(count) = n() else {
                        return Ok(Some(next));
                    };
                    let per = match kind {
                        b'%' | b'|' => 2,
                        _ => 1,
                    };
                    let count = usize::try_from(count).unwrap_or(0);
                    let values = count
                        .saturating_mul(per)
                        .saturating_add(usize::from(kind == b'|'));
                    if values > limits.elements {
                        return Err(over(limits.elements, "values in a reply"));
                    }
                    self.at = next;
                    if values > 0 {
                        self.open.push(values);
                        continue;
                    }
                    next
                }
                _ => return Ok(Some(next)),
            };
            self.at = done_at;
            if self.at > limits.bytes {
                return Err(over(limits.bytes, "bytes in a reply"));
            }
            // One value done: it may complete the lists it closes.
            loop {
                match self.open.last_mut() {
                    None => return Ok(Some(self.at)),
                    Some(left) => {
                        *left -= 1;
                        if *left > 0 {
                            break;
                        }
                        self.open.pop();
                    }
                }
            }
        }
    }
}

fn over(limit: usize, what: &str) -> RedisError {
    let limit = match limit {
        n if n >= 1 << 20 && n.is_multiple_of(1 << 20) => format!("{} MiB", n >> 20),
        n => n.to_string(),
    };
    let text = format!("the server's reply is {OVER_LIMIT} of {limit} {what}");
    io::Error::new(io::ErrorKind::InvalidData, text).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(bytes: &[u8]) -> RedisResult<Option<usize>> {
        Frame::default().advance(bytes, REPLY_LIMITS)
    }

    #[test]
    fn a_reply_is_framed_whole_and_not_before() {
        let reply = b"*3\r\n$2\r\nok\r\n*2\r\n:1\r\n_\r\n%1\r\n+a\r\n$-1\r\n";
        assert_eq!(framed(reply).unwrap(), Some(reply.len()));
        for cut in 0..reply.len() {
            assert_eq!(framed(&reply[..cut]).unwrap(), None, "cut at {cut}");
        }
        let mut two = reply.to_vec();
        two.extend_from_slice(b"+OK\r\n");
        assert_eq!(framed(&two).unwrap(), Some(reply.len()));
        assert_eq!(framed(b"*0\r\n").unwrap(), Some(4));
        assert_eq!(framed(b"-ERR no\r\n").unwrap(), Some(9));
        // Not RESP: up to the bad line, for the parser to refuse.
        assert_eq!(framed(b"\nxx").unwrap(), Some(1));
        assert_eq!(framed(b"HTTP/1.1 400\n").unwrap(), Some(13));
    }

    #[test]
    fn a_reply_past_its_limits_is_refused_at_its_header() {
        let err = framed(b"$4294967296\r\nxx").unwrap_err().to_string();
        assert!(
            err.contains("over rlock's limit of 4 MiB bytes in a bulk string"),
            "{err}"
        );
        let err = framed(b"*100000000\r\n:1\r\n").unwrap_err().to_string();
        assert!(err.contains("65536 values in a reply"), "{err}");
        let many = b":1\r\n".repeat(1 << 16);
        let mut streamed = b"*2\r\n*65535\r\n".to_vec();
        streamed.extend_from_slice(&many);
        assert!(framed(&streamed).is_err());
        let long = vec![b'x'; REPLY_LIMITS.bytes + 1];
        assert!(framed(&[b"+".as_slice(), &long].concat()).is_err());
    }
}
