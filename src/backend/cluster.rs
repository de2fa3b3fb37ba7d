//! Redis Cluster: each script goes to the master of its keys' slot (every key of a lock shares
//! one, through the hash tag), MOVED and ASK are followed, and listings SCAN every master.
//!
//! rlock routes by itself over its own single-server connections rather than through the redis
//! crate's cluster client. That is a decision, not an oversight; keep it unless the crate changes:
//! - its sync cluster client cannot follow MOVED without re-sending a timed-out EVALSHA, and its
//!   hidden retries (up to 16, with waits growing past minutes on TRYAGAIN or CLUSTERDOWN) would
//!   let one frozen master cost far more than --op-timeout: it has no overall response timeout;
//! - it has no sync pub/sub (waiters subscribe on the master of the lock's slot) and no cluster
//!   SCAN (`inspect` lists every master's keys).
//!
//! A master that stops answering (killed, frozen, partitioned) may have failed over: on a
//! transport error the slot map is asked again of the other nodes, each within --op-timeout,
//! and the request goes once more to the master they now name, as for MOVED. Every script is
//! idempotent for the same token, so sending it again is safe.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::Value;

use super::SetupError;
use super::single::Routed;
use super::{Fault, Node, NodeError, Script, Settings, Single, Subscriber, key_slot, with_addr};
use crate::redact::{redact, redact_all};

/// How many redirections one request follows at least (a MOVED, then an ASK, then some slack);
/// more while --op-timeout lasts (a slot in migration sends a request back and forth).
const MAX_REDIRECTS: usize = 4;
/// The first pause before a request that a master asked to retry (TRYAGAIN, CLUSTERDOWN) is
/// sent again, doubled after each, up to MAX_PAUSE.
const FIRST_PAUSE: Duration = Duration::from_millis(5);
const MAX_PAUSE: Duration = Duration::from_millis(100);

pub struct Cluster {
    settings: Settings,
    name: String,
    /// Slot ranges and the URL of the master that serves each.
    slots: Mutex<Vec<(u16, u16, String)>>,
    /// One node (one reused connection) per server URL.
    nodes: Mutex<HashMap<String, Arc<Single>>>,
    /// A master that failed a request too late in its --op-timeout to ask for the slot map
    /// then: the next request asks first, this one last (it may have failed over).
    suspect: Mutex<Option<String>>,
}

impl Cluster {
    pub fn new(settings: &Settings) -> Result<Self, SetupError> {
        for url in &settings.urls {
            settings.connection_info(url)?;
        }
        Ok(Cluster {
            settings: settings.clone(),
            name: format!("cluster {}", redact_all(&settings.urls)),
            slots: Mutex::new(Vec::new()),
            nodes: Mutex::new(HashMap::new()),
            suspect: Mutex::new(None),
        })
    }

    fn node(&self, url: &str) -> Result<Arc<Single>, NodeError> {
        let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = nodes.get(url) {
            return Ok(n.clone());
        }
        // A mistake in the settings stays one (78) on a master found later.
        let node = Arc::new(self.settings.single(url).map_err(|e| e.at(redact(url)))?);
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
        self.refresh_avoiding(None, timeout)
    }

