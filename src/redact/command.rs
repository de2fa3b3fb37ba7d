//! Masking the secrets on a command line by the shapes secrets take, not by a list of flags:
//! an option, variable, header or JSON field whose name looks secret has its value masked, in
//! every form users write it (`--opt=V`, `--opt V`, `-pV`, `NAME=V`, `--env=NAME=V`,
//! `Name: V`); `user:pass` after `-u`/`--user`; URL credentials anywhere; and words holding a
//! shell command line (`sh -c '…'`) are split as the shell would and masked word by word.
//! Where it cannot tell, it masks: a masked port is harmless, a leaked password is not.

use std::sync::atomic::{AtomicBool, Ordering};

use super::shell;

const MASK: &str = "***";

/// Parts of a name that make it name a secret (in any case, anywhere in the name).
const SECRET_PARTS: [&str; 12] = [
    "pass",
    "pwd",
    "secret",
    "token",
    "key",
    "auth",
    "cred",
    "cookie",
    "session",
    "private",
    "bearer",
    "signature",
];

/// Short options that take a secret attached or as the next word: mysql's and sshpass's `-p`,
/// redis-cli's `-a`, zip's `-P`.
const SECRET_LETTERS: [char; 3] = ['p', 'a', 'P'];

/// Programs for which those letters mean something harmless (`mkdir -p`, `ls -a`, `ssh -p`).
const HARMLESS: &[(&str, &str)] = &[
    ("mkdir", "p"),
    ("cp", "apP"),
    ("mv", "p"),
    ("install", "p"),
    ("ls", "aP"),
    ("rsync", "apP"),
    ("tar", "apP"),
    ("ssh", "p"),
    ("scp", "pP"),
    ("git", "ap"),
    ("docker", "a"),
    ("terraform", "apP"),
    ("kubectl", "ap"),
    ("psql", "p"),
    ("pg_dump", "p"),
    ("pg_restore", "p"),
    ("grep", "aP"),
    ("ps", "ap"),
    ("pgrep", "a"),
    ("df", "aP"),
    ("du", "aP"),
    ("uname", "ap"),
    ("netstat", "ap"),
    ("ss", "ap"),
    ("lsof", "ap"),
    ("patch", "p"),
    ("diff", "ap"),
    ("tee", "a"),
    ("xargs", "pP"),
    ("find", "P"),
    ("openssl", "paP"),
];

/// Words that run the word after them as a program.
const WRAPPERS: [&str; 9] = [
    "env", "sudo", "exec", "nohup", "time", "nice", "command", "xargs", "doas",
];

/// Shells, whose `-c` word is a command line.
const SHELLS: [&str; 6] = ["sh", "bash", "dash", "zsh", "ksh", "ash"];

/// Words a masked value may begin with, which are not the secret: `Bearer` in
/// `Authorization: Bearer X`.
const SCHEMES: [&str; 5] = ["bearer", "basic", "token", "digest", "negotiate"];

/// How deep command lines nest in words (`sh -c "ssh h 'mysql -p…'"`) before rlock gives up
/// and masks the whole word.
const MAX_DEPTH: usize = 6;

/// Parts of a name that make it name a secret when they stand alone (`GITHUB_PAT`, `DB_PW`),
/// and too short to look for inside words (`PATH`, `SPIN`).
const SECRET_WORDS: [&str; 7] = ["pat", "pw", "pin", "otp", "dsn", "jwt", "sig"];

/// True when `name` (an option, variable, header or field name) looks like a secret's.
pub fn looks_secret(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    SECRET_PARTS.iter().any(|p| lower.contains(p))
        || lower
            .split(|c: char| !c.is_ascii_alphanumeric())
            .any(|part| SECRET_WORDS.contains(&part))
}

/// Set once for the run by `--program-only`: a command line is recorded as its program's name.
static PROGRAM_ONLY: AtomicBool = AtomicBool::new(false);

/// `--program-only`: from now on `redact_command` gives the program's name alone.
pub fn record_program_only() {
    PROGRAM_ONLY.store(true, Ordering::Relaxed);
}

