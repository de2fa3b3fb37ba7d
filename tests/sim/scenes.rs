//! Scenes: fixed sequences of requests by a few processes, one at a time, to one Redis, through
//! the library's own calls (`Locker::acquire` without waiting, `renew`, `release`,
//! `force_release`, `inspect`, `history`) on the very scripts build.rs sends, each outcome held
//! to what the scripts' headers, docs/design.md and docs/history.md promise. The runs of the
//! simulation reach what clients do by themselves; the scenes reach what they never ask for:
//! a forced release (`--force`: "broken", "brokenall", "free"), `--hold-at-least`, the history
//! a release records, the holder records `inspect` and a busy answer read, a key of another
//! type; and what the runs reach only by chance: the line, each waiter's place, who a release
//! or a freed slot wakes and who it warns, a reservation that lapses (a waiter's try is sent
//! as the waiter sends it, acquire.lua's ARGV with `join`, beside someone listening on its
//! channel). Every script's reply is held to the data as in a run (`replies.rs`). Cheap (a
//! hundred scripts or so), they are the first of the mutation pass's kill budget.

mod back;
mod line;
mod one;
mod several;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rlock::backend::{Fault, Node, NodeError, Script, Subscriber};
use rlock::identity::Identity;
use rlock::lock::{
    ACQUIRE, Error, Grant, HoldRecord, Hooks, Interrupt, Keep, LEAVE, LockInfo, LockKey, Locker,
    Newest, Released, Renewed, Request, RunRecord, Sharing, Silent, WaitPolicy,
};

use super::lua::{Env, Exec, Scripting};
use super::mutants::Mutant;
use super::net::value;
use super::server::{Call, node_error};
use super::store::{Data, Resp, Store};

/// A script's reply: its word, and its fields by name.
type Said = (String, BTreeMap<String, String>);

/// The lock's name (and, with rlock's prefix, its key).
const KEY: &str = "jobs";

/// The server's clock when a scene begins (ms).
const T0: i64 = 1_780_000_000_000;

/// One Redis, called directly: each script runs at once at the scene's clock.
struct Bench {
    store: Store,
    lua: Scripting,
    now_ms: i64,
    mutant: Option<Arc<Mutant>>,
    /// The first reply that the data contradicts, or script that failed unasked.
    broken: Option<String>,
    /// A script error is expected (a key of another type planted).
    errors_expected: bool,
    /// The waiters someone listens for (each on its own channel, `<channel>:<token>`).
    listening: std::collections::BTreeSet<String>,
    /// What the scripts published since it was last read: (channel, message).
    heard: Vec<(String, String)>,
    /// The waiters' tries so far (each try's number).
    tries: u64,
}

struct Direct(Arc<Mutex<Bench>>);

impl Node for Direct {
    fn eval(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
        _timeout: Duration,
    ) -> Result<redis::Value, NodeError> {
        let call = Call {
            name: script.name,
            source: script.source.to_string(),
            sha: script.sha.to_string(),
            keys: keys.iter().map(|k| k.to_string()).collect(),
            args: args.iter().map(|a| a.to_string()).collect(),
            replicated: None,
        };
        let reply = self.0.lock().unwrap_or_else(|p| p.into_inner()).run(call);
        match reply {
            Resp::Err(e) => Err(node_error(Fault::WrongType, "bench", &e)),
            r => Ok(value(r)),
        }
    }

    fn scan(&self, _pattern: &str, _timeout: Duration) -> Result<Vec<String>, NodeError> {
        Err(node_error(Fault::Other, "bench", "no SCAN in a scene"))
    }

    fn subscriber(&self, _: &str, _: &str, _: Duration) -> Result<Subscriber, NodeError> {
        Err(node_error(Fault::Other, "bench", "no waiting in a scene"))
    }

    fn name(&self) -> &str {
        "bench"
    }
}

