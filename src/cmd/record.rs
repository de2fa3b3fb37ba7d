//! What `exec` keeps of each run, once it has ended: one entry in the lock's history in Redis
//! (`lock/history.rs`) and, with `--metrics-file`, the key's lines in a Prometheus text file
//! (`metrics.rs`).
//!
//! Nothing here can change the run: a write that fails is said with `-v` and forgotten, the
//! exit code stays what it was. The run's first entry (`running`) goes with the try that is
//! granted the lock (`at_grant`), so no write here costs the run a round trip before its command.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use nix::sys::signal::Signal;

use super::Context;
use crate::cli::ExecArgs;
use crate::exit::{Code, Exit, Failure, LostHow};
use crate::lock::{AtGrant, Grant, HoldRecord, Keep, LockKey, Locker, NotOwner, RunRecord, Waited};
use crate::metrics;
use crate::watchdog::Loss;

/// How a run ended, as the history and the metrics name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The command exited 0.
    Ok,
    /// The command exited with another status.
    Failed,
    /// The command died of a signal.
    Signal,
    /// The lock was lost while the command ran (76).
    Lost,
    /// The command was stopped at its time limit, `--timeout` (124).
    TimedOut,
    /// A signal ended the wait, or came before the command started (128+N).
    Interrupted,
    /// Busy, and not waiting (`-n`): 75 or `-E`.
    Busy,
    /// Busy still when `-w` ran out: 75 or `-E`.
    GaveUp,
    /// Redis could not be reached (69).
    Unavailable,
    /// The command could not be run (126) or found (127).
    NotRun,
    /// `--once-per`: the window's run was already done (by whom: the record's `by`).
    Skipped,
    /// A newer run displaced it, waiting or running (`--newest`; who: the record's `by`): 79.
    Superseded,
}

impl Outcome {
    /// Every outcome, in the order the metrics list them.
    pub const ALL: [Outcome; 12] = [
        Outcome::Ok,
        Outcome::Failed,
        Outcome::Signal,
        Outcome::Lost,
        Outcome::TimedOut,
        Outcome::Interrupted,
        Outcome::Busy,
        Outcome::GaveUp,
        Outcome::Unavailable,
        Outcome::NotRun,
        Outcome::Skipped,
        Outcome::Superseded,
    ];

    /// Every outcome's name.
    pub fn names() -> [&'static str; 12] {
        Outcome::ALL.map(Outcome::as_str)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Failed => "failed",
            Outcome::Signal => "signal",
            Outcome::Lost => "lost",
            Outcome::TimedOut => "timed-out",
            Outcome::Interrupted => "interrupted",
            Outcome::Busy => "busy",
            Outcome::GaveUp => "gave-up",
            Outcome::Unavailable => "unavailable",
            Outcome::NotRun => "not-run",
            Outcome::Skipped => "skipped",
            Outcome::Superseded => "superseded",
        }
    }

    /// The outcome of a run that ended with `failure`; None for failures that are no run at all
    /// (a refusal, a key that is not a lock, a configuration error): those write nothing.
    fn of_failure(failure: &Failure) -> Option<(Outcome, Option<Signal>)> {
        Some(match failure {
            Failure::Busy {
                waited: Waited::NotAtAll,
                ..
            } => (Outcome::Busy, None),
            Failure::Busy { .. } => (Outcome::GaveUp, None),
            Failure::Interrupted { signal, .. } => (Outcome::Interrupted, Some(*signal)),
            Failure::Lost { .. } => (Outcome::Lost, None),
            Failure::TimedOut { .. } => (Outcome::TimedOut, None),
            Failure::Superseded { .. } => (Outcome::Superseded, None),
            Failure::CannotRun { .. } => (Outcome::NotRun, None),
            f if f.code() == Some(Code::Unavailable) => (Outcome::Unavailable, None),
            _ => return None,
        })
    }
}

/// One `exec` run, from its request for the lock to its end.
pub struct Recorder<'a> {
    ctx: &'a Context,
    locker: &'a Locker,
    key: &'a LockKey,
    args: &'a ExecArgs,
    asked_ms: i64,
    asked: Instant,
    /// The run's ID: one run is one ID, whichever write records it, on every master.
    run: String,
    /// When the lock was granted, and its fence.
    granted: Option<(Instant, i64)>,
    /// False when the lock is an enclosing `rlock exec`'s (nested): that run is the one on
    /// record, not this one. (A lock a shell took with `acquire` is this run's to record.)
    ours: bool,
    /// Redis did not answer the final release: the history is not written (it would cost
    /// another wait for a server that is not there, past the release's `--op-timeout`).
    unanswered: bool,
    /// The release recorded the run in the history (`at_release`).
    recorded: bool,
    /// `--once-per`: the run that already did this run's window (`skipped`).
    skipped_by: Option<String>,
    /// The run that displaced this one (`superseded`): the record's `by` too.
    superseded_by: std::sync::Mutex<Option<String>>,
}

