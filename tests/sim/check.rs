//! The invariants, checked as the run goes: never more holders than the lock allows at one true
//! instant, fences that only rise, a line served in its order, and nothing left behind.
//!
//! A holder is a client that has been granted the lock and whose command has not been made to
//! stop: it stops when the client ends it (before its release), or once the SIGKILL its
//! supervisor's deadlines send (`holder.rs`: the lease timeline's kill moment, as the last
//! renewal moved it) has landed, whichever comes first. A command that ignores the lost-signal
//! runs that long, so that moment is what counts (the holder's `deadline` here).

use super::Micros;
use super::server::Call;
use super::store::{Data, Resp, Store};

/// What the lock allows at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allows {
    /// One holder.
    One,
    /// Up to N holders (`--limit N`).
    Up(usize),
    /// Shared holders together, or one exclusive holder alone (`--shared` beside plain).
    Readers,
}

#[derive(Debug)]
struct Holder {
    client: usize,
    token: String,
    shared: bool,
    fence: i64,
    start: Micros,
    /// When its command is stopped at the latest, as its supervisor last knew (true time): the
    /// SIGKILL of its lease's timeline, landed.
    deadline: Micros,
    /// When its command ended before that.
    end: Option<Micros>,
    /// When its lock was deleted behind its back (it no longer counts as a holder: a forced
    /// break lets the next one in by design; but its renewals must fail from then on).
    broken: Option<Micros>,
}

impl Holder {
    /// When its command was stopped (or will be, at the latest).
    fn stopped(&self) -> Micros {
        self.deadline.min(self.end.unwrap_or(Micros::MAX))
    }

    fn holds_at(&self, t: Micros) -> bool {
        self.start <= t
            && t < self.deadline
            && self.end.is_none_or(|e| t < e)
            && self.broken.is_none_or(|b| t < b)
    }
}

#[derive(Debug)]
pub struct Checker {
    pub allows: Allows,
    holders: Vec<Holder>,
    /// Tokens whose lock was deleted behind their backs, and when.
    broken: std::collections::HashMap<String, Micros>,
    /// Whether the line's order is checked (one Redis, exclusive).
    pub line: bool,
    /// Tokens a newer client displaced (`--newest`): none may ever hold.
    pub displaced: std::collections::HashSet<String>,
    /// Data may be lost (an empty restart, FLUSHALL, a failover that loses writes): two holders
    /// at once are its documented outcome, but the fence must still rise.
    pub lossy: bool,
    pub violation: Option<String>,
}

impl Checker {
    pub fn new(allows: Allows, line: bool) -> Self {
        Checker {
            allows,
            holders: Vec::new(),
            broken: Default::default(),
            line,
            displaced: Default::default(),
            lossy: false,
            violation: None,
        }
    }

    pub fn grants(&self) -> usize {
        self.holders.len()
    }

