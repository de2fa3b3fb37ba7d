//! What went wrong on the way to Redis, sorted into the few kinds rlock decides on (a
//! `NodeError`: one endpoint's fault, which the Redlock quorum logic weighs node by node), and a
//! mistake in how to reach Redis found before anything is sent (a `SetupError`). Both travel up
//! as they are; the user's line and the exit code are decided at the top (exit.rs).

use std::fmt;

use redis::RedisError;

use crate::redact::redact_text;

/// What a Redis endpoint did wrong, in the terms rlock decides on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Could not connect, or the connection broke before the command was sent.
    Connect,
    /// The host name in the URL does not exist (the resolver said so): a mistake in the URL,
    /// which no wait cures, though it reads as an outage. A resolver that cannot answer is
    /// `Connect`.
    Unresolved,
    /// The command was sent and no reply came in time: it may or may not have run.
    Timeout,
    /// The connection broke after the command was sent.
    Io,
    /// The server answers but cannot serve now (LOADING, READONLY, MASTERDOWN, ...).
    NotServing,
    /// The server refused the connection because it has as many clients as it allows
    /// (maxclients): room comes as other clients leave, as a busy lock frees.
    Full,
    /// The Sentinels answer, and none of them names a master by the name given to
    /// --sentinel (a wrong name, or a master not yet monitored).
    NoMaster,
    /// TRYAGAIN: the lock's slot is being moved between masters of a Redis Cluster and its keys
    /// are split between them for now.
    Migrating,
    /// CLUSTERDOWN: the Redis Cluster cannot serve the slot now (a master down, not failed over
    /// yet).
    ClusterDown,
    /// The server refused the credentials rlock gave (WRONGPASS): a wrong password, an unknown
    /// or disabled user.
    Auth,
    /// The server needs a password and rlock gave none (NOAUTH).
    NoPassword,
    /// --password-command gave no password: it failed, printed nothing or did not finish.
    Credential,
    /// What answers on the port does not speak Redis's protocol (an HTTP server, a TLS port
    /// spoken to with redis://): not an outage, and not cured by waiting.
    NotRedis,
    /// The ACL refused a command, a key or a channel (also inside a script).
    Denied,
    /// WRONGTYPE: the key holds a value that is not a lock.
    WrongType,
    /// The lock is held as another kind (exclusive, shared, another --limit); the detail says
    /// which, as "a semaphore with --limit 3".
    Mismatch,
    /// The write was done, but fewer replicas than --replicas acknowledged it in time.
    Replicas,
    /// The server refuses what the URL asks for (a database number out of range).
    Config,
    /// The settings cannot reach a server found later (a Sentinel's or a Cluster's new master):
    /// a `SetupError::Config`, kept a configuration error (78) on its way up.
    Setup,
    /// The TLS handshake failed for a reason no wait cures, and which one.
    Tls(TlsRefusal),
    /// A node of a Redis Cluster was used as a server on its own, where that would mislead (a
    /// listing of one node's keys).
    ClusterNode,
    /// The URLs name another kind of deployment than the flags say: a `--sentinel` URL that is
    /// not a Sentinel, `--cluster` against a Redis that is not a cluster, a node of a cluster
    /// (MOVED) without `--cluster`. The detail says which flag to add or drop. No wait cures it.
    WrongMode,
    /// The server refused what rlock's scripts ask of it as no Redis it supports would: a
    /// command or a form of it that came later (an HSET of several fields is Redis 4.0's).
    TooOld,
    /// The server answered with a reply no version of rlock's scripts gives (a script's reply
    /// that cannot be read, a grant whose fence or TTL is nonsense): what the server did is
    /// unknown, as after a reply that never came.
    BadReply,
    /// Anything else the server or the client library said.
    Other,
}

/// Why a TLS handshake failed, as rustls said it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsRefusal {
    /// The server's certificate is not trusted, or not for the host ("invalid peer
    /// certificate").
    Untrusted,
    /// The server wants a client certificate and was given none ("CertificateRequired").
    ClientCertificateWanted,
    /// The server ended the handshake with another fatal alert (it refuses the client
    /// certificate, say).
    Refused,
}

