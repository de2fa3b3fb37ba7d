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
/// Every lock the enclosing `rlock exec`s hold, not only the innermost: one line each, of the
/// Redis target, the key, the token and the pid of the exec that renews and releases it
/// (fields blank-separated and percent-escaped).
pub const HELD_VAR: &str = "RLOCK_HELD";

/// One lock an enclosing `rlock exec` holds.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HeldLock {
    /// The Redis target (its URLs, passwords masked, the mode and the prefix): a key of the
    /// same name on another Redis is another lock.
    target: String,
    key: String,
    token: String,
    exec_pid: u32,
}

impl HeldLock {
    fn line(&self) -> String {
        format!(
            "{} {} {} {}",
            escape(&self.target),
            escape(&self.key),
            escape(&self.token),
            self.exec_pid
        )
    }

    fn parse(line: &str) -> Option<HeldLock> {
        let mut fields = line.split(' ');
        let held = HeldLock {
            target: unescape(fields.next()?)?,
            key: unescape(fields.next()?)?,
            token: unescape(fields.next()?)?,
            exec_pid: fields.next()?.parse().ok()?,
        };
        fields.next().is_none().then_some(held)
    }
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '%' | ' ' | '\n' | '\r' => out.push_str(&format!("%{:02X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

fn unescape(s: &str) -> Option<String> {
    let mut out = Vec::with_capacity(s.len());
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The locks the enclosing `rlock exec`s hold, from `$RLOCK_HELD`.
fn held_locks() -> Vec<HeldLock> {
    std::env::var(HELD_VAR)
        .map(|v| v.lines().filter_map(HeldLock::parse).collect())
        .unwrap_or_default()
}

/// What tells one Redis target from another: its URLs (passwords masked), the mode, the prefix.
fn target(ctx: &Context) -> String {
    let urls: Vec<String> = ctx
        .settings
        .urls
        .iter()
        .map(|u| crate::redact::redact(u.trim()))
        .collect();
    let mode = match (&ctx.settings.sentinel, ctx.settings.cluster) {
        (Some(name), _) => format!("sentinel={name}"),
        (None, true) => "cluster".to_string(),
        (None, false) => String::new(),
    };
    format!("{}|{mode}|{}", urls.join(","), ctx.global.prefix)
}

/// The most one variable of a command's environment may hold, `NAME=value` and its NUL
/// (Linux's MAX_ARG_STRLEN): past it the command cannot be started (E2BIG, "Argument list too
/// long").
const MAX_ENV_ENTRY: usize = 128 * 1024;

/// Refuses (before the lock is asked for) a key that would make `RLOCK_KEY` or `RLOCK_HELD` too
/// long for the command's environment: the lock would be taken, and the command fail to start.
pub fn check_env_fits(ctx: &Context, key: &LockKey) -> Result<(), Failure> {
    let this = HeldLock {
        target: target(ctx),
        key: key.name.clone(),
        // A token is a UUID; the pid at most 10 digits.
        token: "0".repeat(36),
        exec_pid: u32::MAX,
    };
    let held: usize = held_locks()
        .into_iter()
        .filter(|h| (&h.target, &h.key) != (&this.target, &this.key))
        .map(|h| h.line().len() + 1)
        .sum();
    let longest =
        (KEY_VAR.len() + 1 + key.name.len()).max(HELD_VAR.len() + 1 + held + this.line().len());
    if longest < MAX_ENV_ENTRY {
        return Ok(());
    }
    Err(Failure::Usage(format!(
        "key '{}' ({} bytes) is too long for the command's environment ($RLOCK_KEY, $RLOCK_HELD: at most {} bytes each); nothing was locked",
        crate::output::escape_max(&key.name, 20),
        key.name.len(),
        MAX_ENV_ENTRY - 1
    )))
}

/// The variables `rlock exec` adds to its command's environment for `grant`, renewed and
/// released by the exec whose pid is `renewer_pid`: the innermost lock as `RLOCK_KEY`,
/// `RLOCK_TOKEN` and `RLOCK_FENCE`, and every lock held around the command in `RLOCK_HELD`.
pub fn child_env(ctx: &Context, grant: &Grant, renewer_pid: String) -> [(&'static str, String); 6] {
    let this = HeldLock {
        target: target(ctx),
        key: grant.key.name.clone(),
        token: grant.token.clone(),
        exec_pid: renewer_pid.parse().unwrap_or(0),
    };
    let mut held: Vec<String> = held_locks()
        .into_iter()
        .filter(|h| (&h.target, &h.key) != (&this.target, &this.key))
        .map(|h| h.line())
        .collect();
    held.push(this.line());
    [
        (KEY_VAR, grant.key.name.clone()),
        (TOKEN_VAR, grant.token.clone()),
        (FENCE_VAR, grant.fence.to_string()),
        (EXEC_PID_VAR, renewer_pid),
        (EXEC_TOKEN_VAR, grant.token.clone()),
        (HELD_VAR, held.join("\n")),
    ]
}

/// `$RLOCK_KEY` names `key` and `$RLOCK_TOKEN` is `token`, or an enclosing exec holds `key`
/// with `token`.
pub fn environment_names(key: &LockKey, token: &str) -> bool {
    (std::env::var(KEY_VAR).ok().as_deref() == Some(key.name.as_str())
        && std::env::var(TOKEN_VAR).ok().as_deref() == Some(token))
        || held_locks()
            .iter()
            .any(|h| h.key == key.name && h.token == token)
}

/// The tokens this process tree may hold `key` with: those of the enclosing execs' locks of
/// that name (whatever the target is called: `localhost` and `127.0.0.1` are one Redis, so only
/// Redis decides), then `$RLOCK_KEY`/`$RLOCK_TOKEN` (an exported `acquire`).
fn inherited_tokens(key: &LockKey) -> Vec<String> {
    let mut tokens: Vec<String> = held_locks()
        .into_iter()
        .rev()
        .filter(|h| h.key == key.name)
        .map(|h| h.token)
        .collect();
    if std::env::var(KEY_VAR).ok().as_deref() == Some(key.name.as_str())
        && let Some(token) = std::env::var(TOKEN_VAR).ok().filter(|t| !t.is_empty())
        && !tokens.contains(&token)
    {
        tokens.push(token);
    }
    tokens
}

/// A lock this process already holds through its environment: rlock run inside `rlock exec`
/// (any of several nested ones), or after `eval "$(rlock acquire --export …)"`, on the same
/// key. Redis must confirm that the inherited token still owns the key.
pub fn inherited(ctx: &Context, locker: &Locker, key: &LockKey) -> Result<Option<Grant>, Failure> {
    let tokens = inherited_tokens(key);
    if tokens.is_empty() {
        return Ok(None);
    }
    for token in &tokens {
        if let Some(grant) = locker.owned(key, token)? {
            ctx.say(format_args!(
                "lock '{}' is already held by this process tree ($RLOCK_TOKEN); not taking it again",
                key.name
            ));
            return Ok(Some(grant));
        }
    }
    ctx.say(format_args!(
        "$RLOCK_TOKEN does not own lock '{}' (any more); taking it normally",
        key.name
    ));
    Ok(None)
}

/// The pid of the enclosing `rlock exec` that renews and releases the lock `token`, if one
/// does: named by `$RLOCK_HELD` (or `$RLOCK_EXEC_TOKEN` and `$RLOCK_EXEC_PID`), and really one
/// of this process's ancestors.
pub fn enclosing_exec(token: &str) -> Option<u32> {
    let mut pids: Vec<u32> = held_locks()
        .into_iter()
        .filter(|h| h.token == token)
        .map(|h| h.exec_pid)
        .collect();
    if std::env::var(EXEC_TOKEN_VAR).ok().as_deref() == Some(token)
        && let Some(pid) = std::env::var(EXEC_PID_VAR)
            .ok()
            .and_then(|p| p.parse().ok())
    {
        pids.push(pid);
    }
    pids.into_iter().find(|&pid| is_ancestor(pid))
}

/// True when the lock `token` belongs to an enclosing `rlock exec`, which renews and releases it.
pub fn inside_exec(token: &str) -> bool {
    enclosing_exec(token).is_some()
}

/// `exec_pid` is an ancestor of this process.
fn is_ancestor(exec_pid: u32) -> bool {
    let mut pid = std::process::id();
    for _ in 0..64 {
        let Some(parent) = parent_of(pid) else {
            return false;
        };
        // Init (or no parent) ends the walk: an entry naming pid 1 names no exec.
        if parent <= 1 {
            return false;
        }
        if parent == exec_pid {
            return true;
        }
        pid = parent;
    }
    false
}

/// The parent pid of `pid`, from /proc.
fn parent_of(pid: u32) -> Option<u32> {
    // Bytes: the name in parentheses is cut at 15 bytes, maybe inside a character.
    let stat = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid ...; comm may hold spaces and parentheses.
    let rest = String::from_utf8_lossy(&stat[stat.iter().rposition(|&b| b == b')')? + 1..]);
    rest.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_lock_survives_its_line() {
        let held = HeldLock {
            target: "redis://u:***@h:1|cluster|rlock:".into(),
            key: "a key\nwith 100% odd bytes".into(),
            token: "t-1".into(),
            exec_pid: 42,
        };
        let line = held.line();
        assert!(!line.contains('\n'));
        assert_eq!(line.split(' ').count(), 4);
        assert_eq!(HeldLock::parse(&line), Some(held));
        assert_eq!(HeldLock::parse("a b c"), None);
        assert_eq!(HeldLock::parse("a b c x"), None);
        assert_eq!(HeldLock::parse("a%zz b c 1"), None);
    }
}
