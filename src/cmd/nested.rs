//! The nested-rlock protocol: what `rlock exec` puts in its command's environment, and how an
//! rlock run inside it (or after `eval "$(rlock acquire --export …)"`) finds the lock it already
//! holds, so that it neither waits for itself nor releases what an enclosing exec renews.

use super::Context;
use crate::exit::Failure;
use crate::lock::{Grant, LockKey, Locker};

/// The lock's name, its owner token and its fence, for the command (and for nested rlock).
pub const KEY_VAR: &str = "RLOCK_KEY";
pub const TOKEN_VAR: &str = "RLOCK_TOKEN";
pub const FENCE_VAR: &str = "RLOCK_FENCE";
/// The pid of the `rlock exec` that renews and releases the lock, and the lock's token, so that
/// a nested rlock on that lock leaves both to it.
pub const EXEC_PID_VAR: &str = "RLOCK_EXEC_PID";
pub const EXEC_TOKEN_VAR: &str = "RLOCK_EXEC_TOKEN";

/// The variables `rlock exec` adds to its command's environment for `grant`, renewed and
/// released by the exec whose pid is `renewer_pid`.
pub fn child_env(grant: &Grant, renewer_pid: String) -> [(&'static str, String); 5] {
    [
        (KEY_VAR, grant.key.name.clone()),
        (TOKEN_VAR, grant.token.clone()),
        (FENCE_VAR, grant.fence.to_string()),
        (EXEC_PID_VAR, renewer_pid),
        (EXEC_TOKEN_VAR, grant.token.clone()),
    ]
}

/// `$RLOCK_KEY` names `key` and `$RLOCK_TOKEN` is `token`.
pub fn environment_names(key: &LockKey, token: &str) -> bool {
    std::env::var(KEY_VAR).ok().as_deref() == Some(key.name.as_str())
        && std::env::var(TOKEN_VAR).ok().as_deref() == Some(token)
}

/// A lock this process already holds through its environment: rlock run inside `rlock exec`
/// (or after `eval "$(rlock acquire --export …)"`) on the same key. Redis must confirm that the
/// inherited token still owns the key.
pub fn inherited(ctx: &Context, locker: &Locker, key: &LockKey) -> Result<Option<Grant>, Failure> {
    let env_key = std::env::var(KEY_VAR).ok();
    let env_token = std::env::var(TOKEN_VAR).ok().filter(|t| !t.is_empty());
    let (Some(env_key), Some(token)) = (env_key, env_token) else {
        return Ok(None);
    };
    if env_key != key.name {
        return Ok(None);
    }
    let owned = locker.owned(key, &token)?;
    match &owned {
        Some(_) => ctx.say(format_args!(
            "lock '{}' is already held by this process tree ($RLOCK_TOKEN); not taking it again",
            key.name
        )),
        None => ctx.say(format_args!(
            "$RLOCK_TOKEN does not own lock '{}' (any more); taking it normally",
            key.name
        )),
    }
    Ok(owned)
}

/// True when the lock `token` belongs to an enclosing `rlock exec`, which renews and releases
/// it: $RLOCK_EXEC_TOKEN names that token, and $RLOCK_EXEC_PID that exec, which must really be
/// one of this process's ancestors.
pub fn inside_exec(token: &str) -> bool {
    if std::env::var(EXEC_TOKEN_VAR).ok().as_deref() != Some(token) {
        return false;
    }
    let Some(exec_pid) = std::env::var(EXEC_PID_VAR)
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
    else {
        return false;
    };
    let mut pid = std::process::id();
    for _ in 0..64 {
        let Some(parent) = parent_of(pid) else {
            return false;
        };
        if parent == exec_pid {
            return true;
        }
        if parent <= 1 {
            return false;
        }
        pid = parent;
    }
    false
}

/// The parent pid of `pid`, from /proc.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid ...; comm may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}