/// A mistake in the settings, found before anything is sent: a usage error (2) or a
/// configuration error (78).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetupError {
    #[error("{0}")]
    Usage(String),
    #[error("{0}")]
    Config(String),
}

impl SetupError {
    /// The same mistake met at `node`, a server found after the start (a new master): still a
    /// configuration error, never an outage.
    pub fn at(self, node: String) -> NodeError {
        let (SetupError::Usage(detail) | SetupError::Config(detail)) = self;
        NodeError {
            kind: Fault::Setup,
            node,
            detail,
        }
    }
}

#[derive(Debug, Clone)]
pub struct NodeError {
    pub kind: Fault,
    /// Which endpoint, with any password redacted.
    pub node: String,
    pub detail: String,
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            // "redis://host:6379 does not look like a Redis server: ..."
            Fault::NotRedis => write!(f, "{} {}", self.node, self.detail),
            _ => write!(f, "{}: {}", self.node, self.detail),
        }
    }
}

/// What a fault means for the run, whatever was asked: the four rows of the exit-code table a
/// Redis endpoint's fault can fall in (exit.rs gives each its code).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Redis could not serve the request, now or at all: unreachable, timing out, not serving,
    /// not Redis, too old, or an error of its own.
    Unavailable,
    /// Redis refused rlock: the password, or the ACL.
    Refused,
    /// The key holds what rlock cannot treat as this lock.
    NotALock,
    /// The settings cannot work: TLS, the database number, a node of a Cluster used alone, the
    /// wrong kind of deployment.
    Config,
}

impl Fault {
    /// The class of this fault. Every fault is named, so that a new one must be given its
    /// class (and so its exit code).
    pub fn class(self) -> Class {
        match self {
            Fault::Connect
            | Fault::Unresolved
            | Fault::Timeout
            | Fault::Io
            | Fault::NotServing
            | Fault::Full
            | Fault::Migrating
            | Fault::NoMaster
            | Fault::ClusterDown
            | Fault::NotRedis
            | Fault::Replicas
            | Fault::TooOld
            | Fault::BadReply
            | Fault::Other => Class::Unavailable,
            Fault::NoPassword | Fault::Auth | Fault::Denied | Fault::Credential => Class::Refused,
            Fault::WrongType | Fault::Mismatch => Class::NotALock,
            Fault::Tls(_)
            | Fault::ClusterNode
            | Fault::Config
            | Fault::Setup
            | Fault::WrongMode => Class::Config,
        }
    }

