//! The history of a lock: one stream entry per run, beside the lock in its cluster slot
//! (`{K}:history`), capped at a number of runs and expiring a set time after the last one.
//!
//! A stream, because it is what the history is: entries appended in order, each a few named
//! fields, trimmed from the old end by the append itself (`XADD MAXLEN`) and read newest first
//! (`XREVRANGE COUNT`), with no second key to keep in step. On Redlock every master that answers
//! gets the entry; a reading merges what the masters that answer hold (see `history`).

use std::time::Duration;

use redis::Value;

use super::call::{self, Args, Call, sources};
use super::error::{About, Error};
use super::key::{LockKey, scan_pattern};
use super::locker::{Locker, no_quorum};
use super::reply::{Refusal, Reply};
use crate::backend::{Node, NodeError, Script};

/// One run as the history keeps it. Every field is written by `record`; a field that is missing
/// or unreadable in an entry (another writer, an older rlock) reads as None.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunRecord {
    /// The entry's stream ID (set when read; the server's time of the write, on one server).
    pub id: Option<String>,
    /// This run's own ID (random): one run recorded on several Redlock masters is one run.
    pub run: Option<String>,
    /// When rlock asked for the lock, ms since the epoch (the host's clock).
    pub asked_ms: Option<i64>,
    /// When it got the lock; None when it never did (busy, gave up, interrupted, unavailable).
    pub granted_ms: Option<i64>,
    /// When the run ended: the command's end (or the grant's refusal), ms since the epoch.
    pub ended_ms: Option<i64>,
    /// How long it waited for the lock (or before giving up), ms.
    pub wait_ms: Option<i64>,
    /// How long it held the lock, ms; None when it never did.
    pub held_ms: Option<i64>,
    pub host: Option<String>,
    pub user: Option<String>,
    pub pid: Option<i64>,
    /// The label, or the command line as the holder record keeps it (secrets masked).
    pub command: Option<String>,
    pub fence: Option<i64>,
    /// How the run ended (`Outcome` in src/cmd/record.rs): ok, failed, signal, lost,
    /// timed-out, interrupted, busy, gave-up, unavailable, not-run; or, for a hold `acquire`
    /// took and `release` ended (written by release.lua): released, lost, broken.
    pub outcome: Option<String>,
    /// rlock's exit code for the run.
    pub code: Option<i64>,
    /// The signal the command died of (`signal`) or that ended the wait (`interrupted`): `TERM`.
    pub signal: Option<String>,
    /// Who broke the lock (`broken`): `user@host pid N` of the `release --force`.
    pub by: Option<String>,
    /// A hold released before its --hold-at-least ran out: when the lock is free again, ms since
    /// the epoch by the server's clock (written by release.lua).
    pub held_until_ms: Option<i64>,
}

impl RunRecord {
    /// The fields as the stream entry holds them, name then value, absent ones left out.
    fn fields(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut put = |name: &str, value: Option<String>| {
            if let Some(v) = value {
                out.push(name.to_string());
                out.push(v);
            }
        };
        let num = |n: Option<i64>| n.map(|n| n.to_string());
        put("run", self.run.clone());
        put("asked_ms", num(self.asked_ms));
        put("granted_ms", num(self.granted_ms));
        put("ended_ms", num(self.ended_ms));
        put("wait_ms", num(self.wait_ms));
        put("held_ms", num(self.held_ms));
        put("host", self.host.clone());
        put("user", self.user.clone());
        put("pid", num(self.pid));
        put("command", self.command.clone());
        put("fence", num(self.fence));
        put("outcome", self.outcome.clone());
        put("code", num(self.code));
        put("signal", self.signal.clone());
        put("by", self.by.clone());
        put("held_until_ms", num(self.held_until_ms));
        out
    }

    /// The fields as one argument: a JSON list of name then value, in order (the scripts append
    /// them to the stream as they are).
    fn entry(&self) -> String {
        serde_json::to_string(&self.fields()).expect("a list of strings")
    }

    /// The fields as one entry of record.lua's `entries`.
    pub(super) fn entries(&self) -> Entries {
        Entries(vec![self.fields()])
    }

