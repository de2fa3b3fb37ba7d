//! A master watched by Sentinels. Before every request rlock asks the Sentinels where the master
//! is, and checks a newly named master with ROLE. A failover can leave the old master answering
//! as one for seconds, so asking only after an error is not enough: a renewal on the old master
//! would keep a lock that the new master has already let expire. Asking each time, rlock talks
//! to the new master as soon as the Sentinels name it, and a lock that did not survive the
//! failover is found not owned there: lost.
//!
//! A silent Sentinel (frozen, cut off) must cost no more than a refusing one: the Sentinel that
//! answered last is asked alone, with half of the question's budget; only when it fails are the
//! others asked, all at once, with what is left (and all at once from the start, until one has
//! answered). The request to the master gets whatever the question left of --op-timeout, so a
//! request through Sentinels never takes longer than --op-timeout.
//!
//! rlock asks the Sentinels itself rather than through the redis crate's sync Sentinel API,
//! which connects with no timeout: a frozen Sentinel would hang rlock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redis::Value;

use super::SetupError;
use super::{Fault, Node, NodeError, Script, Settings, Single, Subscriber, with_addr};
use crate::redact::{redact, redact_all};

pub struct Sentinel {
    settings: Settings,
    master: String,
    name: String,
    /// One reused connection per Sentinel.
    sentinels: Vec<Single>,
    /// The master last named, by address, and its node.
    current: Mutex<Option<(String, Arc<Single>)>>,
    /// The Sentinel that answered last (its place in `sentinels`), asked first; none yet:
    /// `usize::MAX`.
    last_good: AtomicUsize,
}

/// What one Sentinel said: where the master is, None when it does not know that master.
type Answer = Result<Option<(String, u16)>, NodeError>;

/// The least time a request is given, however little is left of its budget.
const LEAST: Duration = Duration::from_millis(1);

impl Sentinel {
    pub fn new(settings: &Settings, master: &str) -> Result<Self, SetupError> {
        if master.is_empty() {
            return Err(SetupError::Usage(
                "--sentinel needs the master's name".into(),
            ));
        }
        let sentinels = settings
            .urls
            .iter()
            .map(|url| Ok(Single::new(settings.sentinel_client(url)?, redact(url))))
            .collect::<Result<Vec<_>, SetupError>>()?;
        Ok(Sentinel {
            settings: settings.clone(),
            master: master.to_string(),
            name: format!(
                "master '{master}' of sentinels {}",
                redact_all(&settings.urls)
            ),
            sentinels,
            current: Mutex::new(None),
            last_good: AtomicUsize::new(usize::MAX),
        })
    }

    fn fail(&self, kind: Fault, detail: String) -> NodeError {
        NodeError {
            kind,
            node: self.name.clone(),
            detail,
        }
    }

