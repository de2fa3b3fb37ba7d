//! Where the lock lives: one Redis now, several kinds of deployment behind one small trait.
//!
//! A [`Node`] runs a Lua script on whatever Redis owns the lock's keys, lists keys, and opens a
//! connection to subscribe to wake-ups on. Everything else (what the scripts say, quorum logic)
//! lives in `crate::lock`.

mod cluster;
mod sentinel;
mod single;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use redis::{ConnectionInfo, IntoConnectionInfo, RedisError};

use crate::exit::Failure;

pub use cluster::Cluster;
pub use sentinel::Sentinel;
pub use single::Single;

/// One Lua script, known by its source and its SHA1 (both put together by build.rs).
pub struct Script {
    pub name: &'static str,
    pub source: &'static str,
    pub sha: &'static str,
    /// Always send the whole script (EVAL): for requests whose reply may never be read (a
    /// give-back after a timeout), where EVALSHA's NOSCRIPT could not be answered with EVAL.
    pub always_eval: bool,
}

impl Script {
    pub const fn new(name: &'static str, (source, sha): (&'static str, &'static str)) -> Self {
        Script {
            name,
            source,
            sha,
            always_eval: false,
        }
    }

    /// A script always sent whole (see `always_eval`).
    pub const fn sent_whole(name: &'static str, script: (&'static str, &'static str)) -> Self {
        Script {
            always_eval: true,
            ..Script::new(name, script)
        }
    }
}

/// What a Redis endpoint did wrong, in the terms rlock decides on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// Could not connect, or the connection broke before the command was sent.
    Connect,
    /// The command was sent and no reply came in time: it may or may not have run.
    Timeout,
    /// The connection broke after the command was sent.
    Io,
    /// The server answers but cannot serve now (LOADING, READONLY, MASTERDOWN, ...).
    NotServing,
    /// Wrong password, no password, or an ACL refused a command.
    Auth,
    /// WRONGTYPE: the key holds a value that is not a lock.
    WrongType,
    /// The server refuses what the URL asks for (a database number out of range).
    Config,
    /// Anything else the server or the client library said.
    Other,
}

#[derive(Debug, Clone)]
pub struct NodeError {
    pub kind: ErrorKind,
    /// Which endpoint, with any password redacted.
    pub node: String,
    pub detail: String,
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.node, self.detail)
    }
}

impl NodeError {
    pub fn from_redis(node: &str, err: &RedisError) -> Self {
        let code = err.code().unwrap_or("");
        let text = err.to_string();
        let lower = text.to_ascii_lowercase();
        let kind = if err.kind() == redis::ErrorKind::AuthenticationFailed
            || matches!(code, "NOAUTH" | "WRONGPASS" | "NOPERM")
            || ["noperm", "wrongpass", "noauth", "authenticationfailed", "authentication failed"]
                .iter()
                .any(|w| lower.contains(w))
            // Before AUTH, Redis refuses commands of more than 10 arguments this way.
            || lower.contains("unauthenticated")
        {
            ErrorKind::Auth
        } else if code == "WRONGTYPE" || text.contains("WRONGTYPE") {
            ErrorKind::WrongType
        } else if lower.contains("db index is out of range") {
            ErrorKind::Config
        } else if err.is_timeout() {
            ErrorKind::Timeout
        } else if err.is_connection_refusal() {
            ErrorKind::Connect
        } else if err.is_io_error() || err.is_connection_dropped() {
            ErrorKind::Io
        } else if matches!(
            code,
            "LOADING" | "READONLY" | "MASTERDOWN" | "CLUSTERDOWN" | "TRYAGAIN" | "BUSY"
        ) {
            ErrorKind::NotServing
        } else {
            ErrorKind::Other
        };
        let detail = if kind == ErrorKind::Timeout {
            // The OS says "Resource temporarily unavailable" for a read that timed out.
            "timed out: no reply within the timeout (--op-timeout)".to_string()
        } else {
            redact_text(&text)
        };
        NodeError {
            kind,
            node: node.to_string(),
            detail,
        }
    }

