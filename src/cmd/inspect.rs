//! `rlock inspect`: who holds which lock.

mod history;
mod table;
mod timeline;
mod watch;

use std::io::{IsTerminal, Write};

use anyhow::Result;
use serde_json::{Value, json};

use super::Context;
use crate::cli::InspectArgs;
use crate::exit::{Code, Exit, Failure};
use crate::identity::process_gone;
use crate::lock::{Holder, HolderPid, LockInfo, Locker};

pub fn run(ctx: &Context, args: &InspectArgs) -> Result<Exit> {
    if args.history {
        return history::run(ctx, args);
    }
    if let Some(every) = args.watch {
        return watch::run(ctx, args, every);
    }
    let locker = ctx.locker()?;
    let (locks, code) = read(ctx, &locker, args)?;
    if ctx.global.quiet {
        return Ok(Exit::Code(code as u8));
    }
    if args.json {
        crate::output::json(&json_doc(args, &locks))?;
    } else if locks.is_empty() {
        ctx.note(format_args!("{}", nothing_held(ctx)));
    } else {
        let mut out = crate::output::stdout()?;
        let terminal = std::io::stdout().is_terminal();
        table::write(&mut out, &locks, !args.keys.is_empty(), terminal)?;
        out.flush()?;
    }
    // Hints are not data: stdout carries the table alone, so `rlock inspect | tail -n +2`
    // counts locks, and a script reading it never parses a hint as a row.
    if !args.json {
        for note in table::notes(&locks, &ctx.rlock_line()) {
            ctx.note(format_args!("{note}"));
        }
    }
    Ok(Exit::Code(code as u8))
}

/// The locks to show (the named ones, or every one under the prefix), and the exit code they
/// make: 1 when a named key is free.
fn read(ctx: &Context, locker: &Locker, args: &InspectArgs) -> Result<(Vec<LockInfo>, Code)> {
    if args.keys.is_empty() {
        let locks = locker.list(&ctx.global.prefix).map_err(Failure::from)?;
        return Ok((locks, Code::Ok));
    }
    let mut locks = Vec::new();
    for name in &args.keys {
        locks.push(locker.inspect(&ctx.key(name)?).map_err(Failure::from)?);
    }
    let code = if locks.iter().all(LockInfo::held) {
        Code::Ok
    } else {
        Code::NotHeld
    };
    Ok((locks, code))
}

fn nothing_held(ctx: &Context) -> String {
    format!("no locks held under prefix '{}'", ctx.global.prefix)
}

/// A holder recorded on this host whose process is gone: its lock is held for nothing until
/// its lease ends.
fn stale(h: &Holder) -> bool {
    match (&h.host, &h.pid) {
        (Some(host), Some(pid)) => pid
            .number()
            .is_some_and(|pid| process_gone(host, pid, h.pidns.as_deref())),
        _ => false,
    }
}

/// Every holder of `l` is stale: nothing alive holds it (as far as this host can tell). A lock
/// kept by --hold-at-least after its command ended is held on purpose, never stale.
fn all_stale(l: &LockInfo) -> bool {
    if l.limit.is_some() {
        !l.holders.is_empty() && l.holders.iter().all(|h| stale(&h.holder))
    } else {
        l.held() && l.ours() && l.held_until_ms.is_none() && stale(&l.holder)
    }
}

/// One object for exactly one `-k`; otherwise an array (like kubectl get).
fn json_doc(args: &InspectArgs, locks: &[LockInfo]) -> Value {
    let items: Vec<Value> = locks.iter().map(to_json).collect();
    if args.keys.len() == 1 {
        items.into_iter().next().unwrap_or(Value::Null)
    } else {
        Value::Array(items)
    }
}

