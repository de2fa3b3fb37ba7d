//! `rlock acquire`: take the lock and print the token.

use anyhow::Result;

use super::hint::shell_quote;
use super::nested::{FENCE_VAR, KEY_VAR, TOKEN_VAR, inherited};
use super::take::{Ask, holder, take};
use super::{Context, sharing};
use crate::cli::AcquireArgs;
use crate::exit::Failure;
use crate::lock::Grant;
use crate::output;
use crate::redact::redact_command;
use crate::signals::Signals;

pub fn run(ctx: &Context, args: &AcquireArgs) -> Result<u8> {
    let key = ctx.key(&args.key.key)?;
    let locker = ctx.locker()?;
    let sharing = sharing(&locker, &args.sharing)?;
    let inherited_grant = inherited(ctx, &locker, &key)?;
    let inherited_here = inherited_grant.is_some();
    let grant = match inherited_grant {
        Some(grant) => grant,
        None => {
            // The holder is the calling shell: this process exits as soon as it has the lock.
            let ppid = nix::unistd::getppid().as_raw() as u32;
            let who = holder(ppid, &args.label, || parent_command(ppid));
            let signals = if args.wait.no_wait {
                None
            } else {
                Some(Signals::for_wait()?)
            };
            let ask = Ask {
                key: &key,
                ttl: args.ttl,
                sharing,
                wait: &args.wait,
                who,
                hold: args.hold.hold_at_least,
                newest: crate::lock::Newest::Off,
                record: None,
            };
            take(&locker, ask, &signals, ctx)?
        }
    };
    ctx.say(format_args!(
        "acquired lock '{}' (fence {}, ttl {})",
        key.name,
        grant.fence,
        crate::lock::human_duration(grant.ttl.length())
    ));
    if let Err(e) = print(&grant, args) {
        // Nobody got the token, so nobody could release the lock: give it back now (unless it
        // was inherited, and so is someone else's to release).
        let note = if inherited_here {
            "the inherited lock is left as it was"
        } else {
            let _ = locker.release(&grant.key, &grant.token);
            "the lock was released"
        };
        return Err(Failure::Internal(format!(
            "could not print the token of lock '{}': {e}; {note}",
            key.name
        ))
        .into());
    }
    Ok(0)
}

fn print(grant: &Grant, args: &AcquireArgs) -> std::io::Result<()> {
    // `acquire >&-`: the write fails (output::stdout), rather than the token going nowhere.
    if args.export {
        output::data(&format!(
            "{KEY_VAR}={}\n{TOKEN_VAR}={}\n{FENCE_VAR}={}\nexport {KEY_VAR} {TOKEN_VAR} {FENCE_VAR}",
            shell_quote(&grant.key.name),
            shell_quote(&grant.token),
            grant.fence
        ))
    } else if args.json {
        output::json(&serde_json::json!({
            "key": grant.key.name,
            "redis_key": grant.key.redis_key,
            "token": grant.token,
            "fence": grant.fence,
            "ttl_ms": grant.ttl.length().as_millis() as u64,
        }))
    } else {
        output::data(&grant.token)
    }
}

/// The command line of the process that ran rlock, for `inspect` to show, with the secrets on
/// it (URL passwords, `DB_PASSWORD=…`, `--token …`) redacted.
fn parent_command(ppid: u32) -> String {
    std::fs::read(format!("/proc/{ppid}/cmdline"))
        .ok()
        .map(|raw| {
            let words: Vec<_> = raw
                .split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(String::from_utf8_lossy)
                .collect();
            redact_command(&words)
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "rlock acquire".into())
}