    /// An entry of XREVRANGE's reply: `[id, [name, value, ...]]`. None when it is not shaped
    /// so; fields it does not know are skipped.
    fn from_entry(entry: &Value) -> Option<RunRecord> {
        let Value::Array(parts) = entry else {
            return None;
        };
        let [id, Value::Array(fields)] = parts.as_slice() else {
            return None;
        };
        let text = |v: &Value| match v {
            Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
            Value::SimpleString(s) => Some(s.clone()),
            _ => None,
        };
        let mut r = RunRecord {
            id: Some(text(id)?),
            ..RunRecord::default()
        };
        for pair in fields.chunks(2) {
            let [name, value] = pair else { break };
            let (Some(name), Some(value)) = (text(name), text(value)) else {
                continue;
            };
            let num = || value.parse::<i64>().ok();
            match name.as_str() {
                "run" => r.run = Some(value),
                "asked_ms" => r.asked_ms = num(),
                "granted_ms" => r.granted_ms = num(),
                "ended_ms" => r.ended_ms = num(),
                "wait_ms" => r.wait_ms = num(),
                "held_ms" => r.held_ms = num(),
                "host" => r.host = Some(value),
                "user" => r.user = Some(value),
                "pid" => r.pid = num(),
                "command" => r.command = Some(value),
                "fence" => r.fence = num(),
                "outcome" => r.outcome = Some(value),
                "code" => r.code = num(),
                "signal" => r.signal = Some(value),
                "by" => r.by = Some(value),
                "held_until_ms" => r.held_until_ms = num(),
                _ => {}
            }
        }
        Some(r)
    }
}

/// How many runs a history keeps, and how long it lives after the last.
#[derive(Debug, Clone, Copy)]
pub struct Keep {
    /// At least 1 (a limit of 0 records nothing: the caller does not call).
    pub runs: u32,
    pub ttl: Duration,
}

/// Entries for the history, each a list of name then value: one run of `exec`, or what a release
/// said its history should keep (release.lua's "history" field).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Entries(pub Vec<Vec<String>>);

impl Entries {
    /// release.lua's "history" field (a JSON list of lists of strings); None when it cannot be
    /// read as one.
    pub fn parse(json: &str) -> Option<Entries> {
        serde_json::from_str(json).ok().map(Entries)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// What a release asks release.lua to say about the history: for `rlock release`, the hold it ends (the script
/// reads the rest, the holder record, from the state); for `exec`, its run as it ends should the
/// release give the lock back (`run_end`), and nothing otherwise.
#[derive(Debug, Clone)]
pub struct HoldRecord {
    pub keep: Keep,
    /// The run's ID (random): the same entry on every Redlock master.
    pub run: String,
    /// Who forces a release, `user@host pid N`: the `by` of a broken hold.
    pub by: String,
    /// `exec`'s run as it ends if the release gives the lock back: recorded in place of the
    /// hold, and only then (exec records a lost run itself). None for `rlock release`.
    pub run_end: Option<RunRecord>,
    /// The stream ID of the run's entry `running`, when its grant's write said it: the record
    /// of how the run ended replaces that entry alone, not looking through the newest runs.
    pub running_id: Option<String>,
}

impl HoldRecord {
    /// `exec`'s run, recorded by the release that ends it should that release the lock.
    pub fn of_run(keep: Keep, run: RunRecord, running_id: Option<String>) -> HoldRecord {
        HoldRecord {
            keep,
            run: run.run.clone().unwrap_or_default(),
            by: String::new(),
            run_end: Some(run),
            running_id,
        }
    }

    /// `args` (release.lua's) with what it needs to say what the history should keep: record,
    /// run, by, and for an exec's run its entry.
    pub(super) fn args(&self, args: Args) -> Args {
        args.with("record", "1")
            .with("run", &self.run)
            .with("by", &self.by)
            .with_some("entry", self.run_end.as_ref().map(RunRecord::entry))
    }
}

impl Keep {
    /// `args` with keep_runs (how many runs the history keeps, at least 1) and keep_ms (how
    /// long it lives after this one).
    fn args(&self, args: Args) -> Args {
        args.with("keep_runs", self.runs.max(1))
            .with("keep_ms", self.ttl.as_millis().max(1))
    }
}

/// One entry appended at the end of each run (when the release did not record it).
pub static RECORD: Script = Script::new("record", sources::RECORD);
/// The reading.
pub static HISTORY: Script = Script::new("history", sources::HISTORY).long_reply();

/// record.lua: appends `entries` to `key`'s history, which keeps `keep`; with `released_by`,
/// only if that token has just released the lock (sent with its release); with `granted_to`,
/// only if that token holds it, with its grant's fence (sent with a try, `running.rs`); with
/// `running_id`, the run's entry `running` is that one (`HoldRecord::running_id`).
pub(super) struct Record<'a> {
    pub key: &'a LockKey,
    pub keep: Keep,
    pub entries: &'a Entries,
    pub released_by: Option<&'a str>,
    pub granted_to: Option<&'a str>,
    pub running_id: Option<&'a str>,
}

impl Call for Record<'_> {
    /// The last stream entry's ID; None when skipped (`released_by` did not release the lock).
    type Reply = Option<String>;

