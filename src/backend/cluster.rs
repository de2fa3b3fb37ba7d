//! Redis Cluster: each script goes to the master of its keys' slot (every key of a lock shares
//! one, through the hash tag), MOVED and ASK are followed, and listings SCAN every master.
//!
//! rlock routes by itself over its own single-server connections rather than through the redis
//! crate's cluster client, whose hidden retries (up to 16, with waits growing past minutes on
//! TRYAGAIN or CLUSTERDOWN) would let one frozen master cost far more than --op-timeout.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::Value;

use super::single::Routed;
use super::{ErrorKind, Node, NodeError, Script, Settings, Single, redact, redact_all, with_addr};
use crate::exit::Failure;

/// How many redirections one request may follow (a MOVED, then an ASK, then some slack).
const MAX_REDIRECTS: usize = 4;

pub struct Cluster {
    settings: Settings,
    name: String,
    /// Slot ranges and the URL of the master that serves each.
    slots: Mutex<Vec<(u16, u16, String)>>,
    /// One node (one reused connection) per server URL.
    nodes: Mutex<HashMap<String, Arc<Single>>>,
}

impl Cluster {
    pub fn new(settings: &Settings) -> Result<Self, Failure> {
        for url in &settings.urls {
            settings.connection_info(url)?;
        }
        Ok(Cluster {
            settings: settings.clone(),
            name: format!("cluster {}", redact_all(&settings.urls)),
            slots: Mutex::new(Vec::new()),
            nodes: Mutex::new(HashMap::new()),
        })
    }

    fn node(&self, url: &str) -> Result<Arc<Single>, NodeError> {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = nodes.get(url) {
            return Ok(n.clone());
        }
        let client = self.settings.client(url).map_err(|f| NodeError {
            kind: ErrorKind::Other,
            node: redact(url),
            detail: f.to_string(),
        })?;
        let node = Arc::new(Single::new(client, redact(url)));
        nodes.insert(url.to_string(), node.clone());
        Ok(node)
    }

    /// The URL of a server named by its address (host:port), with the seed URL's scheme,
    /// credentials and options.
    fn url_of(&self, addr: &str) -> String {
        let (host, port) = addr.rsplit_once(':').unwrap_or((addr, "6379"));
        let host = host.trim_start_matches('[').trim_end_matches(']');
        with_addr(&self.settings.urls[0], host, port.parse().unwrap_or(6379))
    }

    /// Asks the seeds (then the known masters) for the slot map: CLUSTER SLOTS.
    fn refresh(&self, timeout: Duration) -> Result<(), NodeError> {
        let mut candidates = self.settings.urls.clone();
        candidates.extend(self.masters_known());
        let mut last = None;
        for url in candidates {
            let reply: Result<Vec<Value>, NodeError> = self
                .node(&url)
                .and_then(|n| n.query(redis::cmd("CLUSTER").arg("SLOTS"), timeout));
            match reply {
                Ok(ranges) => {
                    let map = parse_slots(&ranges, &url, |h, p| {
                        with_addr(&self.settings.urls[0], h, p)
                    });
                    if !map.is_empty() {
                        *self.slots.lock().unwrap_or_else(|p| p.into_inner()) = map;
                        return Ok(());
                    }
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| NodeError {
            kind: ErrorKind::NotServing,
            node: self.name.clone(),
            detail: "no node knows the cluster's slots (is it a Redis Cluster?)".into(),
        }))
    }

    fn masters_known(&self) -> Vec<String> {
        let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let mut masters: Vec<String> = slots.iter().map(|(_, _, url)| url.clone()).collect();
        masters.sort();
        masters.dedup();
        masters
    }

    fn master_for(&self, slot: u16, timeout: Duration) -> Result<Arc<Single>, NodeError> {
        for attempt in 0..2 {
            let url = {
                let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
                slots
                    .iter()
                    .find(|(lo, hi, _)| (*lo..=*hi).contains(&slot))
                    .map(|(_, _, url)| url.clone())
            };
            match url {
                Some(url) => return self.node(&url),
                None if attempt == 0 => self.refresh(timeout)?,
                None => {}
            }
        }
        Err(NodeError {
            kind: ErrorKind::NotServing,
            node: self.name.clone(),
            detail: format!("no master serves slot {slot} (the cluster is down or resharding)"),
        })
    }
}

/// Turns a CLUSTER SLOTS reply into (first slot, last slot, master URL).
fn parse_slots(
    ranges: &[Value],
    asked: &str,
    url: impl Fn(&str, u16) -> String,
) -> Vec<(u16, u16, String)> {
    let int = |v: &Value| match v {
        Value::Int(n) => Some(*n),
        _ => None,
    };
    ranges
        .iter()
        .filter_map(|range| {
            let Value::Array(parts) = range else {
                return None;
            };
            let (lo, hi) = (int(parts.first()?)?, int(parts.get(1)?)?);
            let Value::Array(master) = parts.get(2)? else {
                return None;
            };
            let host = match master.first()? {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                _ => return None,
            };
            let port = int(master.get(1)?)? as u16;
            // An empty host means "the node you asked".
            let host = if host.is_empty() || host == "?" {
                host_of(asked)
            } else {
                host
            };
            Some((lo as u16, hi as u16, url(&host, port)))
        })
        .collect()
}

fn host_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    authority
        .rsplit_once(':')
        .map_or(authority, |(h, _)| h)
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string()
}

