//! Command lines rlock suggests (the stale holder's "break it with: …"), and the shell
//! quoting they and `acquire --export` use.

use super::Context;
use crate::backend::split_urls;

impl Context {
    /// `rlock` and the global options that reach the locks this run reaches (servers, prefix,
    /// credentials' files, TLS files), for a command line rlock suggests: pasted, it acts on
    /// the same lock, not on one of the same name elsewhere. Options left at their defaults,
    /// and those that came from the environment (which will give them again), are left out; so
    /// a URL with a password is named only when it was given on the command line, redacted.
    pub fn rlock_line(&self) -> String {
        let g = &self.global;
        let from_env = |var: &str, value: &str| std::env::var(var).is_ok_and(|v| v == value);
        let mut line = String::from("rlock");
        let mut add = |flag: &str, value: Option<&str>| {
            line.push(' ');
            match value {
                Some(v) => {
                    let long = if flag == "-u" { "--url" } else { flag };
                    line.push_str(&option(flag, long, v))
                }
                None => line.push_str(flag),
            }
        };
        let env_urls = std::env::var("RLOCK_URL").ok().map(|v| split_urls(&v));
        if self.settings.urls != [crate::cli::DEFAULT_URL]
            && env_urls.as_ref() != Some(&self.settings.urls)
        {
            for url in &self.settings.urls {
                add("-u", Some(&crate::redact::redact(url)));
            }
        }
        if g.cluster && std::env::var_os("RLOCK_CLUSTER").is_none() {
            add("--cluster", None);
        }
        let named = [
            ("--sentinel", "RLOCK_SENTINEL", g.sentinel.as_deref()),
            ("--user", "RLOCK_USER", g.user.as_deref()),
            (
                "--password-command",
                "RLOCK_PASSWORD_COMMAND",
                g.password_command.as_deref(),
            ),
        ];
        for (flag, var, value) in named {
            if let Some(v) = value.filter(|v| !from_env(var, v)) {
                add(flag, Some(v));
            }
        }
        let files = [
            ("--password-file", "RLOCK_PASSWORD_FILE", &g.password_file),
            ("--tls-ca", "RLOCK_TLS_CA", &g.tls_ca),
            ("--tls-cert", "RLOCK_TLS_CERT", &g.tls_cert),
            ("--tls-key", "RLOCK_TLS_KEY", &g.tls_key),
        ];
        for (flag, var, path) in files {
            if let Some(path) = path.as_ref().map(|p| p.to_string_lossy())
                && !from_env(var, &path)
            {
                add(flag, Some(&path));
            }
        }
        if g.prefix != crate::cli::DEFAULT_PREFIX && !from_env("RLOCK_PREFIX", &g.prefix) {
            add("--prefix", Some(&g.prefix));
        }
        line
    }
}

/// An option and its value on a command line rlock prints, to run as printed: `-k jobs`, but
/// `--key=-x` for a value that begins with `-` (which `-k -x` would take for an option), the
/// value shell-quoted.
pub fn option(flag: &str, long: &str, value: &str) -> String {
    if value.starts_with('-') {
        format!("{long}={}", shell_quote(value))
    } else {
        format!("{flag} {}", shell_quote(value))
    }
}

/// Quotes a value for `eval` in sh, leaving plain words alone.
pub fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-.:/@%+,=".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::shell_quote;

    #[test]
    fn quotes_for_eval() {
        assert_eq!(shell_quote("jobs"), "jobs");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote("$(rm -rf /)"), "'$(rm -rf /)'");
    }
}
