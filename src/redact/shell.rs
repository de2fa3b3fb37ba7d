//! Splitting a shell command line into words as `sh` would (quotes, backslashes, operators), so
//! that a secret quoted with blanks in it (`--password 'a b'`) is one word to mask.

/// The words of `line` with quotes removed, and the operators (`;`, `&&`, `|`, `>`, …) as words
/// of their own. Never fails: an unclosed quote runs to the end of the line.
pub fn words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    // A word is started even when it is empty ('' is a word).
    let mut started = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => flush(&mut out, &mut word, &mut started),
            '\'' => {
                started = true;
                for c in chars.by_ref() {
                    if c == '\'' {
                        break;
                    }
                    word.push(c);
                }
            }
            '"' => {
                started = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => match chars.next() {
                            Some(n @ ('"' | '\\' | '$' | '`')) => word.push(n),
                            Some('\n') => {}
                            Some(n) => {
                                word.push('\\');
                                word.push(n);
                            }
                            None => word.push('\\'),
                        },
                        c => word.push(c),
                    }
                }
            }
            '$' if chars.peek() == Some(&'\'') => {
                // bash's $'…': backslash escapes, of which only the quote matters here.
                chars.next();
                started = true;
                while let Some(c) = chars.next() {
                    match c {
                        '\'' => break,
                        '\\' => word.extend(chars.next()),
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                started = true;
                match chars.next() {
                    Some('\n') | None => {}
                    Some(n) => word.push(n),
                }
            }
            ';' | '&' | '|' | '(' | ')' | '<' | '>' => {
                flush(&mut out, &mut word, &mut started);
                let mut op = c.to_string();
                while let Some(&n) = chars.peek() {
                    if !";&|<>".contains(n) {
                        break;
                    }
                    op.push(n);
                    chars.next();
                }
                out.push(op);
            }
            c => {
                started = true;
                word.push(c);
            }
        }
    }
    flush(&mut out, &mut word, &mut started);
    out
}

fn flush(out: &mut Vec<String>, word: &mut String, started: &mut bool) {
    if std::mem::take(started) {
        out.push(std::mem::take(word));
    }
}

/// An operator that ends a command, after which the next word names a program.
pub fn ends_command(word: &str) -> bool {
    !word.is_empty() && word.chars().all(|c| ";&|()".contains(c))
}

#[cfg(test)]
mod tests {
    use super::words;

    #[test]
    fn splits_as_sh_does() {
        assert_eq!(
            words("a 'b c' \"d \\\"e\\\"\" f\\ g"),
            ["a", "b c", "d \"e\"", "f g"]
        );
        assert_eq!(words("x;y&&z|w"), ["x", ";", "y", "&&", "z", "|", "w"]);
        assert_eq!(words("--password 'SECRET 15'"), ["--password", "SECRET 15"]);
        assert_eq!(words("a '' b"), ["a", "", "b"]);
        assert_eq!(words("$'x\\'y' 'open"), ["x'y", "open"]);
        assert_eq!(words("  "), Vec::<String>::new());
    }
}
