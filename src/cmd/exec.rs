//! `rlock exec`: take the lock, run the command under it, and give it back.

use std::time::{Duration, Instant};

use anyhow::Result;
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use super::Context;
use super::nested::{self, inherited, inside_exec};
use super::once;

mod wait;
use super::record::Recorder;
use crate::cli::ExecArgs;
use crate::exit::{Code, Exit, Failure, LostHow};
use crate::lock::{About, Grant, HoldRecord, Interruption, Lease, Locker, Renewed, Ttl};
use crate::signals::Signals;
use crate::supervise::{self, Guardian, Launched, LeaseKeeper, Outcome, Reports, Terminal};
use crate::watchdog::Loss;
use wait::{Early, WithTries, acquire, interrupt};

/// `--once-per`: the start of the window the command does, seconds since the epoch by Redis's
/// clock.
const WINDOW_VAR: &str = "RLOCK_WINDOW";

/// How long rlock waits for the guardian's word that the command started, at least: it comes at
/// once, unless the machine is very busy or the guardian is stuck (then it is killed).
const START_ANSWER: Duration = Duration::from_secs(5);

pub fn run(ctx: &Context, args: &ExecArgs) -> Result<Exit> {
    // Not dumpable, as ssh-agent is: a process of the same user (the command, say) can neither
    // open /proc/PID/fd nor ptrace this one, so it can neither talk to the guardian in rlock's
    // name nor read the password in its memory. The guardian inherits it; the command, a new
    // program, does not (execve makes it dumpable again).
    supervise::not_dumpable();
    // Signals are caught from here on: while waiting they end the wait (leaving nothing in
    // Redis), except Ctrl-Z, which stops rlock as usual; once the command runs they are passed
    // on to it.
    let signals = Signals::for_exec()?;
    let key = ctx.key(&args.key.key)?;
    if let Some(events) = &ctx.events {
        events.working_on(&key.name);
    }
    super::nested::check_env_fits(ctx, &key)?;
    // A metrics file rlock could not write safely is refused before anything runs.
    if let Some(path) = &args.record.metrics_file {
        crate::metrics::check(path).map_err(Failure::Config)?;
    }
    // The lease asked for, checked (once) before any Redis traffic.
    let asked = lease(ctx, args, args.ttl)?;
    let locker = ctx.locker()?;
    // The run on record (history, metrics): from its grant (`running`), and how it ended.
    let mut record = Recorder::asked(ctx, &locker, &key, args);
    // --once-per: the window this run fired in; a window already done ends the run here.
    let window = match once::fired(ctx, &locker, &key, args, &mut record) {
        Ok(window) => window,
        Err(done) => return Ok(done?),
    };

    // On one server the run's entry goes with each try, and the one granted writes it: a run
    // is on record from its grant, whatever becomes of its rlock after, at no round trip more.
    let at_grant = record.at_grant();
    let early = Early::new();
    let with = WithTries {
        record: at_grant.as_ref(),
        early: &early,
    };
    let held = hold(ctx, &locker, &key, args, &signals, asked, &with);
    let mut held = held.inspect_err(|e| record.failed(e))?;
    record.granted(&held.grant, held.owner != Owner::OuterExec);
    // A lock inherited from a shell (no try), or Redlock's (`Recorder::at_grant`): on record
    // from a thread beside the command, started with it, so that the command waits for no
    // master (one that does not answer costs a record TTL/10). No thread to be had, on a host
    // out of processes: the run's end alone is on record.
    let on_record_now =
        record.keeps_history() && (held.owner == Owner::Shell || at_grant.is_none());
    if let Some(window) = window {
        // A run that held the lock while this one waited may have done the window's work.
        match once::done_meanwhile(ctx, &locker, &key, args, window, &mut record) {
            Ok(None) => held.window = Some(window),
            Ok(Some(done)) => {
                release(ctx, &locker, &held);
                return Ok(done);
            }
            Err(e) => {
                release(ctx, &locker, &held);
                record.failed(&e);
                return Err(e.into());
            }
        }
    }
    if let Some((on, of)) = locker.holding() {
        ctx.say(format_args!("the lock is on {on} of {of} masters"));
    }
    let recorder = &record;
    // The thread starts once the guardian is forked: no other thread may exist at a fork.
    let ran = start(ctx, &locker, &held, args, early.take()).map(|child| {
        std::thread::scope(|s| {
            let on_record = on_record_now
                .then(|| std::thread::Builder::new().spawn_scoped(s, || recorder.running()));
            let ran = supervise(ctx, &locker, &held, child, args, &signals);
            // Before the run's end goes on record, which replaces this entry.
            if let Some(Ok(on_record)) = on_record {
                let _ = on_record.join();
            }
            ran
        })
    });
    let (outcome, after) = ran.inspect_err(|e| record.failed(e))?;
    let died_of = outcome.signal;
    if let Some(window) = held.window
        && once::succeeded(&outcome)
    {
        once::mark(ctx, &locker, &held.grant, window, args, record.run_id());
    }
    // The lock first: the next holder waits for nothing else. The run goes on record right
    // after, by a script of its own, should the release give the lock back.
    let run = if outcome.lost.is_none() && !outcome.leftovers {
        record.at_release(&finished(args, &held, &outcome), died_of, at_grant.as_ref())
    } else {
        None
    };
    let guardian = after.tidy();
    // The guardian, which has left or is leaving, is reaped and the cgroup removed while Redis
    // answers the release: the next holder waits for nothing else.
    let lost = crate::backend::meanwhile(Box::new(move || guardian.reap()), || {
        give_back(ctx, &locker, &held, &outcome, run, &mut record)
    });
    let exit = exit(args, &held, outcome, lost);
    record.ended(&exit, died_of);
    exit
}

