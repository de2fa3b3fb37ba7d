//! What varies from run to run in an example's output, replaced on both sides (the text of the
//! page and what the run printed) before they are compared: tokens, fences and other long
//! numbers and decimals, durations, pids, the holder's `user@host`, the test server's port. Blanks are
//! collapsed, so that a table whose columns are wider in one run still matches.

/// `line` with what varies replaced by `[TOKEN]`, `[N]`, `[DUR]`, `[PID]`, `[WHO]`, `[PORT]`,
/// and its blanks collapsed.
pub fn redact(line: &str) -> String {
    let words: Vec<&str> = line.split_whitespace().collect();
    let mut out = Vec::with_capacity(words.len());
    for (i, word) in words.iter().enumerate() {
        let next = words.get(i + 1).copied().unwrap_or("");
        if word.contains('@') && next == "pid" && !word.contains("://") {
            // `alice@build-7 pid 4411`: who holds a lock depends on where the test runs.
            let lead: String = word.chars().take_while(|c| *c == '(').collect();
            out.push(format!("{lead}[WHO]"));
            continue;
        }
        let prev = if i > 0 { words[i - 1] } else { "" };
        let after_pid = prev.trim_matches(|c| c == '"' || c == ':') == "pid";
        out.push(redact_word(word, after_pid));
    }
    out.join(" ")
}

/// One word: UUIDs, runs of digits by their shape, and what follows `127.0.0.1:`.
fn redact_word(word: &str, after_pid: bool) -> String {
    let chars: Vec<char> = word.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if let Some(len) = uuid_at(&chars[i..]) {
            out.push_str("[TOKEN]");
            i += len;
            continue;
        }
        let c = chars[i];
        // (Not after a dot: `127.0.0.1` is one address, not numbers.)
        let starts_number =
            c.is_ascii_digit() && (i == 0 || !(is_word_char(chars[i - 1]) || chars[i - 1] == '.'));
        if !starts_number {
            out.push(c);
            i += 1;
            continue;
        }
        let digits = run_of(&chars[i..], |c| c.is_ascii_digit());
        let (len, what) = number_at(&chars[i..], digits);
        let text: String = chars[i..i + len].iter().collect();
        let replaced = match what {
            Number::Duration => "[DUR]".to_string(),
            Number::Decimal => "[N]".to_string(),
            Number::Plain if out.ends_with("127.0.0.1:") || out.ends_with("localhost:") => {
                "[PORT]".to_string()
            }
            Number::Plain if after_pid || out.ends_with("pid\":") || out.ends_with("pid ") => {
                "[PID]".to_string()
            }
            Number::Plain if digits >= 10 => "[N]".to_string(),
            Number::Plain => text,
        };
        out.push_str(&replaced);
        i += len;
    }
    out
}

enum Number {
    Duration,
    Decimal,
    Plain,
}

/// The number at the start of `chars` (`digits` digits long): a duration as rlock and `time`
/// print them (`850ms`, `4.2s`, `2m13s`, `1h05m`, `0m1.508s`), or a plain number.
fn number_at(chars: &[char], digits: usize) -> (usize, Number) {
    let mut at = digits;
    // A fraction.
    let mut fraction = false;
    if chars.get(at) == Some(&'.') && chars.get(at + 1).is_some_and(char::is_ascii_digit) {
        at += 1 + run_of(&chars[at + 1..], |c| c.is_ascii_digit());
        fraction = true;
    }
    let rest: String = chars[at..].iter().take(3).collect();
    let unit_ends = |len: usize| {
        chars
            .get(at + len)
            .is_none_or(|c| !c.is_ascii_alphanumeric())
    };
    if rest.starts_with("ms") && unit_ends(2) {
        return (at + 2, Number::Duration);
    }
    if rest.starts_with('s') && unit_ends(1) {
        return (at + 1, Number::Duration);
    }
    if rest.starts_with('m') || rest.starts_with('h') {
        // `2m13s`, `0m1.508s`, `1h05m`: a second number and its unit.
        let after = at + 1;
        let more = run_of(&chars[after..], |c| c.is_ascii_digit());
        if more > 0 {
            let (len, what) = number_at(&chars[after..], more);
            if matches!(what, Number::Duration) {
                return (after + len, Number::Duration);
            }
            if chars.get(after + more) == Some(&'m') {
                return (after + more + 1, Number::Duration);
            }
        }
    }
    if fraction && chars.get(at) != Some(&'.') {
        // A measure (`0.302`, a timestamp `1795688644.472`), not a version (`7.0.15`).
        return (at, Number::Decimal);
    }
    (digits, Number::Plain)
}