/// The command line `words` (an argv) with its secrets masked, its words joined by blanks; or,
/// with `--program-only`, the first word's file name alone.
pub fn redact_command<S: AsRef<str>>(words: &[S]) -> String {
    let words: Vec<&str> = words.iter().map(AsRef::as_ref).collect();
    if PROGRAM_ONLY.load(Ordering::Relaxed) {
        let first = words.first().copied().unwrap_or_default();
        let name = first.rsplit('/').next().unwrap_or_default();
        return Line::default().words(&[name], 0).join(" ");
    }
    Line::default().words(&words, 0).join(" ")
}

/// What the next word is, by what came before it.
#[derive(Default, Clone, Copy, PartialEq, Eq)]
enum Next {
    #[default]
    Plain,
    /// A secret, whatever it looks like (`--password X`).
    Secret,
    /// A secret unless it is an option (`-p X`, but `mysql -p -u me`).
    SecretUnlessOption,
    /// `user` or `user:password` (`-u`, `--user`).
    User,
    /// A shell command line (`sh -c X`).
    Script,
}

/// The state of one command line being masked.
#[derive(Default)]
struct Line {
    /// The program the words are given to, without its directory (`mysql`).
    program: String,
    /// The next word names a program.
    program_next: bool,
    next: Next,
}

impl Line {
    fn words(&mut self, words: &[&str], depth: usize) -> Vec<String> {
        self.program_next = true;
        words.iter().map(|w| self.word(w, depth)).collect()
    }

    fn word(&mut self, word: &str, depth: usize) -> String {
        let is_option = word.len() > 1 && word.starts_with('-');
        match std::mem::take(&mut self.next) {
            Next::Secret | Next::SecretUnlessOption
                if SCHEMES.contains(&word.to_ascii_lowercase().as_str()) =>
            {
                self.next = Next::Secret;
                return word.to_string();
            }
            Next::Secret => return self.masked(word),
            Next::SecretUnlessOption if !is_option => return self.masked(word),
            Next::User if !is_option => {
                let value = self.value(&mask_urls(word), depth);
                return user_pass(&value);
            }
            Next::Script => return self.nested(word, depth),
            _ => {}
        }
        if shell::ends_command(word) || word == "--" {
            self.program_next = true;
            return word.to_string();
        }
        let word = mask_urls(word);
        if self.program_next && !is_option && !word.contains('=') {
            self.program = word.rsplit('/').next().unwrap_or_default().to_string();
            self.program_next = WRAPPERS.contains(&self.program.as_str());
            // A program's name is a path; anything else in its place is masked as a value.
            if word
                .chars()
                .all(|c| c.is_alphanumeric() || "/._-+".contains(c))
            {
                return word;
            }
            return self.value(&word, depth);
        }
        if let Some(long) = word.strip_prefix("--") {
            return self.long_option(long, depth);
        }
        if is_option && !word[1..].starts_with(|c: char| c.is_ascii_digit()) {
            return self.short_option(&word[1..], depth);
        }
        let masked = self.value(&word, depth);
        let tail = word.rsplit([':', '/']).next().unwrap_or_default();
        if masked == word && is_name(tail) && looks_secret(tail) {
            // A bare word that names a secret (`aws configure set aws_secret_access_key X`,
            // `redis-cli AUTH X`, `npm config set //host/:_authToken X`) is followed by one.
            self.next = Next::SecretUnlessOption;
        }
        masked
    }

    /// A secret masked. One that looks like an option may have been one, which takes the next
    /// word (`--password --password X`, `--password -u me:X`): over-masking is fine.
    fn masked(&mut self, word: &str) -> String {
        if word.len() > 1 && word.starts_with('-') {
            self.next = if looks_secret(word) {
                Next::Secret
            } else {
                Next::SecretUnlessOption
            };
        }
        MASK.into()
    }