/// Who looks after the lock while the command runs.
#[derive(PartialEq, Eq)]
enum Owner {
    /// This process took it: renew, and release at the end.
    Us,
    /// Inherited from a shell (`acquire --export`): renew, but the shell releases it.
    Shell,
    /// Inherited from an enclosing `rlock exec`, which renews and releases it.
    OuterExec,
}

/// The lock the command runs under.
struct Held {
    grant: Grant,
    owner: Owner,
    lease: Lease,
    /// `--once-per`: the window this run does.
    window: Option<crate::lock::Window>,
}

/// The command, running in a process group of its own.
struct Child {
    pgid: Pid,
    terminal: Option<Terminal>,
    guardian: Guardian,
    /// The renewal thread's reports, made before the command starts.
    reports: Reports,
    /// The grant's moments, made once: told to the guardian at its launch, and to the
    /// supervisor.
    timeline: Option<crate::lock::Timeline>,
}

/// The lease of a lock whose TTL is `ttl`, with the options' renewal timing, checked for sense.
fn lease(ctx: &Context, args: &ExecArgs, ttl: std::time::Duration) -> Result<Lease, Failure> {
    Ok(Lease::new(
        ttl,
        args.renew_every,
        args.grace,
        ctx.settings.op_timeout,
    )?)
}

/// The lease a held lock is kept by: the one `asked` for, or for an inherited lock (whose grant
/// tells the lease its holder gave it) a lease of that TTL, not this command's --ttl.
fn kept_by(ctx: &Context, args: &ExecArgs, asked: Lease, grant: &Grant) -> Result<Lease, Failure> {
    match grant.ttl {
        Ttl::Inferred(given) if !given.is_zero() && given != asked.ttl => lease(ctx, args, given),
        _ => Ok(asked),
    }
}