    /// A failure of the path to the server rather than an answer from it.
    pub fn is_transport(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::Connect | ErrorKind::Timeout | ErrorKind::Io | ErrorKind::NotServing
        )
    }

    /// Turns the error into the user-facing failure, naming the lock it was about.
    pub fn into_failure(self, key: &str) -> Failure {
        self.into_failure_for(&format!("lock '{key}'"))
    }

    /// As `into_failure`, naming what the request was about ("lock 'jobs'", "the locks
    /// under 'rlock:'").
    pub fn into_failure_for(self, key: &str) -> Failure {
        match self.kind {
            ErrorKind::Connect | ErrorKind::Timeout | ErrorKind::Io | ErrorKind::NotServing => {
                let lower = self.detail.to_ascii_lowercase();
                let hint = if lower.contains("certificaterequired") {
                    "the server asks for a client certificate: give --tls-cert and --tls-key"
                } else if lower.contains("certificate") {
                    "the server's TLS certificate was not trusted: check --tls-ca (and the host name in the URL)"
                } else {
                    "check that the server is up and --url is right"
                };
                Failure::Unavailable(format!("Redis unavailable for {key}: {self}; {hint}"))
            }
            ErrorKind::Auth => Failure::NotPermitted(format!(
                "Redis refused rlock for {key}: {self}; check the password (--password-file, $RLOCK_PASSWORD) and the user's ACL"
            )),
            ErrorKind::WrongType => Failure::NotALock(format!(
                "{key} holds a value rlock cannot treat as a lock ({}); nothing was changed",
                self.detail
            )),
            ErrorKind::Other => {
                Failure::Unavailable(format!("Redis answered an error for {key}: {self}"))
            }
            ErrorKind::Config => Failure::Config(format!(
                "Redis refused the connection settings for {key}: {self}; check the database number in --url"
            )),
        }
    }
}

/// A Redis deployment that runs the lock scripts.
pub trait Node: Send + Sync {
    /// Runs `script` (EVALSHA, falling back to EVAL on NOSCRIPT) with a reply expected within
    /// `timeout`.
    fn eval(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
        timeout: Duration,
    ) -> Result<redis::Value, NodeError>;

    /// Every key matching `pattern` (SCAN, never KEYS).
    fn scan(&self, pattern: &str, timeout: Duration) -> Result<Vec<String>, NodeError>;

    /// A new connection to the server that owns `key`, to SUBSCRIBE on.
    fn subscriber(&self, key: &str, timeout: Duration) -> Result<redis::Connection, NodeError>;

    /// The endpoint, passwords redacted, for messages.
    fn name(&self) -> &str;
}

