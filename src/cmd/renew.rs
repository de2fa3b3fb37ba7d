//! `rlock renew`: extend the lock while the token owns it.

use anyhow::Result;

use super::{Context, required_token};
use crate::cli::RenewArgs;
use crate::exit::Failure;
use crate::lock::{About, Refused, Renewed};

pub fn run(ctx: &Context, args: &RenewArgs) -> Result<u8> {
    let key = ctx.key(&args.key.key)?;
    let token = required_token(&args.token.token, "renew")?;
    let locker = ctx.locker()?;
    let renewed = locker.renew(&key, &token, args.ttl, locker.op_timeout());
    match renewed.map_err(|e| Failure::redis(&key, e))? {
        Renewed::Yes(ttl) | Renewed::Superseded { ttl, .. } => {
            ctx.say(format_args!(
                "renewed lock '{}' for {}",
                key.name,
                crate::lock::human_duration(ttl)
            ));
            Ok(0)
        }
        Renewed::NotOwner(why) => Err(Failure::NotPermitted {
            about: About::from(&key),
            refused: Refused::Renew(why),
        }
        .into()),
    }
}
