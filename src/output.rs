//! Every line rlock writes goes through here, for two reasons:
//!
//! - Text that another user or another client wrote (a holder's user, host or command, a key's
//!   name, a field of the state hash) reaches a terminal only escaped (`escape`): a `\x1b]52;…`
//!   in `$USER` must not write to the clipboard of whoever reads a busy line.
//! - A write that fails (a closed pipe, a full disk) is an error to return or to drop, never a
//!   panic: rlock finishes what it was doing and exits with the code of the table.

use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};

/// The standard descriptors (bit 0 stdin, 1 stdout, 2 stderr) that were closed when rlock
/// started, before Rust's start-up opened them on /dev/null.
static CLOSED: AtomicU8 = AtomicU8::new(0);

/// Notes which standard descriptors are closed; run by `main.rs` before Rust's start-up.
pub fn note_closed_descriptors() {
    use std::os::fd::AsFd;
    let flags =
        |fd: std::os::fd::BorrowedFd<'_>| nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD);
    let closed = [
        flags(std::io::stdin().as_fd()),
        flags(std::io::stdout().as_fd()),
        flags(std::io::stderr().as_fd()),
    ];
    for (fd, flags) in closed.iter().enumerate() {
        if flags.is_err() {
            CLOSED.fetch_or(1 << fd, Ordering::Relaxed);
        }
    }
}

/// True when descriptor `fd` (0, 1 or 2) was closed when rlock started (`rlock acquire >&-`):
/// what is written to it now goes to /dev/null.
pub fn was_closed(fd: u8) -> bool {
    fd < 3 && CLOSED.load(Ordering::Relaxed) & (1 << fd) != 0
}

use unicode_width::{UnicodeWidthChar, UnicodeWidthStr};

/// `text` with every control character escaped (`\n`, `\t`, `\x1b`, `\x9b`), and the
/// characters that reorder or break a line (bidirectional overrides, line separators) as
/// `\u{…}`: one line, printed as it reads.
pub fn escape(text: &str) -> String {
    escape_max(text, usize::MAX)
}

/// `escape(text)` cut to `max` characters of `text`, with a `…` where it was cut.
pub fn escape_max(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len());
    for (n, c) in text.chars().enumerate() {
        if n == max {
            out.push('…');
            break;
        }
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if reorders(c) => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// `escape(text)` in at most `cols` columns of a terminal (a wide character takes two), with a
/// `…` where it was cut.
pub fn fit(text: &str, cols: usize) -> String {
    let full = escape(text);
    if full.width() <= cols {
        return full;
    }
    let mut out = String::new();
    let mut used = 0;
    for c in full.chars() {
        let w = c.width().unwrap_or(0);
        if used + w + 1 > cols {
            break;
        }
        used += w;
        out.push(c);
    }
    out.push('…');
    out
}

/// `texts` as `cut` shows them (a cell of a table on a terminal), except that two different
/// texts are not shown the same: one whose cut another text shares gets `#` and a fingerprint
/// of the whole text (eight hex digits), so that two keys cut alike cannot pass for one and a
/// row stays bounded.
pub fn distinct(texts: &[&str], cut: impl Fn(&str) -> String) -> Vec<String> {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let shown: Vec<String> = texts.iter().map(|t| cut(t)).collect();
    (0..texts.len())
        .map(|i| {
            let shared = (0..texts.len()).any(|j| shown[j] == shown[i] && texts[j] != texts[i]);
            if !shared {
                return shown[i].clone();
            }
            let mut hasher = DefaultHasher::new();
            texts[i].hash(&mut hasher);
            format!("{}#{:08x}", shown[i], hasher.finish() as u32)
        })
        .collect()
}

/// How many columns `text` takes on a terminal.
pub fn width(text: &str) -> usize {
    text.width()
}

/// Line separators and bidirectional controls, which would reorder or split what follows.
fn reorders(c: char) -> bool {
    matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// A JSON document on one line of stdout, with the characters JSON leaves raw that a terminal
/// would act on (DEL, the C1 controls such as `\u009b`, bidirectional overrides) escaped as
/// `\uXXXX`: the same document to a parser, harmless to a terminal.
pub fn json(value: &serde_json::Value) -> std::io::Result<()> {
    let mut text = String::new();
    for c in value.to_string().chars() {
        if c.is_control() || reorders(c) {
            text.push_str(&format!("\\u{:04x}", c as u32));
        } else {
            text.push(c);
        }
    }
    data(&text)
}

/// stdout, for data: an error when it was closed as rlock started (`rlock inspect >&-`), where
/// start-up put /dev/null and what is written would go nowhere.
pub fn stdout() -> std::io::Result<std::io::StdoutLock<'static>> {
    if was_closed(1) {
        return Err(std::io::Error::other("stdout is closed"));
    }
    Ok(std::io::stdout().lock())
}

/// A line of data on stdout, as it is (a token, `--export`'s lines, a table already escaped),
/// flushed at once: the caller learns whether it was written.
pub fn data(line: &str) -> std::io::Result<()> {
    let mut out = stdout()?;
    out.write_all(line.as_bytes())?;
    out.write_all(b"\n")?;
    out.flush()
}

/// A line of text on stdout (`release --force`'s news), escaped.
pub fn print(line: &str) -> std::io::Result<()> {
    data(&escape(line))
}

/// `rlock: line` on stderr, escaped. A failure to write it is dropped: there is nowhere left to
/// say it, and what rlock was doing, and its exit code, do not depend on it.
pub fn message(line: &str) {
    let mut err = std::io::stderr().lock();
    let _ = err
        .write_all(format!("rlock: {}\n", escape(line)).as_bytes())
        .and_then(|()| err.flush());
}

/// A short human duration: `850ms`, `4.2s`, `28s`, `2m13s`, `1h05m`.
pub fn human_ms(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 10_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else if ms < 60_000 {
        format!("{}s", ms / 1000)
    } else if ms < 3_600_000 {
        format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60)
    } else {
        format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60)
    }
}

