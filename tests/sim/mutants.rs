//! The mutants of the shipped scripts: each one textual change at one site of one of the files
//! the simulation's clients send (src/lock/*.lua, as build.rs puts them together), outside
//! comments and string literals. The operators:
//!
//! - `cmp`: a comparison negated (`==` and `~=`, `<` and `>=`, `>` and `<=`);
//! - `and` / `or`: the one replaced by the other;
//! - `drop`: a statement that is a `redis.call` or `redis.pcall` left out (all its lines);
//! - `inc` / `dec`: a whole-number literal below 100 (a count, an index, a step) one more or
//!   one less; larger literals are durations and limits, not counts.
//!
//! A mutant's ID is stable while its line is: `file:line:operator:index`, the line the file's
//! own (comments included), the index the site's place among that operator's sites on the line.
//! A mutant is applied to the text of every script on its way to the servers that contains the
//! file (common.lua is in every script the clients send). Mutants that do not compile are left
//! out: Redis would refuse them at once, and they tell nothing about the simulation.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::server::Call;

/// The files of the scripts the simulation's clients send (acquire, release, renew, leave);
/// the others (fence, inspect, history, once, record) are not sent by its clients.
pub const FILES: &[(&str, &str)] = &[
    ("common.lua", include_str!("../../src/lock/common.lua")),
    ("multi.lua", include_str!("../../src/lock/multi.lua")),
    ("slot.lua", include_str!("../../src/lock/slot.lua")),
    ("acquire.lua", include_str!("../../src/lock/acquire.lua")),
    ("release.lua", include_str!("../../src/lock/release.lua")),
    ("renew.lua", include_str!("../../src/lock/renew.lua")),
    ("leave.lua", include_str!("../../src/lock/leave.lua")),
];

/// One change to one file.
#[derive(Debug)]
pub struct Mutant {
    pub id: String,
    pub file: &'static str,
    /// The file's line (1 first).
    pub line: usize,
    /// The file's line, before and after (for a `drop`, the first line dropped and "").
    pub before: String,
    pub after: String,
    /// The file as sent (build.rs's part of it), and the same mutated.
    sent: String,
    mutated: String,
    /// How many calls it has changed.
    applied: AtomicU64,
}