    /// The kind of a client library error, `text` being its message: decided here, once, from
    /// the code, the library's kind and the words of the server or of the OS.
    fn of(err: &RedisError, text: &str) -> Self {
        let code = err.code().unwrap_or("");
        let lower = text.to_ascii_lowercase();
        if full(&lower) {
            Fault::Full
        } else if err.kind() == redis::ErrorKind::Parse && text.contains("Parse error at") {
            // The reply is not RESP at all (the parser's "Parse error at 1 Unexpected `72`"):
            // something else listens there. (A reply of the wrong type is a Parse error too,
            // but not "at" a position.)
            Fault::NotRedis
        } else if code == "NOPERM"
            || lower.contains("noperm")
            // Redis 7 inside a script: "The user executing the script can't run this command or
            // subcommand", with no error code of its own.
            || lower.contains("user executing the script can't")
            || lower.contains("no permissions to")
        {
            Fault::Denied
        } else if code == "NOAUTH"
            || ["noauth", "authentication required"]
                .iter()
                .any(|w| lower.contains(w))
            // Before AUTH, Redis refuses commands of more than 10 arguments this way
            // ("Protocol error: unauthenticated multibulk length").
            || lower.contains("unauthenticated")
        {
            Fault::NoPassword
        } else if err.kind() == redis::ErrorKind::AuthenticationFailed
            || code == "WRONGPASS"
            || ["wrongpass", "authenticationfailed", "authentication failed"]
                .iter()
                .any(|w| lower.contains(w))
        {
            Fault::Auth
        } else if let Some(refusal) = tls_refusal(&lower) {
            Fault::Tls(refusal)
        } else if code == "WRONGTYPE" || text.contains("WRONGTYPE") {
            Fault::WrongType
        } else if lower.contains("db index is out of range") {
            Fault::Config
        } else if text.contains(super::OVER_LIMIT) {
            // A reply larger than rlock holds: a reply it cannot use, not a broken link.
            Fault::BadReply
        } else if err.is_io_error() && lower.contains("failed to lookup address") {
            // The resolver's own words (std's, whatever the platform's resolver said): a name
            // the DNS says does not exist is a mistake in the URL; a resolver that could not
            // answer (down, timed out, SERVFAIL) is an outage like a refused connection.
            if name_unknown(&lower) {
                Fault::Unresolved
            } else {
                Fault::Connect
            }
        } else if err.is_timeout() {
            Fault::Timeout
        } else if err.is_connection_refusal() {
            Fault::Connect
        } else if err.is_io_error() || err.is_connection_dropped() {
            Fault::Io
        } else if code == "TRYAGAIN" {
            Fault::Migrating
        } else if code == "CLUSTERDOWN" {
            Fault::ClusterDown
        } else if matches!(code, "LOADING" | "READONLY" | "MASTERDOWN" | "BUSY") {
            Fault::NotServing
        } else if lower.contains("wrong number of args calling redis command")
            || lower.contains("unknown redis command called from")
            || lower.contains("unknown command called from")
        {
            // Redis before 4.0, inside a script, or a server without a command a script calls
            // (streams; Valkey's words are the second); rlock's scripts call nothing else wrongly.
            Fault::TooOld
        } else {
            Fault::Other
        }
    }
}

impl NodeError {
    /// A redirection (`what` is MOVED or ASK, as the server said) without --cluster.
    pub fn cluster_node(node: &str, what: &str, to: &str) -> Self {
        NodeError {
            kind: Fault::WrongMode,
            node: node.to_string(),
            detail: format!(
                "the server answered {what} {to}: it is a node of a Redis Cluster; add --cluster (or set RLOCK_CLUSTER=1)"
            ),
        }
    }

    pub fn from_redis(node: &str, err: &RedisError) -> Self {
        let text = err.to_string();
        let kind = Fault::of(err, &text);
        // The server's and the library's words where they help; rlock's own where they would
        // puzzle ("Resource temporarily unavailable", "unauthenticated multibulk length").
        let detail = match kind {
            // The OS says "Resource temporarily unavailable" for a read that timed out.
            Fault::Timeout => "timed out: no reply within the timeout (--op-timeout)".to_string(),
            Fault::NotRedis => format!("{NOT_REDIS}: its reply is not in Redis's protocol; {CHECK_ADDRESS}"),
            // A Sentinel's master takes its password from the file or the environment only.
            Fault::NoPassword if !node.contains("://") => {
                "the server needs a password: give it with --password-file or $RLOCK_PASSWORD/$REDISCLI_AUTH".to_string()
            }
            Fault::NoPassword => "the server needs a password: give it with --password-file, $RLOCK_PASSWORD/$REDISCLI_AUTH or in the URL (redis://:PASS@host)".to_string(),
            // The client library reports every refused AUTH alike, whatever the server said.
            Fault::Auth => "the server refused the password (a wrong password, an unknown or disabled user, or a server that has no password set)".to_string(),
            _ => cut(&redact_text(&plain(&text))),
        };
        NodeError {
            kind,
            node: node.to_string(),
            detail,
        }
    }

    /// A failure that time may cure: the server is unreachable, timed out, or cannot serve now
    /// (LOADING, READONLY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN, no master named by the Sentinels),
    /// or has fewer replicas than `--replicas` asks for (a promoted replica whose own replicas
    /// are still to catch up, after a failover). A host name that does not resolve is a mistake
    /// in the URL, not an outage.
    pub fn is_transient(&self) -> bool {
        (self.is_transport() && self.kind != Fault::Unresolved) || self.kind == Fault::Replicas
    }

