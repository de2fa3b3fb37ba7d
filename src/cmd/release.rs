//! `rlock release`: give the lock back, or break it with --force; either way the hold that ends
//! is recorded in the lock's history, in the same script as the release (see `hold_record`).

use anyhow::Result;

use super::{Context, nested, required_token};
use crate::cli::ReleaseArgs;
use crate::exit::Failure;
use crate::identity::Identity;
use crate::lock::{HoldRecord, Keep, LockKey, Released};

pub fn run(ctx: &Context, args: &ReleaseArgs) -> Result<u8> {
    let key = ctx.key(&args.key.key)?;
    let record = hold_record(args);
    if args.force {
        let locker = ctx.locker()?;
        let (result, unrecorded) = locker.force_release_recording(&key, record.as_ref());
        say_unrecorded(ctx, &key, &unrecorded);
        match result.map_err(Failure::from)? {
            // What was broken is news, not data: -q (only errors) keeps it quiet.
            // The lock is broken whether or not the line can be written (`| head -c 10`).
            Released::Broken(Some(who)) if !ctx.global.quiet => {
                let _ = crate::output::print(&format!("broke lock '{}' held by {who}", key.name));
            }
            Released::Broken(Some(_)) => {}
            _ => ctx.note(format_args!(
                "lock '{}' was not held; nothing to break",
                key.name
            )),
        }
        return Ok(0);
    }
    let token = required_token(&args.token.token, "release")?;
    // `acquire --export` ... `release` in a script run by `rlock exec` on the same key: the
    // acquire inherited exec's lock, and exec releases it when the command ends (and records
    // the run: nothing is recorded here).
    if nested::environment_names(&key, &token) && nested::inside_exec(&token) {
        ctx.note(format_args!(
            "lock '{}' belongs to the enclosing 'rlock exec', which releases it when its command ends; not releasing it",
            key.name
        ));
        return Ok(0);
    }
    let locker = ctx.locker()?;
    let (result, unrecorded) = locker.release_recording(&key, &token, record.as_ref());
    say_unrecorded(ctx, &key, &unrecorded);
    result.map_err(Failure::from)?;
    ctx.say(format_args!("released lock '{}'", key.name));
    Ok(0)
}

/// What the release records of the hold it ends, None with `--history-limit 0`. The rest (when
/// the lock was granted, the holder's host, user, pid and command, the fence) is the holder
/// record in Redis, which release.lua reads as it releases: this process knows none of it.
fn hold_record(args: &ReleaseArgs) -> Option<HoldRecord> {
    let history = &args.history;
    if history.history_limit == 0 {
        return None;
    }
    // Who breaks a lock: the calling shell, as `acquire` names the holder.
    let ppid = nix::unistd::getppid().as_raw();
    let me = Identity::current(ppid as u32, String::new());
    Some(HoldRecord {
        keep: Keep {
            runs: history.history_limit,
            ttl: history.history_ttl,
        },
        run: uuid::Uuid::new_v4().to_string(),
        by: format!("{}@{} pid {ppid}", me.user, me.host),
        run_end: None,
        running_id: None,
    })
}

/// A history write that failed changes nothing else: `-v` says so, and that is all.
fn say_unrecorded(ctx: &Context, key: &LockKey, unrecorded: &[String]) {
    for why in unrecorded {
        ctx.say(format_args!(
            "{}",
            super::record::unrecorded_line("release", key, why)
        ));
    }
}