impl Bench {
    /// Runs `call` (mutated, if a mutant is planted) now; its reply, each held to the data.
    fn run(&mut self, mut call: Call) -> Resp {
        let b = self;
        if let Some(m) = &b.mutant {
            m.apply(&mut call);
        }
        let now_ms = b.now_ms;
        let channel = format!("{{rlock:{KEY}}}:wake");
        let mut listeners: std::collections::BTreeMap<String, i64> = b
            .listening
            .iter()
            .map(|t| (format!("{channel}:{t}"), 1))
            .collect();
        listeners.insert(channel, 1);
        let exec = Exec {
            store: std::mem::take(&mut b.store),
            env: Env {
                now_us: now_ms * 1000 + 500,
                listeners,
                published: Vec::new(),
                info_server: String::new(),
                info_replication: String::new(),
            },
        };
        let before = exec.store.clone();
        let (reply, exec) = b
            .lua
            .eval(&call.sha, &call.source, &call.keys, &call.args, exec);
        b.store = exec.store;
        b.heard.extend(exec.env.published);
        if b.broken.is_none() {
            b.broken = match &reply {
                Resp::Err(e) if !b.errors_expected => {
                    Some(format!("the script {} failed: {e}", call.name))
                }
                // A refusal is Redis's error form: its code first (WRONGTYPE, NOPERM), as the
                // scripts' headers say, never a Lua error or one prefixed with a place.
                Resp::Err(e) if !e.starts_with("WRONGTYPE ") && !e.starts_with("NOPERM ") => {
                    Some(format!("the script {} failed: {e}", call.name))
                }
                // The replies of the scripts a lock's keys come first in (replies.rs); not
                // record.lua's and the readers', whose first key is another.
                _ if ["acquire", "release", "renew", "leave"].contains(&call.name) => {
                    super::replies::contradiction(&call, &before, &b.store, &reply, now_ms)
                }
                _ => None,
            };
        }
        reply
    }
}

struct Calm;

impl Interrupt for Calm {
    fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        None
    }

    fn take(&self) -> Option<nix::sys::signal::Signal> {
        None
    }
}

/// A scene's server, its clock and the processes' requests.
struct Scene {
    bench: Arc<Mutex<Bench>>,
    locker: Locker,
    key: LockKey,
}

fn who(n: u32) -> Identity {
    Identity {
        host: format!("host{n}"),
        pid: 100 + n,
        user: format!("user{n}"),
        command: format!("job {n}"),
        pidns: String::new(),
    }
}

impl Scene {
    fn new(mutant: Option<Arc<Mutant>>) -> Self {
        let bench = Arc::new(Mutex::new(Bench {
            store: Store::default(),
            lua: Scripting::new(),
            now_ms: T0,
            mutant,
            broken: None,
            errors_expected: false,
            listening: Default::default(),
            heard: Vec::new(),
            tries: 0,
        }));
        let node: Box<dyn Node> = Box::new(Direct(bench.clone()));
        Scene {
            bench,
            locker: Locker::new(vec![node], Duration::from_millis(200)),
            key: LockKey::new("rlock:", KEY).expect("a key"),
        }
    }

    fn bench(&self) -> std::sync::MutexGuard<'_, Bench> {
        self.bench.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The server's clock moves on.
    fn later(&self, ms: i64) {
        self.bench().now_ms += ms;
    }

    fn now(&self) -> i64 {
        self.bench().now_ms
    }

    /// Process `n`'s one try (`-n`), token `t<n>`.
    fn take(
        &self,
        n: u32,
        sharing: Sharing,
        ttl_ms: u64,
        hold_ms: Option<u64>,
    ) -> Result<Grant, Error> {
        let id = who(n);
        let token = format!("t{n}");
        let req = Request {
            key: &self.key,
            token: &token,
            ttl: Duration::from_millis(ttl_ms),
            sharing,
            who: &id,
            hold: hold_ms.map(Duration::from_millis),
            newest: Newest::Off,
            record: None,
        };
        let policy = WaitPolicy {
            wait: None,
            no_wait: true,
        };
        let hooks = Hooks {
            interrupt: &Calm,
            observer: &Silent,
        };
        self.locker.acquire(&req, policy, hooks)
    }
}

/// A broken promise, if `ok` is false.
fn want(ok: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(what()) }
}