/// Step 1: the lock this process tree already holds (nested rlock), or a new grant, and the
/// lease it is kept by.
fn hold(
    ctx: &Context,
    locker: &Locker,
    key: &crate::lock::LockKey,
    args: &ExecArgs,
    signals: &Signals,
    asked: Lease,
    with: &WithTries,
) -> Result<Held, Failure> {
    let (mut grant, owner) = match inherited(ctx, locker, key)? {
        Some(grant) if inside_exec(&grant.token) => (grant, Owner::OuterExec),
        Some(grant) => (grant, Owner::Shell),
        None => (acquire(ctx, locker, key, args, signals, with)?, Owner::Us),
    };
    let lease = kept_by(ctx, args, asked, &grant)?;
    if owner == Owner::Shell {
        // A lock inherited from a shell may have little of its lease left: renew it once before
        // the command starts, so that the deadline counts from now.
        let sent = Instant::now();
        match locker.renew(&grant.key, &grant.token, Some(lease.ttl), lease.op_timeout) {
            Ok(Renewed::Yes(_) | Renewed::Superseded { .. }) => grant.sent = sent,
            Ok(Renewed::NotOwner(why)) => {
                return Err(Failure::Lost {
                    about: About::Lock(key.name.clone()),
                    how: LostHow::Inherited(why),
                });
            }
            Err(e) => return Err(Failure::redis(key, e)),
        }
    }
    ctx.say(format_args!(
        "acquired lock '{}' (fence {}){}",
        key.name,
        grant.fence,
        match owner {
            Owner::Us => "",
            Owner::Shell => ", inherited from the shell: renewing it, not releasing it",
            Owner::OuterExec => ", inherited from the enclosing rlock exec",
        }
    ));
    let held = Held {
        grant,
        owner,
        lease,
        window: None,
    };
    // A signal that came between the grant and the spawn ends the run before it starts.
    if let Some(signal) = interrupt(signals) {
        release(ctx, locker, &held);
        return Err(Failure::Interrupted {
            about: About::Lock(key.name.clone()),
            signal,
            when: Interruption::BeforeStart,
        });
    }
    Ok(held)
}

/// Step 2: the command, in a process group of its own, given the terminal when rlock has it,
/// started by the guardian, which keeps everything the command starts below itself, in a cgroup
/// of its own where one can be made; the guardian stops all of it when the lease runs out or
/// rlock is killed.
fn start(
    ctx: &Context,
    locker: &Locker,
    held: &Held,
    args: &ExecArgs,
    early: Option<wait::Ready>,
) -> Result<Child, Failure> {
    let grant = &held.grant;
    let renewer_pid = match held.owner {
        Owner::OuterExec => nested::enclosing_exec(&grant.token).unwrap_or(0),
        _ => std::process::id(),
    };
    let mut env = nested::child_env(ctx, grant, renewer_pid.to_string()).to_vec();
    if let Some(window) = held.window {
        env.push((WINDOW_VAR, (window.start_ms() / 1000).to_string()));
    }
    // Made while Redis answered the first try, most often.
    let ready = match early {
        Some(ready) => ready.current(args.contain, &args.command),
        None => wait::ready(args.contain, &args.command),
    };
    for dir in &ready.stopped {
        ctx.say(format_args!(
            "stopped what an rlock no longer running left in {}",
            dir.display()
        ));
    }
    let standby = ready.standby.inspect_err(|_| release(ctx, locker, held))?;
    // The renewal thread's reports (it starts once the first renewal is due).
    let reports = match Reports::new() {
        Ok(reports) => reports,
        Err(e) => {
            standby.dismiss();
            release(ctx, locker, held);
            return Err(Failure::Internal(format!("cannot make a pipe: {e}")));
        }
    };
    let terminal = standby.terminal();
    // The guardian holds the lease from the command's first instant, so rlock may wait for its
    // word that the command started past the point where the lease needs enforcing: a grant
    // that came late (a slow server) leaves little of the lease, and the guardian stops the
    // command by its moments meanwhile. A guardian that says nothing within START_ANSWER is
    // killed.
    let timeline = timeline(held);
    let answer_by = match timeline {
        None => Instant::now() + START_ANSWER,
        Some(t) => t.signal_at.max(Instant::now() + START_ANSWER),
    };
    let Launched {
        guardian,
        pgid,
        containment,
    } = standby
        .launch(&env, args.lost_signal, timeline, answer_by, grant.sent)
        .inspect_err(|_| release(ctx, locker, held))?;
    ctx.say(format_args!("the command runs contained by {containment}"));
    Ok(Child {
        pgid,
        terminal,
        guardian,
        reports,
        timeline,
    })
}