/// The Redis Cluster slot of a key: CRC16 (XMODEM) of its hash tag, or of the whole key.
pub fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = match key.find('{') {
        Some(open) => match key[open + 1..].find('}') {
            Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
            _ => bytes,
        },
        None => bytes,
    };
    crc16::State::<crc16::XMODEM>::calculate(hashed) % 16384
}

impl Node for Cluster {
    fn eval(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
        timeout: Duration,
    ) -> Result<Value, NodeError> {
        let slot = key_slot(keys.first().copied().unwrap_or(""));
        let mut target = self.master_for(slot, timeout)?;
        let mut asking = false;
        for _ in 0..MAX_REDIRECTS {
            match target.eval_routed(script, keys, args, timeout, asking)? {
                Routed::Done(v) => return Ok(v),
                Routed::Moved(addr) => {
                    // The slot map is stale: learn the new one, and go where we were sent.
                    let _ = self.refresh(timeout);
                    target = self.node(&self.url_of(&addr))?;
                    asking = false;
                }
                Routed::Ask(addr) => {
                    target = self.node(&self.url_of(&addr))?;
                    asking = true;
                }
            }
        }
        Err(NodeError {
            kind: ErrorKind::NotServing,
            node: self.name.clone(),
            detail: format!("slot {slot} kept moving (more than {MAX_REDIRECTS} redirections)"),
        })
    }

    fn scan(&self, pattern: &str, timeout: Duration) -> Result<Vec<String>, NodeError> {
        self.refresh(timeout)?;
        let mut keys = Vec::new();
        for url in self.masters_known() {
            keys.extend(self.node(&url)?.scan(pattern, timeout)?);
        }
        Ok(keys)
    }

    /// PUBLISH reaches every node of a cluster; the master of the lock's slot will do.
    fn subscriber(&self, key: &str, timeout: Duration) -> Result<redis::Connection, NodeError> {
        self.master_for(key_slot(key), timeout)?
            .subscriber(key, timeout)
    }

    fn name(&self) -> &str {
        &self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from CLUSTER KEYSLOT.
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        assert_eq!(key_slot("{rlock:jobs}:state"), key_slot("rlock:jobs"));
        assert_eq!(key_slot("foo{}{bar}"), key_slot("foo{}{bar}"));
        assert_eq!(host_of("redis://u:p@10.0.0.1:7000/0"), "10.0.0.1");
        assert_eq!(host_of("rediss://[::1]:7000"), "::1");
    }
}
