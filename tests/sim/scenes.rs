//! Scenes: fixed sequences of requests by a few processes, one at a time, to one Redis, through
//! the library's own calls (`Locker::acquire` without waiting, `renew`, `release`,
//! `force_release`, `inspect`, `history`) on the very scripts build.rs sends, each outcome held
//! to what the scripts' headers, docs/design.md and docs/history.md promise. The runs of the
//! simulation reach what clients do by themselves; the scenes reach what they never ask for:
//! a forced release (`--force`: "broken", "brokenall", "free"), `--hold-at-least`, the history
//! a release records, the holder records `inspect` and a busy answer read, a key of another
//! type. Every script's reply is held to the data as in a run (`replies.rs`). Cheap (a few
//! dozen scripts), they are the first of the mutation pass's kill budget.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rlock::backend::{Fault, Node, NodeError, Script, Subscriber};
use rlock::identity::Identity;
use rlock::lock::{
    Error, Grant, HoldRecord, Holder, HolderPid, Hooks, Interrupt, Keep, LockInfo, LockKey, Locker,
    Newest, NotOwner, Refused, Released, Renewed, Request, RunRecord, Seen, Sharing, Silent,
    WaitPolicy,
};

use super::lua::{Env, Exec, Scripting};
use super::mutants::Mutant;
use super::net::value;
use super::server::{Call, node_error};
use super::store::{Data, Resp, Store};

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
        let mut call = Call {
            name: script.name,
            source: script.source.to_string(),
            sha: script.sha.to_string(),
            keys: keys.iter().map(|k| k.to_string()).collect(),
            args: args.iter().map(|a| a.to_string()).collect(),
            replicated: None,
        };
        let mut b = self.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = &b.mutant {
            m.apply(&mut call);
        }
        let now_ms = b.now_ms;
        let exec = Exec {
            store: std::mem::take(&mut b.store),
            env: Env {
                now_us: now_ms * 1000 + 500,
                listeners: Default::default(),
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
        if b.broken.is_none() {
            b.broken = match &reply {
                Resp::Err(e) if !b.errors_expected => {
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
        }));
        let node: Box<dyn Node> = Box::new(Direct(bench.clone()));
        Scene {
            bench,
            locker: Locker::new(vec![node], Duration::from_millis(200)),
            key: LockKey::new("rlock:", "jobs").expect("a key"),
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

/// What inspect and a busy answer say of a holder is what its grant wrote of its process
/// (acquire.lua: host, pid, user, cmd, since; docs/design.md, "inspect").
fn same_holder(h: &Holder, n: u32, since: i64) -> Result<(), String> {
    let id = who(n);
    want(
        h.host.as_deref() == Some(id.host.as_str())
            && h.pid == Some(HolderPid::Pid(id.pid))
            && h.user.as_deref() == Some(id.user.as_str())
            && h.command.as_deref() == Some(id.command.as_str())
            && h.since_ms == Some(since),
        || format!("the holder record of process {n}, granted at {since}, reads {h:?}"),
    )
}

/// What the history keeps of a hold that a release ended (release.lua's record_hold).
fn same_entry(
    e: &RunRecord,
    n: u32,
    granted: i64,
    ended: i64,
    outcome: &str,
) -> Result<(), String> {
    let id = who(n);
    want(
        e.host.as_deref() == Some(id.host.as_str())
            && e.pid == Some(i64::from(id.pid))
            && e.user.as_deref() == Some(id.user.as_str())
            && e.command.as_deref() == Some(id.command.as_str())
            && e.granted_ms == Some(granted)
            && e.ended_ms == Some(ended)
            && e.held_ms == Some(ended - granted)
            && e.outcome.as_deref() == Some(outcome)
            && e.by.as_deref() == (outcome == "broken").then_some("root@admin pid 9"),
        || {
            format!(
                "the history's entry of process {n}'s hold ({granted} to {ended}, {outcome}) \
                 reads {e:?}"
            )
        },
    )
}

/// One holder at a time: a grant, what a busy try and inspect say of its holder, a renewal, a
/// forced break and what the holder then hears, the history of it, a fence that rises, a
/// release retried, a release after the lease ran out.
fn exclusive(s: &Scene) -> Result<(), String> {
    let ex = Sharing::Exclusive;
    let first = s
        .take(1, ex, 10_000, None)
        .map_err(|e| format!("a free lock refused: {e:?}"))?;
    want(
        first.fence >= 1 && first.ttl.length() == Duration::from_secs(10),
        || format!("the first grant: {first:?}"),
    )?;
    let t1 = s.now();
    s.later(1_000);
    match s.take(2, ex, 10_000, None) {
        Err(Error::Busy {
            seen:
                Seen::Held {
                    pttl,
                    holder,
                    crowd,
                    ..
                },
            ..
        }) => {
            same_holder(&holder, 1, t1)?;
            want(pttl == 9_000 && crowd.is_none(), || {
                format!("a busy lock held 1 s of 10 s: pttl {pttl}, {crowd:?}")
            })?;
        }
        other => return Err(format!("a held lock answered {other:?}")),
    }
    let info = s.inspect()?;
    same_holder(&info.holder, 1, t1)?;
    want(
        info.token.as_deref() == Some("t1")
            && info.fence == Some(first.fence)
            && info.ttl_ms == Some(10_000)
            && info.pttl == 9_000
            && info.limit.is_none(),
        || format!("inspect of a lock held 1 s of 10 s: {info:?}"),
    )?;
    s.later(2_000);
    want(
        matches!(s.renew(1), Ok(Renewed::Yes(d)) if d == Duration::from_secs(10)),
        || "the holder's renewal".into(),
    )?;
    let info = s.inspect()?;
    want(
        info.renewed_ms == Some(s.now()) && info.pttl == 10_000,
        || format!("inspect after a renewal at {}: {info:?}", s.now()),
    )?;
    want(
        matches!(s.renew(2), Ok(Renewed::NotOwner(NotOwner::Taken))),
        || "another token's renewal".into(),
    )?;
    want(
        matches!(
            s.release(2, "r0"),
            Err(Error::NotPermitted {
                refused: Refused::ReleaseHeldByOther,
                ..
            })
        ),
        || "another token's release".into(),
    )?;
    s.no_entry("r0")?;
    let ended = s.now();
    match s.force("f1") {
        Ok(Released::Broken(Some(who))) => want(who.contains("host1"), || {
            format!("a forced release says it broke {who}")
        })?,
        other => return Err(format!("a forced release of a held lock: {other:?}")),
    }
    let info = s.inspect()?;
    want(!info.held(), || {
        format!("a broken lock is still held: {info:?}")
    })?;
    same_entry(&s.entry("f1")?, 1, t1, ended, "broken")?;
    // The holder hears that it lost the lock, and to a break (renew.lua's "free" broken).
    want(
        matches!(s.renew(1), Ok(Renewed::NotOwner(NotOwner::Broken))),
        || format!("a broken holder's renewal: {:?}", s.renew(1)),
    )?;
    want(
        matches!(
            s.release(1, "r1"),
            Err(Error::NotPermitted {
                refused: Refused::ReleaseNotHeld,
                ..
            })
        ),
        || "a broken holder's release says it released".into(),
    )?;
    // The break recorded the hold; the holder's release records nothing more.
    s.no_entry("r1")?;
    want(matches!(s.force("f2"), Ok(Released::Broken(None))), || {
        "a forced release of a free lock".into()
    })?;
    s.later(500);
    let second = s
        .take(2, ex, 5_000, None)
        .map_err(|e| format!("a broken lock refused: {e:?}"))?;
    want(second.fence > first.fence, || {
        format!("fences {} then {}", first.fence, second.fence)
    })?;
    let t2 = s.now();
    s.later(1_500);
    want(matches!(s.release(2, "r2"), Ok(Released::Done)), || {
        "a release".into()
    })?;
    same_entry(&s.entry("r2")?, 2, t2, s.now(), "released")?;
    want(matches!(s.release(2, "r2b"), Ok(Released::Done)), || {
        "a release retried".into()
    })?;
    s.no_entry("r2b")?;
    // exec's run, said in place of the hold when its release gives the lock back.
    s.take(4, ex, 5_000, None)
        .map_err(|e| format!("a released lock refused: {e:?}"))?;
    s.later(100);
    want(matches!(s.release_run(4, "x4"), Ok(Released::Done)), || {
        "exec's release".into()
    })?;
    let e = s.entry("x4")?;
    want(
        e.outcome.as_deref() == Some("ok") && e.code == Some(0) && e.host.is_none(),
        || format!("exec's run on record: {e:?}"),
    )?;
    // A lease that ran out before its release: lost, ending when the lease did (its last
    // renewal and TTL), recorded once, and only by a release that records; not for exec's
    // run, which records a lost run itself.
    s.take(3, ex, 1_000, None)
        .map_err(|e| format!("a released lock refused: {e:?}"))?;
    let t3 = s.now();
    s.later(500);
    want(matches!(s.renew(3), Ok(Renewed::Yes(_))), || {
        "a renewal".into()
    })?;
    s.later(3_000);
    want(s.release_run(3, "x3").is_err(), || {
        "exec's release after the lease ran out".into()
    })?;
    s.no_entry("x3")?;
    want(
        matches!(
            s.locker.release(&s.key, "t3"),
            Err(Error::NotPermitted {
                refused: Refused::ReleaseNotHeld,
                ..
            })
        ),
        || "a release after the lease ran out".into(),
    )?;
    want(s.release(3, "r3").is_err(), || {
        "a release after the lease ran out".into()
    })?;
    same_entry(&s.entry("r3")?, 3, t3, t3 + 1_500, "lost")?;
    want(s.release(3, "r3b").is_err(), || "a release retried".into())?;
    s.no_entry("r3b")
}

/// `--hold-at-least`: a release before the hold's end leaves the lock held until then (by the
/// server's clock), told as "until"; nobody else gets it sooner; a forced break ends it.
fn held_at_least(s: &Scene) -> Result<(), String> {
    let ex = Sharing::Exclusive;
    s.take(1, ex, 2_000, Some(5_000))
        .map_err(|e| format!("a free lock refused: {e:?}"))?;
    let t1 = s.now();
    s.later(500);
    // A renewal to a lease past the hold's end (`renew --ttl`): the release still frees the
    // lock at the hold's end.
    let renewed = s.locker.renew(
        &s.key,
        "t1",
        Some(Duration::from_secs(10)),
        Duration::from_millis(200),
    );
    want(matches!(renewed, Ok(Renewed::Yes(_))), || {
        format!("a renewal: {renewed:?}")
    })?;
    s.later(500);
    want(matches!(s.release(1, "r1"), Ok(Released::Done)), || {
        "a release".into()
    })?;
    let info = s.inspect()?;
    want(
        info.held_until_ms == Some(t1 + 5_000) && info.pttl == 4_000,
        || format!("inspect of a hold released 4 s early: {info:?}"),
    )?;
    let e = s.entry("r1")?;
    same_entry(&e, 1, t1, s.now(), "released")?;
    want(e.held_until_ms == Some(t1 + 5_000), || {
        format!("a held release's entry: {e:?}")
    })?;
    want(matches!(s.release(1, "r1b"), Ok(Released::Done)), || {
        "a release retried".into()
    })?;
    s.no_entry("r1b")?;
    s.later(2_000);
    want(s.take(2, ex, 2_000, None).is_err(), || {
        "a grant before the hold's end".into()
    })?;
    s.later(2_001);
    s.take(2, ex, 2_000, Some(10_000))
        .map_err(|e| format!("refused after the hold: {e:?}"))?;
    s.later(100);
    want(matches!(s.release(2, "r2"), Ok(Released::Done)), || {
        "a release".into()
    })?;
    // Broken, not released: the holder's release again hears that it lost the lock.
    match s.force("f1") {
        Ok(Released::Broken(Some(who))) => want(who.contains("host2"), || format!("broke {who}"))?,
        other => return Err(format!("a forced release of a hold: {other:?}")),
    }
    want(
        matches!(
            s.release(2, "r2b"),
            Err(Error::NotPermitted {
                refused: Refused::ReleaseNotHeld,
                ..
            })
        ),
        || "a broken hold's release".into(),
    )?;
    s.take(3, ex, 2_000, None)
        .map_err(|e| format!("a broken hold's lock refused: {e:?}"))?;
    Ok(())
}

/// A semaphore of two, or shared holders: each holder's own record, its renewal and release,
/// a busy answer's count, and a forced release that breaks them all ("brokenall"), each on
/// record.
fn several(s: &Scene, sharing: Sharing) -> Result<(), String> {
    let limit = match sharing {
        Sharing::Limit(n) => i64::from(n),
        _ => 0,
    };
    s.take(1, sharing, 10_000, None)
        .map_err(|e| format!("a free lock refused: {e:?}"))?;
    let t1 = s.now();
    s.later(1_000);
    s.take(2, sharing, 20_000, None)
        .map_err(|e| format!("a second holder refused: {e:?}"))?;
    let t2 = s.now();
    s.later(1_000);
    let info = s.inspect()?;
    want(info.limit == Some(limit) && info.holders.len() == 2, || {
        format!("inspect of two holders: {info:?}")
    })?;
    let h1 = &info.holders[0];
    same_holder(&h1.holder, 1, t1)?;
    same_holder(&info.holders[1].holder, 2, t2)?;
    want(
        h1.token == "t1"
            && h1.ends_ms == t1 + 10_000
            && h1.ttl_ms == Some(10_000)
            && h1.renewed_ms == Some(t1)
            && info.holders[1].ends_ms == t2 + 20_000,
        || format!("inspect of two holders: {info:?}"),
    )?;
    let other = if limit == 0 {
        Sharing::Exclusive
    } else {
        sharing
    };
    match s.take(3, other, 10_000, None) {
        Err(Error::Busy {
            seen:
                Seen::Held {
                    holder,
                    crowd: Some(c),
                    pttl,
                    ..
                },
            ..
        }) => {
            // The holder whose lease ends first; the wait, until a slot is free (the first
            // lease's end) or, for an exclusive request, until no holder is left (the last).
            same_holder(&holder, 1, t1)?;
            let free_in = if limit == 0 { 19_000 } else { 8_000 };
            want(
                c.holders == 2 && c.limit == limit && pttl == free_in,
                || format!("a busy answer of two holders: {c:?}, pttl {pttl}"),
            )?;
        }
        other => return Err(format!("a full lock answered {other:?}")),
    }
    want(
        matches!(s.renew(1), Ok(Renewed::Yes(d)) if d == Duration::from_secs(10)),
        || "a renewal".into(),
    )?;
    let info = s.inspect()?;
    want(
        info.holders.iter().any(|h| {
            h.token == "t1" && h.renewed_ms == Some(s.now()) && h.ends_ms == s.now() + 10_000
        }),
        || format!("inspect after a renewal: {info:?}"),
    )?;
    s.later(1_000);
    want(matches!(s.release(1, "r1"), Ok(Released::Done)), || {
        "a release".into()
    })?;
    same_entry(&s.entry("r1")?, 1, t1, s.now(), "released")?;
    want(matches!(s.release(1, "r1b"), Ok(Released::Done)), || {
        "a release retried".into()
    })?;
    s.take(3, sharing, 10_000, None)
        .map_err(|e| format!("a freed slot refused: {e:?}"))?;
    let t3 = s.now();
    s.later(500);
    let ended = s.now();
    match s.force("f1") {
        Ok(Released::Broken(Some(who))) => {
            want(who.contains("host2") && who.contains("host3"), || {
                format!("a forced release says it broke {who}")
            })?
        }
        other => return Err(format!("a forced release of a held lock: {other:?}")),
    }
    let all = s.history()?;
    let broken: Vec<&RunRecord> = all
        .iter()
        .filter(|r| r.outcome.as_deref() == Some("broken"))
        .collect();
    want(broken.len() == 2, || {
        format!("two holders broken, the history: {all:?}")
    })?;
    for (n, since) in [(2, t2), (3, t3)] {
        let e = broken
            .iter()
            .find(|r| r.host.as_deref() == Some(who(n).host.as_str()))
            .ok_or_else(|| format!("no broken entry of process {n}: {all:?}"))?;
        same_entry(e, n, since, ended, "broken")?;
    }
    want(!s.inspect()?.held(), || {
        "a broken lock is still held".into()
    })?;
    want(
        matches!(
            s.release(2, "r2"),
            Err(Error::NotPermitted {
                refused: Refused::ReleaseNotHeld,
                ..
            })
        ),
        || "a broken holder's release".into(),
    )?;
    s.no_entry("r2")?;
    want(matches!(s.force("f2"), Ok(Released::Broken(None))), || {
        "breaking a free lock".into()
    })?;
    // A lease that ran out, its key with it: lost, when the lease ended.
    s.take(4, sharing, 1_000, None)
        .map_err(|e| format!("a broken lock refused: {e:?}"))?;
    let t4 = s.now();
    s.later(500);
    want(matches!(s.renew(4), Ok(Renewed::Yes(_))), || {
        "a renewal".into()
    })?;
    s.later(2_000);
    want(s.release(4, "r4").is_err(), || {
        "a release after the lease ran out".into()
    })?;
    same_entry(&s.entry("r4")?, 4, t4, t4 + 1_500, "lost")?;
    want(s.release(4, "r4b").is_err(), || "a release retried".into())?;
    s.no_entry("r4b")?;
    // A lone holder, broken.
    s.take(5, sharing, 1_000, None)
        .map_err(|e| format!("a free lock refused: {e:?}"))?;
    match s.force("f3") {
        Ok(Released::Broken(Some(who))) => want(who.contains("host5"), || format!("broke {who}")),
        other => Err(format!("a forced release of one holder: {other:?}")),
    }
}

/// A key that is not a lock, and a helper key of another type: refused, nothing changed
/// (acquire.lua's and release.lua's "wrongtype", WRONGTYPE errors); a forced release breaks a
/// hash (e.g. Redisson's lock).
fn other_types(s: &Scene) -> Result<(), String> {
    // A lock key of another type is answered, never an error; a helper key's is an error.
    let plant = |key: &str, data: Data| {
        let mut b = s.bench();
        b.store.data.insert(key.to_string(), data);
        b.store.expires.insert(key.to_string(), T0 + 60_000);
        b.errors_expected = key != s.key.redis_key;
    };
    let hash = || Data::Hash([("x".to_string(), "1".to_string())].into_iter().collect());
    plant(&s.key.redis_key, hash());
    for sharing in [Sharing::Exclusive, Sharing::Limit(2), Sharing::Shared] {
        let r = s.take(1, sharing, 1_000, None);
        want(r.is_err(), || format!("a hash granted as a lock: {r:?}"))?;
    }
    want(!matches!(s.renew(1), Ok(Renewed::Yes(_))), || {
        "a hash renewed".into()
    })?;
    want(s.release(1, "r1").is_err(), || "a hash released".into())?;
    match s.force("f1") {
        Ok(Released::Broken(Some(who))) => want(who.contains("hash"), || format!("broke {who}"))?,
        other => return Err(format!("a forced release of a hash: {other:?}")),
    }
    want(!s.bench().store.data.contains_key(&s.key.redis_key), || {
        "the hash is left".into()
    })?;
    plant(&s.key.redis_key, Data::Str("v".into()));
    match s.force("f2") {
        Ok(Released::Broken(Some(who))) => {
            want(who.contains("token v"), || format!("broke {who}"))?
        }
        other => {
            return Err(format!(
                "a forced release of another client's lock: {other:?}"
            ));
        }
    }
    for helper in [
        format!("{{{}}}:state", s.key.redis_key),
        format!("{{{}}}:q", s.key.redis_key),
    ] {
        plant(&helper, Data::Str("x".into()));
        let before = s.bench().store.clone();
        for sharing in [Sharing::Exclusive, Sharing::Limit(2)] {
            let r = s.take(1, sharing, 1_000, None);
            want(r.is_err(), || {
                format!("granted beside a {helper} of another type: {r:?}")
            })?;
        }
        want(s.force("f3").is_err(), || {
            format!("broken beside a {helper} of another type")
        })?;
        want(s.bench().store == before, || {
            format!("a refusal beside {helper} changed the data")
        })?;
        s.bench().store.data.remove(&helper);
    }
    Ok(())
}

/// Runs every scene, each on a server of its own, with `mutant` (if any) applied to the scripts:
/// the first broken promise.
pub fn play(mutant: Option<Arc<Mutant>>) -> Option<String> {
    type Play = fn(&Scene) -> Result<(), String>;
    let scenes: [(&str, Play); 5] = [
        ("exclusive", exclusive),
        ("--hold-at-least", held_at_least),
        ("--limit 2", |s| several(s, Sharing::Limit(2))),
        ("--shared", |s| several(s, Sharing::Shared)),
        ("other types", other_types),
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