/// The grant's moments (`Lease::timeline`), which the guardian is told at its launch and the
/// supervisor enforces; None when an enclosing `rlock exec` enforces the lease.
fn timeline(held: &Held) -> Option<crate::lock::Timeline> {
    (held.owner != Owner::OuterExec).then(|| held.lease.timeline(held.grant.sent))
}

/// Step 3: the command's group runs to its end, the lock renewed from a thread of its own while
/// it does, and the group stopped if the lock cannot be kept. Then the terminal comes back to
/// rlock, and the guardian stands down.
fn supervise(
    ctx: &Context,
    locker: &Locker,
    held: &Held,
    child: Child,
    args: &ExecArgs,
    signals: &Signals,
) -> (Outcome, After) {
    let Child {
        pgid,
        terminal,
        mut guardian,
        reports,
        timeline,
    } = child;
    let renews = held.owner != Owner::OuterExec;
    // --cancel-running: the holder hears a newer run's word on its own channel (and its
    // renewals read it, should a message be missed).
    let newer = (args.cancel_running && held.owner == Owner::Us).then(|| {
        let (key, token) = (&held.grant.key, &held.grant.token);
        locker.subscribers(key, token, held.lease.op_timeout)
    });
    let outcome = std::thread::scope(|s| {
        let mut keeper = LeaseKeeper::new(s, locker, &held.grant, held.lease, renews, reports);
        let heard = newer.map(|subs| match subs {
            Ok(subs) => keeper.hear_newer(subs).map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        });
        if let Some(Err(e)) = heard {
            ctx.say(format_args!(
                "a newer run's word is read at renewals only: {e}"
            ));
        }
        let mut enforce = keeper.enforce(args.lost_signal, timeline);
        // Counted from the command's start, which is now: it has just been launched.
        enforce.time_limit = args
            .timeout
            .and_then(|limit| held.lease.limit(Instant::now(), limit));
        supervise::supervise(&mut guardian, signals, keeper, enforce, terminal, ctx)
    });
    (
        outcome,
        After {
            pgid,
            terminal,
            guardian,
        },
    )
}

/// What is left to do once the command's group is gone and the lock given back.
struct After {
    pgid: Pid,
    terminal: Option<Terminal>,
    guardian: Guardian,
}

impl After {
    /// The terminal back to rlock's group. The guardian, once it has told that nothing of the
    /// command runs, leaves by itself: it is reaped last (should anything still run, a process
    /// SIGKILL could not end at once, its request pipe closing then tells it to kill it again).
    fn tidy(self) -> Guardian {
        if let Some(t) = self.terminal {
            t.take_back_from(self.pgid);
        }
        self.guardian
    }
}

