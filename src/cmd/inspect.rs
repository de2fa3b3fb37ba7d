//! `rlock inspect`: who holds which lock.

use std::io::Write;

use anyhow::Result;
use serde_json::{Value, json};

use super::Context;
use crate::cli::InspectArgs;
use crate::exit::Code;
use crate::lock::{Holder, KeyType, LockInfo, human_ms};

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
    let holder = l.ours().then(|| holder_json(&l.holder, l.now_ms));
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
        "waiters": l.waiters,
        "kind": kind,
        "limit": limit,
        "holders": holders,
    })
}

/// What rlock wrote of a holder, and how long it has held the lock.
fn holder_json(h: &Holder, now_ms: i64) -> Value {
    json!({
        "host": h.host,
        "pid": h.pid.as_deref().and_then(|p| p.parse::<i64>().ok()),
        "user": h.user,
        "command": h.command,
        "since_ms": h.since_ms,
        "held_for_ms": h.since_ms.map(|s| (now_ms - s).max(0)),
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
        if l.limit.is_some() {
            rows.extend(holder_rows(l));
            continue;
        }
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
        } else if l.kind == KeyType::String {
            "another client".into()
        } else if l.kind == KeyType::Hash {
            "another client (hash, e.g. Redisson)".into()
        } else {
            format!("not a lock ({})", l.kind.as_str())
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
    // Whatever a key or a holder field holds (another client wrote it, or a user name had a
    // newline), a lock is one row of printable cells of bounded width.
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.iter().map(|c| cell(c)).collect())
        .collect();
    let mut widths = [0usize; 8];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in &rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < row.len() {
                let pad = widths[i] - cell.chars().count() + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// A semaphore or shared lock: `held 2/3` or `shared ×3`, and one row per holder.
fn holder_rows(l: &LockInfo) -> Vec<[String; 8]> {
    let state = match l.limit {
        Some(0) => format!("shared ×{}", l.holders.len()),
        n => format!("held {}/{}", l.holders.len(), n.unwrap_or(0)),
    };
    l.holders
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let first = i == 0;
            let who = h.holder.describe(l.now_ms);
            [
                if first { l.name.clone() } else { String::new() },
                if first { state.clone() } else { String::new() },
                human_ms(h.ends_ms - l.now_ms),
                h.fence.map_or_else(|| "-".into(), |f| f.to_string()),
                who.split(" for ").next().unwrap_or("").to_string(),
                h.holder
                    .since_ms
                    .map_or_else(|| "-".into(), |s| human_ms(l.now_ms - s)),
                if first {
                    l.waiters.to_string()
                } else {
                    String::new()
                },
                h.holder.command.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect()
}

/// The longest a table cell may be, in characters; the JSON output keeps every value whole.
const CELL_MAX: usize = 120;

/// `text` fit for one cell of a one-line row: control characters escaped (`\n`, `\x1b`), and
/// cut to `CELL_MAX` characters with a `…` where it was cut.
fn cell(text: &str) -> String {
    let mut out = String::new();
    for (n, c) in text.chars().enumerate() {
        if n == CELL_MAX {
            out.push('…');
            break;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            // Line separators and bidirectional overrides, which would reorder the row.
            '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => {
                out.push_str(&format!("\\u{{{:04x}}}", c as u32))
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{CELL_MAX, cell};

    #[test]
    fn cells_are_one_line_and_bounded() {
        assert_eq!(cell("a\nb\tc\u{1b}[31m"), "a\\nb\\tc\\x1b[31m");
        let long = "x".repeat(70_000);
        assert_eq!(cell(&long).chars().count(), CELL_MAX + 1);
        assert!(cell(&long).ends_with('…'));
        assert_eq!(cell("plain"), "plain");
    }
}
