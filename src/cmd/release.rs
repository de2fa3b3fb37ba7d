//! `rlock release`: give the lock back, or break it with --force.

use anyhow::Result;

use super::{Context, required_token};
use crate::cli::ReleaseArgs;
use crate::lock::Released;

pub fn run(ctx: &Context, args: &ReleaseArgs) -> Result<u8> {
    let key = ctx.key(&args.key.key)?;
    if args.force {
        let locker = ctx.locker()?;
        match locker.force_release(&key)? {
            Released::Broken(Some(who)) => println!("broke lock '{}' held by {who}", key.name),
            _ => ctx.note(format_args!(
                "lock '{}' was not held; nothing to break",
                key.name
            )),
        }
        return Ok(0);
    }
    let token = required_token(&args.token.token, "release")?;
    let locker = ctx.locker()?;
    locker.release(&key, &token)?;
    ctx.say(format_args!("released lock '{}'", key.name));
    Ok(0)
}