/// Step 4: the lock given back (when this process took it), with `run` recorded in the history
/// by the same script if it does give it back. Returns how it was lost, if the release found
/// that out: broken or expired between two renewals, the command ran unprotected for a while,
/// and that must not pass for success. `record` hears whether Redis answered, and whether the
/// run is on record.
fn give_back(
    ctx: &Context,
    locker: &Locker,
    held: &Held,
    outcome: &Outcome,
    run: Option<HoldRecord>,
    record: &mut Recorder,
) -> Result<Option<LostHow>, Failure> {
    if outcome.leftovers {
        // Something the command started may still run: the lock must not be granted again
        // before its lease ends.
        return Ok(Some(LostHow::Unstoppable(supervise::AFTER_KILL)));
    }
    if held.owner != Owner::Us {
        return Ok(None);
    }
    let (released, unrecorded) =
        locker.release_recording(&held.grant.key, &held.grant.token, run.as_ref());
    let released = released.map_err(Failure::from);
    let unavailable = |e: &Failure| e.code() == Some(Code::Unavailable);
    Ok(match released {
        Ok(_) => {
            if run.is_some() {
                record.recorded_at_release(&unrecorded);
            }
            None
        }
        // Already known lost: the owner-checked release only gives it back if it is, after
        // all, still ours.
        Err(e) if outcome.lost.is_some() => {
            if unavailable(&e) {
                record.unanswered();
            }
            None
        }
        Err(Failure::NotPermitted { .. }) => Some(LostHow::AtRelease),
        // Refused by the ACL, not by the owner check: the lock may still be held.
        Err(e) if e.code() == Some(Code::NotPermitted) => {
            return Err(Failure::ReleaseRefused {
                error: Box::new(e),
                ttl: held.lease.ttl,
            });
        }
        // Redlock: too few masters answered to tell whether the lock is gone from a majority
        // (where it is, the release is done; where a majority says it is not this token's,
        // NotPermitted above): not a success, 69.
        Err(e) if locker.is_quorum() && unavailable(&e) => {
            record.unanswered();
            return Err(Failure::Unreleased(Box::new(e)));
        }
        // Redis unreachable at the very end: the lock expires by itself.
        Err(e) => {
            ctx.note(format_args!("{e}; the lock will expire by itself"));
            if unavailable(&e) {
                record.unanswered();
            }
            None
        }
    })
}

/// Releases after a failure before the command ran; a failure to release is only told.
fn release(ctx: &Context, locker: &Locker, held: &Held) {
    if held.owner == Owner::Us
        && let Err(e) = locker.release(&held.grant.key, &held.grant.token)
    {
        ctx.note(format_args!("{}", Failure::from(e)));
    }
}

/// Step 5: the command's status, 76 for a lost lock, 124 for a command stopped at its time
/// limit, or death by SIGINT as the command's.
fn exit(
    args: &ExecArgs,
    held: &Held,
    outcome: Outcome,
    lost: Result<Option<LostHow>, Failure>,
) -> Result<Exit> {
    let end = finished(args, held, &outcome);
    // A lock lost while the command ran says more than a release that could not be told.
    let lost = match lost {
        Err(unreleased) if outcome.lost.is_none() => return Err(unreleased.into()),
        Err(_) => None,
        Ok(lost) => lost,
    };
    // Stopped at a newer run's word (--cancel-running) and given back: not a lost lock.
    if let Some(Loss::Superseded(by)) = &outcome.lost
        && !matches!(lost, Some(LostHow::Unstoppable(_)))
    {
        return Err(Failure::Superseded {
            about: About::Lock(held.grant.key.name.clone()),
            by: by.clone(),
            running: Some(args.lost_signal),
        }
        .into());
    }
    let how = outcome.lost.map(|loss| LostHow::Running {
        loss,
        signal: args.lost_signal,
    });
    // Not released since something may still run: that says more than why the lock was lost.
    let how = match lost {
        Some(unstoppable @ LostHow::Unstoppable(_)) => Some(unstoppable),
        lost => how.or(lost),
    };
    if let Some(how) = how {
        let about = About::Lock(held.grant.key.name.clone());
        return Err(Failure::Lost { about, how }.into());
    }
    end
}

/// The command's end as rlock's: 124 when it was stopped at its time limit, else its status,
/// or death by SIGINT as the command's.
fn finished(args: &ExecArgs, held: &Held, outcome: &Outcome) -> Result<Exit> {
    if let (true, Some(limit)) = (outcome.timed_out, args.timeout) {
        return Err(Failure::TimedOut {
            about: About::Lock(held.grant.key.name.clone()),
            limit,
            signal: args.lost_signal,
        }
        .into());
    }
    Ok(if outcome.signal == Some(Signal::SIGINT) {
        Exit::Signal(Signal::SIGINT)
    } else {
        Exit::Code(outcome.code)
    })
}