    /// `--name=value` or `--name` (whose value is the next word).
    fn long_option(&mut self, long: &str, depth: usize) -> String {
        match long.split_once('=') {
            Some((name, _)) if self.secret_option(name) => format!("--{name}={MASK}"),
            Some((name, value)) if is_user_option(name) => {
                format!("--{name}={}", user_pass(value))
            }
            Some((name, value)) => format!("--{name}={}", self.value(value, depth)),
            None => {
                if self.secret_option(long) && !is_switch(long) {
                    self.next = Next::Secret;
                } else if is_user_option(long) {
                    self.next = Next::User;
                }
                format!("--{long}")
            }
        }
    }

    /// `-p`, `-pVALUE`, `-Dname=value`, `-storepass`: `short` is what follows the `-`.
    fn short_option(&mut self, short: &str, depth: usize) -> String {
        if let Some((name, value)) = short.split_once('=') {
            return if looks_secret(name) {
                format!("-{name}={MASK}")
            } else {
                format!("-{name}={}", self.value(value, depth))
            };
        }
        let Some(letter) = short.chars().next() else {
            return "-".into();
        };
        let attached = &short[letter.len_utf8()..];
        let secret_letter = SECRET_LETTERS.contains(&letter) && !self.harmless(letter);
        if attached.is_empty() {
            if secret_letter {
                self.next = Next::SecretUnlessOption;
            } else if letter == 'u' {
                self.next = Next::User;
            } else if letter == 'c' && SHELLS.contains(&self.program.as_str()) {
                self.next = Next::Script;
            }
            return format!("-{short}");
        }
        if is_name(short) && looks_secret(short) && !(self.is_rlock() && short == "k") {
            // `keytool -storepass X`, `openssl -passin X`.
            self.next = Next::SecretUnlessOption;
        }
        if secret_letter {
            format!("-{letter}{MASK}")
        } else if letter == 'u' {
            format!("-u{}", user_pass(attached))
        } else {
            format!("-{short}")
        }
    }

    /// A value standing alone, or after `=`: `NAME=value`, `Name: value`, a word holding a
    /// command line, `user:pass@host`, JSON.
    fn value(&mut self, value: &str, depth: usize) -> String {
        let colon = value.find(':');
        let equals = value.find('=');
        if let Some(colon) = colon
            && equals.is_none_or(|e| colon < e)
            && is_header_name(&value[..colon])
            && looks_secret(&value[..colon])
        {
            let (name, rest) = (&value[..colon], &value[colon + 1..]);
            if rest.trim().is_empty() {
                self.next = Next::Secret;
                return value.to_string();
            }
            let blank = if rest.starts_with(char::is_whitespace) {
                " "
            } else {
                ""
            };
            return format!("{name}:{blank}{MASK}");
        }
        if let Some(equals) = equals
            && equals > 0
            && !value[..equals].contains(char::is_whitespace)
        {
            let (name, rest) = (&value[..equals], &value[equals + 1..]);
            return if looks_secret(name) {
                format!("{name}={MASK}")
            } else {
                format!("{name}={}", self.value(rest, depth))
            };
        }
        if value.contains(char::is_whitespace) {
            // JSON first: the shell's split would take its quotes away.
            return self.nested(&mask_json(value), depth);
        }
        mask_json(&mask_user_at_host(value))
    }

    /// A word that holds a command line of its own, split as the shell would and masked.
    fn nested(&mut self, word: &str, depth: usize) -> String {
        if depth >= MAX_DEPTH {
            return MASK.into();
        }
        let words = shell::words(word);
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        let mut inner = Line::default();
        let masked = inner.words(&words, depth + 1).join(" ");
        // A word that ends wanting a value (`sh -c --password X`) passes that on.
        if inner.next != Next::Plain {
            self.next = inner.next;
        }
        masked
    }

    /// An option whose value is a secret; not rlock's own `--key`, which names a lock.
    fn secret_option(&self, name: &str) -> bool {
        looks_secret(name) && !(self.is_rlock() && name == "key")
    }

    fn is_rlock(&self) -> bool {
        self.program == "rlock"
    }

    fn harmless(&self, letter: char) -> bool {
        HARMLESS
            .iter()
            .any(|(program, letters)| *program == self.program && letters.contains(letter))
    }
}

/// An option that takes no value though its name looks secret: `--no-password`,
/// `--password-stdin`.
fn is_switch(name: &str) -> bool {
    name.starts_with("no-")
        || name.starts_with("ask-")
        || name.ends_with("-stdin")
        || name.ends_with("-prompt")
}