impl<'a> Recorder<'a> {
    /// A run asking for `key` now.
    pub fn asked(
        ctx: &'a Context,
        locker: &'a Locker,
        key: &'a LockKey,
        args: &'a ExecArgs,
    ) -> Self {
        Recorder {
            ctx,
            locker,
            key,
            args,
            asked_ms: epoch_ms(),
            asked: Instant::now(),
            run: uuid::Uuid::new_v4().to_string(),
            granted: None,
            ours: true,
            unanswered: false,
            recorded: false,
            skipped_by: None,
            superseded_by: std::sync::Mutex::new(None),
        }
    }

    /// This run's ID.
    pub fn run_id(&self) -> &str {
        &self.run
    }

    /// `--once-per`: the run ended without running its command, its window done `by` another
    /// run; `code` is its exit code.
    pub fn skipped(&mut self, by: String, code: i64) {
        self.skipped_by = Some(by);
        self.keep(Outcome::Skipped, code, None, true);
    }

    /// Redis did not answer the final release: the run goes to the metrics file only.
    pub fn unanswered(&mut self) {
        self.unanswered = true;
    }

    /// The lock is held; `ours` unless an enclosing `rlock exec` holds it.
    pub fn granted(&mut self, grant: &Grant, ours: bool) {
        self.granted = Some((Instant::now(), grant.fence));
        self.ours = ours;
        if let Some(events) = &self.ctx.events {
            events.emit(
                "acquired",
                &self.key.name,
                serde_json::json!({
                    "run": self.run,
                    "fence": grant.fence,
                    "waited_ms": self.asked.elapsed().as_millis() as u64,
                    "ttl_ms": self.args.ttl.as_millis() as u64,
                }),
            );
        }
    }

    /// The run's entry at its grant (an entry `running`), for one server's tries to carry: the
    /// try granted writes it (`lock::AtGrant`). None when the history is off, and on Redlock,
    /// where `running` writes it once the grant is known. The entry of how the run ends
    /// replaces it (record.lua). A run whose rlock dies without that end stays `running` while
    /// its lease lasts, and `inspect --history` shows it `abandoned` after
    /// (`cmd/inspect/history.rs`).
    pub fn at_grant(&self) -> Option<AtGrant> {
        let keep = self.kept()?;
        if self.locker.is_quorum() {
            return None;
        }
        Some(AtGrant::new(keep, self.running_entry()))
    }

    /// The run is on record while it runs, written now (beside the command): for a lock this
    /// run did not take with a try of its own (one a shell took with `acquire`), and on Redlock
    /// (`at_grant`). A write
    /// that fails changes nothing and is not said: the run's end is written the same way and
    /// says it (one line, not two).
    pub fn running(&self) {
        let Some(keep) = self.kept() else { return };
        if !self.ours || self.granted.is_none() {
            return;
        }
        let timeout = self.locker.node_timeout(self.args.ttl);
        let _ = self
            .locker
            .record(self.key, keep, &self.running_entry(), timeout);
    }

    /// Whether the history is on.
    pub fn keeps_history(&self) -> bool {
        self.kept().is_some()
    }

    /// What the history keeps, None when it is off.
    fn kept(&self) -> Option<Keep> {
        let history = &self.args.record.history;
        (history.history_limit > 0).then_some(Keep {
            runs: history.history_limit,
            ttl: history.history_ttl,
        })
    }

    /// The run's entry while it runs: how it ended left out.
    fn running_entry(&self) -> RunRecord {
        let mut run = self.record(Outcome::Ok, 0, None);
        run.outcome = Some("running".into());
        run.code = None;
        run.ended_ms = None;
        run.held_ms = None;
        run
    }

    /// The run ended with `failure` before its command ran (or, for a lost lock, while it ran).
    pub fn failed(&self, failure: &Failure) {
        // A lock `release --force` broke: that release recorded the hold, as broken and by
        // whom; one run is one entry.
        let broken = matches!(
            failure,
            Failure::Lost {
                how: LostHow::Running {
                    loss: Loss::NotOwner(NotOwner::Broken),
                    ..
                } | LostHow::Inherited(NotOwner::Broken),
                ..
            }
        );
        if let Some((outcome, signal)) = Outcome::of_failure(failure) {
            if let Failure::Superseded { by, .. } = failure {
                // (Told once: `failed` is the run's last word.)
                *self.superseded_by.lock().unwrap_or_else(|e| e.into_inner()) = Some(by_words(by));
            }
            self.keep(
                outcome,
                i64::from(failure.exit_code(self.args.wait.busy_code())),
                signal,
                !broken,
            );
        }
    }

