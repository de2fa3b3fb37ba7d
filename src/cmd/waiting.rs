//! The lines a waiter prints with `-v`, so that a CI log shows a job waiting, not hung:
//!
//! ```text
//! rlock: waiting for lock 'deploy': held by ci@build-7 pid 4411 for 2m13s (https://ci/job/1); first in line
//! rlock: still waiting for lock 'deploy' after 1m00s: held by ci@build-7 pid 4411 for 3m13s (https://ci/job/1); first in line
//! rlock: still waiting for lock 'deploy' after 1m12s: now held by ci@build-8 pid 90 for 1.0s (./deploy.sh); first in line
//! ```
//!
//! Every field that came from Redis is escaped where the line is written (`output::message`).

use std::time::Duration;

use crate::lock::{Crowd, Seen, human_ms};

/// `waiting for lock 'deploy': held by …; first in line`
pub fn begins(key: &str, seen: &Seen, place: Option<i64>) -> String {
    format!(
        "waiting for lock '{key}': {}{}{}",
        holders(seen, false),
        gone(seen),
        line(place)
    )
}

/// `still waiting for lock 'deploy' after 1m00s: held by …; first in line`
pub fn goes_on(
    key: &str,
    waited: Duration,
    seen: &Seen,
    place: Option<i64>,
    new_holder: bool,
) -> String {
    format!(
        "still waiting for lock '{key}' after {}: {}{}{}",
        human_ms(waited.as_millis() as i64),
        holders(seen, new_holder),
        gone(seen),
        line(place)
    )
}

/// `, a run whose rlock is gone; its lease ends in 41s`: a holder on this host whose process is
/// no more (SIGKILLed with its guardian, say), which nothing but its lease's end frees.
fn gone(seen: &Seen) -> String {
    let Seen::Held { pttl, holder, .. } = seen else {
        return String::new();
    };
    let (Some(host), Some(pid)) = (&holder.host, holder.pid.as_ref().and_then(|p| p.number()))
    else {
        return String::new();
    };
    if *pttl < 0 || !crate::identity::process_gone(host, pid, holder.pidns.as_deref()) {
        return String::new();
    }
    format!(
        ", a run whose rlock is gone; its lease ends in {}",
        human_ms(*pttl)
    )
}

/// Who holds the lock: `held by alice@build-7 pid 4411 for 2m13s (./deploy.sh)`, with the
/// holder's label or command; for a semaphore or shared lock, the holder whose lease ends first
/// and how many others there are.
fn holders(seen: &Seen, new: bool) -> String {
    let Seen::Held {
        now_ms,
        holder,
        crowd,
        ..
    } = seen
    else {
        return "the lock is being handed to a process ahead in line".into();
    };
    let mut who = holder.describe(*now_ms);
    if let Some(what) = &holder.command {
        who.push_str(&format!(" ({what})"));
    }
    let others = match crowd {
        Some(Crowd { holders, .. }) if *holders == 2 => " and 1 other".to_string(),
        Some(Crowd { holders, .. }) if *holders > 2 => format!(" and {} others", holders - 1),
        _ => String::new(),
    };
    let verb = match crowd {
        Some(Crowd { limit: 0, .. }) => "shared by",
        _ => "held by",
    };
    let now = if new { "now " } else { "" };
    format!("{now}{verb} {who}{others}")
}

/// `; first in line`, `; 2 ahead in line`, or nothing where there is no line (Redlock).
fn line(place: Option<i64>) -> String {
    match place {
        Some(..=1) => "; first in line".into(),
        Some(n) => format!("; {} ahead in line", n - 1),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{Holder, HolderPid};

    fn held(command: Option<&str>, crowd: Option<Crowd>) -> Seen {
        Seen::Held {
            pttl: 20_000,
            now_ms: 1_000_000,
            holder: Box::new(Holder {
                host: Some("build-7".into()),
                pid: Some(HolderPid::Pid(4411)),
                user: Some("ci".into()),
                since_ms: Some(1_000_000 - 133_000),
                command: command.map(Into::into),
                pidns: None,
            }),
            crowd,
        }
    }

    #[test]
    fn the_lines_name_the_holder_and_the_place_in_line() {
        assert_eq!(
            begins("deploy", &held(Some("https://ci/job/1"), None), Some(1)),
            "waiting for lock 'deploy': held by ci@build-7 pid 4411 for 2m13s (https://ci/job/1); first in line"
        );
        assert_eq!(
            goes_on(
                "deploy",
                Duration::from_secs(60),
                &held(None, None),
                Some(3),
                true
            ),
            "still waiting for lock 'deploy' after 1m00s: now held by ci@build-7 pid 4411 for 2m13s; 2 ahead in line"
        );
        let crowd = Crowd {
            holders: 3,
            limit: 0,
            exclusive_ahead: false,
        };
        assert_eq!(
            begins("db", &held(Some("report"), Some(crowd)), None),
            "waiting for lock 'db': shared by ci@build-7 pid 4411 for 2m13s (report) and 2 others"
        );
        assert_eq!(
            begins("db", &Seen::Handed, Some(2)),
            "waiting for lock 'db': the lock is being handed to a process ahead in line; 1 ahead in line"
        );
    }
}
