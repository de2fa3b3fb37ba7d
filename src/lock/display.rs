//! How locks and holders read in messages and tables.

use std::fmt;

use super::Sharing;
use super::reply::Holder;
use crate::output::human_ms;

/// The kind of lock as a message names it: `a semaphore with --limit 3`.
impl fmt::Display for Sharing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Sharing::Exclusive => f.write_str("an exclusive lock (no --limit, or --limit 1)"),
            Sharing::Limit(n) => write!(f, "a semaphore with --limit {n}"),
            Sharing::Shared => f.write_str("a shared lock (--shared)"),
        }
    }
}

impl Holder {
    /// `alice@build-7 pid 4411 for 2m13s` or `another client (not rlock)`.
    pub fn describe(&self, now_ms: i64) -> String {
        match (&self.host, &self.pid) {
            (Some(host), Some(pid)) => {
                let mut s = match &self.user {
                    Some(u) => format!("{u}@{host} pid {pid}"),
                    None => format!("{host} pid {pid}"),
                };
                if let Some(since) = self.since_ms {
                    s.push_str(&format!(" for {}", human_ms(now_ms - since)));
                }
                s
            }
            _ => "another client (not rlock)".into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::lock::Sharing;

    #[test]
    fn kinds_of_lock() {
        assert_eq!(Sharing::Limit(3).to_string(), "a semaphore with --limit 3");
        assert_eq!(Sharing::Shared.to_string(), "a shared lock (--shared)");
        assert_eq!(
            Sharing::Exclusive.to_string(),
            "an exclusive lock (no --limit, or --limit 1)"
        );
    }
}
