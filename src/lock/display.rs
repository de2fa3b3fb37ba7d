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

/// A duration as a person reads it: its largest unit and the next, never finer than
/// milliseconds once it reaches one (`333ms`, not `333ms 333us 333ns`; `1s 500ms`, `2m 14s`,
/// `365d`). The words humantime reads back (`--ttl 2m 14s`).
pub fn human_duration(d: std::time::Duration) -> String {
    const UNITS: [(u128, &str); 7] = [
        (86_400_000_000_000, "d"),
        (3_600_000_000_000, "h"),
        (60_000_000_000, "m"),
        (1_000_000_000, "s"),
        (1_000_000, "ms"),
        (1_000, "us"),
        (1, "ns"),
    ];
    const MS: usize = 4;
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    let largest = UNITS
        .iter()
        .position(|(u, _)| *u <= ns)
        .unwrap_or(UNITS.len() - 1);
    let finest = if largest >= MS { largest } else { largest + 1 };
    let step = UNITS[finest].0;
    let mut left = (ns + step / 2) / step * step;
    let mut words = Vec::new();
    for (unit, name) in UNITS {
        if left >= unit {
            words.push(format!("{}{name}", left / unit));
            left %= unit;
        }
    }
    words.join(" ")
}

#[cfg(test)]
mod tests {
    use super::{human_duration, human_ms};
    use std::time::Duration;

    #[test]
    fn durations_read_as_a_person_reads_them() {
        let cases = [
            (Duration::from_nanos(333_333_333), "333ms"),
            (Duration::from_nanos(1_333_333_333), "1s 333ms"),
            (Duration::from_millis(1500), "1s 500ms"),
            (Duration::from_millis(133_500), "2m 14s"),
            (Duration::from_secs(30), "30s"),
            (Duration::from_secs(365 * 86_400), "365d"),
            (Duration::from_secs(86_400 + 5400), "1d 2h"),
            (Duration::from_micros(500), "500us"),
            (Duration::from_nanos(59_999_600_000), "1m"),
            (Duration::ZERO, "0s"),
        ];
        for (d, want) in cases {
            assert_eq!(human_duration(d), want, "{d:?}");
            assert!(humantime::parse_duration(want).is_ok(), "{want}");
        }
    }
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
