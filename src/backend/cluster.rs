//! Redis Cluster: scripts go to the master of the lock's slot (every key of a lock shares it),
//! MOVED and ASK are followed by the client library, listings SCAN every master.

use std::sync::Mutex;
use std::time::Duration;

use redis::Value;
use redis::cluster::{ClusterClient, ClusterConnection};

use super::single::{run_script, scan_connection};
use super::{ErrorKind, Node, NodeError, Script, Settings, redact, redact_all, with_addr};
use crate::exit::Failure;

pub struct Cluster {
    client: ClusterClient,
    conn: Mutex<Option<ClusterConnection>>,
    settings: Settings,
    name: String,
}

impl Cluster {
    pub fn new(settings: &Settings) -> Result<Self, Failure> {
        let seeds = settings
            .urls
            .iter()
            .map(|u| settings.connection_info(u))
            .collect::<Result<Vec<_>, _>>()?;
        let mut builder = ClusterClient::builder(seeds)
            .connection_timeout(settings.op_timeout)
            .response_timeout(settings.op_timeout);
        if let Some(certs) = settings.tls_certificates()? {
            builder = builder.certs(certs);
        }
        let client = builder
            .build()
            .map_err(|e| Failure::Config(format!("cannot use the cluster seed nodes: {e}")))?;
        let name = format!("cluster {}", redact_all(&settings.urls));
        Ok(Cluster {
            client,
            conn: Mutex::new(None),
            settings: settings.clone(),
            name,
        })
    }

    fn err(&self, e: &redis::RedisError) -> NodeError {
        NodeError::from_redis(&self.name, e)
    }

    /// One direct connection per master, to SCAN each (SCAN walks one server only).
    fn masters(&self, timeout: Duration) -> Result<Vec<String>, NodeError> {
        let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let conn = match slot.as_mut() {
            Some(c) => c,
            None => slot.insert(self.client.get_connection().map_err(|e| self.err(&e))?),
        };
        let _ = conn.set_read_timeout(Some(timeout));
        let slots: Vec<Value> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query(conn)
            .map_err(|e| self.err(&e))?;
        let seed = &self.settings.urls[0];
        let mut masters: Vec<String> = slots
            .iter()
            .filter_map(|range| match range {
                Value::Array(parts) => match parts.get(2) {
                    Some(Value::Array(master)) => {
                        let host = match master.first()? {
                            Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                            _ => return None,
                        };
                        let port = match master.get(1)? {
                            Value::Int(p) => *p as u16,
                            _ => return None,
                        };
                        Some(with_addr(seed, &host, port))
                    }
                    _ => None,
                },
                _ => None,
            })
            .collect();
        masters.sort();
        masters.dedup();
        Ok(masters)
    }
}

impl Node for Cluster {
    fn eval(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
        timeout: Duration,
    ) -> Result<Value, NodeError> {
        let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let conn = match slot.as_mut() {
            Some(c) => c,
            None => slot.insert(self.client.get_connection().map_err(|e| {
                let mut err = self.err(&e);
                if matches!(err.kind, ErrorKind::Timeout | ErrorKind::Io) {
                    err.kind = ErrorKind::Connect;
                }
                err
            })?),
        };
        let _ = conn.set_read_timeout(Some(timeout));
        let _ = conn.set_write_timeout(Some(timeout));
        run_script(conn, script, keys, args).map_err(|e| {
            let err = self.err(&e);
            if err.is_transport() {
                *slot = None;
            }
            err
        })
    }

    fn scan(&self, pattern: &str, timeout: Duration) -> Result<Vec<String>, NodeError> {
        let mut keys = Vec::new();
        for url in self.masters(timeout)? {
            let name = redact(&url);
            let client = self.settings.client(&url).map_err(|f| NodeError {
                kind: ErrorKind::Other,
                node: name.clone(),
                detail: f.to_string(),
            })?;
            let mut conn = client
                .get_connection_with_timeout(timeout)
                .map_err(|e| NodeError::from_redis(&name, &e))?;
            let _ = conn.set_read_timeout(Some(timeout));
            keys.extend(
                scan_connection(&mut conn, pattern)
                    .map_err(|e| NodeError::from_redis(&name, &e))?,
            );
        }
        Ok(keys)
    }

    /// PUBLISH reaches every node of a cluster, so any seed that answers will do.
    fn subscriber(&self, _key: &str, timeout: Duration) -> Result<redis::Connection, NodeError> {
        let mut last = None;
        for url in &self.settings.urls {
            let name = redact(url);
            match self.settings.client(url) {
                Ok(client) => match client.get_connection_with_timeout(timeout) {
                    Ok(conn) => {
                        let _ = conn.set_read_timeout(Some(timeout));
                        let _ = conn.set_write_timeout(Some(timeout));
                        return Ok(conn);
                    }
                    Err(e) => last = Some(NodeError::from_redis(&name, &e)),
                },
                Err(f) => {
                    last = Some(NodeError {
                        kind: ErrorKind::Other,
                        node: name,
                        detail: f.to_string(),
                    })
                }
            }
        }
        Err(last.expect("a cluster has at least one seed URL"))
    }

    fn name(&self) -> &str {
        &self.name
    }
}
