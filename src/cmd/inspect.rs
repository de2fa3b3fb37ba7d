//! `rlock inspect`: who holds which lock.

use std::io::Write;

use anyhow::Result;
use serde_json::{Value, json};

use super::Context;
use crate::cli::InspectArgs;
use crate::exit::Code;
use crate::lock::{LockInfo, human_ms};

pub fn run(ctx: &Context, args: &InspectArgs) -> Result<u8> {
    let locker = ctx.locker()?;
    let (locks, code) = if args.keys.is_empty() {
        (locker.list(&ctx.global.prefix)?, Code::Ok)
    } else {
        let mut locks = Vec::new();
        for name in &args.keys {
            locks.push(locker.inspect(&ctx.key(name)?)?);
        }
        let code = if locks.iter().all(LockInfo::held) {
            Code::Ok
        } else {
            Code::NotHeld
        };
        (locks, code)
    };
    if ctx.global.quiet {
        return Ok(code as u8);
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        let items: Vec<Value> = locks.iter().map(to_json).collect();
        // One named key: one object; otherwise an array (like kubectl get).
        let doc = if args.keys.len() == 1 {
            items.into_iter().next().unwrap_or(Value::Null)
        } else {
            Value::Array(items)
        };
        writeln!(out, "{doc}")?;
    } else if locks.is_empty() {
        ctx.note(format_args!(
            "no locks held under prefix '{}'",
            ctx.global.prefix
        ));
    } else {
        write_table(&mut out, &locks)?;
    }
    out.flush()?;
    Ok(code as u8)
}

fn to_json(l: &LockInfo) -> Value {
    let holder = l.ours().then(|| {
        json!({
            "host": l.holder.host,
            "pid": l.holder.pid.as_deref().and_then(|p| p.parse::<i64>().ok()),
            "user": l.holder.user,
            "command": l.holder.command,
            "since_ms": l.holder.since_ms,
            "held_for_ms": l.holder.since_ms.map(|s| (l.now_ms - s).max(0)),
        })
    });
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
        "waiters": l.waiters,
    })
}

fn write_table(out: &mut impl Write, locks: &[LockInfo]) -> std::io::Result<()> {
    let mut rows = vec![[
        "KEY".to_string(),
        "STATE".into(),
        "EXPIRES IN".into(),
        "FENCE".into(),
        "HOLDER".into(),
        "HELD FOR".into(),
        "WAITING".into(),
        "COMMAND".into(),
    ]];
    for l in locks {
        let dash = || "-".to_string();
        let expires = match l.pttl {
            _ if !l.held() => dash(),
            -1 => "never".into(),
            p => human_ms(p),
        };
        let holder = if !l.held() {
            dash()
        } else if l.ours() {
            l.holder
                .describe(l.now_ms)
                .split(" for ")
                .next()
                .unwrap_or("")
                .to_string()
        } else if l.kind == "string" {
            "another client".into()
        } else if l.kind == "hash" {
            "another client (hash, e.g. Redisson)".into()
        } else {
            format!("not a lock ({})", l.kind)
        };
        rows.push([
            l.name.clone(),
            if l.held() {
                "held".into()
            } else {
                "free".into()
            },
            expires,
            l.fence.map_or_else(dash, |f| f.to_string()),
            holder,
            l.holder
                .since_ms
                .filter(|_| l.ours())
                .map_or_else(dash, |s| human_ms(l.now_ms - s)),
            l.waiters.to_string(),
            l.holder
                .command
                .clone()
                .filter(|_| l.ours())
                .unwrap_or_else(dash),
        ]);
    }
    let mut widths = [0usize; 8];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in &rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<w$}  ", w = widths[i]));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}