    /// As `refresh`, asking the node `avoid` (one that just failed) last.
    /// Every node asked shares `timeout`: a frozen one costs what is left of it, not a whole
    /// timeout each.
    fn refresh_avoiding(&self, avoid: Option<&str>, timeout: Duration) -> Result<(), NodeError> {
        let deadline = Instant::now() + timeout;
        let mut candidates = self.settings.urls.clone();
        candidates.extend(self.masters_known());
        candidates.sort();
        candidates.dedup();
        if let Some(avoid) = avoid {
            candidates.sort_by_key(|url| url == avoid);
        }
        let mut last = None;
        let mut standalone = None;
        for url in candidates {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let reply: Result<Vec<Value>, NodeError> = self
                .node(&url)
                .and_then(|n| n.query_long(redis::cmd("CLUSTER").arg("SLOTS"), left));
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
                Err(e) if e.detail.contains("cluster support disabled") => {
                    standalone = Some(NodeError {
                        kind: Fault::WrongMode,
                        detail: "is not a node of a Redis Cluster (its cluster support is disabled); drop --cluster (and RLOCK_CLUSTER) to lock on it as a server on its own".into(),
                        ..e
                    });
                }
                // A Sentinel has no CLUSTER command (nor has a Redis that renamed it away).
                Err(e)
                    if e.kind == Fault::Other
                        && e.detail.to_ascii_lowercase().contains("unknown command") =>
                {
                    standalone = Some(NodeError {
                        kind: Fault::WrongMode,
                        detail: "is not a node of a Redis Cluster (it has no CLUSTER command: a Sentinel?); for Sentinels use --sentinel NAME instead of --cluster".into(),
                        ..e
                    });
                }
                Err(e) => last = Some(e),
            }
        }
        // No seed knows the slots, and one is a Redis on its own: a mistake no wait cures.
        if let Some(e) = standalone {
            return Err(e);
        }
        Err(last.unwrap_or_else(|| NodeError {
            kind: Fault::NotServing,
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
        self.master_url_for(slot, timeout)
            .and_then(|url| self.node(&url))
    }

    /// The URL of the master that serves `slot`, by the slot map (asked for when it has none).
    fn master_url_for(&self, slot: u16, timeout: Duration) -> Result<String, NodeError> {
        for attempt in 0..2 {
            let url = {
                let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
                slots
                    .iter()
                    .find(|(lo, hi, _)| (*lo..=*hi).contains(&slot))
                    .map(|(_, _, url)| url.clone())
            };
            match url {
                Some(url) => return Ok(url),
                None if attempt == 0 => self.refresh(timeout)?,
                None => {}
            }
        }
        Err(NodeError {
            kind: Fault::NotServing,
            node: self.name.clone(),
            detail: format!("no master serves slot {slot} (the cluster is down or resharding)"),
        })
    }

    /// Asks for the slot map again (that master last) when the last request's master failed
    /// it too late in its --op-timeout to ask then.
    fn ask_again_if_suspect(&self, timeout: Duration) {
        let suspect = self
            .suspect
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(suspect) = suspect {
            // The last request's master failed it: it may have failed over since.
            let _ = self.refresh_avoiding(Some(&suspect), timeout / 2);
        }
    }

    /// A master asked for the request again later (TRYAGAIN, CLUSTERDOWN): pauses, longer each
    /// time, and routes it to the slot's master again; or `e`, when the pause would pass the
    /// deadline.
    fn retry_later(&self, route: &mut Route, e: NodeError) -> Result<(), NodeError> {
        if Instant::now() + route.pause >= route.deadline {
            return Err(e);
        }
        std::thread::sleep(route.pause);
        route.pause = (route.pause * 2).min(MAX_PAUSE);
        if e.kind == Fault::ClusterDown {
            let _ = self.refresh(route.left());
        }
        // From the slot's master again: it sends the request on (ASK) once the keys have moved.
        route.url = self.master_url_for(route.slot, route.left())?;
        route.asking = false;
        Ok(())
    }

    /// The master did not answer (`e`, a transport error, the first of this request): routes
    /// the request to the master the other nodes now name for the slot; or `e`, when they name
    /// the same one, or when too little time is left to ask (then the next request asks first).
    fn after_transport_error(&self, route: &mut Route, e: NodeError) -> Result<(), NodeError> {
        // The master may be gone and its replica promoted: ask the others, now if
        // --op-timeout leaves time for it (a refused connection), else at the next
        // request (a frozen master took it all).
        route.asked_again = true;
        if route.deadline.saturating_duration_since(Instant::now()) < route.timeout / 4 {
            *self.suspect.lock().unwrap_or_else(|p| p.into_inner()) = Some(route.url.clone());
            return Err(e);
        }
        let moved = self
            .refresh_avoiding(Some(&route.url), route.left())
            .and_then(|()| self.master_url_for(route.slot, route.left()));
        match moved {
            Ok(new) if new != route.url => {
                route.url = new;
                route.asking = false;
                Ok(())
            }
            _ => Err(e),
        }
    }

    /// The error of a request whose slot moved more often than it could follow in time.
    fn kept_moving(&self, route: &Route) -> NodeError {
        let (slot, redirects) = (route.slot, route.redirects);
        NodeError {
            kind: Fault::Migrating,
            node: self.name.clone(),
            detail: format!(
                "slot {slot} kept moving ({redirects} redirections within --op-timeout)"
            ),
        }
    }
}

/// Where one request goes next, and what it has been through on its way.
struct Route {
    /// The slot of its keys.
    slot: u16,
    /// When its --op-timeout is spent.
    deadline: Instant,
    /// The whole --op-timeout.
    timeout: Duration,
    /// The master (or, after ASK, the node) it goes to next.
    url: String,
    /// Whether it goes after an ASK (preceded by ASKING).
    asking: bool,
    /// Whether the slot map was asked for again after a transport error (once per request).
    asked_again: bool,
    /// How many MOVED and ASK it has followed.
    redirects: usize,
    /// The pause before it is sent again after TRYAGAIN or CLUSTERDOWN.
    pause: Duration,
}

impl Route {
    /// What is left of its --op-timeout.
    fn left(&self) -> Duration {
        left(self.deadline)
    }
}

/// What is left until `deadline`, at least a millisecond (a timeout of zero is none at all).
fn left(deadline: Instant) -> Duration {
    deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(1))
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
    url::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(|h| h.trim_matches(['[', ']']).to_string()))
        .unwrap_or_default()
}

