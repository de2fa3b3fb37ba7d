//! The first table: its rows, the notes under it, and the statistics its figures share.

use std::time::Duration;

/// Runs each of `subjects` (each measures itself) `runs` times, taking turns (`turn`: who goes
/// first changes every round, and who follows whom too), so that a machine that gets slower or
/// faster meanwhile, and what one leaves behind, weigh on all of them alike: the median of each,
/// after `WARMUP` rounds not counted.
pub fn interleaved<const N: usize>(
    runs: usize,
    subjects: [&mut dyn FnMut() -> f64; N],
) -> [f64; N] {
    let mut samples: [Vec<f64>; N] = std::array::from_fn(|_| Vec::with_capacity(runs));
    for round in 0..WARMUP + runs {
        for k in 0..N {
            let i = turn(round, k, N);
            let t = (subjects[i])();
            if round >= WARMUP {
                samples[i].push(t);
            }
        }
    }
    samples.map(median)
}

/// Which of `n` subjects runs `k`th in round `round`. The order turns by one each round, and runs
/// backwards every other `n` rounds, so that over `2n` rounds every subject follows every other
/// equally often: turning alone, each would mostly follow the same one (rlock the redis-cli pair,
/// whose two processes and connections Redis and the kernel are still tidying after), and pay
/// for it.
pub fn turn(round: usize, k: usize, n: usize) -> usize {
    let first = round % n;
    if (round / n).is_multiple_of(2) {
        (first + k) % n
    } else {
        (first + n - 1 - k) % n
    }
}

/// Rounds run before the timed ones, and not counted: the first runs of a program pay for what
/// the next find ready (its pages in the page cache and mapped, Redis's script cache, the
/// dentries of its paths).
pub const WARMUP: usize = 5;

pub fn median(mut v: Vec<f64>) -> f64 {
    assert!(!v.is_empty());
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// One line of the table. Values are in `unit`; None is "n/a".
#[derive(Debug, Clone)]
pub struct Row {
    pub figure: String,
    pub unit: &'static str,
    pub rlock: f64,
    pub flock: Option<f64>,
    /// The minimal Redis client (`minimal.rs`).
    pub minimal: Option<f64>,
    pub cli: Option<f64>,
    /// e.g. "≤ 5 ms" or "≤ 1.5× flock"
    pub target: String,
    pub met: Option<bool>,
    /// Show the values with this many decimals.
    pub decimals: usize,
}

impl Row {
    fn value(&self, v: Option<f64>) -> String {
        match v {
            Some(v) => format!("{v:.*} {}", self.decimals, self.unit),
            None => "n/a".into(),
        }
    }

    fn cells(&self) -> [String; COLUMNS] {
        [
            self.figure.clone(),
            self.value(Some(self.rlock)),
            self.value(self.flock),
            self.value(self.minimal),
            self.value(self.cli),
            ratio(self.rlock, self.flock),
            ratio(self.rlock, self.minimal),
            self.target.clone(),
            match self.met {
                Some(true) => "yes".into(),
                Some(false) => "NO".into(),
                None => "".into(),
            },
        ]
    }
}

fn ratio(a: f64, b: Option<f64>) -> String {
    match b {
        Some(b) if b > 0.0 && a.is_finite() => format!("{:.2}×", a / b),
        _ => "n/a".into(),
    }
}

/// What one figure adds to the table: its rows, and a note to print under it.
pub struct Figure {
    pub rows: Vec<Row>,
    pub note: Option<String>,
}

/// The rows of the figures in the order they ran, and their notes in the same order.
#[derive(Default)]
pub struct Table {
    rows: Vec<Row>,
    notes: Vec<String>,
}

impl Table {
    pub fn add(&mut self, figure: Figure) {
        self.rows.extend(figure.rows);
        self.notes.extend(figure.note);
    }

    /// The table, aligned, then a blank line and the notes.
    pub fn print(&self) {
        print_rows(&self.rows);
        println!();
        for note in &self.notes {
            println!("{note}");
        }
    }
}

const COLUMNS: usize = 9;

fn print_rows(rows: &[Row]) {
    let header = [
        "figure",
        "rlock",
        "flock",
        "minimal client",
        "redis-cli pair",
        "rlock/flock",
        "rlock/minimal",
        "target",
        "met",
    ];
    let cells: Vec<[String; COLUMNS]> = rows.iter().map(Row::cells).collect();
    let width = |i: usize| {
        cells
            .iter()
            .map(|c| c[i].chars().count())
            .chain([header[i].chars().count()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..COLUMNS).map(width).collect();
    let line = |cols: &[String]| {
        let mut s = String::from("|");
        for (i, c) in cols.iter().enumerate() {
            let pad = widths[i] - c.chars().count();
            if i == 0 || i == 7 {
                s.push_str(&format!(" {c}{} |", " ".repeat(pad)));
            } else {
                s.push_str(&format!(" {}{c} |", " ".repeat(pad)));
            }
        }
        s
    };
    println!("{}", line(&header.map(String::from)));
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    println!("{}", line(&rule).replace(' ', "-"));
    for c in &cells {
        println!("{}", line(c));
    }
}
