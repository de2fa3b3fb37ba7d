//! How to reach Redis: the URLs, the deployment they describe, the password and the TLS
//! material, resolved from the global options and the environment.

use std::path::{Path, PathBuf};
use std::time::Duration;

use redis::{ConnectionInfo, IntoConnectionInfo};

use super::SetupError;
use super::files::{TLS_MAX, read_bounded};
use super::password::{Password, read_file};
use super::{Cluster, Node, Sentinel, Single};
use crate::redact::{redact, redact_text};

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
    pub password: Option<Password>,
    /// The ACL user of servers whose URL names none (--user).
    pub user: Option<String>,
    /// How many replicas must acknowledge a grant or a renewal (--replicas).
    pub replicas: u32,
    pub tls: TlsFiles,
    pub op_timeout: Duration,
}

impl Settings {
    /// Where the password comes from: --password-file (read now, to find a mistake at once, and
    /// again for every connection) or --password-command, else $RLOCK_PASSWORD, else
    /// $REDISCLI_AUTH. A command is mutually exclusive with every other source (clap refuses it
    /// beside a file); `timeout` bounds each of its runs (--connect-timeout).
    pub fn resolve_password(
        file: Option<&Path>,
        command: Option<&str>,
        timeout: Duration,
    ) -> Result<Option<Password>, SetupError> {
        if let Some(path) = file {
            read_file(path)?;
            return Ok(Some(Password::File(path.to_path_buf())));
        }
        let env = ["RLOCK_PASSWORD", "REDISCLI_AUTH"]
            .into_iter()
            .find_map(|var| {
                std::env::var(var)
                    .ok()
                    .filter(|v| !v.is_empty())
                    .map(|v| (var, v))
            });
        if let Some(line) = command {
            if let Some((var, _)) = env {
                return Err(SetupError::Usage(format!(
                    "--password-command and ${var} both give the password: keep one (unset ${var})"
                )));
            }
            if line.trim().is_empty() {
                return Err(SetupError::Usage("--password-command is empty".into()));
            }
            return Ok(Some(Password::Command {
                line: line.to_string(),
                timeout,
            }));
        }
        Ok(env.map(|(_, v)| Password::Fixed(v)))
    }

    /// The password a new connection to `url` asks for anew (--password-file,
    /// --password-command), when the URL gives none of its own.
    pub fn changing_password(&self, url: &str) -> Option<Password> {
        let password = self.password.as_ref().filter(|p| p.changes())?;
        let info = self.connection_info(url).ok()?;
        info.redis_settings()
            .password()
            .is_none()
            .then(|| password.clone())
    }

    /// Parses one URL into connection info, with the fallback password applied.
    pub fn connection_info(&self, url: &str) -> Result<ConnectionInfo, SetupError> {
        self.connection_info_with(url, true)
    }

    fn connection_info_with(
        &self,
        url: &str,
        fallback_password: bool,
    ) -> Result<ConnectionInfo, SetupError> {
        let shown = redact(url);
        let scheme_ok = ["redis://", "rediss://", "unix://", "redis+unix://"]
            .iter()
            .any(|s| url.starts_with(s));
        if !scheme_ok {
            return Err(SetupError::Config(format!(
                "malformed URL '{shown}': it must start with redis://, rediss:// or unix://"
            )));
        }
        let info = url.into_connection_info().map_err(|e| {
            SetupError::Config(format!(
                "malformed URL '{shown}': {}",
                why_malformed(url, &e)
            ))
        })?;
        // A host name (not an address) is looked up when connecting.
        if let redis::ConnectionAddr::Tcp(host, _) | redis::ConnectionAddr::TcpTls { host, .. } =
            info.addr()
            && host.parse::<std::net::IpAddr>().is_err()
        {
            crate::names::pin_builtin_services();
        }
        let mut settings = info.redis_settings().clone().set_skip_set_lib_name();
        if fallback_password
            && settings.password().is_none()
            && let Some(Password::Fixed(p)) = &self.password
        {
            settings = settings.set_password(p);
        }
        if fallback_password
            && settings.username().is_none()
            && let Some(user) = &self.user
        {
            settings = settings.set_username(user);
        }
        Ok(info.set_redis_settings(settings))
    }

    /// Opens the deployment the options describe: one node for a single Redis, a Cluster or
    /// a Sentinel-watched master; one node per master for Redlock.
    pub fn connect(&self) -> Result<Vec<Box<dyn Node>>, SetupError> {
        if self.urls.is_empty() {
            return Err(SetupError::Usage("no --url given".into()));
        }
        if self.cluster && self.sentinel.is_some() {
            return Err(SetupError::Usage(
                "--cluster and --sentinel cannot be used together".into(),
            ));
        }
        self.check_tls_options()?;
        // A Cluster's nodes and a Sentinel's master are named by the servers, maybe by host name.
        if self.cluster || self.sentinel.is_some() {
            crate::names::pin_builtin_services();
        }
        if self.cluster {
            return Ok(vec![Box::new(Cluster::new(self)?)]);
        }
        if let Some(name) = &self.sentinel {
            return Ok(vec![Box::new(Sentinel::new(self, name)?)]);
        }
        let n = self.urls.len();
        if n > 1 && (n < 3 || n.is_multiple_of(2)) {
            return Err(SetupError::Usage(format!(
                "Redlock needs an odd number of independent masters (3, 5, ...), got {n} --url"
            )));
        }
        self.check_independent()?;
        self.urls
            .iter()
            .map(|url| Ok(Box::new(self.single(url)?) as Box<dyn Node>))
            .collect()
    }

