//! What listens on a port that does not answer like Redis. Asked only after a request failed in
//! a way a Redis server does not fail (a reply that is not RESP, or a connection dropped at its
//! first exchange), so that the user reads "does not look like a Redis server; use rediss://"
//! rather than the parser's "Parse error at 1 Unexpected `72`" or "Connection reset by peer".
//!
//! The question is one TLS ClientHello on a new connection: a TLS server (a Redis started with
//! `--tls-port`, spoken to with `redis://`) answers with a TLS record; anything else either
//! answers in its own words (an HTTP server's status line, an SSH banner), which are quoted, or
//! says nothing. Nothing is sent after the hello, and no certificate is looked at.
//!
//! The other way round, a `rediss://` URL naming a plain Redis port, the TLS handshake just
//! times out (Redis waits for the end of a line that never comes) or reads garbage. Then the
//! question is a plain `PING`: a Redis without TLS answers it (`+PONG`, or `-NOAUTH`), a TLS
//! port does not.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the port answered to a TLS ClientHello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Speaks {
    /// A TLS record (a ServerHello, or an alert): a TLS port.
    Tls,
    /// The first line of a plain-text answer, cleaned up for a message.
    Text(String),
    /// Nothing to tell by: no answer, no connection, or bytes that are neither.
    Unknown,
}

/// How long any step of the question may take at most: a TLS server answers a hello at once,
/// and a Redis that dropped a connection for another reason answers nothing (it waits for the
/// end of a line), so this is what a failure costs on top of itself.
const PATIENCE: Duration = Duration::from_secs(1);

/// Sends a TLS ClientHello to `host:port` and reads the first bytes of the answer. Every step
/// (connect, write, read) is bounded by `timeout`, and by one second.
pub fn speaks(host: &str, port: u16, timeout: Duration) -> Speaks {
    match client_hello(host).and_then(|hello| ask(host, port, &hello, timeout)) {
        Some(reply) => classify(&reply),
        None => Speaks::Unknown,
    }
}

/// How long a port may take to say what it speaks, at most `patience`, after a request of
/// `timeout` that `began` then failed: no longer than what is left of the timeout (a `-w`
/// about to end is not held up by a silent port), but for `FLOOR` (time for a loaded host's
/// plain Redis to answer a PING).
pub(super) fn asking_time(patience: Duration, timeout: Duration, began: Instant) -> Duration {
    const FLOOR: Duration = Duration::from_millis(300);
    patience.min(timeout.saturating_sub(began.elapsed()).max(FLOOR))
}

/// Whether `host:port` answers a plain-text `PING` in Redis's protocol, as a Redis without TLS
/// does, within `timeout` (and one second) per step.
pub fn answers_plain_redis(host: &str, port: u16, timeout: Duration) -> bool {
    ask(host, port, b"PING\r\n", timeout).is_some_and(|reply| {
        // "+PONG", or a refusal such as "-NOAUTH Authentication required.", ending its line.
        matches!(reply.first(), Some(b'+' | b'-')) && reply.ends_with(b"\r\n")
    })
}

/// Sends `question` on a new connection to `host:port` and returns the first bytes of the
/// answer (none when there is no connection, no answer, or the connection closes at once).
fn ask(host: &str, port: u16, question: &[u8], timeout: Duration) -> Option<Vec<u8>> {
    let timeout = timeout.min(PATIENCE);
    let addr = (host, port).to_socket_addrs().ok()?.next()?;
    let mut stream = TcpStream::connect_timeout(&addr, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    stream.write_all(question).ok()?;
    let mut reply = [0u8; 256];
    let n = stream.read(&mut reply).ok()?;
    Some(reply[..n].to_vec())
}

/// The bytes of a TLS ClientHello for `host`, as rustls writes it.
fn client_hello(host: &str) -> Option<Vec<u8>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    // An IP address or a DNS name; any valid name will do, as the handshake goes no further.
    let name = rustls::pki_types::ServerName::try_from(host.to_string())
        .or_else(|_| rustls::pki_types::ServerName::try_from("localhost"))
        .ok()?;
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).ok()?;
    let mut hello = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut hello).ok()?;
    }
    Some(hello)
}

/// A TLS record starts with its content type (21 alert, 22 handshake) and the major version 3.
fn classify(reply: &[u8]) -> Speaks {
    match reply {
        [21 | 22, 3, ..] => Speaks::Tls,
        // A RESP reply (Redis reads the hello as an inline command, "-ERR unknown command"):
        // this is Redis after all, and the failure was something else.
        []
        | [
            b'+' | b'-' | b':' | b'$' | b'*' | b'_' | b'#' | b',' | b'(' | b'!' | b'=' | b'%'
            | b'~' | b'>' | b'|',
            ..,
        ] => Speaks::Unknown,
        _ => {
            let line = reply
                .split(|&b| b == b'\r' || b == b'\n')
                .next()
                .unwrap_or(&[]);
            let printable = !line.is_empty() && line.iter().all(|b| (0x20..0x7f).contains(b));
            if !printable {
                return Speaks::Unknown;
            }
            let text = String::from_utf8_lossy(line);
            let text: String = text.chars().take(60).collect();
            Speaks::Text(text.replace('\'', "\""))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tells_tls_from_text() {
        assert_eq!(classify(&[22, 3, 3, 0, 90, 2]), Speaks::Tls);
        assert_eq!(classify(&[21, 3, 1, 0, 2, 2, 50]), Speaks::Tls);
        assert_eq!(
            classify(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"),
            Speaks::Text("HTTP/1.1 400 Bad Request".into())
        );
        assert_eq!(classify(b""), Speaks::Unknown);
        assert_eq!(
            classify(b"-ERR unknown command '\x16\x03', with args beginning with: \r\n"),
            Speaks::Unknown
        );
        assert_eq!(classify(&[0, 1, 2]), Speaks::Unknown);
    }

    #[test]
    fn the_hello_is_a_tls_handshake_record() {
        let hello = client_hello("127.0.0.1").expect("a hello");
        assert_eq!(&hello[..2], &[22, 3]);
    }
}
