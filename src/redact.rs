//! Keeping secrets out of every message and out of Redis: passwords in URLs, and the secrets
//! users put on command lines (the holder's command that `inspect` shows).

mod command;
mod programs;
mod shell;
mod words;

pub use command::{cap_field, mask_line, record_args, redact_command};
pub use words::looks_secret;

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
            // The authority ends at a path, a query, or where the URL does (a blank or a quote
            // around it in a message): `h:1 ` and `h:1'` end in a port, not in a password.
            let authority_end = out[rest_start..]
                .find(|c: char| "/?#'\"".contains(c) || c.is_whitespace())
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

#[cfg(test)]
mod corpus;

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
        // Blanks or quotes around a URL are not part of its port.
        assert_eq!(redact(" redis://h:6379"), " redis://h:6379");
        assert_eq!(redact("redis://h:6379 "), "redis://h:6379 ");
        assert_eq!(redact("redis://h:6379'"), "redis://h:6379'");
        assert_eq!(redact("  redis://:s3cret "), "  redis://:*** ");
        assert_eq!(
            redact_text("malformed URL 'redis://127.0.0.1:1 ' here"),
            "malformed URL 'redis://127.0.0.1:1 ' here"
        );
    }

    #[test]
    fn labels_and_one_word_command_lines_are_masked_like_arguments() {
        for (text, want) in [
            (
                "deploy https://ci.example/jobs/42",
                "deploy https://ci.example/jobs/42",
            ),
            ("nightly (host a) it's fine", "nightly (host a) it's fine"),
            (
                "commit 3f2a9c0d1e2b3a4c5d6e7f8091a2b3c4d5e6f708",
                "commit 3f2a9c0d1e2b3a4c5d6e7f8091a2b3c4d5e6f708",
            ),
            ("job https://u:S3C1@h/x", "job https://u:***@h/x"),
            ("PASSWORD=S3C2 backup", "PASSWORD=*** backup"),
            ("deploy --token S3C3", "deploy --token ***"),
            ("PGPASSWORD=S3C4 psql -h db", "PGPASSWORD=*** psql -h db"),
        ] {
            assert_eq!(mask_line(text), want, "{text}");
        }
    }

    #[test]
    fn the_three_forms_record_args_left_in_clear_are_masked() {
        for line in [
            "app --data S3CdXNlcjpwYXNzd29yZDEyMzQ1Njc4OQ==",
            "curl -d eyJhbGciOiJIUzI1NiJ9.S3CeyJzdWIiOiIxIn0.abc https://h",
            "vault login S3C5",
            "vault login -method=token S3C6",
            "sh -c 'echo S3C7 | docker login -u me --password-stdin reg'",
            "sh -c 'printf %s S3C8 | gh auth login --with-token'",
        ] {
            let words = shell::words(line);
            let got = command::masked(&words);
            assert!(!got.contains("S3C"), "{line}: {got}");
        }
        // What is no secret stays.
        let kept = "sh -c 'echo hello | tee out.txt'";
        assert_eq!(
            command::masked(&shell::words(kept)),
            "sh -c echo hello | tee out.txt"
        );
        let kept = "vault kv get -field=x secret/app";
        assert_eq!(command::masked(&shell::words(kept)), kept);
    }
}