/// A duration as a person reads it: its largest unit and the next, never finer than
/// milliseconds once it reaches one (`333ms`, not `333ms 333us 333ns`; `1s 500ms`, `2m 14s`,
/// `365d`). The words humantime reads back (`--ttl 2m 14s`).
pub fn human_duration(d: std::time::Duration) -> String {
    const UNITS: [(u128, &str); 7] = [
        (86_400_000_000_000, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    const MS: usize = 4;
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    let largest = UNITS
        .iter()
        .position(|(u, _)| *u <= ns)
        .unwrap_or(UNITS.len() - 1);
    let finest = if largest >= MS { largest } else { largest + 1 };
    let step = UNITS[finest].0;
    let mut left = (ns + step / 2) / step * step;
    let mut words = Vec::new();
    for (unit, name) in UNITS {
        if left >= unit {
            words.push(format!("{}{name}", left / unit));
            left %= unit;
        }
    }
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::{distinct, escape, escape_max, human_duration, human_ms};
    use std::time::Duration;

    #[test]
    fn texts_cut_alike_are_told_apart_and_others_kept() {
        let cut = |t: &str| escape_max(t, 4);
        let shown = distinct(&["abcdef", "abcdxy", "abcdef", "ab"], cut);
        assert_eq!(shown[0], shown[2], "one text, one form");
        assert_ne!(shown[0], shown[1]);
        assert!(
            shown[0].starts_with("abcd…#") && shown[0].len() < 20,
            "{shown:?}"
        );
        assert_eq!(shown[3], "ab");
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(escape("a\nb\tc\u{1b}[31m"), "a\\nb\\tc\\x1b[31m");
        assert_eq!(
            escape("root\u{1b}]52;c;aGk=\u{7}"),
            "root\\x1b]52;c;aGk=\\x07"
        );
        assert_eq!(escape("\u{9b}31m\u{7f}"), "\\x9b31m\\x7f");
        assert_eq!(escape("a\u{202e}b"), "a\\u{202e}b");
        assert_eq!(escape("plain — ünïcode"), "plain — ünïcode");
        let long = "x".repeat(200);
        assert_eq!(escape_max(&long, 120).chars().count(), 121);
    }

    #[test]
    fn durations_read_as_a_person_reads_them() {
        let cases = [
            (Duration::from_nanos(333_333_333), "333ms"),
            (Duration::from_nanos(1_333_333_333), "1s 333ms"),
            (Duration::from_millis(1500), "1s 500ms"),
            (Duration::from_millis(133_500), "2m 14s"),
            (Duration::from_secs(30), "30s"),
            (Duration::from_secs(365 * 86_400), "365d"),
            (Duration::from_secs(86_400 + 5400), "1d 2h"),
            (Duration::from_micros(500), "500us"),
            (Duration::from_nanos(59_999_600_000), "1m"),
            (Duration::ZERO, "0s"),
        ];
        for (d, want) in cases {
            assert_eq!(human_duration(d), want, "{d:?}");
            assert!(humantime::parse_duration(want).is_ok(), "{want}");
        }
    }
    #[test]
    fn human_durations() {
        assert_eq!(human_ms(850), "850ms");
        assert_eq!(human_ms(4200), "4.2s");
        assert_eq!(human_ms(133_000), "2m13s");
        assert_eq!(human_ms(3_900_000), "1h05m");
    }
}