    fn script(&self) -> &'static Script {
        &RECORD
    }

    fn keys(&self) -> Vec<&str> {
        match (self.released_by, self.granted_to) {
            (_, Some(_)) => vec![&self.key.history, &self.key.state, &self.key.redis_key],
            (Some(_), None) => vec![&self.key.history, &self.key.state],
            (None, None) => vec![&self.key.history],
        }
    }

    fn args(&self) -> Args {
        let entries = serde_json::to_string(&self.entries.0).expect("lists of strings");
        self.keep
            .args(Args::new())
            .with("entries", entries)
            .with_some("released_by", self.released_by)
            .with_some("granted_to", self.granted_to)
            .with_some("running_id", self.running_id)
    }

    fn decode(&self, reply: &[Value]) -> Result<Option<String>, Refusal> {
        let reply = Reply::parse(reply)?;
        match reply.word.as_str() {
            "recorded" => reply.fields.need_text("id").map(Some),
            "skipped" => Ok(None),
            _ => Err(Refusal::Unexpected),
        }
    }
}

/// history.lua: the newest `count` runs of `key`'s history, newest first (XREVRANGE's entries,
/// each read by name).
struct History<'a> {
    key: &'a LockKey,
    count: usize,
}

impl Call for History<'_> {
    type Reply = Vec<RunRecord>;

    fn script(&self) -> &'static Script {
        &HISTORY
    }

    fn keys(&self) -> Vec<&str> {
        vec![&self.key.history]
    }

    fn args(&self) -> Args {
        Args::new().with("count", self.count)
    }

    fn decode(&self, entries: &[Value]) -> Result<Vec<RunRecord>, Refusal> {
        if !entries.iter().all(|e| matches!(e, Value::Array(_))) {
            return Err(Refusal::Unexpected);
        }
        Ok(entries.iter().filter_map(RunRecord::from_entry).collect())
    }
}

/// A history of lock `name` under the prefix, found by `histories`.
#[derive(Debug, Clone)]
pub struct LastRun {
    pub name: String,
    pub run: RunRecord,
}

impl Locker {
    /// Appends `run` to `key`'s history on every node (each Redlock master that answers), each
    /// within `timeout`. The errors of the nodes that did not take it; none when every one did.
    pub fn record(
        &self,
        key: &LockKey,
        keep: Keep,
        run: &RunRecord,
        timeout: Duration,
    ) -> Vec<NodeError> {
        let entries = run.entries();
        let call = Record {
            key,
            keep,
            entries: &entries,
            released_by: None,
            granted_to: None,
            running_id: None,
        };
        self.on_all(|n| call::run(n, &call, timeout))
            .into_iter()
            .filter_map(Result::err)
            .collect()
    }

    /// The newest `count` runs of `key`, newest first. On Redlock, the runs any master that
    /// answers holds, each once (by its run ID), newest first by the time it ended: a master
    /// that missed a run (down then) leaves no gap, and no majority is needed to read.
    pub fn history(&self, key: &LockKey, count: usize) -> Result<Vec<RunRecord>, Error> {
        // A run may have two entries (its start, where its end could not replace it): read
        // twice as many, keep one per run.
        let results = self.on_all(|n| read_history(n, key, count * 2, self.op_timeout));
        let mut runs: Vec<RunRecord> = Vec::new();
        let mut errors = Vec::new();
        for r in results {
            match r {
                Ok(node_runs) => runs.extend(node_runs),
                Err(e) => errors.push(e),
            }
        }
        if errors.len() == self.nodes.len() {
            let about = About::from(key);
            return Err(if self.is_quorum() {
                no_quorum(about, self.nodes.len(), errors)
            } else {
                Error::redis(about, errors.remove(0))
            });
        }
        let mut runs = one_per_run(runs);
        if self.is_quorum() {
            runs.sort_by_key(|r| std::cmp::Reverse((r.ended_ms.or(r.granted_ms), r.asked_ms)));
        }
        runs.truncate(count);
        Ok(runs)
    }

