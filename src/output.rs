//! Every line rlock writes goes through here, for two reasons:
//!
//! - Text that another user or another client wrote (a holder's user, host or command, a key's
//!   name, a field of the state hash) reaches a terminal only escaped (`escape`): a `\x1b]52;…`
//!   in `$USER` must not write to the clipboard of whoever reads a busy line.
//! - A write that fails (a closed pipe, a full disk) is an error to return or to drop, never a
//!   panic: rlock finishes what it was doing and exits with the code of the table.

use std::io::Write;

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

/// A line of data on stdout, as it is (a token, `--export`'s lines, a table already escaped),
/// flushed at once: the caller learns whether it was written.
pub fn data(line: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
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

#[cfg(test)]
mod tests {
    use super::{escape, escape_max};

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
}
