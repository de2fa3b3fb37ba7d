//! `rlock inspect --history`: the runs on record, newest first, as a table a person reads at 80
//! columns or as JSON (one object per run).

use std::io::{IsTerminal, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Result;
use serde_json::{Value, json};

use crate::cli::InspectArgs;
use crate::cmd::Context;
use crate::exit::{Exit, Failure};
use crate::lock::{RunRecord, human_ms};
use crate::output::{distinct, escape, escape_max as escaped, fit, width};

/// The width the table fits in: the command, last, is cut to what is left of it.
const WIDTH: usize = 80;

pub(super) fn run(ctx: &Context, args: &InspectArgs) -> Result<Exit> {
    let locker = ctx.locker()?;
    let mut runs: Vec<(String, RunRecord)> = Vec::new();
    if args.keys.is_empty() {
        for mut last in locker
            .histories(&ctx.global.prefix)
            .map_err(Failure::from)?
        {
            if let Ok(key) = ctx.key(&last.name) {
                mark_abandoned(&locker, &key, std::slice::from_mut(&mut last.run));
            }
            runs.push((last.name, last.run));
        }
        // The lock whose last run ended last, first.
        runs.sort_by_key(|(_, r)| std::cmp::Reverse(r.ended_ms));
    } else {
        for name in &args.keys {
            let key = ctx.key(name)?;
            let mut found = locker
                .history(&key, args.count as usize)
                .map_err(Failure::from)?;
            mark_abandoned(&locker, &key, &mut found);
            if found.is_empty() && !args.json {
                ctx.note(format_args!(
                    "no runs on record for lock '{}'",
                    escaped(name, 120)
                ));
            }
            runs.extend(found.into_iter().map(|r| (name.clone(), r)));
        }
    }
    if ctx.global.quiet {
        return Ok(Exit::Code(0));
    }
    if args.json {
        // Escaped as the table is: a terminal must not act on a field another user wrote.
        let items: Vec<Value> = runs.iter().map(|(k, r)| to_json(k, r)).collect();
        crate::output::json(&Value::Array(items))?;
    } else if runs.is_empty() && args.keys.is_empty() {
        ctx.note(format_args!(
            "no runs on record under prefix '{}'",
            escaped(&ctx.global.prefix, 120)
        ));
    } else if !runs.is_empty() {
        let mut out = crate::output::stdout()?;
        if args.timeline {
            super::timeline::write_timeline(&mut out, &runs, epoch_ms())?;
        } else {
            let terminal = std::io::stdout().is_terminal();
            let with_key = args.keys.len() != 1;
            write_table(&mut out, &runs, with_key, epoch_ms(), terminal)?;
        }
        out.flush()?;
    }
    Ok(Exit::Code(0))
}

/// The runs on record as `running` whose lease is no longer the lock's are `abandoned`: their
/// rlock ended without its end on record (SIGKILL of rlock and its guardian, a host that went
/// down), and the lease ran out or was broken. While the lease lasts they are `running`.
fn mark_abandoned(
    locker: &crate::lock::Locker,
    key: &crate::lock::LockKey,
    runs: &mut [RunRecord],
) {
    if !runs.iter().any(|r| r.outcome.as_deref() == Some("running")) {
        return;
    }
    let Ok(info) = locker.inspect(key) else {
        return;
    };
    let live: Vec<i64> = info
        .fence
        .into_iter()
        .chain(info.holders.iter().filter_map(|h| h.fence))
        .collect();
    for r in runs
        .iter_mut()
        .filter(|r| r.outcome.as_deref() == Some("running"))
    {
        if !(info.held() && r.fence.is_some_and(|f| live.contains(&f))) {
            r.outcome = Some("abandoned".into());
        }
    }
}

/// One run as JSON. The fields are stable; a field the entry lacks is null.
fn to_json(key: &str, r: &RunRecord) -> Value {
    json!({
        "key": key,
        "id": r.id,
        "run": r.run,
        "outcome": r.outcome,
        "code": r.code,
        "signal": r.signal,
        "asked_ms": r.asked_ms,
        "granted_ms": r.granted_ms,
        "ended_ms": r.ended_ms,
        "wait_ms": r.wait_ms,
        "held_ms": r.held_ms,
        "host": r.host,
        "user": r.user,
        "pid": r.pid,
        "command": r.command,
        "fence": r.fence,
        "by": r.by,
        "held_until_ms": r.held_until_ms,
    })
}

/// The table: WHEN (how long ago the run ended), HOST, WAIT, HELD, OUTCOME, COMMAND, and KEY
/// first when the runs are of several locks. Every cell is escaped and measured in terminal
/// columns (a wide character takes two); the host and the key are cut (to 20 columns, fewer if
/// need be) so that the command keeps at least 16 of the 80 columns, and the command is cut to
/// what is left, each with a `…`; two keys are never cut alike. Off a `terminal` (a pipe, a
/// file) nothing is cut.
fn write_table(
    out: &mut impl Write,
    runs: &[(String, RunRecord)],
    with_key: bool,
    now_ms: i64,
    terminal: bool,
) -> std::io::Result<()> {
    let mut cap = if terminal { 20 } else { usize::MAX };
    loop {
        let rows = rows(runs, with_key, now_ms, cap);
        let last = rows[0].len() - 1;
        let mut widths = vec![0usize; last];
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(width(cell));
            }
        }
        let used: usize = widths.iter().map(|w| w + 2).sum();
        if terminal && used + 16 > WIDTH && cap > 8 {
            cap -= 1;
            continue;
        }
        let room = WIDTH.saturating_sub(used).max(16);
        for row in &rows {
            let mut line = String::new();
            for (cell, w) in row.iter().zip(&widths) {
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', w - width(cell) + 2));
            }
            match terminal {
                true => line.push_str(&fit(&row[last], room)),
                false => line.push_str(&escape(&row[last])),
            }
            writeln!(out, "{}", line.trim_end())?;
        }
        return Ok(());
    }
}