    /// The run ended as `exit` says; `died_of` is the signal the command died of, if it did.
    pub fn ended(&self, exit: &Result<Exit>, died_of: Option<Signal>) {
        match exit {
            Err(e) => {
                if let Some(f) = e.downcast_ref::<Failure>() {
                    self.failed(f);
                }
            }
            Ok(_) => {
                if let Some((outcome, code, signal)) = self.end_of(exit, died_of) {
                    self.keep(outcome, code, signal, true);
                }
            }
        }
    }

    /// How a run that ended with `exit` is on record; None for failures that are no run.
    fn end_of(
        &self,
        exit: &Result<Exit>,
        died_of: Option<Signal>,
    ) -> Option<(Outcome, i64, Option<Signal>)> {
        Some(match exit {
            Ok(Exit::Code(0)) => (Outcome::Ok, 0, None),
            Ok(Exit::Code(code)) if died_of.is_some() => {
                (Outcome::Signal, i64::from(*code), died_of)
            }
            Ok(Exit::Code(code)) => (Outcome::Failed, i64::from(*code), None),
            Ok(Exit::Signal(s)) => (Outcome::Signal, 128 + *s as i64, Some(*s)),
            Err(e) => {
                let failure = e.downcast_ref::<Failure>()?;
                let (outcome, signal) = Outcome::of_failure(failure)?;
                let code = failure.exit_code(self.args.wait.busy_code());
                (outcome, i64::from(code), signal)
            }
        })
    }

    /// The run as it ends with `exit`, for the release to record should it give the lock back
    /// (release.lua says so, record.lua writes it): None when the history is off or the run is not ours,
    /// and on Redlock, where a release can give the lock back on some masters and find it lost
    /// on the others: one run would then be on record twice, ended two ways.
    /// `at_grant` is the entry its grant wrote, if one did.
    pub fn at_release(
        &self,
        exit: &Result<Exit>,
        died_of: Option<Signal>,
        at_grant: Option<&AtGrant>,
    ) -> Option<HoldRecord> {
        let history = &self.args.record.history;
        if !self.ours || history.history_limit == 0 || self.locker.is_quorum() {
            return None;
        }
        let (outcome, code, signal) = self.end_of(exit, died_of)?;
        let keep = Keep {
            runs: history.history_limit,
            ttl: history.history_ttl,
        };
        let running_id = at_grant.and_then(AtGrant::written);
        Some(HoldRecord::of_run(
            keep,
            self.record(outcome, code, signal),
            running_id,
        ))
    }

    /// The release gave the lock back and recorded the run (`at_release`), but for `unrecorded`
    /// (why, where it did not): the history is not written again.
    pub fn recorded_at_release(&mut self, unrecorded: &[String]) {
        self.recorded = true;
        for why in unrecorded {
            self.ctx
                .say(format_args!("{}", unrecorded_line("run", self.key, why)));
        }
    }

    /// Writes the run: to the history, then to the metrics file.
    fn keep(&self, outcome: Outcome, code: i64, signal: Option<Signal>, in_history: bool) {
        if let Some(events) = &self.ctx.events {
            self.emit_end(events, outcome, code, signal);
        }
        let record = &self.args.record;
        if !self.ours || (record.history.history_limit == 0 && record.metrics_file.is_none()) {
            return;
        }
        let run = self.record(outcome, code, signal);
        if self.unanswered && record.history.history_limit > 0 {
            self.ctx.say(format_args!(
                "the run was not recorded in the history of lock '{}': Redis did not answer its release",
                self.key.name
            ));
        }
        if record.history.history_limit > 0 && !self.unanswered && !self.recorded && in_history {
            let keep = Keep {
                runs: record.history.history_limit,
                ttl: record.history.history_ttl,
            };
            // On Redlock, a master that does not answer costs what it costs a grant (TTL/10 at
            // most), not a whole --op-timeout at the end of every run.
            let mut timeout = self.locker.node_timeout(self.args.ttl);
            if outcome == Outcome::Unavailable {
                // The run ended because Redis did not answer: the record is tried, briefly (a
                // bounded wait must end when it said, not a whole --op-timeout later).
                timeout = timeout.min(std::time::Duration::from_millis(200));
            }
            if outcome == Outcome::GaveUp {
                // A bounded wait ended, at the moment it said: a master that answers takes a
                // round trip, one that does not may not hold the run past the bound.
                timeout = timeout.min(std::time::Duration::from_millis(50));
            }
            for e in self.locker.record(self.key, keep, &run, timeout) {
                self.ctx.say(format_args!(
                    "{}",
                    unrecorded_line("run", self.key, &e.to_string())
                ));
            }
        }
        if let Some(path) = &record.metrics_file {
            match metrics::write(path, &self.key.name, &run, &Outcome::names()) {
                Ok(None) => {}
                Ok(Some(why)) => self.ctx.say(format_args!(
                    "the metrics file {} was replaced whole: {why}",
                    path.display()
                )),
                Err(e) => self.ctx.say(format_args!(
                    "the metrics file {} was not written: {e}",
                    path.display()
                )),
            }
        }
    }