    /// Redlock's masters must be independent: the same server named twice would let one
    /// server make a majority.
    fn check_independent(&self) -> Result<(), SetupError> {
        let mut seen: Vec<(redis::ConnectionAddr, &str)> = Vec::new();
        for url in &self.urls {
            let addr = self.connection_info(url)?.addr().clone();
            if let Some((_, first)) = seen.iter().find(|(a, _)| *a == addr) {
                return Err(SetupError::Config(format!(
                    "'{}' and '{}' are the same Redis server: Redlock needs independent masters",
                    redact(first),
                    redact(url)
                )));
            }
            seen.push((addr, url));
        }
        Ok(())
    }

    fn check_tls_options(&self) -> Result<(), SetupError> {
        if self.tls.cert.is_some() != self.tls.key.is_some() {
            return Err(SetupError::Config(
                "--tls-cert and --tls-key go together: give both or neither".into(),
            ));
        }
        let any = self.tls.ca.is_some() || self.tls.cert.is_some();
        if any && !self.urls.iter().any(|u| u.starts_with("rediss://")) {
            return Err(SetupError::Config(
                "--tls-ca/--tls-cert/--tls-key apply to rediss:// URLs, and no --url is rediss://"
                    .into(),
            ));
        }
        Ok(())
    }

    /// The certificates of --tls-ca, --tls-cert and --tls-key, if any were given.
    pub fn tls_certificates(&self) -> Result<Option<redis::TlsCertificates>, SetupError> {
        let read = |what: &str, path: &Path| read_bounded(what, path, TLS_MAX);
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
    pub fn client(&self, url: &str) -> Result<redis::Client, SetupError> {
        self.client_with(url, true)
    }

    /// A server that runs the lock scripts: a client for `url`, waiting for --replicas after
    /// every grant and renewal.
    pub fn single(&self, url: &str) -> Result<Single, SetupError> {
        Ok(Single::new(self.client(url)?, redact(url))
            .password(self.changing_password(url))
            .replicated(self.replicas)
            .tls_files(self.tls.clone()))
    }

    /// A client for a Sentinel: only the URL's own credentials (the fallback password is the
    /// master's, and a Sentinel without one would refuse AUTH).
    pub fn sentinel_client(&self, url: &str) -> Result<redis::Client, SetupError> {
        self.client_with(url, false)
    }

    fn client_with(&self, url: &str, fallback_password: bool) -> Result<redis::Client, SetupError> {
        let info = self.connection_info_with(url, fallback_password)?;
        let bad = |e: redis::RedisError| {
            SetupError::Config(format!(
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
    let Ok(mut parsed) = url::Url::parse(url) else {
        return url.to_string();
    };
    let host = if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]")
    } else {
        host.to_string()
    };
    if parsed.set_host(Some(&host)).is_err() || parsed.set_port(Some(port)).is_err() {
        return url.to_string();
    }
    parsed.into()
}

/// The URLs of `RLOCK_URL`, a comma-separated list, split only where a new URL starts (a comma
/// followed by a scheme), so that a password holding a comma stays whole and is never cut into
/// pieces that a message could echo.
pub fn split_urls(list: &str) -> Vec<String> {
    const SCHEMES: [&str; 4] = ["redis://", "rediss://", "unix://", "redis+unix://"];
    let list = list.trim().trim_matches(',');
    let mut urls = Vec::new();
    let mut start = 0;
    for (comma, _) in list.match_indices(',') {
        let next = list[comma + 1..].trim_start();
        if SCHEMES.iter().any(|s| next.starts_with(s)) {
            urls.push(list[start..comma].trim().to_string());
            start = comma + 1;
        }
    }
    urls.push(list[start..].trim().to_string());
    urls.retain(|u| !u.is_empty());
    urls
}

/// What is wrong with a URL the redis crate would not take, in words: the `url` crate's
/// reason ("invalid port number"), the database number, or else the redis crate's own words
/// without its error kind ("- InvalidClientConfig"). Never a piece of the URL itself, which
/// may hold a password.
fn why_malformed(url: &str, e: &redis::RedisError) -> String {
    if url.starts_with("redis://") || url.starts_with("rediss://") {
        match url::Url::parse(url) {
            Err(e) => return e.to_string(),
            Ok(u) if u.host_str().is_none_or(str::is_empty) => return "no host".into(),
            Ok(u) => {
                let db = u.path().trim_start_matches('/');
                if !db.is_empty() && db.parse::<i64>().is_err() {
                    return "the database after the host must be a number, as in redis://host:6379/0"
                        .into();
                }
            }
        }
    }
    let text = e.to_string();
    let text = text.split(" - ").next().unwrap_or(&text);
    redact_text(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_the_address() {
        assert_eq!(
            with_addr("rediss://u:p@seed:1/0?x=1", "10.0.0.2", 7001),
            "rediss://u:p@10.0.0.2:7001/0?x=1"
        );
        assert_eq!(with_addr("redis://seed", "::1", 7), "redis://[::1]:7");
        assert_eq!(with_addr("redis://master", "h", 6380), "redis://h:6380");
    }

    #[test]
    fn splits_rlock_url_where_a_url_starts() {
        assert_eq!(
            split_urls("redis://a:1, redis://b:2,rediss://c:3"),
            ["redis://a:1", "redis://b:2", "rediss://c:3"]
        );
        assert_eq!(
            split_urls("redis://:pa,ss@h:1,redis://:x,y,z@h:2"),
            ["redis://:pa,ss@h:1", "redis://:x,y,z@h:2"]
        );
        assert_eq!(split_urls("redis://h:1,"), ["redis://h:1"]);
    }
}