/// The header and a row per run, the key and host cut to `cap` characters, the command whole.
fn rows(runs: &[(String, RunRecord)], with_key: bool, now_ms: i64, cap: usize) -> Vec<Vec<String>> {
    let dash = || "-".to_string();
    let mut rows: Vec<Vec<String>> = vec![
        ["KEY", "WHEN", "HOST", "WAIT", "HELD", "OUTCOME", "COMMAND"]
            .map(String::from)
            .to_vec(),
    ];
    let keys: Vec<&str> = runs.iter().map(|(key, _)| key.as_str()).collect();
    let keys = distinct(&keys, |key| fit(key, cap));
    for ((_, r), key) in runs.iter().zip(keys) {
        rows.push(vec![
            key,
            r.ended_ms
                .map_or_else(dash, |t| format!("{} ago", human_ms(now_ms - t))),
            fit(r.host.as_deref().unwrap_or("-"), cap),
            r.wait_ms.map_or_else(dash, human_ms),
            r.held_ms.map_or_else(dash, human_ms),
            outcome_cell(r),
            r.command.clone().unwrap_or_else(dash),
        ]);
    }
    if !with_key {
        for row in &mut rows {
            row.remove(0);
        }
    }
    rows
}

/// `ok`, `exit 3`, `signal KILL`, `lost`, `timed out`, `busy`, `gave up`, `interrupted`,
/// `unavailable`, `not run 127`: short, the code and signal whole in the JSON.
fn outcome_cell(r: &RunRecord) -> String {
    let code = r.code.map_or_else(|| "?".into(), |c| c.to_string());
    let signal = r.signal.as_deref().unwrap_or("?");
    let cell = match r.outcome.as_deref() {
        Some("failed") => format!("exit {code}"),
        Some("signal") => format!("signal {}", fit(signal, 6)),
        Some("gave-up") => "gave up".into(),
        Some("timed-out") => "timed out".into(),
        Some("not-run") => format!("not run {code}"),
        Some(other) => fit(other, 12),
        None => "?".into(),
    };
    // Released before --hold-at-least ran out: the lock stayed taken until then.
    if r.held_until_ms.is_some() {
        format!("{cell}, held")
    } else {
        cell
    }
}

fn epoch_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(outcome: &str, code: i64, command: &str) -> RunRecord {
        RunRecord {
            outcome: Some(outcome.into()),
            code: Some(code),
            ended_ms: Some(1_000),
            wait_ms: Some(1_500),
            held_ms: Some(65_000),
            host: Some("build-7.example.com".into()),
            command: Some(command.into()),
            ..RunRecord::default()
        }
    }

    #[test]
    fn the_table_fits_in_80_columns() {
        let long = format!("./backup.sh --all {}", "x".repeat(200));
        let runs = vec![
            ("nightly-backup".to_string(), run("ok", 0, &long)),
            ("a\nb".to_string(), run("gave-up", 75, "sh -c 'a\u{1b}b'")),
        ];
        let mut out = Vec::new();
        write_table(&mut out, &runs, true, 3_601_000, true).unwrap();
        let text = String::from_utf8(out).unwrap();
        for line in text.lines() {
            assert!(line.chars().count() <= 80, "{line:?}");
        }
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("KEY"), "{text}");
        assert!(
            lines[1].contains("1h00m ago") && lines[1].contains("1m05s"),
            "{text}"
        );
        assert!(lines[1].ends_with('…'), "{text}");
        assert!(lines[2].starts_with("a\\nb") && lines[2].contains("gave up"));
        assert!(lines[2].contains("a\\x1bb"), "{text}");
    }

    #[test]
    fn wide_and_escaped_characters_keep_the_table_in_80_columns_and_aligned() {
        let wide = "日本語のキー".repeat(4);
        let mut odd = run("signal", 137, &"命令\u{1b}[31m".repeat(30));
        odd.host = Some("\u{1b}\u{1b}\u{1b}\u{1b}\u{1b}\u{1b}host".into());
        odd.signal = Some("\u{1b}\u{1b}\u{1b}".into());
        let runs = vec![
            (wide.clone(), odd),
            (
                "k\x01\x02\x03\x04\x05\x06\x07".to_string(),
                run("ok", 0, "true"),
            ),
            ("plain".to_string(), run("ok", 0, &"x".repeat(300))),
        ];
        let mut out = Vec::new();
        write_table(&mut out, &runs, true, 3_601_000, true).unwrap();
        let text = String::from_utf8(out).unwrap();
        let starts: Vec<usize> = text
            .lines()
            .map(|line| {
                assert!(width(line) <= 80, "{} columns: {line}", width(line));
                // Where WHEN begins: the key column has one width on every line.
                let key_end = line.find("  ").unwrap();
                width(&line[..key_end]) + line[key_end..].len() - line[key_end..].trim_start().len()
            })
            .collect();
        assert!(
            starts.windows(2).all(|w| w[0] == w[1]),
            "{starts:?}\n{text}"
        );
        assert!(text.lines().nth(1).unwrap().contains('…'), "{text}");
    }
}