impl Mutant {
    /// Changes `call`'s script if it contains the mutated file.
    pub fn apply(&self, call: &mut Call) {
        if call.source.contains(&self.sent) {
            call.source = call.source.replacen(&self.sent, &self.mutated, 1);
            call.sha = sha1_smol::Sha1::from(call.source.as_bytes())
                .digest()
                .to_string();
            self.applied.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// How many calls it has changed.
    pub fn applied(&self) -> u64 {
        self.applied.load(Ordering::Relaxed)
    }
}

/// The part of a Lua file that is sent, as build.rs makes it: its lines less those that are
/// blank or only a comment.
pub fn sent_part(lua: &str) -> String {
    lua.lines()
        .filter(|line| {
            let code = line.trim_start();
            !code.is_empty() && !code.starts_with("--")
        })
        .flat_map(|line| [line, "\n"])
        .collect()
}

/// The byte ranges of `line` that are code: outside string literals, before a comment.
fn code_spans(line: &str) -> Vec<(usize, usize)> {
    let bytes = line.as_bytes();
    let mut spans = Vec::new();
    let (mut start, mut i) = (0, 0);
    while i < bytes.len() {
        match bytes[i] {
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                spans.push((start, i));
                return spans;
            }
            q @ (b'"' | b'\'') => {
                spans.push((start, i));
                i += 1;
                while i < bytes.len() && bytes[i] != q {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    spans.push((start.min(bytes.len()), bytes.len()));
    spans
}

fn word_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The sites of one line: (operator, byte offset, length, replacement).
fn sites(line: &str) -> Vec<(&'static str, usize, usize, String)> {
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    for (from, to) in code_spans(line) {
        let mut i = from;
        while i < to {
            let two = line.get(i..(i + 2).min(to)).unwrap_or("");
            let negated = match two {
                "==" => Some("~="),
                "~=" => Some("=="),
                "<=" => Some(">"),
                ">=" => Some("<"),
                _ => None,
            };
            if let Some(n) = negated {
                out.push(("cmp", i, 2, n.to_string()));
                i += 2;
                continue;
            }
            let b = bytes[i];
            if b == b'<' || b == b'>' {
                let n = if b == b'<' { ">=" } else { "<=" };
                out.push(("cmp", i, 1, n.to_string()));
                i += 1;
                continue;
            }
            if word_char(b) && (i == 0 || !word_char(bytes[i - 1])) {
                let mut end = i;
                while end < to && word_char(bytes[end]) {
                    end += 1;
                }
                let word = &line[i..end];
                let after_dot = i > 0 && bytes[i - 1] == b'.';
                let before_dot = bytes.get(end) == Some(&b'.');
                match word {
                    "and" => out.push(("and", i, 3, "or".into())),
                    "or" => out.push(("or", i, 2, "and".into())),
                    w if !after_dot && !before_dot && w.bytes().all(|c| c.is_ascii_digit()) => {
                        if let Ok(n) = w.parse::<i64>()
                            && n < 100
                        {
                            out.push(("inc", i, end - i, (n + 1).to_string()));
                            out.push(("dec", i, end - i, (n - 1).to_string()));
                        }
                    }
                    _ => {}
                }
                i = end;
                continue;
            }
            i += 1;
        }
    }
    out
}

/// Whether `line` begins a statement that is a `redis.call` or `redis.pcall` alone; how many
/// lines it spans (its parentheses closed).
fn call_statement(lines: &[&str], at: usize) -> Option<usize> {
    let code = lines[at].trim_start();
    if !code.starts_with("redis.call(") && !code.starts_with("redis.pcall(") {
        return None;
    }
    let mut depth = 0i32;
    for (n, line) in lines[at..].iter().enumerate() {
        for (from, to) in code_spans(line) {
            for b in line[from..to].bytes() {
                match b {
                    b'(' => depth += 1,
                    b')' => depth -= 1,
                    _ => {}
                }
            }
        }
        if depth <= 0 {
            return Some(n + 1);
        }
    }
    None
}

/// Every mutant of the files the clients send, in a stable order (file, line, site); those
/// that do not compile are left out.
pub fn all() -> Vec<Arc<Mutant>> {
    let lua = mlua::Lua::new();
    let mut out = Vec::new();
    for (file, text) in FILES {
        let lines: Vec<&str> = text.lines().collect();
        let sent = sent_part(text);
        let mut push =
            |n: usize, id: String, before: &str, after: &str, mutated_lines: Vec<&str>| {
                let mutated = sent_part(&mutated_lines.join("\n"));
                if mutated == sent || lua.load(&mutated).into_function().is_err() {
                    return;
                }
                out.push(Arc::new(Mutant {
                    id,
                    file,
                    line: n + 1,
                    before: before.trim().to_string(),
                    after: after.trim().to_string(),
                    sent: sent.clone(),
                    mutated,
                    applied: AtomicU64::new(0),
                }));
            };
        for (n, line) in lines.iter().enumerate() {
            let code = line.trim_start();
            if code.is_empty() || code.starts_with("--") {
                continue;
            }
            let mut seen: Vec<&str> = Vec::new();
            for (op, at, len, with) in sites(line) {
                let index = seen.iter().filter(|o| **o == op).count();
                seen.push(op);
                let changed = format!("{}{with}{}", &line[..at], &line[at + len..]);
                let mut mutated = lines.clone();
                mutated[n] = &changed;
                push(
                    n,
                    format!("{file}:{}:{op}:{index}", n + 1),
                    line,
                    &changed,
                    mutated,
                );
            }
            if let Some(span) = call_statement(&lines, n) {
                let mut mutated = lines.clone();
                mutated.drain(n..n + span);
                push(n, format!("{file}:{}:drop:0", n + 1), line, "", mutated);
            }
        }
    }
    out
}

/// The lines of the files that ran (file, line: 1 first), from the lines of the scripts that ran
/// (`lua::LINES`, by SHA1) and the scripts' texts (`lua::SOURCES`).
pub fn reached() -> std::collections::BTreeSet<(&'static str, usize)> {
    use super::lua::{LINES, SOURCES};
    let lines = LINES.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let sources = SOURCES.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut out = std::collections::BTreeSet::new();
    for (sha, line) in lines {
        let Some(source) = sources.get(&sha) else {
            continue;
        };
        for (file, text) in FILES {
            let sent = sent_part(text);
            let Some(at) = source.find(&sent) else {
                continue;
            };
            let first = source[..at].matches('\n').count() + 1;
            let count = sent.matches('\n').count();
            if line < first || line >= first + count {
                continue;
            }
            // The file's lines that are sent, in order: the k-th of them is the chunk's line.
            let k = line - first;
            let own = text
                .lines()
                .enumerate()
                .filter(|(_, l)| {
                    let code = l.trim_start();
                    !code.is_empty() && !code.starts_with("--")
                })
                .nth(k)
                .map(|(n, _)| n + 1);
            if let Some(n) = own {
                out.insert((*file, n));
            }
        }
    }
    out
}
