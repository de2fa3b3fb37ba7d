//! One try at the lock, no wait (`-n`).

use std::time::Duration;

use super::sleep::{Slept, jitter, sleep};
use super::{Hooks, OUTAGE_BACKOFF_MAX, Tries, interrupted, superseded};
use crate::lock::call::acquire::Attempt;
use crate::lock::error::{About, Error, Seen, Waited};
use crate::lock::observe::Note;
use crate::lock::{Grant, LockKey};

/// One try at the lock, no wait (`-n`): `-n` concerns the lock, not the server, so a Redis that
/// cannot be reached yet, or has no room for another client (maxclients), is tried again for the
/// first contact, as any run does, and the first answer decides (a grant too few replicas
/// acknowledged is one: given back, 69 at once). A signal that came during the
/// request is answered once it returns (signals are not let interrupt rlock's system calls): a
/// failure then reports the signal.
pub(super) fn try_once(tries: &impl Tries, key: &LockKey, hooks: Hooks) -> Result<Grant, Error> {
    let busy = |seen: Seen| Error::Busy {
        about: About::from(key),
        seen,
        waited: Waited::NotAtAll,
    };
    let clock = tries.clock();
    let start = clock.now();
    let mut backoff = Duration::from_millis(50);
    let mut said = false;
    let attempt = loop {
        // No `while_trying` here: a single try (`-n`) finds the lock busy as often as not (the
        // same cron job on several hosts), and work made for a grant would then be undone at
        // once on the busy path.
        match tries.attempt(false, None) {
            Err(failure) if failure.is_transient() && !failure.is_short_of_replicas() => {
                if let Some(signal) = hooks.interrupt.take() {
                    return Err(interrupted(key, signal));
                }
                let Some(end) = start
                    .checked_add(tries.first_contact())
                    .filter(|&end| clock.now() < end)
                else {
                    return Err(Error::NeverReached {
                        last: Box::new(failure),
                        tried_for: clock.now().saturating_duration_since(start),
                    });
                };
                if !said {
                    said = true;
                    hooks.observer.observe(Note::OutageBegan {
                        key: &key.name,
                        failure: &failure,
                        first_contact: Some(tries.first_contact()),
                    });
                }
                let pause = backoff.mul_f64(0.75) + jitter(clock).min(backoff / 4);
                let until = (clock.now() + pause).min(end);
                if let Slept::Interrupted(signal) =
                    sleep(clock, &mut [], until, "", hooks.interrupt)
                {
                    return Err(interrupted(key, signal));
                }
                backoff = (backoff * 2).min(OUTAGE_BACKOFF_MAX);
            }
            attempt => break attempt,
        }
    };
    match attempt {
        Err(e) => Err(hooks
            .interrupt
            .take()
            .map_or(e, |sig| interrupted(key, sig))),
        Ok(Attempt::Granted(grant)) => Ok(grant),
        Ok(Attempt::Busy {
            pttl,
            now_ms,
            holder,
            crowd,
            ..
        }) => Err(busy(Seen::Held {
            pttl,
            now_ms,
            holder: Box::new(holder),
            crowd,
        })),
        Ok(Attempt::Queued { .. }) => Err(busy(Seen::Handed)),
        Ok(Attempt::Superseded { by }) => Err(superseded(key, by)),
    }
}