/// TLS material named on the command line or in the environment.
#[derive(Debug, Default, Clone)]
pub struct TlsFiles {
    pub ca: Option<PathBuf>,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

/// How to reach Redis, resolved from global options and the environment.
#[derive(Debug, Clone)]
pub struct Settings {
    pub urls: Vec<String>,
    pub cluster: bool,
    pub sentinel: Option<String>,
    pub password: Option<String>,
    pub tls: TlsFiles,
    pub op_timeout: Duration,
}

impl Settings {
    /// The password from --password-file, else $RLOCK_PASSWORD, else $REDISCLI_AUTH.
    pub fn resolve_password(file: Option<&Path>) -> Result<Option<String>, Failure> {
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|e| {
                Failure::Config(format!(
                    "cannot read password file '{}': {e}",
                    path.display()
                ))
            })?;
            let first = text.lines().next().unwrap_or("").to_string();
            if first.is_empty() {
                return Err(Failure::Config(format!(
                    "password file '{}' is empty",
                    path.display()
                )));
            }
            return Ok(Some(first));
        }
        for var in ["RLOCK_PASSWORD", "REDISCLI_AUTH"] {
            if let Ok(v) = std::env::var(var)
                && !v.is_empty()
            {
                return Ok(Some(v));
            }
        }
        Ok(None)
    }

    /// Parses one URL into connection info, with the fallback password applied.
    pub fn connection_info(&self, url: &str) -> Result<ConnectionInfo, Failure> {
        self.connection_info_with(url, true)
    }

    fn connection_info_with(
        &self,
        url: &str,
        fallback_password: bool,
    ) -> Result<ConnectionInfo, Failure> {
        let shown = redact(url);
        let scheme_ok = ["redis://", "rediss://", "unix://", "redis+unix://"]
            .iter()
            .any(|s| url.starts_with(s));
        if !scheme_ok {
            return Err(Failure::Config(format!(
                "malformed URL '{shown}': it must start with redis://, rediss:// or unix://"
            )));
        }
        let info = url.into_connection_info().map_err(|e| {
            Failure::Config(format!(
                "malformed URL '{shown}': {}",
                redact_text(&e.to_string())
            ))
        })?;
        let mut settings = info.redis_settings().clone().set_skip_set_lib_name();
        if fallback_password
            && settings.password().is_none()
            && let Some(p) = &self.password
        {
            settings = settings.set_password(p);
        }
        Ok(info.set_redis_settings(settings))
    }

    /// Opens the deployment the options describe: one node for a single Redis, a Cluster or
    /// a Sentinel-watched master; one node per master for Redlock.
    pub fn connect(&self) -> Result<Vec<Box<dyn Node>>, Failure> {
        if self.urls.is_empty() {
            return Err(Failure::Usage("no --url given".into()));
        }
        if self.cluster && self.sentinel.is_some() {
            return Err(Failure::Usage(
                "--cluster and --sentinel cannot be used together".into(),
            ));
        }
        self.check_tls_options()?;
        if self.cluster {
            return Ok(vec![Box::new(Cluster::new(self)?)]);
        }
        if let Some(name) = &self.sentinel {
            return Ok(vec![Box::new(Sentinel::new(self, name)?)]);
        }
        let n = self.urls.len();
        if n > 1 && (n < 3 || n.is_multiple_of(2)) {
            return Err(Failure::Usage(format!(
                "Redlock needs an odd number of independent masters (3, 5, ...), got {n} --url"
            )));
        }
        self.urls
            .iter()
            .map(|url| Ok(Box::new(Single::new(self.client(url)?, redact(url))) as Box<dyn Node>))
            .collect()
    }

    fn check_tls_options(&self) -> Result<(), Failure> {
        if self.tls.cert.is_some() != self.tls.key.is_some() {
            return Err(Failure::Config(
                "--tls-cert and --tls-key go together: give both or neither".into(),
            ));
        }
        let any = self.tls.ca.is_some() || self.tls.cert.is_some();
        if any && !self.urls.iter().any(|u| u.starts_with("rediss://")) {
            return Err(Failure::Config(
                "--tls-ca/--tls-cert/--tls-key apply to rediss:// URLs, and no --url is rediss://"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The certificates of --tls-ca, --tls-cert and --tls-key, if any were given.
    pub fn tls_certificates(&self) -> Result<Option<redis::TlsCertificates>, Failure> {
        let read = |what: &str, path: &Path| {
            std::fs::read(path).map_err(|e| {
                Failure::Config(format!("cannot read {what} '{}': {e}", path.display()))
            })
        };
        let root_cert = match &self.tls.ca {
            Some(p) => Some(read("--tls-ca", p)?),
            None => None,
        };
        let client_tls = match (&self.tls.cert, &self.tls.key) {
            (Some(c), Some(k)) => Some(redis::ClientTlsConfig {
                client_cert: read("--tls-cert", c)?,
                client_key: read("--tls-key", k)?,
            }),
            _ => None,
        };
        if root_cert.is_none() && client_tls.is_none() {
            return Ok(None);
        }
        Ok(Some(redis::TlsCertificates {
            client_tls,
            root_cert,
        }))
    }

    /// A client for one URL, with the fallback password and the TLS material applied.
    pub fn client(&self, url: &str) -> Result<redis::Client, Failure> {
        self.client_with(url, true)
    }

    /// A client for a Sentinel: only the URL's own credentials (the fallback password is the
    /// master's, and a Sentinel without one would refuse AUTH).
    pub fn sentinel_client(&self, url: &str) -> Result<redis::Client, Failure> {
        self.client_with(url, false)
    }

    fn client_with(&self, url: &str, fallback_password: bool) -> Result<redis::Client, Failure> {
        let info = self.connection_info_with(url, fallback_password)?;
        let bad = |e: redis::RedisError| {
            Failure::Config(format!(
                "cannot use '{}': {}",
                redact(url),
                redact_text(&e.to_string())
            ))
        };
        if url.starts_with("rediss://")
            && let Some(certs) = self.tls_certificates()?
        {
            return redis::Client::build_with_tls(info, certs).map_err(bad);
        }
        redis::Client::open(info).map_err(bad)
    }
}

/// `url` with its host and port replaced (scheme, credentials, database and options kept).
pub fn with_addr(url: &str, host: &str, port: u16) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest_start = scheme_end + 3;
    let authority_end = url[rest_start..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |i| rest_start + i);
    let host_start = url[rest_start..authority_end]
        .rfind('@')
        .map_or(rest_start, |i| rest_start + i + 1);
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    format!(
        "{}{host}:{port}{}",
        &url[..host_start],
        &url[authority_end..]
    )
}

/// A URL with its password replaced by `***`, fit for any message.
pub fn redact(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(scheme_end) = out.find("://") {
        let rest_start = scheme_end + 3;
        // The userinfo ends at the last '@' (a password may hold '/', '?' or '@' itself).
        if let Some(at) = out[rest_start..].rfind('@') {
            let userinfo = &out[rest_start..rest_start + at];
            let redacted = match userinfo.find(':') {
                Some(colon) => format!("{}:***", &userinfo[..colon]),
                None if out.starts_with("redis") => "***".to_string(),
                None => userinfo.to_string(),
            };
            out.replace_range(rest_start..rest_start + at, &redacted);
        } else {
            // No '@', yet something after a ':' that is not a port: what is left of a broken
            // URL may be a password ("redis://:secret"). Hide it.
            let authority_end = out[rest_start..]
                .find(['/', '?'])
                .map_or(out.len(), |i| rest_start + i);
            if let Some(colon) = out[rest_start..authority_end].rfind(':') {
                let after = &out[rest_start + colon + 1..authority_end];
                if !after.is_empty() && !after.chars().all(|c| c.is_ascii_digit()) {
                    out.replace_range(rest_start + colon + 1..authority_end, "***");
                }
            }
        }
    }
    // unix://path?pass=secret
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _))
                    if k.eq_ignore_ascii_case("pass") || k.eq_ignore_ascii_case("password") =>
                {
                    format!("{k}=***")
                }
                _ => kv.to_string(),
            })
            .collect();
        out = format!("{head}{}", query.join("&"));
    }
    out
}

