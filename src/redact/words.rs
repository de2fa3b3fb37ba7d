//! Secrets inside one word, whatever program it is given to: the password of a URL's or a
//! `user:pass@host`'s credentials; and what makes a name a secret's (`looks_secret`), which the
//! command lines' masking and the shell's pipes both ask.

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

/// What a secret is replaced with.
pub(super) const MASK: &str = "***";

/// `user:pass@host` without a scheme (scp, some clients) as `user:***@host`.
pub(super) fn mask_user_at_host(word: &str) -> String {
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
pub(super) fn mask_urls(word: &str) -> String {
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

/// `user:password` as `user:***`; also `user%password` (smbclient) and `user,password` (lftp).
pub(super) fn user_pass(value: &str) -> String {
    match value.find([':', '%', ',']) {
        Some(at) if at + 1 < value.len() && !value.contains("://") => {
            format!("{}{MASK}", &value[..=at])
        }
        _ => value.to_string(),
    }
}

/// Oracle's `user/password@db` as `user/***@db`; None for a word of another shape.
pub(super) fn slash_login(word: &str) -> Option<String> {
    let (user, rest) = word.split_once('/')?;
    if user.is_empty() || !is_name(user) || rest.is_empty() {
        return None;
    }
    let db = rest.find('@').map_or("", |at| &rest[at..]);
    Some(format!("{user}/{MASK}{db}"))
}

/// A name as options, variables and keys have them: `db.password`, `API_TOKEN`, `x-api-key`.
pub(super) fn is_name(word: &str) -> bool {
    !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
}

pub(super) fn is_header_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// A word that looks like an encoded secret (a base64 or base64url blob, a JWT): long, of the
/// blob alphabet only, mixing capitals, small letters and digits. A commit id (small letters
/// and digits) or a path with dots is none; where it cannot tell, it masks.
pub(super) fn is_blob(word: &str) -> bool {
    let body = word.trim_end_matches('=');
    if word.starts_with("eyJ") && word.len() >= 20 {
        return true;
    }
    body.len() >= 20
        && !body.starts_with(['-', '/'])
        && body
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+/_-".contains(c))
        && body.chars().any(|c| c.is_ascii_uppercase())
        && body.chars().any(|c| c.is_ascii_lowercase())
        && body.chars().any(|c| c.is_ascii_digit())
}