fn run_of(chars: &[char], f: impl Fn(&char) -> bool) -> usize {
    chars.iter().take_while(|c| f(c)).count()
}

fn is_word_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// The length of a UUID (8-4-4-4-12 hex digits) at the start of `chars`.
fn uuid_at(chars: &[char]) -> Option<usize> {
    let mut at = 0;
    for (n, group) in [8, 4, 4, 4, 12].into_iter().enumerate() {
        if n > 0 {
            if chars.get(at) != Some(&'-') {
                return None;
            }
            at += 1;
        }
        if chars.len() < at + group || !chars[at..at + group].iter().all(char::is_ascii_hexdigit) {
            return None;
        }
        at += group;
    }
    Some(at)
}

/// Whether `got` (redacted) is what `want` (redacted) says: `[..]` in `want` stands for any
/// text within the line.
pub fn line_matches(want: &str, got: &str) -> bool {
    let mut parts = want.split("[..]");
    let first = parts.next().unwrap_or("");
    let Some(mut rest) = got.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    for (n, part) in parts.iter().enumerate() {
        if n + 1 == parts.len() {
            return rest.ends_with(part);
        }
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.is_empty()
}

/// Whether the lines `got` are the lines `want`, where a line `...` in `want` stands for any
/// number of lines (none included).
pub fn lines_match(want: &[String], got: &[String]) -> bool {
    match want.split_first() {
        None => got.is_empty(),
        Some((first, rest)) if first == "..." => {
            (0..=got.len()).any(|skip| lines_match(rest, &got[skip..]))
        }
        Some((first, rest)) => {
            got.first().is_some_and(|g| line_matches(first, g)) && lines_match(rest, &got[1..])
        }
    }
}

#[test]
fn what_varies_is_redacted_and_the_rest_kept() {
    assert_eq!(
        redact(
            "rlock: lock 'demo' is busy (held by root@vm pid 28216 for 9ms, expires in 4m59s); not waiting (-n)"
        ),
        "rlock: lock 'demo' is busy (held by [WHO] pid [PID] for [DUR], expires in [DUR]); not waiting (-n)"
    );
    assert_eq!(
        redact("demo  held   4m59s    alice@build-7 pid 4411   1h05m  4.2s ago  0   bash"),
        "demo held [DUR] [WHO] pid [PID] [DUR] [DUR] ago 0 bash"
    );
    assert_eq!(
        redact(
            "{\"fence\":1795436376323856,\"token\":\"7814fbc8-d2ad-440e-99d3-207d5131ba49\",\"ttl_ms\":30000}"
        ),
        "{\"fence\":[N],\"token\":\"[TOKEN]\",\"ttl_ms\":30000}"
    );
    assert_eq!(redact("real\t0m1.508s"), "real [DUR]");
    assert_eq!(
        redact("rlock_last_run_duration_seconds{key=\"nightly\"} 0.302 at 1795688644.472"),
        "rlock_last_run_duration_seconds{key=\"nightly\"} [N] at [N]"
    );
    assert_eq!(
        redact("redis://127.0.0.1:41234: Connection refused (os error 111); exit 75"),
        "redis://127.0.0.1:[PORT]: Connection refused (os error 111); exit 75"
    );
    assert_eq!(
        redact("--limit 3 held 2/3 --ttl 5m"),
        "--limit 3 held 2/3 --ttl 5m"
    );
    assert!(line_matches("fence [..] at [..]", "fence [N] at 12:00"));
    assert!(!line_matches("fence [..] at", "fence [N] at 12:00"));
    let l = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(lines_match(
        &l(&["a", "...", "d"]),
        &l(&["a", "b", "c", "d"])
    ));
    assert!(lines_match(&l(&["a", "...", "d"]), &l(&["a", "d"])));
    assert!(!lines_match(&l(&["a", "d"]), &l(&["a", "b", "d"])));
}