fn to_json(l: &LockInfo) -> Value {
    let holder = l.ours().then(|| {
        let mut h = holder_json(&l.holder, l.now_ms);
        if l.held_until_ms.is_some() {
            // Its command ended, and the lock stays on purpose (--hold-at-least).
            h["stale"] = json!(false);
        }
        h
    });
    // Every holder: the one of a lock, or each of a semaphore or shared lock.
    let holders: Vec<Value> = if l.limit.is_some() {
        l.holders
            .iter()
            .map(|h| {
                let mut one = holder_json(&h.holder, l.now_ms);
                one["token"] = json!(h.token);
                one["fence"] = json!(h.fence);
                one["ttl_ms"] = json!((h.ends_ms - l.now_ms).max(0));
                one["lease_ms"] = json!(h.ttl_ms);
                one["renewed_ms"] = json!(h.renewed_ms);
                one
            })
            .collect()
    } else {
        holder
            .clone()
            .map(|mut h| {
                h["token"] = json!(l.token);
                h["fence"] = json!(l.fence);
                h["ttl_ms"] = json!(l.pttl);
                h["lease_ms"] = json!(l.ttl_ms);
                h["renewed_ms"] = json!(l.renewed_ms);
                h
            })
            .into_iter()
            .collect()
    };
    let (kind, limit) = match l.limit {
        _ if !l.held() => (Value::Null, Value::Null),
        Some(0) => (json!("shared"), Value::Null),
        Some(n) => (json!("semaphore"), json!(n)),
        None => (json!("exclusive"), json!(1)),
    };
    json!({
        "key": l.name,
        "redis_key": l.redis_key,
        "held": l.held(),
        "type": if l.held() { Value::from(l.kind.as_str()) } else { Value::Null },
        "owner": if !l.held() { "none" } else if l.ours() { "rlock" } else { "other" },
        "ttl_ms": if l.held() && l.pttl >= 0 { Value::from(l.pttl) } else { Value::Null },
        "fence": l.fence,
        "token": l.token,
        "holder": holder,
        "lease_ms": l.ttl_ms,
        "renewed_ms": l.renewed_ms,
        "stale": all_stale(l),
        "waiters": l.waiters,
        "waiting": l.line.iter().map(|w| waiter_json(w, l.now_ms)).collect::<Vec<_>>(),
        "held_until_ms": l.held_until_ms,
        "command_ended": l.held_until_ms.is_some(),
        "kind": kind,
        "limit": limit,
        "holders": holders,
    })
}

/// What rlock wrote of a holder, how long it has held the lock, and whether its process is
/// gone from this host.
fn holder_json(h: &Holder, now_ms: i64) -> Value {
    json!({
        "host": h.host,
        "pid": h.pid.as_ref().and_then(HolderPid::number),
        "user": h.user,
        "command": h.command,
        "since_ms": h.since_ms,
        "held_for_ms": h.since_ms.map(|s| (now_ms - s).max(0)),
        "stale": stale(h),
    })
}

/// A waiter in line: who it is, and since when it waits (server ms).
fn waiter_json(w: &Holder, now_ms: i64) -> Value {
    json!({
        "host": w.host,
        "pid": w.pid.as_ref().and_then(HolderPid::number),
        "user": w.user,
        "command": w.command,
        "waiting_since_ms": w.since_ms,
        "waited_ms": w.since_ms.map(|s| (now_ms - s).max(0)),
    })
}

/// What makes two readings of the locks different for `--watch`: who holds what (kind, token,
/// fence, holder, whether it is stale, a hold whose command ended) and who waits. The clocks (time left, held for,
/// renewed) change at every look and are left out.
fn change_key(locks: &[LockInfo]) -> String {
    let who = |h: &Holder| {
        (
            h.host.clone(),
            h.pid.as_ref().map(ToString::to_string),
            stale(h),
        )
    };
    let state: Vec<Value> = locks
        .iter()
        .map(|l| {
            let holders: Vec<Value> = if l.limit.is_some() {
                l.holders
                    .iter()
                    .map(|h| json!([h.token, h.fence, who(&h.holder)]))
                    .collect()
            } else {
                vec![json!([l.token, l.fence, who(&l.holder)])]
            };
            let line: Vec<Value> = l.line.iter().map(|w| json!(who(w))).collect();
            json!([
                l.name,
                l.kind.as_str(),
                l.limit,
                l.waiters,
                holders,
                line,
                l.held_until_ms
            ])
        })
        .collect();
    Value::Array(state).to_string()
}
