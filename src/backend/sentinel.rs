//! A master watched by Sentinels. The master's address is asked of the Sentinels (in order,
//! each within --op-timeout), confirmed with ROLE, and asked again after any failure of the
//! master's connection or a READONLY answer: after a failover rlock talks to the new master, where
//! a lock that did not survive is simply not owned any more, and so is reported lost.

use std::sync::Mutex;
use std::time::Duration;

use redis::Value;

use super::{ErrorKind, Node, NodeError, Script, Settings, Single, redact, redact_all, with_addr};
use crate::exit::Failure;

pub struct Sentinel {
    settings: Settings,
    master: String,
    name: String,
    current: Mutex<Option<std::sync::Arc<Single>>>,
}

impl Sentinel {
    pub fn new(settings: &Settings, master: &str) -> Result<Self, Failure> {
        if master.is_empty() {
            return Err(Failure::Usage("--sentinel needs the master's name".into()));
        }
        // Parse every URL now, so that a malformed one is a configuration error up front.
        for url in &settings.urls {
            settings.connection_info(url)?;
        }
        let name = format!(
            "master '{master}' of sentinels {}",
            redact_all(&settings.urls)
        );
        Ok(Sentinel {
            settings: settings.clone(),
            master: master.to_string(),
            name,
            current: Mutex::new(None),
        })
    }

    fn fail(&self, kind: ErrorKind, detail: String) -> NodeError {
        NodeError {
            kind,
            node: self.name.clone(),
            detail,
        }
    }

    /// Asks the Sentinels for the master and checks that it says it is one.
    fn resolve(&self, timeout: Duration) -> Result<std::sync::Arc<Single>, NodeError> {
        let mut problems = Vec::new();
        for sentinel in &self.settings.urls {
            let shown = redact(sentinel);
            let addr: Option<(String, u16)> = self
                .settings
                .client(sentinel)
                .map_err(|f| f.to_string())
                .and_then(|c| {
                    let mut conn = c
                        .get_connection_with_timeout(timeout)
                        .map_err(|e| e.to_string())?;
                    let _ = conn.set_read_timeout(Some(timeout));
                    redis::cmd("SENTINEL")
                        .arg("GET-MASTER-ADDR-BY-NAME")
                        .arg(&self.master)
                        .query(&mut conn)
                        .map_err(|e| e.to_string())
                })
                .unwrap_or_else(|e| {
                    problems.push(format!("{shown}: {e}"));
                    None
                });
            let Some((host, port)) = addr else {
                if problems.last().is_none_or(|p| !p.starts_with(&shown)) {
                    problems.push(format!("{shown}: does not know master '{}'", self.master));
                }
                continue;
            };
            // The master speaks TLS when the Sentinels do; it takes the fallback password, not
            // the Sentinel URL's own credentials.
            let scheme = if sentinel.starts_with("rediss://") {
                "rediss://"
            } else {
                "redis://"
            };
            let url = with_addr(&format!("{scheme}placeholder"), &host, port);
            let client = self
                .settings
                .client(&url)
                .map_err(|f| self.fail(ErrorKind::Other, f.to_string()))?;
            let single = Single::new(client, format!("{} at {host}:{port}", self.name));
            match single.role(timeout) {
                Ok(role) if role == "master" => return Ok(std::sync::Arc::new(single)),
                Ok(role) => problems.push(format!(
                    "{shown} named {host}:{port}, which says it is a {role}"
                )),
                Err(e) => problems.push(e.to_string()),
            }
        }
        Err(self.fail(
            ErrorKind::Connect,
            format!(
                "no Sentinel gave a reachable master: {}",
                problems.join("; ")
            ),
        ))
    }

    fn master(&self, timeout: Duration) -> Result<std::sync::Arc<Single>, NodeError> {
        let mut current = self.current.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = current.as_ref() {
            return Ok(m.clone());
        }
        let m = self.resolve(timeout)?;
        *current = Some(m.clone());
        Ok(m)
    }

    fn forget(&self) {
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = None;
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
        // A failure may mean a failover: ask the Sentinels again, once.
        let mut last = None;
        for _ in 0..2 {
            let master = self.master(timeout)?;
            match master.eval(script, keys, args, timeout) {
                Ok(v) => return Ok(v),
                Err(e) if e.is_transport() => {
                    self.forget();
                    if e.kind == ErrorKind::Timeout {
                        return Err(e);
                    }
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("the loop ran"))
    }

    fn scan(&self, pattern: &str, timeout: Duration) -> Result<Vec<String>, NodeError> {
        self.master(timeout)?.scan(pattern, timeout)
    }

    fn subscriber(&self, key: &str, timeout: Duration) -> Result<redis::Connection, NodeError> {
        self.master(timeout)?.subscriber(key, timeout)
    }

    fn name(&self) -> &str {
        &self.name
    }
}
