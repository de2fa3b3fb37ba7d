//! `rlock exec`: take the lock, run the command under it, and give it back.

use std::sync::mpsc;

use anyhow::Result;
use nix::sys::signal::Signal;

use super::{Context, inherited, inside_exec, new_token};
use crate::cli::ExecArgs;
use crate::exit::Failure;
use crate::lock::{Identity, WaitPolicy};
use crate::redact::redact_command;
use crate::supervise::{self, Enforce, Renewal, Signals};
use crate::watchdog::{self, Lease};

/// Set in the child's environment: the pid of the `rlock exec` that renews and releases the
/// lock, and the lock's token, so that a nested rlock on that lock leaves both to it.
pub const EXEC_PID_VAR: &str = "RLOCK_EXEC_PID";
pub const EXEC_TOKEN_VAR: &str = "RLOCK_EXEC_TOKEN";

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

pub fn run(ctx: &Context, args: &ExecArgs) -> Result<u8> {
    // Signals are caught from here on: while waiting they end the wait (leaving nothing in
    // Redis), except Ctrl-Z, which stops rlock as usual; once the command runs they are passed
    // on to it.
    let signals = Signals::for_exec()?;
    let key = ctx.key(&args.key.key)?;
    // Checked before any Redis traffic, with the TTL asked for.
    Lease::new(
        args.ttl,
        args.renew_every,
        args.grace,
        ctx.settings.op_timeout,
    )
    .map_err(Failure::Usage)?;
    let locker = ctx.locker()?;
    // The renewal thread's reports (it starts once the command runs).
    let (report_tx, reports) = supervise::reports()?;
    let interrupt = || loop {
        match signals.try_next()? {
            s if s == Signal::SIGTSTP as i32 => supervise::stop_self(Signal::SIGTSTP),
            s if s == Signal::SIGCHLD as i32 => {}
            s => return Some(s),
        }
    };

    let (grant, owner) = match inherited(ctx, &locker, &key)? {
        Some(grant) if inside_exec(&grant.token) => (grant, Owner::OuterExec),
        Some(grant) => (grant, Owner::Shell),
        None => {
            let command = args.label.label.clone().unwrap_or_else(|| {
                let words: Vec<_> = args.command.iter().map(|a| a.to_string_lossy()).collect();
                redact_command(&words)
            });
            let who = Identity::current(std::process::id(), command);
            let policy = WaitPolicy {
                wait: args.wait.wait,
                no_wait: args.wait.no_wait,
                busy_code: args.wait.conflict_exit_code,
            };
            let token = new_token();
            let grant = locker.acquire(&key, &token, args.ttl, &who, policy, &interrupt)?;
            (grant, Owner::Us)
        }
    };
    // An inherited lock is renewed with the lease it was given, not this command's --ttl.
    let lease_ttl = if owner == Owner::Us || grant.ttl.is_zero() {
        args.ttl
    } else {
        grant.ttl
    };
    let lease = Lease::new(
        lease_ttl,
        args.renew_every,
        args.grace,
        ctx.settings.op_timeout,
    )
    .map_err(Failure::Usage)?;
    // A lock inherited from a shell may have little of its lease left: renew it once before the
    // command starts, so that the deadline counts from now.
    let mut grant = grant;
    if owner == Owner::Shell {
        let sent = std::time::Instant::now();
        match locker.renew(
            &grant.key,
            &grant.token,
            Some(lease.ttl),
            lease.renew_timeout(),
        ) {
            Ok(crate::lock::Renewed::Yes(_)) => grant.sent = sent,
            Ok(crate::lock::Renewed::NotOwner(why)) => {
                return Err(Failure::Lost(format!(
                    "lock '{}' inherited from the shell is no longer held ({why}); not running the command",
                    key.name
                ))
                .into());
            }
            Err(e) => return Err(e.into_failure(&key.name).into()),
        }
    }
    let grant = grant;
    let release = || {
        if owner == Owner::Us
            && let Err(e) = locker.release(&grant.key, &grant.token)
        {
            ctx.note(format_args!("{e}"));
        }
    };
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
    // A signal that came between the grant and the spawn ends the run before it starts.
    if let Some(signal) = interrupt() {
        release();
        let name = Signal::try_from(signal).map_or("a signal", |s| s.as_str());
        return Err(Failure::Interrupted {
            message: format!(
                "interrupted by {name} before the command started; lock '{}' released",
                key.name
            ),
            signal,
        }
        .into());
    }

    let renewer_pid = match owner {
        Owner::OuterExec => std::env::var(EXEC_PID_VAR).unwrap_or_default(),
        _ => std::process::id().to_string(),
    };
    let env = [
        ("RLOCK_KEY", key.name.clone()),
        ("RLOCK_TOKEN", grant.token.clone()),
        ("RLOCK_FENCE", grant.fence.to_string()),
        (EXEC_PID_VAR, renewer_pid),
        (EXEC_TOKEN_VAR, grant.token.clone()),
    ];
    let terminal = supervise::foreground_terminal();
    let pgid = match supervise::spawn(&args.command, &env, terminal) {
        Ok(pid) => pid,
        Err(e) => {
            release();
            return Err(e.into());
        }
    };
    let guardian = supervise::Guardian::arm(pgid);

    let renews = owner != Owner::OuterExec;
    let outcome = std::thread::scope(|s| {
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let (mut stop_tx, mut stop_rx) = (Some(stop_tx), Some(stop_rx));
        let mut report_tx = Some(report_tx);
        let (locker, grant) = (&locker, &grant);
        let enforce = Enforce {
            deadline: renews.then(|| watchdog::deadline(grant.sent, lease.ttl)),
            renew_at: renews.then(|| grant.sent + lease.renew_every),
            grace: lease.grace,
            lost_signal: args.lost_signal,
        };
        supervise::supervise(
            pgid,
            &signals,
            &reports,
            enforce,
            terminal,
            ctx.global.verbose,
            |renewal| match renewal {
                Renewal::Start => match (stop_rx.take(), report_tx.take()) {
                    (Some(stop_rx), Some(report_tx)) => std::thread::Builder::new()
                        .name("renew".into())
                        .spawn_scoped(s, move || {
                            watchdog::renew_loop(locker, grant, lease, stop_rx, |r| {
                                report_tx.send(r);
                            });
                        })
                        .map(drop),
                    _ => Ok(()),
                },
                Renewal::Stop => {
                    drop(stop_tx.take());
                    Ok(())
                }
            },
        )
    });
    supervise::restore_terminal(terminal, pgid);
    if let Some(g) = guardian {
        g.stand_down();
    }

    if let Some(why) = outcome.lost {
        // Owner-checked: gives the lock back only if it is, after all, still ours.
        if owner == Owner::Us {
            let _ = locker.release(&grant.key, &grant.token);
        }
        return Err(Failure::Lost(format!(
            "lost lock '{}' while the command ran: {why}; sent SIG{} to the command's process group",
            key.name,
            args.lost_signal.as_str().trim_start_matches("SIG")
        ))
        .into());
    }
    // The lock can be lost between two renewals without rlock hearing of it (broken with
    // --force, say); the release at the end finds out. Then the command ran unprotected for a
    // while, and that must not pass for success.
    if owner == Owner::Us {
        match locker.release(&grant.key, &grant.token) {
            Ok(_) => {}
            Err(Failure::NotPermitted(_)) => {
                return Err(Failure::Lost(format!(
                    "lost lock '{}' while the command ran: it was no longer held by this token when the command ended (broken or expired between two renewals)",
                    key.name
                ))
                .into());
            }
            // Redis unreachable at the very end: the lock expires by itself.
            Err(e) => ctx.note(format_args!("{e}; the lock will expire by itself")),
        }
    }
    if outcome.signal == Some(Signal::SIGINT as i32) {
        supervise::die_by(Signal::SIGINT);
    }
    Ok(outcome.code)
}