    fn ask_one(&self, i: usize, timeout: Duration) -> Answer {
        self.sentinels[i].query(
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&self.master),
            timeout.max(LEAST),
        )
    }

    /// Where the Sentinels say the master is, within `budget`: the Sentinel that answered
    /// last, alone, with half of it; then every other at once with what is left.
    fn ask(&self, budget: Duration) -> Result<(String, u16), NodeError> {
        let start = Instant::now();
        let n = self.sentinels.len();
        let last = self.last_good.load(Ordering::Relaxed);
        let mut answers: Vec<(usize, Answer)> = Vec::new();
        if last < n && n > 1 {
            match self.ask_one(last, budget / 2) {
                Ok(Some(addr)) => return Ok(addr),
                other => answers.push((last, other)),
            }
        }
        let left = budget.saturating_sub(start.elapsed());
        let others: Vec<usize> = (0..n)
            .filter(|i| answers.iter().all(|(a, _)| a != i))
            .collect();
        let asked: Vec<(usize, Answer)> = std::thread::scope(|s| {
            let handles: Vec<_> = others
                .iter()
                .map(|&i| s.spawn(move || (i, self.ask_one(i, left))))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a Sentinel worker panicked"))
                .collect()
        });
        answers.extend(asked);
        answers.sort_by_key(|(i, _)| *i);
        if let Some((i, addr)) = answers.iter().find_map(|(i, a)| match a {
            Ok(Some(addr)) => Some((*i, addr.clone())),
            _ => None,
        }) {
            self.last_good.store(i, Ordering::Relaxed);
            return Ok(addr);
        }
        Err(self.none_named(answers))
    }

    /// Why no Sentinel named the master: a URL that is not a Sentinel (78) or a refusal that
    /// no wait cures comes first; else an outage, or a master no Sentinel knows (both of which
    /// a wait rides out).
    fn none_named(&self, answers: Vec<(usize, Answer)>) -> NodeError {
        let mut problems = Vec::new();
        let mut lasting = None;
        let mut unknown = false;
        for (i, answer) in answers {
            let sentinel = &self.sentinels[i];
            match answer {
                Ok(Some(_)) => {}
                Ok(None) => {
                    unknown = true;
                    problems.push(format!(
                        "{}: does not know master '{}'",
                        sentinel.name(),
                        self.master
                    ));
                }
                Err(e) if not_a_sentinel(&e) => {
                    let answered = match e.kind {
                        Fault::NotRedis => e.detail.clone(),
                        _ => format!("it answered '{}'", e.detail),
                    };
                    return NodeError {
                        kind: Fault::WrongMode,
                        detail: format!(
                            "is not a Sentinel ({answered}); give --sentinel the Sentinels' URLs (port 26379 unless set otherwise), or drop --sentinel to lock on a Redis server itself"
                        ),
                        ..e
                    };
                }
                Err(e) => {
                    if !e.is_transient() && lasting.is_none() {
                        lasting = Some(e.clone());
                    }
                    problems.push(e.to_string());
                }
            }
        }
        if let Some(e) = lasting {
            return e;
        }
        self.fail(
            if unknown {
                Fault::NoMaster
            } else {
                Fault::Connect
            },
            format!("no Sentinel named the master: {}", problems.join("; ")),
        )
    }

    /// The master as the Sentinels name it now, confirmed with ROLE when it is a new one.
    fn master(&self, timeout: Duration) -> Result<Arc<Single>, NodeError> {
        let start = Instant::now();
        let (host, port) = self.ask(timeout)?;
        let timeout = timeout.saturating_sub(start.elapsed()).max(LEAST);
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
            // A mistake in the settings stays one (78) on a master found later.
            .map_err(|e| e.at(self.name.clone()))?;
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

impl Sentinel {
    /// The master, asked for within half of `timeout`, and what is left of `timeout` for the
    /// request to it: the question and the request share --op-timeout.
    fn master_within(&self, timeout: Duration) -> Result<(Arc<Single>, Duration), NodeError> {
        let start = Instant::now();
        let master = self.master(timeout / 2)?;
        Ok((master, timeout.saturating_sub(start.elapsed()).max(LEAST)))
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
        let (master, left) = self.master_within(timeout)?;
        master.eval(script, keys, args, left)
    }

    fn eval_then(
        &self,
        first: super::Eval<'_>,
        second: super::Eval<'_>,
        timeout: Duration,
    ) -> Result<super::Replies, NodeError> {
        let (master, left) = self.master_within(timeout)?;
        master.eval_then(first, second, left)
    }

    fn scan(&self, pattern: &str, timeout: Duration) -> Result<Vec<String>, NodeError> {
        let (master, left) = self.master_within(timeout)?;
        master.scan(pattern, left)
    }

    fn subscriber(
        &self,
        key: &str,
        channel: &str,
        timeout: Duration,
    ) -> Result<Subscriber, NodeError> {
        let (master, left) = self.master_within(timeout)?;
        master.subscriber(key, channel, left)
    }

    fn name(&self) -> &str {
        &self.name
    }
}

/// A Sentinel URL's answer that says it is no Sentinel: a Redis server without the SENTINEL
/// command, or something that does not speak Redis at all.
fn not_a_sentinel(e: &NodeError) -> bool {
    e.kind == Fault::NotRedis
        || (e.kind == Fault::Other && e.detail.to_ascii_lowercase().contains("unknown command"))
}
