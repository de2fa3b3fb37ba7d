//! `rlock inspect -k KEY --history --timeline`: the runs on record drawn along time, one row per
//! host, in 80 columns of text, so that a window with no run, a pile-up of waiters or two holds
//! at once show at a glance. `--json` gives the same data as numbers.

use std::collections::BTreeMap;
use std::io::Write;

use crate::lock::{RunRecord, human_ms};
use crate::output::{fit, width};

/// The width of the drawing.
const WIDTH: usize = 80;
/// The host column, at most.
const HOST: usize = 14;

/// What a cell shows, weakest first: a later run's stronger mark wins a shared cell.
fn strength(c: char) -> u8 {
    match c {
        ' ' => 0,
        '.' => 1,
        '=' => 2,
        _ => 3,
    }
}

/// The letter a run's end is drawn with, over its last cell; None for a run that ended well.
fn end_mark(outcome: Option<&str>) -> Option<char> {
    Some(match outcome? {
        "ok" | "released" => return None,
        "failed" => 'F',
        "signal" => 'K',
        "lost" => 'L',
        "timed-out" => 'T',
        "interrupted" => 'I',
        "busy" => 'b',
        "gave-up" => 'g',
        "skipped" => 's',
        "superseded" => 'S',
        "unavailable" => 'u',
        "not-run" => 'n',
        "abandoned" => 'x',
        "broken" => 'X',
        _ => '?',
    })
}

/// The legend, two lines within `WIDTH`.
const LEGEND: [&str; 2] = [
    "= held  . waiting  s skipped  S superseded  b busy  g gave up  x abandoned",
    "F failed  K signal  L lost  T timed out  I interrupted  u unavailable  n not run",
];

/// Draws `runs` (any order) at `now_ms` (when a run has no end yet).
pub(super) fn write_timeline(
    out: &mut impl Write,
    runs: &[(String, RunRecord)],
    now_ms: i64,
) -> std::io::Result<()> {
    let start = runs
        .iter()
        .filter_map(|(_, r)| r.asked_ms.or(r.ended_ms))
        .min()
        .unwrap_or(now_ms);
    let end = runs
        .iter()
        .filter_map(|(_, r)| r.ended_ms.or(r.asked_ms))
        .max()
        .unwrap_or(now_ms)
        .max(start + 1);
    let hosts: Vec<String> = {
        let mut seen: Vec<String> = Vec::new();
        for (_, r) in runs {
            let h = r.host.clone().unwrap_or_else(|| "?".into());
            if !seen.contains(&h) {
                seen.push(h);
            }
        }
        seen.sort();
        seen
    };
    let label = hosts
        .iter()
        .map(|h| width(&fit(h, HOST)))
        .max()
        .unwrap_or(1)
        .max(4);
    // `host |cells|`
    let cells = WIDTH - label - 3;
    let col = |t: i64| -> usize {
        let t = t.clamp(start, end);
        (((t - start) as i128 * (cells as i128 - 1)) / (end - start) as i128) as usize
    };
    let mut rows: BTreeMap<&str, Vec<char>> = hosts
        .iter()
        .map(|h| (h.as_str(), vec![' '; cells]))
        .collect();
    let mut oldest_first: Vec<&RunRecord> = runs.iter().map(|(_, r)| r).collect();
    oldest_first.sort_by_key(|r| r.asked_ms.or(r.ended_ms));
    for r in oldest_first {
        let host = r.host.as_deref().unwrap_or("?");
        let row = rows.get_mut(host).expect("every host has a row");
        let mut put = |from: usize, to: usize, c: char| {
            for cell in &mut row[from..=to.max(from)] {
                if strength(c) >= strength(*cell) {
                    *cell = c;
                }
            }
        };
        let asked = r.asked_ms.or(r.ended_ms).unwrap_or(start);
        let ended = r.ended_ms.unwrap_or(now_ms);
        match r.granted_ms {
            Some(granted) => {
                if granted > asked {
                    put(col(asked), col(granted), '.');
                }
                put(col(granted), col(ended), '=');
            }
            None => put(col(asked), col(ended), '.'),
        }
        if let Some(mark) = end_mark(r.outcome.as_deref()) {
            put(col(ended), col(ended), mark);
        }
    }
    for host in &hosts {
        let name = fit(host, HOST);
        let pad = label - width(&name);
        let drawn: String = rows[host.as_str()].iter().collect();
        writeln!(out, "{name}{} |{drawn}|", " ".repeat(pad))?;
    }
    let from = clock(start);
    let to = clock(end);
    let span = format!("{} in all", human_ms(end - start));
    let inner = cells + 2;
    let gap = inner.saturating_sub(from.len() + to.len() + span.len());
    writeln!(
        out,
        "{}{from}{}{span}{}{to}",
        " ".repeat(label + 1),
        " ".repeat(gap / 2),
        " ".repeat(gap - gap / 2)
    )?;
    for line in LEGEND {
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// The time of day of `ms`, UTC, to the second: `04:20:31Z`.
fn clock(ms: i64) -> String {
    let secs = ms.div_euclid(1000).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}Z", secs / 3600, secs / 60 % 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        host: &str,
        asked: i64,
        granted: Option<i64>,
        ended: i64,
        outcome: &str,
    ) -> (String, RunRecord) {
        (
            "k".into(),
            RunRecord {
                host: Some(host.into()),
                asked_ms: Some(asked),
                granted_ms: granted,
                ended_ms: Some(ended),
                outcome: Some(outcome.into()),
                ..RunRecord::default()
            },
        )
    }

    #[test]
    fn each_host_a_row_each_run_where_it_happened() {
        let runs = vec![
            run("a", 0, Some(0), 10_000, "ok"),
            run("b", 1_000, None, 1_000, "skipped"),
            run("c", 2_000, Some(10_000), 20_000, "failed"),
            run("b", 30_000, Some(30_000), 40_000, "lost"),
        ];
        let mut out = Vec::new();
        write_timeline(&mut out, &runs, 50_000).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines.iter().all(|l| width(l) <= WIDTH), "{text}");
        assert!(lines[0].starts_with("a    |="), "{text}");
        assert!(
            lines[1].starts_with("b    | ") && lines[1].contains('s') && lines[1].contains("=L"),
            "{text}"
        );
        let c = lines[2];
        assert!(
            c.contains(".=") && c.contains("=F"),
            "waits, then holds, then fails: {text}"
        );
        assert!(!lines[0][6..].contains('.'), "{text}");
        assert!(
            lines[3].contains("00:00:00Z") && lines[3].contains("00:00:40Z"),
            "{text}"
        );
    }
}