/// How long a scene's history keeps its runs.
fn record(run: &str) -> HoldRecord {
    HoldRecord {
        keep: Keep {
            runs: 10,
            ttl: Duration::from_secs(86_400),
        },
        run: run.into(),
        by: "root@admin pid 9".into(),
        run_end: None,
        running_id: None,
    }
}

impl Scene {
    fn renew(&self, n: u32) -> Result<Renewed, NodeError> {
        self.locker.renew(
            &self.key,
            &format!("t{n}"),
            None,
            Duration::from_millis(200),
        )
    }

    fn release(&self, n: u32, run: &str) -> Result<Released, Error> {
        let rec = record(run);
        self.locker
            .release_recording(&self.key, &format!("t{n}"), Some(&rec))
            .0
    }

    /// Process `n`'s release as `rlock exec`'s, its run `run` said in place of the hold.
    fn release_run(&self, n: u32, run: &str) -> Result<Released, Error> {
        let ran = RunRecord {
            run: Some(run.into()),
            outcome: Some("ok".into()),
            code: Some(0),
            ..RunRecord::default()
        };
        let rec = HoldRecord::of_run(record(run).keep, ran, None);
        self.locker
            .release_recording(&self.key, &format!("t{n}"), Some(&rec))
            .0
    }

    fn force(&self, run: &str) -> Result<Released, Error> {
        let rec = record(run);
        self.locker.force_release_recording(&self.key, Some(&rec)).0
    }

    fn history(&self) -> Result<Vec<RunRecord>, String> {
        self.locker
            .history(&self.key, 20)
            .map_err(|e| format!("the history could not be read: {e:?}"))
    }

    fn inspect(&self) -> Result<LockInfo, String> {
        self.locker
            .inspect(&self.key)
            .map_err(|e| format!("inspect failed: {e:?}"))
    }

    /// The history has no entry of run `run`.
    fn no_entry(&self, run: &str) -> Result<(), String> {
        let all = self.history()?;
        want(!all.iter().any(|r| r.run.as_deref() == Some(run)), || {
            format!("run {run} is on record: {all:?}")
        })
    }

    /// The history's entry of run `run`.
    fn entry(&self, run: &str) -> Result<RunRecord, String> {
        let all = self.history()?;
        all.iter()
            .find(|r| r.run.as_deref() == Some(run))
            .cloned()
            .ok_or_else(|| format!("no entry of run {run} in the history: {all:?}"))
    }
}

impl Scene {
    /// Process `n`'s try as a waiter's (acquire.lua's ARGV, `join` "1"), token `t<n>`; someone
    /// listens on its channel from now on. The reply's word and fields.
    fn join(&self, n: u32, sharing: Sharing) -> Said {
        self.join_as(n, sharing, None)
    }

    /// As `join`, with `--newest` ("1") or `--cancel-running` ("2").
    fn join_as(&self, n: u32, sharing: Sharing, newest: Option<&str>) -> Said {
        self.try_with(n, sharing, newest, true)
    }

    /// As `join_as`, but a try that does not wait (`-n`): it joins no line.
    fn try_as(&self, n: u32, sharing: Sharing, newest: Option<&str>) -> Said {
        self.try_with(n, sharing, newest, false)
    }

    fn try_with(&self, n: u32, sharing: Sharing, newest: Option<&str>, join: bool) -> Said {
        let id = who(n);
        let (mode, limit) = match sharing {
            Sharing::Exclusive => ("", 0),
            Sharing::Limit(l) => ("limit", l),
            Sharing::Shared => ("shared", 0),
        };
        let try_number = {
            let mut b = self.bench();
            b.listening.insert(format!("t{n}"));
            b.tries += 1;
            b.tries
        };
        let mut args = vec![
            ("ttl", "10000".to_string()),
            ("join", if join { "1" } else { "0" }.into()),
            ("check", "5000".into()),
            ("host", id.host),
            ("pid", id.pid.to_string()),
            ("user", id.user),
            ("cmd", id.command),
            ("mode", mode.into()),
            ("limit", limit.to_string()),
            ("pidns", String::new()),
            ("try", try_number.to_string()),
        ];
        if let Some(x) = newest {
            args.push(("newest", x.into()));
        }
        self.raw(&ACQUIRE, n, args)
    }

