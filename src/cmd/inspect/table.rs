//! `inspect`'s table: one row per lock (one per holder of a semaphore or shared lock), and for
//! locks named with -k one per waiter in line; and, apart from it, a note for each holder whose
//! process is gone, saying how to break its lock.

use std::io::Write;

use super::stale;
use crate::cmd::hint::option;
use crate::lock::{Holder, HolderLease, KeyType, LockInfo, human_ms};
use crate::output::{distinct, escape, escape_max};

const COLUMNS: usize = 8;

/// Writes the table of `locks`: a header and the rows, nothing else (the stale holders' notes
/// are `notes`), so that `rlock inspect | tail -n +2` counts locks. With `waiters` (the locks
/// were named with -k), each lock's waiters follow it, a row each, first first. A row of a lock with a
/// short name, held on a host with a short name, fits 80 columns before its COMMAND; the fence
/// and the token, which nobody reads at a glance, are in `--json`. Off a `terminal` (a pipe, a
/// file) every cell is whole; on one, a long cell is cut, but two keys are never cut alike.
pub(super) fn write(
    out: &mut impl Write,
    locks: &[LockInfo],
    waiters: bool,
    terminal: bool,
) -> std::io::Result<()> {
    let mut rows = vec![
        [
            "KEY", "STATE", "EXPIRES", "HOLDER", "HELD", "RENEWED", "QUEUE", "COMMAND",
        ]
        .map(String::from),
    ];
    for l in locks {
        if l.limit.is_some() {
            rows.extend(holder_rows(l));
        } else {
            rows.push(lock_row(l));
        }
        if waiters {
            rows.extend(waiter_rows(l));
        }
    }
    // Whatever a key or a holder field holds (another client wrote it, or a user name had a
    // newline), a lock is one row of printable cells of bounded width.
    let keys: Vec<&str> = rows.iter().map(|row| row[0].as_str()).collect();
    let keys = distinct(&keys, cell);
    let rows: Vec<Vec<String>> = rows
        .iter()
        .zip(keys)
        .map(|(row, key)| {
            let cells = row.iter().skip(1).map(|c| match terminal {
                true => cell(c),
                false => escape(c),
            });
            let key = if terminal { key } else { escape(&row[0]) };
            std::iter::once(key).chain(cells).collect()
        })
        .collect();
    let mut widths = [0usize; COLUMNS];
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

/// How to break the lock of each stale holder among `locks`, one line each, with `rlock` the
/// command line that reaches them (`Context::rlock_line`). Escaped as a cell is, but never cut:
/// each is a command to copy, and runs as printed.
pub(super) fn notes(locks: &[LockInfo], rlock: &str) -> Vec<String> {
    let mut notes = Vec::new();
    for l in locks {
        if l.limit.is_some() {
            notes.extend(
                l.holders
                    .iter()
                    .filter_map(|h| stale_note(l, Some(h), rlock)),
            );
        } else {
            notes.extend(stale_note(l, None, rlock));
        }
    }
    notes.iter().map(|n| escape(n)).collect()
}

/// A lock with one holder (or none, or another client's).
fn lock_row(l: &LockInfo) -> [String; COLUMNS] {
    let dash = || "-".to_string();
    let expires = match l.pttl {
        _ if !l.held() => dash(),
        -1 => "never".into(),
        p => human_ms(p),
    };
    let holder = if !l.held() {
        dash()
    } else if l.held_until_ms.is_some() {
        // Its command ended, and the lock stays on purpose (--hold-at-least): never stale.
        described(&l.holder, l.now_ms)
    } else if l.ours() {
        who(&l.holder, l.now_ms)
    } else if l.kind == KeyType::String {
        "another client".into()
    } else if l.kind == KeyType::Hash {
        "another client (hash, e.g. Redisson)".into()
    } else {
        format!("not a lock ({})", l.kind.as_str())
    };
    let ours = l.held() && l.ours();
    let state = match l.held_until_ms {
        _ if !l.held() => "free".into(),
        Some(until) => format!("held until {}, command ended", server_time(until)),
        None => "held".into(),
    };
    [
        l.name.clone(),
        state,
        expires,
        holder,
        l.holder
            .since_ms
            .filter(|_| ours)
            .map_or_else(dash, |s| human_ms(l.now_ms - s)),
        renewed(l.renewed_ms.filter(|_| ours), l.now_ms),
        l.waiters.to_string(),
        l.holder
            .command
            .clone()
            .filter(|_| ours)
            .unwrap_or_else(dash),
    ]
}

/// A semaphore or shared lock: `held 2/3` or `shared ×3`, and one row per holder.
fn holder_rows(l: &LockInfo) -> Vec<[String; COLUMNS]> {
    let state = match l.limit {
        Some(0) => format!("shared ×{}", l.holders.len()),
        n => format!("held {}/{}", l.holders.len(), n.unwrap_or(0)),
    };
    l.holders
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let first = i == 0;
            [
                if first { l.name.clone() } else { String::new() },
                if first { state.clone() } else { String::new() },
                human_ms(h.ends_ms - l.now_ms),
                who(&h.holder, l.now_ms),
                h.holder
                    .since_ms
                    .map_or_else(|| "-".into(), |s| human_ms(l.now_ms - s)),
                renewed(h.renewed_ms, l.now_ms),
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

/// One row per waiter in line, first first: STATE says its place, HOLDER who it is, HELD how
/// long it has waited, COMMAND its label or command.
fn waiter_rows(l: &LockInfo) -> Vec<[String; COLUMNS]> {
    let dash = || "-".to_string();
    l.line
        .iter()
        .enumerate()
        .map(|(i, w)| {
            [
                String::new(),
                format!("waiting {}", i + 1),
                dash(),
                if w.host.is_some() {
                    who(w, l.now_ms)
                } else {
                    "?".into()
                },
                w.since_ms.map_or_else(dash, |s| human_ms(l.now_ms - s)),
                dash(),
                String::new(),
                w.command.clone().unwrap_or_else(dash),
            ]
        })
        .collect()
}

/// A time by the server's clock (ms since the epoch), to the second, in UTC.
fn server_time(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_seconds(at).to_string()
}

/// `alice@build-7 pid 4411`, and `(stale)` when that process is gone from this host.
fn who(h: &Holder, now_ms: i64) -> String {
    let who = described(h, now_ms);
    if stale(h) {
        format!("{who} (stale)")
    } else {
        who
    }
}

/// `alice@build-7 pid 4411`.
fn described(h: &Holder, now_ms: i64) -> String {
    let described = h.describe(now_ms);
    described.split(" for ").next().unwrap_or("").to_string()
}

/// How long ago the lease was last renewed (or granted): `4.2s ago`.
fn renewed(at_ms: Option<i64>, now_ms: i64) -> String {
    at_ms.map_or_else(|| "-".into(), |at| format!("{} ago", human_ms(now_ms - at)))
}

/// For a stale holder (of `l`, or the holder `one` of a semaphore or shared lock), what it is
/// and the command that frees what it holds: `release --force` for a lock, or, to break only
/// that holder's lease should the lock change hands meanwhile, a release with its token; for one
/// holder among several, a release with its token, which leaves the others alone.
fn stale_note(l: &LockInfo, one: Option<&HolderLease>, rlock: &str) -> Option<String> {
    let holder = one.map_or(&l.holder, |h| &h.holder);
    let kept_on_purpose = one.is_none() && l.held_until_ms.is_some();
    if kept_on_purpose || !stale(holder) || (one.is_none() && !(l.held() && l.ours())) {
        return None;
    }
    let pid = holder
        .pid
        .as_ref()
        .map_or_else(|| "?".to_string(), ToString::to_string);
    let key = option("-k", "--key", &l.name);
    Some(match (one, &l.token) {
        (None, Some(token)) => format!(
            "stale: pid {pid} is gone on this host; break it with: {rlock} release {key} --force (or {} instead of --force, to break only this holder's lease)",
            option("--token", "--token", token)
        ),
        (None, None) => format!(
            "stale: pid {pid} is gone on this host; break it with: {rlock} release {key} --force"
        ),
        (Some(h), _) => format!(
            "stale: pid {pid} is gone on this host; free its place in '{}' with: {rlock} release {key} {}",
            l.name,
            option("--token", "--token", &h.token)
        ),
    })
}

/// The longest a table cell may be, in characters; the JSON output keeps every value whole.
const CELL_MAX: usize = 120;

/// `text` fit for one cell of a one-line row: control characters escaped (`\n`, `\x1b`), and
/// cut to `CELL_MAX` characters with a `…` where it was cut.
fn cell(text: &str) -> String {
    escape_max(text, CELL_MAX)
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
