//! `rlock exec`: take the lock, run the command under it, and give it back.

use std::sync::mpsc;

use anyhow::Result;
use nix::unistd::Pid;

use super::{Context, inherited, new_token};
use crate::cli::ExecArgs;
use crate::exit::Failure;
use crate::lock::{Identity, WaitPolicy};
use crate::supervise::{self, Enforce, Event};
use crate::watchdog::{self, Lease};

pub fn run(ctx: &Context, args: &ExecArgs) -> Result<u8> {
    let lease = Lease::new(
        args.ttl,
        args.renew_every,
        args.grace,
        ctx.settings.op_timeout,
    )
    .map_err(Failure::Usage)?;
    let key = ctx.key(&args.key.key)?;
    let locker = ctx.locker()?;

    // Signals are caught from here on: while waiting they end the wait (leaving nothing in
    // Redis); once the command runs they are passed on to it.
    let (events_tx, events) = mpsc::channel::<Event>();
    let _signals = supervise::catch_signals(events_tx.clone())?;
    let interrupt = || match events.try_recv() {
        Ok(Event::Signal(s)) => Some(s),
        _ => None,
    };

    let (grant, reentrant) = match inherited(ctx, &locker, &key)? {
        Some(grant) => (grant, true),
        None => {
            let command = args
                .command
                .iter()
                .map(|a| a.to_string_lossy())
                .collect::<Vec<_>>()
                .join(" ");
            let who = Identity::current(std::process::id(), command);
            let policy = WaitPolicy {
                wait: args.wait.wait,
                no_wait: args.wait.no_wait,
                busy_code: args.wait.conflict_exit_code,
            };
            let token = new_token();
            let grant = locker.acquire(&key, &token, args.ttl, &who, policy, &interrupt)?;
            (grant, false)
        }
    };
    let release = || {
        if !reentrant && let Err(e) = locker.release(&grant.key, &grant.token) {
            ctx.note(format_args!("{e}"));
        }
    };
    ctx.say(format_args!(
        "acquired lock '{}' (fence {}){}",
        key.name,
        grant.fence,
        if reentrant { ", inherited" } else { "" }
    ));
    // A signal that came between the grant and the spawn ends the run before it starts.
    if let Some(signal) = interrupt() {
        release();
        return Ok(128 + signal as u8);
    }

    let env = [
        ("RLOCK_KEY", key.name.clone()),
        ("RLOCK_TOKEN", grant.token.clone()),
        ("RLOCK_FENCE", grant.fence.to_string()),
    ];
    let terminal = supervise::foreground_terminal();
    let mut child = match supervise::spawn(&args.command, &env, terminal) {
        Ok(child) => child,
        Err(e) => {
            release();
            return Err(e.into());
        }
    };
    let pgid = Pid::from_raw(child.id() as i32);

    let outcome = std::thread::scope(|s| {
        let reaper_tx = events_tx.clone();
        s.spawn(move || {
            let _ = reaper_tx.send(Event::Exited(child.wait()));
        });
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let mut stop_tx = Some(stop_tx);
        if !reentrant {
            let report_tx = events_tx.clone();
            let (locker, grant) = (&locker, &grant);
            s.spawn(move || {
                watchdog::renew_loop(locker, grant, lease, stop_rx, |r| {
                    let _ = report_tx.send(Event::Watchdog(r));
                });
            });
        }
        let enforce = Enforce {
            deadline: (!reentrant).then(|| watchdog::deadline(grant.sent, lease.ttl)),
            grace: lease.grace,
            lost_signal: args.lost_signal,
        };
        let outcome = supervise::supervise(pgid, &events, enforce, ctx.global.verbose, || {
            stop_tx.take();
        });
        drop(stop_tx);
        outcome
    });
    supervise::restore_terminal(terminal);

    if let Some(why) = outcome.lost {
        // Owner-checked: gives the lock back only if it is, after all, still ours.
        let _ = locker.release(&grant.key, &grant.token);
        return Err(Failure::Lost(format!(
            "lost lock '{}' while the command ran: {why}; sent SIG{} to the command's process group",
            key.name,
            args.lost_signal.as_str().trim_start_matches("SIG")
        ))
        .into());
    }
    release();
    let status = outcome.status?;
    Ok(supervise::status_code(&status))
}
