//! `exec --once-per DUR`: the window a run fired in, whether its work is done, and the mark a
//! successful run leaves (`lock/once.rs` keeps the record).

use super::Context;
use super::record::Recorder;
use crate::cli::ExecArgs;
use crate::exit::{Exit, Failure};
use crate::lock::{Grant, LockKey, Locker, Window, WindowDone, human_ms};

/// The window this run fired in, by Redis's clock: None without --once-per. A run whose window
/// is already done ends here (`Err(Ok(exit))`), before it waits for the lock.
pub fn fired(
    ctx: &Context,
    locker: &Locker,
    key: &LockKey,
    args: &ExecArgs,
    record: &mut Recorder,
) -> Result<Option<Window>, Result<Exit, Failure>> {
    let Some(len) = args.once_per else {
        return Ok(None);
    };
    if locker.is_quorum() {
        return Err(Err(Failure::Usage(
            "--once-per needs one Redis, Sentinel or Cluster: over Redlock's independent masters no record says which window is done".into(),
        )));
    }
    let look = locker
        .once_look(key, len)
        .map_err(|e| Err(Failure::from(e)))
        .inspect_err(|e| {
            if let Err(f) = e {
                record.failed(f);
            }
        })?;
    let window = Window::at(look.now_ms, len);
    ctx.say(format_args!(
        "fired in window {} of lock '{}' (one run per {}, by Redis's clock)",
        window_name(window),
        key.name,
        human_ms(len.as_millis() as i64)
    ));
    match look.done_for(window) {
        Some(done) => Err(Ok(skip(ctx, key, args, window, done, record))),
        None => Ok(Some(window)),
    }
}

/// Once the lock is held: whether a run that held it meanwhile did this window's work. Then the
/// lock is given back by the caller and this run ends (`Some(exit)`).
pub fn done_meanwhile(
    ctx: &Context,
    locker: &Locker,
    key: &LockKey,
    args: &ExecArgs,
    window: Window,
    record: &mut Recorder,
) -> Result<Option<Exit>, Failure> {
    let look = locker.once_look(key, window.len).map_err(Failure::from)?;
    Ok(look
        .done_for(window)
        .map(|done| skip(ctx, key, args, window, done, record)))
}

/// The window is done by `done`'s run: this one ends without running its command, quietly
/// (-v says why), with 0 or -E, and says so in the history.
fn skip(
    ctx: &Context,
    key: &LockKey,
    args: &ExecArgs,
    window: Window,
    done: &WindowDone,
    record: &mut Recorder,
) -> Exit {
    let by = format!(
        "{} run {}",
        done.host.as_deref().unwrap_or("?"),
        done.run.as_deref().unwrap_or("?")
    );
    let code = args.wait.conflict_exit_code.unwrap_or(0);
    ctx.say(format_args!(
        "window {} of lock '{}' already had its run (by {}); not running the command",
        window_name(window),
        key.name,
        crate::output::escape(&by)
    ));
    record.skipped(by, i64::from(code));
    Exit::Code(code)
}

/// A successful run marks its window done, while it still holds the lock; a mark that fails is
/// said (-v) and costs the window a second run at most, never this run's status.
pub fn mark(
    ctx: &Context,
    locker: &Locker,
    grant: &Grant,
    window: Window,
    args: &ExecArgs,
    run: &str,
) {
    let host = super::take::exec_holder(args).host;
    match locker.once_mark(&grant.key, &grant.token, window, &host, run) {
        Ok(true) => ctx.say(format_args!(
            "window {} of lock '{}' is done",
            window_name(window),
            grant.key.name
        )),
        Ok(false) => ctx.say(format_args!(
            "window {} of lock '{}' not marked done: the lock is no longer this run's",
            window_name(window),
            grant.key.name
        )),
        Err(e) => ctx.say(format_args!(
            "window {} of lock '{}' not marked done: {}",
            window_name(window),
            grant.key.name,
            Failure::from(e)
        )),
    }
}

/// The command exited 0 with its lock kept, and nothing of it was left running: its window is
/// done.
pub fn succeeded(outcome: &crate::supervise::Outcome) -> bool {
    outcome.code == 0
        && outcome.signal.is_none()
        && outcome.lost.is_none()
        && !outcome.leftovers
        && !outcome.timed_out
}

/// A window as people read it: when it began, UTC, by Redis's clock.
fn window_name(window: Window) -> String {
    let start =
        std::time::UNIX_EPOCH + std::time::Duration::from_millis(window.start_ms().max(0) as u64);
    format!("{}", humantime::format_rfc3339_seconds(start))
}