fn is_user_option(name: &str) -> bool {
    name == "user" || name.ends_with("-user")
}

/// `user:password` as `user:***`.
fn user_pass(value: &str) -> String {
    match value.split_once(':') {
        Some((user, pass)) if !pass.is_empty() && !value.contains("://") => {
            format!("{user}:{MASK}")
        }
        _ => value.to_string(),
    }
}

/// A name as options, variables and keys have them: `db.password`, `API_TOKEN`, `x-api-key`.
fn is_name(word: &str) -> bool {
    !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

fn is_header_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// `user:pass@host` without a scheme (scp, some clients) as `user:***@host`.
fn mask_user_at_host(word: &str) -> String {
    if let Some(at) = word.find('@')
        && let Some(colon) = word[..at].find(':')
        && !word[..at].contains('/')
        && colon + 1 < at
    {
        return format!("{}:{MASK}{}", &word[..colon], &word[at..]);
    }
    word.to_string()
}

/// The credentials of every URL in `word` masked: `https://u:***@h`, `https://***@h` (a token
/// as the user name), `redis://:***` (what is left of a broken one).
pub fn mask_urls(word: &str) -> String {
    let mut out = String::new();
    let mut rest = word;
    while let Some(i) = rest.find("://") {
        out.push_str(&rest[..i + 3]);
        rest = &rest[i + 3..];
        // The URL runs to a blank or a quote; its authority to the first '/', '?' or '#'.
        let url_end = rest
            .find(|c: char| c.is_whitespace() || "\"'<>".contains(c))
            .unwrap_or(rest.len());
        let authority_end = rest[..url_end].find(['/', '?', '#']).unwrap_or(url_end);
        let authority = &rest[..authority_end];
        let userinfo_end = match authority.rfind('@') {
            Some(at) => Some(at),
            // A password holding '/' unencoded: `u:pa/ss@h`.
            None if authority.contains(':') && !port_follows(authority) => {
                rest[..url_end].rfind('@')
            }
            None => None,
        };
        match userinfo_end {
            Some(at) => {
                match rest[..at].split_once(':') {
                    Some((user, _)) => out.push_str(&format!("{user}:{MASK}")),
                    None => out.push_str(MASK),
                }
                rest = &rest[at..];
            }
            None if authority.contains(':') && !port_follows(authority) => {
                let colon = authority.rfind(':').unwrap_or(0);
                out.push_str(&authority[..=colon]);
                out.push_str(MASK);
                rest = &rest[authority_end..];
            }
            None => {}
        }
    }
    out.push_str(rest);
    out
}

/// The authority ends in a port (or an IPv6 address): `h:6379`, `[::1]`, `[::1]:1`.
fn port_follows(authority: &str) -> bool {
    let after = authority.rsplit(':').next().unwrap_or_default();
    after.ends_with(']') || after.chars().all(|c| c.is_ascii_digit())
}

/// JSON fields whose name looks secret masked: `{"password":"x"}` as `{"password":"***"}`.
fn mask_json(word: &str) -> String {
    if !word.contains('"') {
        return word.to_string();
    }
    let mut out = String::new();
    let mut rest = word;
    // Each quoted string followed by ':' is a field name.
    while let Some(open) = rest.find('"') {
        let Some(len) = rest[open + 1..].find('"') else {
            break;
        };
        let name = &rest[open + 1..open + 1 + len];
        let after = &rest[open + len + 2..];
        out.push_str(&rest[..open + len + 2]);
        rest = after;
        let trimmed = after.trim_start();
        if let Some(value) = trimmed.strip_prefix(':')
            && looks_secret(name)
        {
            let value = value.trim_start();
            let end = match value.strip_prefix('"') {
                Some(s) => s.find('"').map_or(value.len(), |i| i + 2),
                None => value.find([',', '}', ']']).unwrap_or(value.len()),
            };
            out.push_str(&format!(":\"{MASK}\""));
            rest = &value[end..];
        }
    }
    out.push_str(rest);
    out
}
