//! Secrets inside one word, whatever program it is given to: the password of a URL's or a
//! `user:pass@host`'s credentials. (A JSON word's secret fields are the command module's: they
//! need its notion of a secret name.)

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
