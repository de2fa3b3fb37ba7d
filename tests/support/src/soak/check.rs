//! The soak's log, read back: the commands' lines parsed, and every grant checked against the
//! next (no holder's sign of life at or after the next holder's start; fences rising; never
//! more holders of a semaphore than its limit).

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use super::{Config, Report};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Start,
    Beat,
    End,
}

#[derive(Debug, Clone)]
pub(super) struct Line {
    kind: Kind,
    fence: u64,
    pub(super) nanos: i128,
    token: String,
    pub(super) left: u32,
}

impl Line {
    pub(super) fn parse(text: &str) -> Option<Line> {
        let mut f = text.split(' ');
        let kind = match f.next()? {
            "start" => Kind::Start,
            "hb" => Kind::Beat,
            "end" => Kind::End,
            _ => return None,
        };
        let line = Line {
            kind,
            fence: f.next()?.parse().ok()?,
            nanos: f.next()?.parse().ok()?,
            token: f.next().filter(|t| !t.is_empty())?.to_string(),
            left: f.next()?.parse().ok()?,
        };
        f.next().is_none().then_some(line)
    }
}

/// One holder: everything its command wrote.
struct Grant {
    token: String,
    fence: u64,
    start: Option<i128>,
    last: i128,
    lines: Vec<String>,
    ended: bool,
    long: bool,
}

/// Fills the report's grants, overlaps, inversions and malformed lines from the log `run` wrote
/// (or any log of its lines: the checker's own tests give it some).
pub fn check_log(log: &Path, cfg: &Config, report: &mut Report) {
    let text = fs::read_to_string(log).unwrap_or_else(|e| panic!("read {}: {e}", log.display()));
    let mut grants: Vec<Grant> = Vec::new();
    let mut by_token: HashMap<String, usize> = HashMap::new();
    for raw in text.lines() {
        let Some(line) = Line::parse(raw) else {
            report.malformed.push(raw.to_string());
            continue;
        };
        let i = *by_token.entry(line.token.clone()).or_insert_with(|| {
            grants.push(Grant {
                token: line.token.clone(),
                fence: line.fence,
                start: None,
                last: line.nanos,
                lines: Vec::new(),
                ended: false,
                long: false,
            });
            grants.len() - 1
        });
        let g = &mut grants[i];
        if g.fence != line.fence {
            report
                .malformed
                .push(format!("{raw} (token had fence {})", g.fence));
        }
        match line.kind {
            Kind::Start if g.start.is_some() => report.malformed.push(format!("{raw} (2nd start)")),
            Kind::Start => {
                g.start = Some(line.nanos);
                g.long = line.left == cfg.long_beats;
            }
            Kind::End => g.ended = true,
            Kind::Beat => {}
        }
        g.last = g.last.max(line.nanos);
        g.lines.push(raw.to_string());
    }
    let mut started: Vec<&Grant> = Vec::new();
    for g in &grants {
        match g.start {
            Some(_) => started.push(g),
            None => report
                .malformed
                .push(format!("token {} wrote no start: {:?}", g.token, g.lines)),
        }
    }
    started.sort_by_key(|g| g.start);
    report.grants = started.len();
    if let Some(limit) = cfg.limit {
        report.long_grants = started.iter().filter(|g| g.long).count();
        report.cut_short = started.iter().filter(|g| !g.ended).count();
        check_semaphore(&started, limit as usize, report);
        return;
    }
    report.long_grants = started.iter().filter(|g| g.long).count();
    report.cut_short = started.iter().filter(|g| !g.ended).count();
    for pair in started.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let next = b.start.expect("started");
        if a.last >= next {
            let late: Vec<&String> = a
                .lines
                .iter()
                .filter(|l| Line::parse(l).is_some_and(|l| l.nanos >= next))
                .collect();
            report.overlaps.push(format!(
                "fence {} wrote {late:?} after fence {} started at {next}",
                a.fence, b.fence
            ));
        }
        if b.fence <= a.fence {
            report.inversions.push(format!(
                "fence {} (started {next}) came after fence {} (started {})",
                b.fence,
                a.fence,
                a.start.expect("started")
            ));
        }
    }
}

/// A semaphore's log: at no instant more than `limit` holders between their start and their last
/// sign of life, and no fence given twice (the fence rises over all grants of the key, but
/// holders that start together may write their start lines in any order).
fn check_semaphore(started: &[&Grant], limit: usize, report: &mut Report) {
    // Ends sort before starts at the same instant: a stamp at or after another's start counts.
    let mut events: Vec<(i128, i8, u64)> = Vec::new();
    for g in started {
        events.push((g.start.expect("started"), 1, g.fence));
        events.push((g.last, -1, g.fence));
    }
    events.sort_by_key(|&(at, step, _)| (at, -step));
    let mut running: Vec<u64> = Vec::new();
    for (at, step, fence) in events {
        if step > 0 {
            running.push(fence);
            report.max_running = report.max_running.max(running.len());
            if running.len() > limit {
                report.overlaps.push(format!(
                    "{} holders at {at} under --limit {limit}: fences {running:?}",
                    running.len()
                ));
            }
        } else {
            running.retain(|f| *f != fence);
        }
    }
    let mut fences: Vec<u64> = started.iter().map(|g| g.fence).collect();
    fences.sort_unstable();
    for pair in fences.windows(2) {
        if pair[0] == pair[1] {
            report
                .inversions
                .push(format!("fence {} given twice", pair[0]));
        }
    }
}