    /// A failure of the path to the server rather than an answer from it.
    pub fn is_transport(&self) -> bool {
        matches!(
            self.kind,
            Fault::Connect
                | Fault::Unresolved
                | Fault::Timeout
                | Fault::Io
                | Fault::NotServing
                | Fault::Full
                | Fault::NoMaster
                | Fault::Migrating
                | Fault::ClusterDown
        )
    }
}

/// Whether `lower`, an error's words in lower case, is a server's refusal of a connection for
/// having as many clients as it allows ("ERR max number of clients reached").
pub(crate) fn full(lower: &str) -> bool {
    lower.contains("max number of clients reached")
}

/// The fault a subscriber connection's failure shows, `lower` being its words in lower case: a
/// full server, a refusal (the ACL, the password), which no wait cures, or else a connection
/// that failed.
pub(crate) fn of_subscription(lower: &str) -> Fault {
    if full(lower) {
        Fault::Full
    } else if lower.contains("noperm") || lower.contains("no permissions") {
        Fault::Denied
    } else if ["wrongpass", "noauth", "invalid username-password"]
        .iter()
        .any(|w| lower.contains(w))
    {
        Fault::Auth
    } else if lower.contains(super::OVER_LIMIT) {
        // A server that streams a subscriber more than any wake-up: no wait cures it, and the
        // waiter waits without a wake channel.
        Fault::BadReply
    } else {
        Fault::Connect
    }
}

/// A TLS handshake that failed on trust or identity (rustls's "invalid peer certificate: …"), or
/// that the server ended with a fatal alert (it wants a client certificate, or refuses ours).
fn tls_refusal(lower: &str) -> Option<TlsRefusal> {
    if lower.contains("certificaterequired") {
        Some(TlsRefusal::ClientCertificateWanted)
    } else if lower.contains("invalid peer certificate") {
        Some(TlsRefusal::Untrusted)
    } else if lower.contains("received fatal alert") {
        Some(TlsRefusal::Refused)
    } else {
        None
    }
}

/// How a message about a port that does not speak Redis begins.
pub(crate) const NOT_REDIS: &str = "does not look like a Redis server";
/// What to do about a port that does not speak Redis (and does not speak TLS either).
pub(crate) const CHECK_ADDRESS: &str = "check the host and port in --url";

/// A lookup that failed because the name does not exist (glibc's EAI_NONAME and EAI_NODATA,
/// musl's words for them), not because the resolver could not answer (EAI_AGAIN, EAI_FAIL).
fn name_unknown(lower: &str) -> bool {
    [
        "name or service not known",
        "no address associated with hostname",
        "name does not resolve",
        "nodename nor servname provided",
    ]
    .iter()
    .any(|w| lower.contains(w))
}

/// The most of a server's error text a message shows, in characters: a line a person reads,
/// whatever length a server sends.
const MAX_DETAIL: usize = 200;

/// `text` cut at `MAX_DETAIL` characters, marked `…` when it was longer.
fn cut(text: &str) -> String {
    match text.char_indices().nth(MAX_DETAIL) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

/// The text of a Redis error without what the client library and Redis add around it: the
/// library's `"CODE": ` or `Kind: ` in front, and the ` script: SHA, on @user_script:N.` that
/// Redis 7 appends to an error raised inside a script.
fn plain(text: &str) -> String {
    let mut text = text.trim();
    if let Some((head, rest)) = text.split_once(": ")
        && !head.contains(' ')
        && head
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '"' || c == '_')
    {
        text = rest;
    }
    if let Some(at) = text.find(" script: ")
        && text[at..].contains("@user_script:")
    {
        text = &text[..at];
    }
    // Redis 6 puts the script and the line in front instead: "Error running script (call to
    // f_SHA): @user_script:N: WRONGTYPE …"; the error's own code follows.
    if text.starts_with("Error running script")
        && let Some((_, rest)) = text.split_once("@user_script:")
        && let Some((line, rest)) = rest.split_once(": ")
        && line.chars().all(|c| c.is_ascii_digit())
    {
        text = rest;
        if let Some((code, rest)) = text.split_once(' ')
            && code.chars().all(|c| c.is_ascii_uppercase())
        {
            text = rest;
        }
    }
    text.trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests;
