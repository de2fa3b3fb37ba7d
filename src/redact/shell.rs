//! Splitting a shell command line into words as `sh` would (quotes, backslashes, operators), so
//! that a secret quoted with blanks in it (`--password 'a b'`) is one word to mask.

use std::iter::Peekable;
use std::str::Chars;

/// The words of `line` with quotes removed, and the operators (`;`, `&&`, `|`, `>`, …) as words
/// of their own. Never fails: an unclosed quote runs to the end of the line.
pub fn words(line: &str) -> Vec<String> {
    let mut words = Words::default();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => words.flush(),
            '\'' => words.single_quoted(&mut chars),
            '"' => words.double_quoted(&mut chars),
            '$' if chars.peek() == Some(&'\'') => {
                chars.next();
                words.dollar_quoted(&mut chars);
            }
            '\\' => words.escaped(&mut chars),
            ';' | '&' | '|' | '(' | ')' | '<' | '>' => words.operator(c, &mut chars),
            c => words.push(c),
        }
    }
    words.flush();
    words.out
}

/// The words found so far, and the one being read.
#[derive(Default)]
struct Words {
    out: Vec<String>,
    word: String,
    /// A word is started even when it is empty ('' is a word).
    started: bool,
}

impl Words {
    /// An unquoted character of the current word.
    fn push(&mut self, c: char) {
        self.started = true;
        self.word.push(c);
    }

    /// Ends the current word, if one was started.
    fn flush(&mut self) {
        if std::mem::take(&mut self.started) {
            self.out.push(std::mem::take(&mut self.word));
        }
    }

    /// After `'`: everything up to the closing quote, as it is.
    fn single_quoted(&mut self, chars: &mut Peekable<Chars<'_>>) {
        self.started = true;
        for c in chars.by_ref() {
            if c == '\'' {
                break;
            }
            self.word.push(c);
        }
    }

    /// After `"`: up to the closing quote, a backslash escaping only `"`, `\`, `$`, `` ` `` and
    /// a newline (which it removes).
    fn double_quoted(&mut self, chars: &mut Peekable<Chars<'_>>) {
        self.started = true;
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some(n @ ('"' | '\\' | '$' | '`')) => self.word.push(n),
                    Some('\n') => {}
                    Some(n) => {
                        self.word.push('\\');
                        self.word.push(n);
                    }
                    None => self.word.push('\\'),
                },
                c => self.word.push(c),
            }
        }
    }

    /// After bash's `$'`: backslash escapes, of which only the quote matters here.
    fn dollar_quoted(&mut self, chars: &mut Peekable<Chars<'_>>) {
        self.started = true;
        while let Some(c) = chars.next() {
            match c {
                '\'' => break,
                '\\' => self.word.extend(chars.next()),
                c => self.word.push(c),
            }
        }
    }

    /// After an unquoted `\`: the next character as it is (a newline: nothing).
    fn escaped(&mut self, chars: &mut Peekable<Chars<'_>>) {
        self.started = true;
        match chars.next() {
            Some('\n') | None => {}
            Some(n) => self.word.push(n),
        }
    }

    /// An operator starting with `c`, with the operator characters after it, as a word of its
    /// own: it ends the word before it.
    fn operator(&mut self, c: char, chars: &mut Peekable<Chars<'_>>) {
        self.flush();
        let mut op = c.to_string();
        while let Some(&n) = chars.peek() {
            if !";&|<>".contains(n) {
                break;
            }
            op.push(n);
            chars.next();
        }
        self.out.push(op);
    }
}

/// An operator that ends a command, after which the next word names a program.
pub fn ends_command(word: &str) -> bool {
    !word.is_empty() && word.chars().all(|c| ";&|()".contains(c))
}

/// Which of `words` feed a secret to the next command of a pipe: the arguments of `echo TOKEN`
/// in `echo TOKEN | docker login --password-stdin` (a command with an option that reads a
/// secret from its standard input: `--password-stdin`, `--with-token`).
pub fn fed_to_secret_stdin(words: &[&str]) -> Vec<bool> {
    let mut fed = vec![false; words.len()];
    let reads_secret = |w: &&str| {
        let name = w.trim_start_matches('-').to_ascii_lowercase();
        w.starts_with("--")
            && (name == "with-token" || name.ends_with("-stdin"))
            && super::words::looks_secret(&name)
    };
    let ends: Vec<usize> = (0..words.len())
        .filter(|&i| ends_command(words[i]))
        .collect();
    let mut start = 0;
    for (n, &end) in ends.iter().enumerate() {
        let next_end = ends.get(n + 1).copied().unwrap_or(words.len());
        if matches!(words[end], "|" | "|&") && words[end + 1..next_end].iter().any(reads_secret) {
            for f in fed.iter_mut().take(end).skip(start + 1) {
                *f = true;
            }
        }
        start = end + 1;
    }
    fed
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
