//! The parsers of option values: durations with their units and bounds, non-empty names, and
//! signals by name or number. Each refuses with a message that says what to write instead.

use std::time::Duration;

use nix::sys::signal::Signal;

/// Parses a humantime duration; a plain number is seconds (`10`, `2.5`), as `flock -w` and
/// `timeout` read it.
pub fn duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if let Some(seconds) = plain_seconds(s) {
        return Duration::try_from_secs_f64(seconds)
            .map_err(|_| format!("'{s}' is too long: at most 365d"));
    }
    if s.starts_with('-') {
        return Err(format!("'{s}' is negative: durations must be positive"));
    }
    humantime::parse_duration(s).map_err(|e| {
        let why = match e {
            humantime::DurationError::UnknownUnit { unit, .. } => {
                format!("unknown unit '{unit}': use ms, s, m, h or d")
            }
            e => e.to_string(),
        };
        format!(
            "'{s}' is not a duration ({why}); try e.g. 30s, 250ms, 5m, '1h 30m' or 30 (seconds)"
        )
    })
}

/// `10` or `2.5`: digits with at most one decimal point, which `duration` reads as seconds.
fn plain_seconds(s: &str) -> Option<f64> {
    let digits = s.chars().filter(char::is_ascii_digit).count();
    let points = s.chars().filter(|&c| c == '.').count();
    if digits == 0 || points > 1 || digits + points != s.chars().count() {
        return None;
    }
    s.parse().ok()
}

/// A duration of at least one millisecond.
pub fn positive_duration(s: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    if d < Duration::from_millis(1) {
        return Err(format!("'{s}' is too short: it must be at least 1ms"));
    }
    Ok(d)
}

/// A lease: at least 1ms, at most 365 days (Redis and its Lua scripts count in milliseconds).
pub fn ttl_duration(s: &str) -> Result<Duration, String> {
    let d = positive_duration(s)?;
    if d > Duration::from_secs(365 * 86_400) {
        return Err(format!("'{s}' is too long: at most 365d"));
    }
    Ok(d)
}

/// A window of `exec --once-per`: at least a second (a window shorter than a round trip and a
/// run has no sense), at most 365 days.
pub fn once_window(s: &str) -> Result<Duration, String> {
    let d = duration(s)?;
    if d < Duration::from_secs(1) {
        return Err(format!("'{s}' is too short for --once-per: at least 1s"));
    }
    if d > Duration::from_secs(365 * 86_400) {
        return Err(format!("'{s}' is too long for --once-per: at most 365d"));
    }
    Ok(d)
}

/// `acquire --once-per`: refused, whatever its value. A window is done when its command
/// succeeded, and `acquire` runs none.
pub fn once_without_command(_: &str) -> Result<Duration, String> {
    Err("--once-per is for `rlock exec --once-per DUR -- CMD`: a window is done when its command succeeds, and acquire runs none".into())
}

/// A connect and command timeout: at least 1ms, at most an hour.
pub fn op_timeout(s: &str) -> Result<Duration, String> {
    let d = positive_duration(s)?;
    if d > Duration::from_secs(3600) {
        return Err(format!("'{s}' is too long for a timeout: at most 1h"));
    }
    Ok(d)
}

/// How often `inspect --watch` looks: at least 100ms (as watch(1)), so that a typo such as
/// `--watch 1ms` does not keep Redis busy.
pub fn watch_interval(s: &str) -> Result<Duration, String> {
    let d = positive_duration(s)?;
    if d < Duration::from_millis(100) {
        return Err(format!("'{s}' is too short for --watch: at least 100ms"));
    }
    if d > Duration::from_secs(365 * 86_400) {
        return Err(format!("'{s}' is too long: at most 365d"));
    }
    Ok(d)
}

pub(super) fn non_empty(what: &'static str) -> impl Fn(&str) -> Result<String, String> + Clone {
    move |s: &str| {
        if s.trim().is_empty() {
            Err(format!(
                "the {what} must not be empty or only blanks (got '{s}')"
            ))
        } else if s.chars().any(char::is_control) {
            // Clap quotes the value as it is, and a newline in it splits the message: shown
            // escaped here, where it can be seen.
            Err(format!(
                "the {what} must not hold control characters (a newline, a tab): got '{}'",
                s.escape_debug()
            ))
        } else {
            Ok(s.to_string())
        }
    }
}

/// `signal` with the usual signal names as possible values, so that the generated completions
/// offer them; parsing stays `signal`'s (numbers, `SIG` prefixes and lower case pass too), and
/// `hide_possible_values` keeps the list out of `--help`. A `PossibleValuesParser` would refuse
/// `15` and `sigterm`.
#[derive(Clone)]
pub(super) struct SignalParser;

impl clap::builder::TypedValueParser for SignalParser {
    type Value = Signal;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<Signal, clap::Error> {
        signal.parse_ref(cmd, arg, value)
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        const NAMES: [&str; 8] = ["TERM", "INT", "HUP", "QUIT", "KILL", "USR1", "USR2", "ALRM"];
        Some(Box::new(
            NAMES.into_iter().map(clap::builder::PossibleValue::new),
        ))
    }
}

/// Parses `TERM`, `SIGTERM`, `term` or `15`.
pub fn signal(s: &str) -> Result<Signal, String> {
    let bad =
        || format!("'{s}' is not a signal: use a name such as TERM, INT, HUP, KILL, or a number");
    if let Ok(n) = s.parse::<i32>() {
        return Signal::try_from(n).map_err(|_| bad());
    }
    let upper = s.to_ascii_uppercase();
    let name = if upper.starts_with("SIG") {
        upper
    } else {
        format!("SIG{upper}")
    };
    name.parse::<Signal>().map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(duration("1h 30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(duration("30").unwrap(), Duration::from_secs(30));
        assert_eq!(duration("2.5").unwrap(), Duration::from_millis(2500));
        assert_eq!(duration("0").unwrap(), Duration::ZERO);
        assert!(duration("1.2.3").is_err());
        assert!(duration(".").is_err());
        assert!(positive_duration("0").unwrap_err().contains("too short"));
        assert!(ttl_duration("1e9").is_err());
        assert!(
            ttl_duration("99999999999")
                .unwrap_err()
                .contains("too long")
        );
        assert!(duration("-5s").is_err());
        assert!(positive_duration("0s").is_err());
        assert!(ttl_duration("300000000y").unwrap_err().contains("too long"));
        assert!(ttl_duration("-5s").unwrap_err().contains("negative"));
        assert_eq!(watch_interval("2s").unwrap(), Duration::from_secs(2));
        assert!(
            watch_interval("10ms")
                .unwrap_err()
                .contains("at least 100ms")
        );
        assert_eq!(watch_interval("2").unwrap(), Duration::from_secs(2));
    }

    #[test]
    fn signals() {
        assert_eq!(signal("TERM").unwrap(), Signal::SIGTERM);
        assert_eq!(signal("sigusr1").unwrap(), Signal::SIGUSR1);
        assert_eq!(signal("9").unwrap(), Signal::SIGKILL);
        assert!(signal("BOGUS").is_err());
    }
}
