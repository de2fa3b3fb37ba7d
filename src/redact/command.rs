//! Masking the secrets on a command line by the shapes secrets take, not by a list of flags:
//! an option, variable, header or JSON field whose name looks secret has its value masked, in
//! every form users write it (`--opt=V`, `--opt V`, `-pV`, `NAME=V`, `--env=NAME=V`,
//! `Name: V`); `user:pass` after `-u`/`--user`; URL credentials anywhere; and words holding a
//! shell command line (`sh -c '…'`) are split as the shell would and masked word by word.
//! Where it cannot tell, it masks: a masked port is harmless, a leaked password is not.

use std::sync::atomic::{AtomicBool, Ordering};

use super::programs::{
    HARMLESS, PROGRAM_SECRET_LETTERS, PROGRAM_SECRET_REST, SHELLS, SLASH_LOGINS, WRAPPERS, knows,
    remote,
};
use super::shell;
use super::words::{
    MASK, is_blob, is_header_name, is_name, looks_secret, mask_urls, mask_user_at_host,
    slash_login, user_pass,
};

/// Short options that take a secret attached or as the next word: mysql's and sshpass's `-p`,
/// redis-cli's `-a`, zip's `-P`.
const SECRET_LETTERS: [char; 3] = ['p', 'a', 'P'];

/// Words a masked value may begin with, which are not the secret: `Bearer` in
/// `Authorization: Bearer X`.
const SCHEMES: [&str; 5] = ["bearer", "basic", "token", "digest", "negotiate"];

/// How deep command lines nest in words (`sh -c "ssh h 'mysql -p…'"`) before rlock gives up
/// and masks the whole word.
const MAX_DEPTH: usize = 6;

/// Set once for the run by `--record-args`: a command line is recorded whole, masked.
static RECORD_ARGS: AtomicBool = AtomicBool::new(false);

/// `--record-args`: from now on `redact_command` gives the whole command line, masked.
pub fn record_args() {
    RECORD_ARGS.store(true, Ordering::Relaxed);
}

/// The most a field rlock stores (a command line, a label) keeps, in bytes: one holder record
/// or history entry stays small whatever the command line (a `find … -exec` of 1 MiB).
pub const FIELD_CAP: usize = 4096;

/// What marks a field cut at `FIELD_CAP`.
const CUT: &str = "…[cut]";

/// `field` as rlock stores it: at most `FIELD_CAP` bytes, cut on a character's boundary and
/// marked so when longer.
pub fn cap_field(field: String) -> String {
    if field.len() <= FIELD_CAP {
        return field;
    }
    let mut end = FIELD_CAP - CUT.len();
    while !field.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{CUT}", &field[..end])
}

/// The program's name of the command line `words` (the first word's file name), as rlock
/// records it by default; with `--record-args`, the whole command line with its secrets
/// masked, its words joined by blanks. Either at most `FIELD_CAP` bytes.
pub fn redact_command<S: AsRef<str>>(words: &[S]) -> String {
    let words: Vec<&str> = words.iter().map(AsRef::as_ref).collect();
    if !RECORD_ARGS.load(Ordering::Relaxed) {
        let first = words.first().copied().unwrap_or_default();
        let name = first.rsplit('/').next().unwrap_or_default();
        return cap_field(Line::default().words(&[name], 0).join(" "));
    }
    cap_field(masked(&words))
}

/// A free text (a label, a program's name that may be a whole command line) with its secrets
/// masked, read as the shell would read it: the text as it is when it holds none, else its
/// words masked and joined by blanks.
pub fn mask_line(text: &str) -> String {
    let words = shell::words(text);
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let masked = Line::default().words(&words, 0);
    if masked.iter().zip(&words).all(|(m, w)| m == w) {
        return text.to_string();
    }
    masked.join(" ")
}

/// The command line `words` with its secrets masked, its words joined by blanks.
pub(super) fn masked<S: AsRef<str>>(words: &[S]) -> String {
    let words: Vec<&str> = words.iter().map(AsRef::as_ref).collect();
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
    /// An option's value that is no secret by its place (`ssh -p 22`): masked by its shape only.
    Value,
    /// Every word to the end of the command (`redis-cli AUTH user X`, `htpasswd -b f u X`).
    Rest,
}

