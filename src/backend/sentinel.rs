//! A master watched by Sentinels. Before every request rlock asks the Sentinels where the master
//! is, and checks a newly named master with ROLE. A failover can leave the old master answering
//! as one for seconds, so asking only after an error is not enough: a renewal on the old master
//! would keep a lock that the new master has already let expire. Asking each time, rlock talks
//! to the new master as soon as the Sentinels name it, and a lock that did not survive the
//! failover is found not owned there: lost.
//!
//! The master is the one a majority of the Sentinels that answer name, all asked at once: one
//! Sentinel that names another master under the same name cannot send a run elsewhere, and a
//! split without a majority is waited out (or 69), naming who said what. A silent Sentinel
//! (frozen, cut off) must then cost little: once a master is known, the Sentinel that answered
//! last is asked alone, with half of the question's budget, and believed when it names that
//! same master; otherwise every Sentinel is asked again. The request to the master gets whatever the question left of --op-timeout, so a
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

    /// Where the Sentinels say the master is, within `budget`. Once a master is known (named by
    /// a majority, its role checked), the Sentinel that answered last is asked alone, with half
    /// of it, and its answer taken when it names that master. Otherwise every Sentinel is asked
    /// at once with what is left, and the master is the one a majority of those that answer
    /// name: a Sentinel that names another master under the same name (another set, a stale
    /// view) is outvoted, and a split without a majority is a wait, not a guess.
    fn ask(&self, budget: Duration) -> Result<(String, u16), NodeError> {
        let start = Instant::now();
        let n = self.sentinels.len();
        let last = self.last_good.load(Ordering::Relaxed);
        let known = self
            .current
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(addr, _)| addr.clone());
        if last < n
            && n > 1
            && let Some(known) = known
            && let Ok(Some(addr)) = self.ask_one(last, budget / 2)
            && format!("{}:{}", addr.0, addr.1) == known
        {
            return Ok(addr);
        }
        let left = budget.saturating_sub(start.elapsed());
        let answers: Vec<(usize, Answer)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|i| s.spawn(move || (i, self.ask_one(i, left))))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a Sentinel worker panicked"))
                .collect()
        });
        let named: Vec<(usize, &(String, u16))> = answers
            .iter()
            .filter_map(|(i, a)| match a {
                Ok(Some(addr)) => Some((*i, addr)),
                _ => None,
            })
            .collect();
        if named.is_empty() {
            return Err(self.none_named(answers));
        }
        let votes = |addr: &(String, u16)| named.iter().filter(|(_, a)| *a == addr).count();
        if let Some(&(i, addr)) = named.iter().find(|(_, a)| 2 * votes(a) > named.len()) {
            self.last_good.store(i, Ordering::Relaxed);
            return Ok(addr.clone());
        }
        let said: Vec<String> = named
            .iter()
            .map(|(i, (host, port))| format!("{} names {host}:{port}", self.sentinels[*i].name()))
            .collect();
        Err(self.fail(
            Fault::NotServing,
            format!(
                "the Sentinels disagree on the master, and no majority of those that answer names the same one: {}",
                said.join("; ")
            ),
        ))
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
                .password(self.settings.changing_password(&url))
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
