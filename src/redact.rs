//! Keeping secrets out of every message and out of Redis: passwords in URLs, and the secrets
//! users put on command lines (the holder's command that `inspect` shows).

/// A URL with its password replaced by `***`, fit for any message.
pub fn redact(url: &str) -> String {
    let mut out = url.to_string();
    if !out.contains("://")
        && let Some(at) = out.rfind('@')
    {
        // Not a URL at all, yet what stands before an '@' may be credentials.
        let redacted = match out[..at].find(':') {
            Some(colon) => format!("{}:***", &out[..colon]),
            None => "***".to_string(),
        };
        out.replace_range(..at, &redacted);
    }
    if let Some(scheme_end) = out.find("://") {
        let rest_start = scheme_end + 3;
        // The userinfo ends at the last '@' (a password may hold '/', '?' or '@' itself).
        if let Some(at) = out[rest_start..].rfind('@') {
            let userinfo = &out[rest_start..rest_start + at];
            let redacted = match userinfo.find(':') {
                Some(colon) => format!("{}:***", &userinfo[..colon]),
                None if out.starts_with("redis") => "***".to_string(),
                None => userinfo.to_string(),
            };
            out.replace_range(rest_start..rest_start + at, &redacted);
        } else {
            // No '@', yet something after a ':' that is not a port: what is left of a broken
            // URL may be a password ("redis://:secret"). Hide it.
            let authority_end = out[rest_start..]
                .find(['/', '?'])
                .map_or(out.len(), |i| rest_start + i);
            if let Some(colon) = out[rest_start..authority_end].rfind(':') {
                let after = &out[rest_start + colon + 1..authority_end];
                if !after.is_empty() && !after.chars().all(|c| c.is_ascii_digit()) {
                    out.replace_range(rest_start + colon + 1..authority_end, "***");
                }
            }
        }
    }
    // unix://path?pass=secret
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let query: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _))
                    if k.eq_ignore_ascii_case("pass") || k.eq_ignore_ascii_case("password") =>
                {
                    format!("{k}=***")
                }
                _ => kv.to_string(),
            })
            .collect();
        out = format!("{head}{}", query.join("&"));
    }
    out
}

/// Several URLs, redacted, comma-separated: how a Cluster or Sentinel deployment is named.
pub fn redact_all(urls: &[String]) -> String {
    urls.iter().map(|u| redact(u)).collect::<Vec<_>>().join(",")
}

/// Error text from the client library may quote a URL; redact anything that looks like one.
pub fn redact_text(text: &str) -> String {
    text.split(' ')
        .map(|w| {
            if w.contains("://") {
                redact(w)
            } else {
                w.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A command line fit to store in Redis and show in `inspect`: URL passwords, the values of
/// `NAME=value` words whose NAME names a secret, and the word after (or the value in
/// `--flag=value` of) a flag that names one, replaced by `***`.
pub fn redact_command<S: AsRef<str>>(words: &[S]) -> String {
    let mut out = Vec::with_capacity(words.len());
    let mut hide_next = false;
    // `sh -c "DB_PASSWORD=x ./deploy"` holds a whole command line in one word.
    let tokens = words
        .iter()
        .flat_map(|w| w.as_ref().split(char::is_whitespace))
        .filter(|t| !t.is_empty());
    for word in tokens {
        if std::mem::take(&mut hide_next) {
            out.push("***".to_string());
            continue;
        }
        if word.starts_with('-') && !word.starts_with("---") {
            let (flag, value) = match word.split_once('=') {
                Some((flag, value)) => (flag, Some(value)),
                None => (word, None),
            };
            if secret_flag(flag) {
                match value {
                    Some(_) => out.push(format!("{flag}=***")),
                    None => {
                        hide_next = true;
                        out.push(word.to_string());
                    }
                }
                continue;
            }
        } else if let Some((name, _)) = word.split_once('=')
            && is_identifier(name)
            && secret_name(name)
        {
            out.push(format!("{name}=***"));
            continue;
        }
        out.push(redact_text(word));
    }
    out.join(" ")
}

/// Words that name a secret: PASS (password, passwd), SECRET, TOKEN, KEY, and the like.
fn secret_name(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    ["pass", "secret", "token", "key", "auth", "credential"]
        .iter()
        .any(|w| lower.contains(w))
}

/// A flag whose value is a secret: `--password`, `--token`, `--api-key`, `-p` (a password for
/// mysql and redis-cli's `-a`), ... Not rlock's own `--key`/`-k`, which names a lock.
fn secret_flag(flag: &str) -> bool {
    let name = flag.trim_start_matches('-');
    if flag.starts_with("--") {
        return name != "key" && secret_name(name);
    }
    matches!(name, "p" | "a")
}

/// `NAME` of a shell assignment `NAME=value`.
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords() {
        assert_eq!(redact("redis://:s3cret@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact("redis://u:s3cret@h:1"), "redis://u:***@h:1");
        assert_eq!(redact("rediss://s3cret@h"), "rediss://***@h");
        assert_eq!(redact("redis://h:6379"), "redis://h:6379");
        assert_eq!(redact("redis://:pa/ss@h:1"), "redis://:***@h:1");
        assert_eq!(redact("redis://:topsecret"), "redis://:***");
        assert_eq!(redact("redis://[::1]:6379/0"), "redis://[::1]:6379/0");
        assert_eq!(
            redact("unix:///tmp/r.sock?db=1&pass=s3cret"),
            "unix:///tmp/r.sock?db=1&pass=***"
        );
        // No scheme: what stands before an '@' may still be a password.
        assert_eq!(redact("u:s3cret@h:1"), "u:***@h:1");
        assert_eq!(redact("s3cret@h"), "***@h");
    }

    #[test]
    fn hides_secrets_on_command_lines() {
        let cases: &[(&[&str], &str)] = &[
            (&["sh", "-c", "x"], "sh -c x"),
            (
                &["DB_PASSWORD=hunter2", "rlock", "acquire"],
                "DB_PASSWORD=*** rlock acquire",
            ),
            (
                &["env", "api_key=abc", "GITHUB_TOKEN=t", "X=1"],
                "env api_key=*** GITHUB_TOKEN=*** X=1",
            ),
            (
                &["deploy", "--password", "hunter2", "--to", "prod"],
                "deploy --password *** --to prod",
            ),
            (&["deploy", "--token=abc"], "deploy --token=***"),
            (&["mysql", "-p", "pw", "-u", "me"], "mysql -p *** -u me"),
            (&["redis-cli", "-a", "pw"], "redis-cli -a ***"),
            (
                &["sh", "-c", "DB_PASSWORD=hunter2 rlock acquire -k leak"],
                "sh -c DB_PASSWORD=*** rlock acquire -k leak",
            ),
            (
                &["sh", "-c", "deploy --password\thunter2\n"],
                "sh -c deploy --password ***",
            ),
            (
                &["rlock", "--key", "jobs", "-k", "x"],
                "rlock --key jobs -k x",
            ),
            (&["curl", "redis://u:pw@h:1/0"], "curl redis://u:***@h:1/0"),
            (
                &["x", "--api-key", "k", "--client-secret=s"],
                "x --api-key *** --client-secret=***",
            ),
        ];
        for (words, want) in cases {
            assert_eq!(redact_command(words), *want, "{words:?}");
        }
    }
}