    /// Client `client` was granted the lock for `token` at `now`, by a try it sent at `sent`,
    /// its command stopped at `deadline` at the latest. Its number, or the invariant it breaks.
    /// (A grant that arrives after its deadline starts no command: the guardian kills it at
    /// once.)
    #[allow(clippy::too_many_arguments)]
    pub fn granted(
        &mut self,
        now: Micros,
        sent: Micros,
        client: usize,
        token: &str,
        shared: bool,
        fence: i64,
        deadline: Micros,
    ) -> (usize, Option<String>) {
        let beside: Vec<&Holder> = self
            .holders
            .iter()
            .filter(|h| h.holds_at(now) && h.client != client)
            // A grant that arrives after its deadline starts no command; one whose lock was
            // deleted before it arrived holds nothing.
            .filter(|_| now < deadline && !self.broken.contains_key(token))
            .collect();
        let names = || {
            beside
                .iter()
                .map(|h| {
                    format!(
                        "c{} ({}, fence {}, until {} us)",
                        h.client,
                        h.token,
                        h.fence,
                        h.deadline.min(h.end.unwrap_or(Micros::MAX))
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        };
        let mut broken = match self.allows {
            _ if self.lossy => None,
            Allows::One if !beside.is_empty() => Some(format!(
                "two holders: c{client} ({token}) was granted while {} held the lock",
                names()
            )),
            Allows::Up(n) if beside.len() >= n => Some(format!(
                "more than {n} holders: c{client} ({token}) was granted beside {}",
                names()
            )),
            Allows::Readers if beside.iter().any(|h| !h.shared || !shared) => Some(format!(
                "a writer beside a reader: c{client} ({token}, {}) was granted beside {}",
                if shared { "shared" } else { "exclusive" },
                names()
            )),
            _ => None,
        };
        // Fencing: a grant asked for after a hold ended carries a higher fence than it.
        if broken.is_none()
            && let Some(before) = self
                .holders
                .iter()
                .filter(|h| h.stopped() <= sent && h.fence >= fence)
                .max_by_key(|h| h.fence)
        {
            broken = Some(format!(
                "the fence went back: c{client} ({token}) got {fence}, asked for after {} ({}) had held with {}",
                before.client, before.token, before.fence
            ));
        }
        self.holders.push(Holder {
            client,
            token: token.to_string(),
            shared,
            fence,
            start: now,
            deadline,
            end: (now >= deadline).then_some(now),
            broken: self.broken.get(token).copied(),
        });
        (self.holders.len() - 1, broken)
    }

    /// The holder's rlock renewed, by a renewal sent at `sent`: its command now runs until
    /// `deadline`, unless it was stopped already (a renewal that comes after the deadline finds
    /// the command killed). A renewal sent after the lock was deleted behind the holder's back
    /// must not succeed: the invariant it breaks.
    pub fn renewed(
        &mut self,
        holder: usize,
        now: Micros,
        sent: Micros,
        deadline: Micros,
    ) -> Option<String> {
        let h = &mut self.holders[holder];
        if let Some(b) = h.broken
            && sent > b
            && h.end.is_none()
        {
            return Some(format!(
                "c{} ({}) renewed a lock deleted behind its back at {b} us",
                h.client, h.token
            ));
        }
        if h.end.is_none() && now < h.deadline {
            h.deadline = deadline;
        }
        None
    }

    /// The lock `token` held was deleted behind its back at `now` (whether or not its client
    /// has heard of its grant yet).
    pub fn broken(&mut self, token: &str, now: Micros) {
        self.broken.insert(token.to_string(), now);
        for h in self.holders.iter_mut().filter(|h| h.token == token) {
            h.broken.get_or_insert(now);
        }
    }

    /// The server granted `token` again (a duplicate of its try, arriving late): it holds.
    pub fn regranted(&mut self, token: &str) {
        self.broken.remove(token);
        for h in self.holders.iter_mut().filter(|h| h.token == token) {
            h.broken = None;
        }
    }

    /// The holder's command ended at `now` (or earlier, at its deadline).
    pub fn ended(&mut self, holder: usize, now: Micros) {
        let h = &mut self.holders[holder];
        if h.end.is_none() {
            h.end = Some(now.min(h.deadline));
        }
    }

    /// Whether some client was granted `token` (and heard of it).
    pub fn holds_token(&self, token: &str) -> bool {
        self.holders.iter().any(|h| h.token == token)
    }

    /// Whether holder `holder`'s lock was deleted behind its back.
    pub fn was_broken(&self, holder: usize) -> bool {
        self.holders[holder].broken.is_some()
    }

    /// The deadline holder `holder` runs until now.
    pub fn deadline(&self, holder: usize) -> Micros {
        self.holders[holder].deadline
    }

    /// After an acquire ran: a grant goes to the first of the line, or to a client when no one
    /// waits ahead of it. (Tokens that the script dropped from the line, dead or too late to
    /// claim, no longer wait.)
    pub fn line_order(
        &self,
        call: &Call,
        before: &Store,
        after: &Store,
        reply: &Resp,
        _now_ms: i64,
    ) -> Option<String> {
        if !self.line || call.name != "acquire" {
            return None;
        }
        let Resp::Array(items) = reply else {
            return None;
        };
        if items.first() != Some(&Resp::Bulk("ok".into())) {
            return None;
        }
        let token = call.arg("token")?;
        let queue = call.keys.get(2)?;
        // A try that finds the lock its own already (a retry, a duplicate) is no new grant.
        if matches!(before.data.get(call.keys.first()?), Some(Data::Str(held)) if held == token) {
            return None;
        }
        let line = |s: &Store| match s.data.get(queue) {
            Some(Data::ZSet(z)) => z.clone(),
            _ => Vec::new(),
        };
        let (was, is) = (line(before), line(after));
        let mine = was.iter().find(|(_, m)| m == token).map(|(s, _)| *s);
        let ahead: Vec<&String> = was
            .iter()
            .filter(|(score, m)| m != token && mine.is_none_or(|me| *score < me))
            .map(|(_, m)| m)
            .filter(|m| is.iter().any(|(_, still)| still == *m))
            .collect();
        (!ahead.is_empty())
            .then(|| format!("out of line: {token} was granted while {ahead:?} waited ahead of it"))
    }

    /// After an acquire ran: a token displaced by a newer client (`--newest`, answered
    /// "superseded" now or before) is never granted, and is out of the line.
    pub fn displacement(&mut self, call: &Call, after: &Store, reply: &Resp) -> Option<String> {
        let token = call.arg("token").filter(|_| call.name == "acquire")?;
        let Resp::Array(items) = reply else {
            return None;
        };
        if items.first() == Some(&Resp::Bulk("superseded".into())) {
            self.displaced.insert(token.clone());
        }
        // Every fate the scripts wrote (slot.lua's supersede) names a displaced token.
        if let Some(Data::Hash(state)) = after.data.get(call.keys.get(1)?) {
            let fates = state.keys().filter_map(|f| f.strip_prefix("x:"));
            self.displaced.extend(fates.map(str::to_string));
        }
        if !self.displaced.contains(token) {
            return None;
        }
        let queue = call.keys.get(2)?;
        let in_line = matches!(after.data.get(queue), Some(Data::ZSet(z)) if z.iter().any(|(_, m)| m == token));
        match (items.first(), in_line) {
            (Some(Resp::Bulk(w)), _) if w == "ok" => {
                Some(format!("a displaced waiter holds: {token} was granted"))
            }
            (_, true) => Some(format!("a displaced waiter is back in line: {token}")),
            _ => None,
        }
    }

    /// What is left in a store once every client has left and every lease and record could
    /// have expired: nothing but the history.
    pub fn leftovers(store: &Store) -> Option<String> {
        let left: Vec<&String> = store
            .data
            .keys()
            .filter(|k| !k.ends_with(":history"))
            .collect();
        (!left.is_empty()).then(|| format!("left in the store after every client left: {left:?}"))
    }
}

/// A try whose server granted and whose reply never reached its client in time.
#[derive(Debug)]
pub struct Orphan {
    pub client: usize,
    pub token: String,
    pub server: String,
    /// When its client stopped waiting for the reply.
    pub at: Micros,
    /// Given back (a `leave` was sent for its token) or granted to its client after all.
    pub settled: bool,
}

/// What the liveness invariants keep track of.
#[derive(Debug, Default)]
pub struct Live {
    /// When each client last met a fault.
    pub met: Vec<Option<Micros>>,
    pub orphans: Vec<Orphan>,
    /// Redlock: restart empty a master that a grant reached, while a master it missed misses
    /// it (at most one every `spacing`).
    pub restart_in_window: bool,
    pub spacing: Micros,
    pub last_restart: Option<Micros>,
    /// The run's --op-timeout (true time, with the clients' rate error).
    pub op_timeout: Micros,
}

/// What the invariants of `--hold-at-least` and `--once-per` keep track of (`terms.rs`).
#[derive(Debug, Default)]
pub struct Terms {
    /// Grants that asked for a hold: the server, the token, and when the hold ends (server ms).
    pub holds: Vec<(usize, String, i64)>,
    /// Windows marked done: the window's index, the run's token, when (true time).
    pub marks: Vec<(i64, String, Micros)>,
}
