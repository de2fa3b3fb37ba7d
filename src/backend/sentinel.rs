//! A master watched by Sentinels. Before every request rlock asks the Sentinels (in order, each
//! within --op-timeout) where the master is, and checks a newly named master with ROLE. A
//! failover can leave the old master answering as one for seconds, so asking only after an
//! error is not enough: a renewal on the old master would keep a lock that the new master has
//! already let expire. Asking each time, rlock talks to the new master as soon as the Sentinels
//! name it, and a lock that did not survive the failover is found not owned there: lost.
//!
//! rlock asks the Sentinels itself rather than through the redis crate's sync Sentinel API,
//! which connects with no timeout: a frozen Sentinel would hang rlock. Each question here is
//! bounded by --op-timeout, and the next Sentinel is asked.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Value;

use super::{Fault, Node, NodeError, Script, Settings, Single, Subscriber, with_addr};
use crate::exit::Failure;
use crate::redact::{redact, redact_all};

pub struct Sentinel {
    settings: Settings,
    master: String,
    name: String,
    /// One reused connection per Sentinel.
    sentinels: Vec<Single>,
    /// The master last named, by address, and its node.
    current: Mutex<Option<(String, Arc<Single>)>>,
}

impl Sentinel {
    pub fn new(settings: &Settings, master: &str) -> Result<Self, Failure> {
        if master.is_empty() {
            return Err(Failure::Usage("--sentinel needs the master's name".into()));
        }
        let sentinels = settings
            .urls
            .iter()
            .map(|url| Ok(Single::new(settings.sentinel_client(url)?, redact(url))))
            .collect::<Result<Vec<_>, Failure>>()?;
        Ok(Sentinel {
            settings: settings.clone(),
            master: master.to_string(),
            name: format!(
                "master '{master}' of sentinels {}",
                redact_all(&settings.urls)
            ),
            sentinels,
            current: Mutex::new(None),
        })
    }

    fn fail(&self, kind: Fault, detail: String) -> NodeError {
        NodeError {
            kind,
            node: self.name.clone(),
            detail,
        }
    }

    /// Where the Sentinels say the master is: the first Sentinel that knows answers.
    fn ask(&self, timeout: Duration) -> Result<(String, u16), NodeError> {
        let mut problems = Vec::new();
        // A Sentinel whose name does not resolve makes the failure one no wait cures.
        let mut kind = Fault::Connect;
        for sentinel in &self.sentinels {
            let reply: Result<Option<(String, u16)>, NodeError> = sentinel.query(
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(&self.master),
                timeout,
            );
            match reply {
                Ok(Some(addr)) => return Ok(addr),
                Ok(None) => problems.push(format!(
                    "{}: does not know master '{}'",
                    sentinel.name(),
                    self.master
                )),
                Err(e) => {
                    if e.kind == Fault::Unresolved {
                        kind = Fault::Unresolved;
                    }
                    problems.push(e.to_string());
                }
            }
        }
        Err(self.fail(
            kind,
            format!("no Sentinel named the master: {}", problems.join("; ")),
        ))
    }

    /// The master as the Sentinels name it now, confirmed with ROLE when it is a new one.
    fn master(&self, timeout: Duration) -> Result<Arc<Single>, NodeError> {
        let (host, port) = self.ask(timeout)?;
        let addr = format!("{host}:{port}");
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((known, node)) = current.as_ref()
            && *known == addr
        {
            return Ok(node.clone());
        }
        // The master speaks TLS when the Sentinels do; it takes the fallback password, not the
        // Sentinel URL's own credentials.
        let scheme = if self.settings.urls[0].starts_with("rediss://") {
            "rediss://"
        } else {
            "redis://"
        };
        let url = with_addr(&format!("{scheme}master"), &host, port);
        let client = self
            .settings
            .client(&url)
            .map_err(|f| self.fail(Fault::Other, f.to_string()))?;
        let node = Arc::new(
            Single::new(client, format!("{} at {addr}", self.name))
                .replicated(self.settings.replicas)
                .tls_files(self.settings.tls.clone()),
        );
        match node.role(timeout)? {
            redis::Role::Primary { .. } => {
                *current = Some((addr, node.clone()));
                Ok(node)
            }
            role => {
                let role = match role {
                    redis::Role::Replica { .. } => "replica",
                    _ => "sentinel",
                };
                Err(self.fail(
                    Fault::NotServing,
                    format!(
                        "the Sentinels name {addr}, which says it is a {role} (a failover is under way)"
                    ),
                ))
            }
        }
    }
}

impl Node for Sentinel {
    fn eval(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
        timeout: Duration,
    ) -> Result<Value, NodeError> {
        self.master(timeout)?.eval(script, keys, args, timeout)
    }

    fn scan(&self, pattern: &str, timeout: Duration) -> Result<Vec<String>, NodeError> {
        self.master(timeout)?.scan(pattern, timeout)
    }

    fn subscriber(
        &self,
        key: &str,
        channel: &str,
        timeout: Duration,
    ) -> Result<Subscriber, NodeError> {
        self.master(timeout)?.subscriber(key, channel, timeout)
    }

    fn name(&self) -> &str {
        &self.name
    }
}
