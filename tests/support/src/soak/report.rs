//! What a soak saw: grants, exits, faults and what the log check found, printed for a test's
//! failure message or the benchmark's figures.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// What a run saw.
#[derive(Debug, Default)]
pub struct Report {
    pub seed: u64,
    pub wall: Duration,
    /// Commands that wrote a `start` line.
    pub grants: usize,
    /// Of those, commands that ran a long time (more than the TTL).
    pub long_grants: usize,
    /// Commands with a `start` but no `end` line: stopped while they ran.
    pub cut_short: usize,
    /// `rlock exec` exit code → how many times (-9: hung, killed by the engine).
    pub exits: BTreeMap<i32, usize>,
    /// How many `rlock exec` each loop ran.
    pub execs_per_loop: Vec<usize>,
    /// The length of every freeze.
    pub freezes: Vec<Duration>,
    /// The length of every blackhole of rlock's link (`Target::link`).
    pub cuts: Vec<Duration>,
    pub script_flushes: usize,
    /// `CLIENT KILL` commands sent, and the connections they closed.
    pub client_kills: usize,
    pub clients_killed: i64,
    /// Faults that failed to go out (a reply missing, say); a description each.
    pub fault_errors: Vec<String>,
    /// Lines of one holder stamped at or after the next holder's start.
    pub overlaps: Vec<String>,
    /// Consecutive grants (by start time) whose fences do not strictly increase.
    pub inversions: Vec<String>,
    /// Log lines that do not parse, or a token whose lines disagree on its fence.
    pub malformed: Vec<String>,
    /// The most holders running at one instant (semaphore mode).
    pub max_running: usize,
    /// For every exit other than 0 and 76: the code and the last line rlock wrote on stderr.
    pub other_exits: Vec<String>,
}

impl Report {
    pub fn exit_count(&self, code: i32) -> usize {
        self.exits.get(&code).copied().unwrap_or(0)
    }

    pub fn faults(&self) -> usize {
        self.freezes.len() + self.cuts.len() + self.script_flushes + self.client_kills
    }

    pub fn longest_freeze(&self) -> Duration {
        self.freezes.iter().copied().max().unwrap_or_default()
    }

    pub fn longest_cut(&self) -> Duration {
        self.cuts.iter().copied().max().unwrap_or_default()
    }

    /// Grants per second of wall time.
    pub fn rate(&self) -> f64 {
        self.grants as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let exits: Vec<String> = self.exits.iter().map(|(c, n)| format!("{c}×{n}")).collect();
        writeln!(
            f,
            "soak: {} grants ({} long, {} cut short) in {:.1} s ({:.1} grants/s), seed {}",
            self.grants,
            self.long_grants,
            self.cut_short,
            self.wall.as_secs_f64(),
            self.rate(),
            self.seed
        )?;
        writeln!(f, "  exit codes: {}", exits.join(", "))?;
        if !self.execs_per_loop.is_empty() {
            writeln!(f, "  execs per loop: {:?}", self.execs_per_loop)?;
        }
        writeln!(
            f,
            "  faults: {} freezes (longest {} ms), {} blackholes (longest {} ms), {} SCRIPT FLUSH, {} CLIENT KILL ({} connections), {} failed",
            self.freezes.len(),
            self.longest_freeze().as_millis(),
            self.cuts.len(),
            self.longest_cut().as_millis(),
            self.script_flushes,
            self.client_kills,
            self.clients_killed,
            self.fault_errors.len()
        )?;
        if self.max_running > 0 {
            writeln!(f, "  at most {} holders at once", self.max_running)?;
        }
        write!(
            f,
            "  overlaps: {}, fence inversions: {}, malformed lines: {}",
            self.overlaps.len(),
            self.inversions.len(),
            self.malformed.len()
        )?;
        for (what, list) in [
            ("overlap", &self.overlaps),
            ("inversion", &self.inversions),
            ("malformed", &self.malformed),
            ("fault error", &self.fault_errors),
            ("exit", &self.other_exits),
        ] {
            for line in list.iter().take(10) {
                write!(f, "\n  {what}: {line}")?;
            }
        }
        Ok(())
    }
}