impl Node for Cluster {
    fn eval(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
        timeout: Duration,
    ) -> Result<Value, NodeError> {
        // Redirections and replies that ask for a retry (TRYAGAIN while the slot's keys are
        // split between two masters, CLUSTERDOWN until a failover ends) are followed until
        // --op-timeout is spent: a slot in migration is not a failed request.
        let deadline = Instant::now() + timeout;
        let slot = key_slot(keys.first().copied().unwrap_or(""));
        self.ask_again_if_suspect(timeout);
        let mut route = Route {
            slot,
            deadline,
            timeout,
            url: self.master_url_for(slot, left(deadline))?,
            asking: false,
            asked_again: false,
            redirects: 0,
            pause: FIRST_PAUSE,
        };
        loop {
            let routed = self.node(&route.url).and_then(|target| {
                target.eval_routed(script, keys, args, route.left(), route.asking)
            });
            match routed {
                Ok(Routed::Done(v)) => return Ok(v),
                Ok(Routed::Moved(addr)) => {
                    // The slot map is stale: learn the new one, and go where we were sent.
                    let _ = self.refresh(route.left());
                    route.url = self.url_of(&addr);
                    route.asking = false;
                    route.redirects += 1;
                }
                Ok(Routed::Ask(addr)) => {
                    route.url = self.url_of(&addr);
                    route.asking = true;
                    route.redirects += 1;
                }
                Err(e) if matches!(e.kind, Fault::Migrating | Fault::ClusterDown) => {
                    self.retry_later(&mut route, e)?;
                }
                Err(e) if e.is_transport() && !route.asked_again => {
                    self.after_transport_error(&mut route, e)?;
                }
                Err(e) => return Err(e),
            }
            if route.redirects > MAX_REDIRECTS && Instant::now() >= deadline {
                return Err(self.kept_moving(&route));
            }
        }
    }

    /// `first` and `second`, whose keys share a slot, in one write to the slot's master, as on
    /// one server. A redirection, a slot in migration or a failover, or a connection that
    /// failed, sends them again one after the other, each routed as `eval` routes it (each
    /// script is one rlock may run twice: a try or a release of the same token, a record that
    /// checks what the first did); a master that did not answer within the time is asked about
    /// at the next request, as `eval` does.
    fn eval_then(
        &self,
        first: super::Eval<'_>,
        second: super::Eval<'_>,
        timeout: Duration,
    ) -> Result<super::Replies, NodeError> {
        let deadline = Instant::now() + timeout;
        let slot = key_slot(first.keys.first().copied().unwrap_or(""));
        if second.keys.iter().all(|k| key_slot(k) == slot) {
            self.ask_again_if_suspect(timeout);
            let url = self.master_url_for(slot, timeout);
            if let Ok(url) = url
                && let Ok(master) = self.node(&url)
            {
                match master.eval_then(first, second, timeout) {
                    Err(e) if e.kind == Fault::Timeout => {
                        // As `eval` after a master that took the whole --op-timeout: the next
                        // request asks the other nodes who serves the slot first.
                        *self.suspect.lock().unwrap_or_else(|p| p.into_inner()) = Some(url);
                        return Err(e);
                    }
                    Err(e) if e.is_transport() || e.kind == Fault::WrongMode => {}
                    done => return done,
                }
            }
        }
        let value = self.eval(first.script, first.keys, first.args, left(deadline))?;
        let second = self.eval(second.script, second.keys, second.args, left(deadline));
        Ok((value, second))
    }

    fn scan(&self, pattern: &str, timeout: Duration) -> Result<Vec<String>, NodeError> {
        self.refresh(timeout)?;
        let mut keys = Vec::new();
        for url in self.masters_known() {
            keys.extend(self.node(&url)?.scan_keys(pattern, timeout)?);
        }
        Ok(keys)
    }

    /// PUBLISH reaches every node of a cluster; the master of the lock's slot will do.
    fn subscriber(
        &self,
        key: &str,
        channel: &str,
        timeout: Duration,
    ) -> Result<Subscriber, NodeError> {
        self.master_for(key_slot(key), timeout)?
            .subscriber(key, channel, timeout)
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn hang_up(&self) {
        let nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
        for node in nodes.values() {
            node.hang_up();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_of_urls() {
        assert_eq!(host_of("redis://u:p@10.0.0.1:7000/0"), "10.0.0.1");
        assert_eq!(host_of("rediss://[::1]:7000"), "::1");
    }
}