    /// The last run of every lock under `prefix` that has a history (SCAN, never KEYS), by name.
    pub fn histories(&self, prefix: &str) -> Result<Vec<LastRun>, Error> {
        // `{PREFIX+KEY}:history`, or `PREFIX+KEY:history` for a key with a hash tag of its own.
        let patterns = [
            format!("{{{}}}:history", scan_pattern(prefix)),
            format!("{}:history", scan_pattern(prefix)),
        ];
        let results = self.on_all(|n| {
            let mut keys = Vec::new();
            for p in &patterns {
                keys.extend(n.scan(p, self.op_timeout)?);
            }
            Ok::<_, NodeError>(keys)
        });
        let mut names = Vec::new();
        let mut errors = Vec::new();
        for r in results {
            match r {
                Ok(keys) => names.extend(keys.iter().filter_map(|k| name_of(prefix, k))),
                Err(e) => errors.push(e),
            }
        }
        if errors.len() == self.nodes.len() {
            let about = About::Locks(prefix.to_string());
            return Err(if self.is_quorum() {
                no_quorum(about, self.nodes.len(), errors)
            } else {
                Error::redis(about, errors.remove(0))
            });
        }
        names.sort();
        names.dedup();
        let mut out = Vec::new();
        for name in names {
            let key = LockKey::new(prefix, &name)?;
            if let Some(run) = self.history(&key, 1)?.into_iter().next() {
                out.push(LastRun { name, run });
            }
        }
        Ok(out)
    }
}

/// One entry per run (by its run ID), in the order given: the one that says how it ended over
/// the one written at its grant (`running`), which a user who may not XDEL leaves behind.
fn one_per_run(runs: Vec<RunRecord>) -> Vec<RunRecord> {
    let ended: std::collections::HashSet<String> = runs
        .iter()
        .filter(|r| r.outcome.as_deref() != Some("running"))
        .filter_map(|r| r.run.clone())
        .collect();
    let mut seen = std::collections::HashSet::new();
    runs.into_iter()
        .filter(|r| match &r.run {
            None => true,
            Some(id) => {
                (r.outcome.as_deref() != Some("running") || !ended.contains(id))
                    && seen.insert(id.clone())
            }
        })
        .collect()
}

/// The lock name whose history `history_key` is, under `prefix`: None for a key that only looks
/// like one.
fn name_of(prefix: &str, history_key: &str) -> Option<String> {
    let base = history_key.strip_suffix(":history")?;
    let redis_key = base
        .strip_prefix('{')
        .and_then(|b| b.strip_suffix('}'))
        .filter(|inner| !inner.contains(['{', '}']))
        .unwrap_or(base);
    let name = redis_key.strip_prefix(prefix)?;
    LockKey::new(prefix, name)
        .ok()
        .filter(|k| k.history == history_key)
        .map(|k| k.name)
}

/// One node's newest `count` runs of `key`.
fn read_history(
    node: &dyn Node,
    key: &LockKey,
    count: usize,
    timeout: Duration,
) -> Result<Vec<RunRecord>, NodeError> {
    call::run(node, &History { key, count }, timeout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written() {
        let run = RunRecord {
            id: None,
            run: Some("r1".into()),
            asked_ms: Some(1),
            granted_ms: None,
            ended_ms: Some(3),
            wait_ms: Some(2),
            held_ms: None,
            host: Some("h".into()),
            user: Some("u".into()),
            pid: Some(42),
            command: Some("sh -c 'x y'".into()),
            fence: None,
            outcome: Some("busy".into()),
            code: Some(75),
            signal: None,
            by: Some("root@h pid 7".into()),
            held_until_ms: Some(9),
        };
        let fields: Vec<Value> = run
            .fields()
            .into_iter()
            .map(|f| Value::BulkString(f.into_bytes()))
            .collect();
        let entry = Value::Array(vec![
            Value::BulkString(b"5-0".to_vec()),
            Value::Array(fields),
        ]);
        let back = RunRecord::from_entry(&entry).unwrap();
        assert_eq!(
            back,
            RunRecord {
                id: Some("5-0".into()),
                ..run
            }
        );
    }

    #[test]
    fn history_keys_name_their_locks() {
        assert_eq!(
            name_of("rlock:", "{rlock:jobs}:history").as_deref(),
            Some("jobs")
        );
        assert_eq!(
            name_of("rlock:", "rlock:{g}jobs:history").as_deref(),
            Some("{g}jobs")
        );
        assert_eq!(name_of("rlock:", "{other:jobs}:history"), None);
        assert_eq!(name_of("rlock:", "{rlock:jobs}:state"), None);
    }
}