    /// Process `n`'s give-back (leave.lua), for its tries up to `upto`.
    fn leave(&self, n: u32, upto: u64) -> Said {
        self.raw(&LEAVE, n, vec![("upto", upto.to_string())])
    }

    /// `script` for token `t<n>` on the lock's keys, with `args` beside its token and channel.
    fn raw(&self, script: &Script, n: u32, args: Vec<(&str, String)>) -> Said {
        let mut all = vec![
            ("token".to_string(), format!("t{n}")),
            ("channel".into(), format!("{{rlock:{KEY}}}:wake")),
        ];
        all.extend(args.into_iter().map(|(k, v)| (k.to_string(), v)));
        let call = Call {
            name: script.name,
            source: script.source.to_string(),
            sha: script.sha.to_string(),
            keys: vec![
                self.key.redis_key.clone(),
                format!("{{rlock:{KEY}}}:state"),
                format!("{{rlock:{KEY}}}:q"),
            ],
            args: all.into_iter().flat_map(|(k, v)| [k, v]).collect(),
            replicated: None,
        };
        let mut out = (String::new(), BTreeMap::new());
        if let Resp::Array(items) = self.bench().run(call) {
            let text = |r: &Resp| match r {
                Resp::Bulk(s) | Resp::Status(s) => s.clone(),
                Resp::Int(i) => i.to_string(),
                other => format!("{other:?}"),
            };
            out.0 = items.first().map(text).unwrap_or_default();
            for pair in items[1.min(items.len())..].chunks(2) {
                if let [k, v] = pair {
                    out.1.insert(text(k), text(v));
                }
            }
        }
        out
    }

    /// Nobody listens for process `n` any more (it died).
    fn deaf(&self, n: u32) {
        self.bench().listening.remove(&format!("t{n}"));
    }

    /// What the scripts published since last asked: (token or "*", message).
    fn heard(&self) -> Vec<(String, String)> {
        let channel = format!("{{rlock:{KEY}}}:wake");
        std::mem::take(&mut self.bench().heard)
            .into_iter()
            .map(|(c, m)| {
                let to = c.strip_prefix(&format!("{channel}:")).unwrap_or("*");
                (to.to_string(), m)
            })
            .collect()
    }

    /// The line, first first.
    fn line(&self) -> Vec<String> {
        let b = self.bench();
        match b.store.data.get(&format!("{{rlock:{KEY}}}:q")) {
            Some(Data::ZSet(z)) => z.iter().map(|(_, t)| t.clone()).collect(),
            _ => Vec::new(),
        }
    }
}

/// Runs every scene, each on a server of its own, with `mutant` (if any) applied to the scripts:
/// the first broken promise.
pub fn play(mutant: Option<Arc<Mutant>>) -> Option<String> {
    type Play = fn(&Scene) -> Result<(), String>;
    let scenes: [(&str, Play); 13] = [
        ("exclusive", one::exclusive),
        ("--hold-at-least", one::held_at_least),
        ("--limit 2", |s| several::several(s, Sharing::Limit(2))),
        ("--shared", |s| several::several(s, Sharing::Shared)),
        ("other types", one::other_types),
        ("the line", line::exclusive),
        ("the line of --limit 2", line::semaphore),
        ("the line of --shared", line::shared),
        ("give-backs", back::give_back),
        ("renewals", back::renewals),
        ("--newest", back::newest),
        ("kinds", back::kinds),
        ("a semaphore's reservation", line::reserved),
    ];
    for (name, scene) in scenes {
        let s = Scene::new(mutant.clone());
        let result = scene(&s);
        let broken = s.bench().broken.take();
        if let Some(v) = broken.or(result.err()) {
            return Some(format!("scene {name}: {v}"));
        }
    }
    None
}

#[test]
fn the_scenes_keep_their_promises() {
    if let Some(v) = play(None) {
        panic!("{v}");
    }
}
