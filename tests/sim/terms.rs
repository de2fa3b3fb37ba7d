//! The invariants of the terms a run can ask for beside the lock, checked by the server's own
//! clock and the scripts' effects, not by what the clients say:
//!
//! - `--hold-at-least`: a grant that asked for a hold is given to no other token before the
//!   hold ends (the grant's server time plus the hold), whatever its holder did meanwhile (a
//!   release before then leaves the lock taken). A grant given back by the try's own client,
//!   which never saw it (leave.lua, "released"), is void, its hold with it.
//! - `--once-per`: a window marked done is not run again: no run starts its command for that
//!   window, or an earlier one, once another run's mark is on the server (one Redis: once.lua's
//!   mark applied), or acknowledged to its run (with --replicas: a mark the replica has not
//!   acknowledged may be lost in a failover). A run whose mark was lost leaves its window open:
//!   documented.
//!
//! Holds are checked on one Redis (a grant and a hold on the server that granted them).

use super::server::Call;
use super::store::{Data, Resp, Store};
use super::world::World;

fn says(reply: &Resp, word: &str) -> bool {
    matches!(reply, Resp::Array(items) if items.first() == Some(&Resp::Bulk(word.into())))
}

impl World {
    /// After `call` ran on `server` (whose store was `before`) and answered `reply`.
    pub fn check_terms(&mut self, server: usize, call: &Call, before: &Store, reply: &Resp) {
        let now_ms = self.servers[server].clock_us(self.now) / 1000;
        let Some(token) = call.arg("token").cloned() else {
            return;
        };
        // A try that finds the lock its own already (a retry, a duplicate) is no new grant.
        let own = call
            .keys
            .first()
            .is_some_and(|k| matches!(before.data.get(k), Some(Data::Str(t)) if *t == token));
        if call.name == "leave" && says(reply, "released") {
            self.terms
                .holds
                .retain(|(s, t, _)| *s != server || *t != token);
        } else if call.name == "acquire" && says(reply, "ok") && !own {
            // One millisecond of room: the scripts read the clock in whole milliseconds.
            let cut = self
                .terms
                .holds
                .iter()
                .find(|(s, t, until)| *s == server && *t != token && now_ms + 1 < *until)
                .cloned();
            if let Some((_, held, until)) = cut {
                let name = self.servers[server].name.clone();
                self.violation(format!(
                    "a hold was cut short: {token} was granted on {name} at {now_ms} ms, \
                     before {held}'s --hold-at-least ended at {until} ms"
                ));
            }
            if let Some(hold) = call.arg("hold").and_then(|h| h.parse::<i64>().ok()) {
                self.terms.holds.push((server, token, now_ms + hold));
            }
        } else if call.name == "once"
            && call.arg("op").is_some_and(|op| op == "mark")
            && says(reply, "marked")
            && self.replicas == 0
            && let Some(window) = call.arg("window").and_then(|w| w.parse().ok())
        {
            let now = self.now;
            self.terms.marks.push((window, token, now));
        }
    }

    /// Run `token` was told its mark of window `window` is done (`--once-per`).
    pub fn once_marked(&mut self, token: &str, window: i64) {
        let now = self.now;
        self.terms.marks.push((window, token.to_string(), now));
    }

    /// Run `token` starts its command for window `window` (`--once-per`).
    pub fn once_starts(&mut self, token: &str, window: i64) {
        let done = self
            .terms
            .marks
            .iter()
            .find(|(w, t, _)| *w >= window && t != token)
            .cloned();
        if let Some((marked, by, at)) = done {
            self.violation(format!(
                "a window done was run again: {token} starts window {window}'s command, which \
                 {by}'s mark of window {marked} covered at {at} us"
            ));
        }
    }
}
