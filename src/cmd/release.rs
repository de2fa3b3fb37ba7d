//! `rlock release`: give the lock back, or break it with --force.

use anyhow::Result;

use super::{Context, nested, required_token};
use crate::cli::ReleaseArgs;
use crate::lock::Released;

pub fn run(ctx: &Context, args: &ReleaseArgs) -> Result<u8> {
    let key = ctx.key(&args.key.key)?;
    if args.force {
        let locker = ctx.locker()?;
        match locker.force_release(&key)? {
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
    // acquire inherited exec's lock, and exec releases it when the command ends.
    if nested::environment_names(&key, &token) && nested::inside_exec(&token) {
        ctx.note(format_args!(
            "lock '{}' belongs to the enclosing 'rlock exec', which releases it when its command ends; not releasing it",
            key.name
        ));
        return Ok(0);
    }
    let locker = ctx.locker()?;
    locker.release(&key, &token)?;
    ctx.say(format_args!("released lock '{}'", key.name));
    Ok(0)
}