    /// The event of how the run ended (`--events`): `released` for a command that ran to its
    /// end (its status in `process.exit.code`), or the outcome's own name.
    fn emit_end(
        &self,
        events: &super::events::Events,
        outcome: Outcome,
        code: i64,
        signal: Option<Signal>,
    ) {
        let run = self.record(outcome, code, signal);
        let name = match outcome {
            Outcome::Ok | Outcome::Failed | Outcome::Signal => "released",
            other => other.as_str(),
        };
        events.emit(
            &name.replace('-', "_"),
            &self.key.name,
            serde_json::json!({
                "run": run.run,
                "outcome": run.outcome,
                "process.exit.code": code,
                "signal": run.signal,
                "fence": run.fence,
                "waited_ms": run.wait_ms,
                "held_ms": run.held_ms,
                "command": run.command,
                "by": run.by,
            }),
        );
    }

    /// What the history keeps of this run: the holder record's fields (the label or the
    /// command line with its secrets masked, as `acquire` records it), the times and the end.
    fn record(&self, outcome: Outcome, code: i64, signal: Option<Signal>) -> RunRecord {
        let args = self.args;
        let who = super::take::exec_holder(args);
        let ms = |since: Instant| since.elapsed().as_millis() as i64;
        let (wait_ms, held_ms, fence) = match self.granted {
            Some((at, fence)) => (
                at.duration_since(self.asked).as_millis() as i64,
                Some(ms(at)),
                Some(fence),
            ),
            None => (ms(self.asked), None, None),
        };
        RunRecord {
            id: None,
            run: Some(self.run.clone()),
            asked_ms: Some(self.asked_ms),
            granted_ms: held_ms.map(|_| self.asked_ms + wait_ms),
            ended_ms: Some(self.asked_ms + ms(self.asked)),
            wait_ms: Some(wait_ms),
            held_ms,
            host: Some(who.host),
            user: Some(who.user),
            pid: Some(i64::from(who.pid)),
            command: Some(who.command),
            fence,
            outcome: Some(outcome.as_str().into()),
            code: Some(code),
            signal: signal.map(|s| s.as_str().trim_start_matches("SIG").to_string()),
            by: (self.skipped_by.clone())
                .or_else(|| self.superseded_by.lock().ok().and_then(|b| b.clone())),
            held_until_ms: None,
        }
    }
}

/// The run that displaced this one as the history's `by` names it: `alice@ci-2 pid 4411
/// (deploy #43)`, its label or program masked as every record's is (the script that wrote it
/// got the masked holder record).
fn by_words(by: &crate::lock::Holder) -> String {
    let who = crate::lock::Holder {
        since_ms: None,
        ..by.clone()
    }
    .describe(0);
    match &by.command {
        Some(what) => format!("{who} ({what})"),
        None => who,
    }
}

/// Now, in ms since the epoch (the host's clock).
fn epoch_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The `-v` line for a `what` ("run", "release") the history of `key` did not keep, for `why`.
/// A server without streams (Garnet) refuses the history's XADD as an unknown command: then the
/// line says the history is off there, rather than repeat the server's words.
pub(super) fn unrecorded_line(what: &str, key: &LockKey, why: &str) -> String {
    let lower = why.to_ascii_lowercase();
    if lower.contains("unknown") && lower.contains("command") {
        return format!(
            "the history of lock '{}' is off: the server does not offer streams (XADD), where rlock keeps it ({why})",
            key.name
        );
    }
    format!(
        "the {what} was not recorded in the history of lock '{}': {why}",
        key.name
    )
}