/// The state of one command line being masked.
#[derive(Default)]
struct Line {
    /// The program the words are given to, without its directory (`mysql`).
    program: String,
    /// The next word names a program.
    program_next: bool,
    next: Next,
    /// Within `ssh`, `docker exec`, `kubectl exec` until the host (container, pod) is named:
    /// the short and long options that take a value. The words after the host are a command.
    remote: Option<(&'static str, &'static [&'static str])>,
    /// The word before, in lower case (`identified` before `by`).
    previous: String,
    /// To the end of the command, a word that is no option nor `NAME=value` is a secret.
    bare_secrets: bool,
}

impl Line {
    fn words(&mut self, words: &[&str], depth: usize) -> Vec<String> {
        self.program_next = true;
        let fed = shell::fed_to_secret_stdin(words);
        let words = words.iter().zip(fed);
        words
            .map(|(w, fed)| {
                if fed {
                    MASK.into()
                } else {
                    self.word(w, depth)
                }
            })
            .collect()
    }

    fn word(&mut self, word: &str, depth: usize) -> String {
        let masked = self.judged(word, depth);
        self.previous = word.to_ascii_lowercase();
        masked
    }

    fn judged(&mut self, word: &str, depth: usize) -> String {
        let is_option = word.len() > 1 && word.starts_with('-');
        let next = std::mem::take(&mut self.next);
        if next == Next::Rest {
            if shell::ends_command(word) {
                self.program_next = true;
                return word.to_string();
            }
            self.next = Next::Rest;
            return MASK.into();
        }
        match next {
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
            Next::Value => return self.value(&mask_urls(word), depth),
            _ => {}
        }
        if shell::ends_command(word) || word == "--" {
            self.program_next = true;
            self.bare_secrets = false;
            return word.to_string();
        }
        if self.bare_secrets && !is_option && !word.contains('=') {
            return MASK.into();
        }
        if self.program == "vault" && word == "login" {
            self.bare_secrets = true;
            return word.to_string();
        }
        let word = mask_urls(word);
        if is_option
            && word.contains(char::is_whitespace)
            && !word
                .split(char::is_whitespace)
                .next()
                .unwrap_or("")
                .contains('=')
        {
            // One word that holds an option and its value (`"--password X"`).
            return self.nested(&word, depth);
        }
        if let Some((letters, longs)) = self.remote {
            return self.remote_word(&word, letters, longs, depth);
        }
        if self.program_next && !is_option && !word.contains('=') {
            self.program = word.rsplit('/').next().unwrap_or_default().to_string();
            self.program_next = WRAPPERS.contains(&self.program.as_str());
            self.remote = remote(&self.program);
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
        if !is_option && knows(&word) {
            // A program with rules of its own, as an argument (`sh -c '…' sh openssl enc -k X`,
            // `xargs openssl …`): what follows is likely its command line.
            self.program = word.clone();
            self.remote = remote(&word);
            return word;
        }
        if matches!(self.program.as_str(), "docker" | "podman" | "kubectl") && word == "exec" {
            self.remote = remote(&format!("{} exec", self.program));
            return word;
        }
        if SLASH_LOGINS.contains(&self.program.as_str())
            && let Some(login) = slash_login(&word)
        {
            return login;
        }
        if self.previous == "identified" && word.eq_ignore_ascii_case("by") {
            // SQL: `… IDENTIFIED BY 'X'`.
            self.next = Next::Secret;
            return word;
        }
        if word == "AUTH" || (word.eq_ignore_ascii_case("auth") && self.program.ends_with("-cli")) {
            // Redis's `AUTH [user] X` (redis-cli's, valkey-cli's): every word after it.
            self.next = Next::Rest;
            return word;
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
        if short.is_empty() {
            return "-".into();
        }
        if is_name(short) && looks_secret(short) && !(self.is_rlock() && short == "k") {
            // `keytool -storepass X`, `openssl -passin X`.
            self.next = Next::SecretUnlessOption;
            return format!("-{short}");
        }
        // Every letter of a cluster is judged (`curl -su user:X`): the first that takes a
        // secret, a user or a command line takes what is attached to it, or the next word.
        for (at, letter) in short.char_indices() {
            let end = at + letter.len_utf8();
            let (head, attached) = (&short[..end], &short[end..]);
            if self.takes_rest(letter) {
                self.next = Next::Rest;
                return format!("-{head}{}", if attached.is_empty() { "" } else { MASK });
            }
            // A secret letter after the first takes only the next word (`-sp X`): what is
            // attached to it is more likely a word (`-jar`, `-name`) than a cluster.
            if self.secret_letter(letter)
                && (at == 0 || attached.is_empty() || self.own_letter(letter))
            {
                if attached.is_empty() {
                    self.next = Next::SecretUnlessOption;
                    return format!("-{short}");
                }
                return format!("-{head}{MASK}");
            }
            if letter == 'u' || letter == 'U' {
                if attached.is_empty() {
                    self.next = Next::User;
                    return format!("-{short}");
                }
                return format!("-{head}{}", user_pass(attached));
            }
            if letter == 'c' && SHELLS.contains(&self.program.as_str()) {
                if attached.is_empty() {
                    self.next = Next::Script;
                }
                return format!("-{short}");
            }
            if !letter.is_ascii_alphabetic() {
                break;
            }
        }
        format!("-{short}")
    }

    /// A short option letter that takes a secret, for this program.
    fn secret_letter(&self, letter: char) -> bool {
        self.own_letter(letter) || (SECRET_LETTERS.contains(&letter) && !self.harmless(letter))
    }

    /// A short option letter that takes a secret for this program alone (`openssl -k`).
    fn own_letter(&self, letter: char) -> bool {
        PROGRAM_SECRET_LETTERS
            .iter()
            .any(|(program, letters)| *program == self.program && letters.contains(letter))
    }

    /// A short option letter after which every word is a secret, for this program.
    fn takes_rest(&self, letter: char) -> bool {
        PROGRAM_SECRET_REST
            .iter()
            .any(|(program, letters)| *program == self.program && letters.contains(letter))
    }

    /// A word of `ssh`, `docker exec` or `kubectl exec` before the host (container, pod): an
    /// option (whose value, when it takes one, is the next word), or the host, after which
    /// the words are a command.
    fn remote_word(&mut self, word: &str, letters: &str, longs: &[&str], depth: usize) -> String {
        if !(word.len() > 1 && word.starts_with('-')) {
            self.remote = None;
            self.program_next = true;
            return self.value(word, depth);
        }
        if let Some(long) = word.strip_prefix("--") {
            let out = self.long_option(long, depth);
            if self.next == Next::Plain && !long.contains('=') && longs.contains(&long) {
                self.next = Next::Value;
            }
            out
        } else {
            let short = &word[1..];
            let out = self.short_option(short, depth);
            // The first letter that takes a value takes the next word, or what follows it
            // (masked: `-p2222` may as well be `-pX`).
            match short.find(|c| letters.contains(c)) {
                Some(at) if self.next == Next::Plain && at + 1 == short.len() => {
                    self.next = Next::Value;
                    out
                }
                Some(at) if self.next == Next::Plain && out == word => {
                    format!("-{}{MASK}", &short[..=at])
                }
                _ => out,
            }
        }
    }

    /// A value standing alone, or after `=`: `NAME=value`, `Name: value`, a word holding a
    /// command line, `user:pass@host`, JSON.
    fn value(&mut self, value: &str, depth: usize) -> String {
        if is_blob(value) {
            // Before `NAME=value`: base64 ends in `=`.
            return MASK.into();
        }
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

/// An option whose value is `user:password` (curl's `--cert FILE:PASSWORD` too).
fn is_user_option(name: &str) -> bool {
    name == "user" || name.ends_with("-user") || name == "cert" || name.ends_with("-cert")
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
