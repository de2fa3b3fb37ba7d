//! What a waiter tells its observer while it waits: once when the wait begins, then, for an
//! observer that hears progress (`-v`), 10 seconds into the wait, 20 seconds after each line
//! while the wait is younger than 30 seconds and 60 seconds after each line later (10s, 30s,
//! 1m30s, ...), and whenever a try finds a new holder. The lines are built from what the waiter's own
//! tries saw: telling costs Redis nothing, and a waiter that tells wakes at most once more per
//! line (a CI log shows a blocked job waiting, not hung).

use std::time::{Duration, Instant};

use crate::lock::observe::{Note, Observer};
use crate::lock::{Holder, Seen};

/// When the first progress line comes, counted from the start of the wait.
const FIRST: Duration = Duration::from_secs(10);
/// The wait's age before which lines come `SOON` apart, and `EVERY` apart after.
const YOUNG: Duration = Duration::from_secs(30);
const SOON: Duration = Duration::from_secs(20);
const EVERY: Duration = Duration::from_secs(60);

/// What a wait has told and what it last saw.
pub(super) struct Progress {
    start: Instant,
    /// What the last busy try saw, and when.
    last: Option<(Seen, Instant)>,
    /// The waiter's place in line, as the last try that said so gave it.
    place: Option<i64>,
    /// Who the last line named (None: nobody known, or the lock being handed over).
    told: Option<Who>,
    /// When the next progress line is due.
    next: Instant,
}

/// A holder as far as telling one from the next goes.
#[derive(PartialEq, Eq)]
struct Who(Option<String>, Option<String>, Option<i64>);

impl Who {
    fn of(seen: &Seen) -> Option<Who> {
        match seen {
            Seen::Held { holder, .. } => Some(Who::from(holder.as_ref())),
            Seen::Handed => None,
        }
    }
}

impl From<&Holder> for Who {
    fn from(h: &Holder) -> Self {
        Who(
            h.host.clone(),
            h.pid.as_ref().map(ToString::to_string),
            h.since_ms,
        )
    }
}

impl Progress {
    pub(super) fn new(start: Instant) -> Self {
        Progress {
            start,
            last: None,
            place: None,
            told: None,
            next: start + FIRST,
        }
    }

    /// A try found the lock busy (`seen`, and the place in line if the reply gave it). The
    /// first says the wait begins; a later one with a new holder, or one that comes when a
    /// line is due, says the wait goes on.
    pub(super) fn busy(
        &mut self,
        key: &str,
        seen: Seen,
        place: Option<i64>,
        to: &dyn Observer,
        now: Instant,
    ) {
        self.place = place.or(self.place);
        let who = Who::of(&seen);
        let first = self.last.is_none();
        let new_holder = !first && who.is_some() && who != self.told;
        self.last = Some((seen, now));
        if who.is_some() {
            self.told = who;
        }
        if first {
            let (seen, _) = self.last.as_ref().expect("just set");
            to.observe(Note::WaitBegins {
                key,
                seen,
                place: self.place,
            });
        } else if new_holder || now >= self.next {
            self.tell(key, new_holder, to, now);
        }
    }

    /// When the waiter should wake to tell how its wait goes, if its observer listens.
    pub(super) fn due(&self, to: &dyn Observer) -> Option<Instant> {
        (to.hears_progress() && self.last.is_some()).then_some(self.next)
    }

    /// Tells how the wait goes, from what the last try saw, aged to `now`. A line that was due
    /// puts the next a gap later; news of a new holder in between leaves the schedule alone.
    pub(super) fn tell(&mut self, key: &str, new_holder: bool, to: &dyn Observer, now: Instant) {
        let waited = now.saturating_duration_since(self.start);
        if now >= self.next {
            self.next = now + gap(waited);
        }
        let Some((seen, at)) = &self.last else {
            return;
        };
        if !to.hears_progress() {
            return;
        }
        let seen = aged(seen, now.saturating_duration_since(*at));
        to.observe(Note::StillWaiting {
            key,
            waited,
            seen: &seen,
            place: self.place,
            new_holder,
        });
    }
}

/// The time from a line told `waited` into the wait to the next.
fn gap(waited: Duration) -> Duration {
    if waited < YOUNG { SOON } else { EVERY }
}

/// `seen` as it would read `by` later: the holder held it that much longer, its lease has that
/// much less left.
fn aged(seen: &Seen, by: Duration) -> Seen {
    let by_ms = by.as_millis() as i64;
    match seen {
        Seen::Held {
            pttl,
            now_ms,
            holder,
            crowd,
        } => Seen::Held {
            pttl: if *pttl >= 0 {
                (pttl - by_ms).max(0)
            } else {
                *pttl
            },
            now_ms: now_ms + by_ms,
            holder: holder.clone(),
            crowd: *crowd,
        },
        Seen::Handed => Seen::Handed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_come_at_10s_30s_then_every_minute() {
        let s = Duration::from_secs;
        assert_eq!(FIRST, s(10));
        assert_eq!(s(10) + gap(s(10)), s(30));
        assert_eq!(s(30) + gap(s(30)), s(90));
        assert!(gap(s(3600)) <= s(60), "at least once a minute");
    }
}
