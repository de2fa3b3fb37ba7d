//! How locks and holders read in messages and tables.

use std::fmt;

use super::Sharing;
use super::reply::Holder;

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

/// A short human duration: `850ms`, `4.2s`, `28s`, `2m13s`, `1h05m`.
pub fn human_ms(ms: i64) -> String {
    let ms = ms.max(0);
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 10_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else if ms < 60_000 {
        format!("{}s", ms / 1000)
    } else if ms < 3_600_000 {
        format!("{}m{:02}s", ms / 60_000, (ms / 1000) % 60)
    } else {
        format!("{}h{:02}m", ms / 3_600_000, (ms / 60_000) % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::human_ms;
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

    #[test]
    fn human_durations() {
        assert_eq!(human_ms(850), "850ms");
        assert_eq!(human_ms(4200), "4.2s");
        assert_eq!(human_ms(133_000), "2m13s");
        assert_eq!(human_ms(3_900_000), "1h05m");
    }
}