/// Several URLs, redacted, comma-separated: how a Cluster or Sentinel deployment is named.
pub fn redact_all(urls: &[String]) -> String {
    urls.iter().map(|u| redact(u)).collect::<Vec<_>>().join(",")
}

/// Error text from the client library may quote a URL; redact anything that looks like one.
pub fn redact_text(text: &str) -> String {
    text.split(' ')
        .map(|w| {
            if w.contains("://") {
                redact(w)
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords() {
        assert_eq!(redact("redis://:s3cret@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact("redis://u:s3cret@h:1"), "redis://u:***@h:1");
        assert_eq!(redact("rediss://s3cret@h"), "rediss://***@h");
        assert_eq!(redact("redis://h:6379"), "redis://h:6379");
        assert_eq!(redact("redis://:pa/ss@h:1"), "redis://:***@h:1");
        assert_eq!(redact("redis://:topsecret"), "redis://:***");
        assert_eq!(redact("redis://[::1]:6379/0"), "redis://[::1]:6379/0");
        assert_eq!(
            with_addr("rediss://u:p@seed:1/0?x=1", "10.0.0.2", 7001),
            "rediss://u:p@10.0.0.2:7001/0?x=1"
        );
        assert_eq!(with_addr("redis://seed", "::1", 7), "redis://[::1]:7");
        assert_eq!(
            redact("unix:///tmp/r.sock?db=1&pass=s3cret"),
            "unix:///tmp/r.sock?db=1&pass=***"
        );
    }
}
