//! The liveness invariants, beside the safety ones of `check.rs`: a grant nobody saw is given
//! back, a holder that meets no fault keeps its lease, the line survives every release, and what
//! is left once every client has gone. Also the faults a run times on purpose: a Redlock master
//! restarted empty while a grant that missed another master holds (the restart rule's window).
//!
//! "A fault met" is anything that can make a request late or lost for a client: a message of
//! its lost, cut, slowed or caught in a spike; a request that timed out or met a frozen, down or
//! restarted server; any fault of a server (every client uses every server); a pause of its own.

use super::Micros;
use super::check::Orphan;
use super::model::Fault;
use super::server::Call;
use super::store::{Data, Store};
use super::world::{Kind, World};

/// How long after its client stopped waiting a grant nobody saw must have been given back, beyond
/// one --op-timeout: the give-back is sent at once (every request of a try times out at once),
/// or, when a Redlock majority granted after all, the grant is held once the fences are raised
/// (one more request, within --op-timeout); one millisecond of true time is room for the rest.
/// A paused client sends it once resumed.
pub const GIVE_BACK_WITHIN: Micros = 1_000;

/// How many --op-timeouts a bounded wait (`-w`) may run past its deadline: a try begun before
/// it runs to its end (Redlock: who each master is, the try, the give-back of a try that won
/// too few votes; one Redis: the try and the give-back of one whose reply never came), and a
/// waiter that gives up then leaves the line (one more).
pub const WAIT_OVERRUN_TRIES: Micros = 4;

impl World {
    /// Records a broken invariant found once the run is over (when `violation` no longer
    /// records: the threads are ending).
    pub fn violation_at_end(&mut self, what: String) {
        self.shutdown = false;
        self.violation(what);
        self.shutdown = true;
    }

    /// Client `client` met a fault now.
    pub fn met(&mut self, client: usize) {
        let now = self.now;
        if let Some(m) = self.live.met.get_mut(client) {
            *m = Some(now);
        }
    }

    /// Every client met a fault now (a fault of a server).
    pub fn all_met(&mut self) {
        let now = self.now;
        for m in &mut self.live.met {
            *m = Some(now);
        }
    }

    /// Fault `f` is met by the clients it touches.
    pub fn fault_met(&mut self, f: &Fault) {
        match *f {
            Fault::Cut { client, .. }
            | Fault::Heal { client, .. }
            | Fault::Slow { client, .. }
            | Fault::Pause { client, .. }
            | Fault::Resume(client) => self.met(client),
            _ => self.all_met(),
        }
    }

    /// Request `req` timed out: if its server granted it, the grant is an orphan, which its
    /// client must give back.
    pub fn timed_out(&mut self, req: usize) {
        let r = &self.requests[req];
        let client = r.client;
        let granted = r.call.name == "acquire"
            && matches!((&r.reply, r.call.replicated), (Some(Ok(v)), Some(when)) if when(v));
        let token = r.call.arg("token").cloned();
        let server = self.servers[r.server].name.clone();
        self.met(client);
        if let (true, Some(token)) = (granted, token) {
            let at = self.now;
            self.live.orphans.push(Orphan {
                client,
                token,
                server,
                at,
                settled: false,
            });
            let orphan = self.live.orphans.len() - 1;
            let by = at + self.live.op_timeout + GIVE_BACK_WITHIN;
            self.at(by, Kind::GiveBack { orphan });
        }
    }

    /// Client `client` sends `call`: a give-back settles its orphans of that token.
    pub fn sending(&mut self, client: usize, call: &Call) {
        if call.name != "leave" {
            return;
        }
        let Some(token) = call.arg("token") else {
            return;
        };
        for o in &mut self.live.orphans {
            if o.client == client && &o.token == token {
                o.settled = true;
            }
        }
    }

    /// The time for orphan `orphan`'s give-back is up.
    pub fn check_give_back(&mut self, orphan: usize) {
        let o = &self.live.orphans[orphan];
        if o.settled || self.check.holds_token(&o.token) {
            return;
        }
        let paused = self.clients[o.client].paused_until;
        let bound = self.live.op_timeout + GIVE_BACK_WITHIN;
        if paused + bound > self.now {
            self.at(paused + bound, Kind::GiveBack { orphan });
            return;
        }
        let v = format!(
            "a grant nobody saw was not given back: {}'s grant of {} to c{}, whose reply it \
             stopped waiting for at {} us, was neither given back nor held {} us later \
             (--op-timeout and 1 ms)",
            o.server,
            o.token,
            o.client,
            o.at,
            self.live.op_timeout + GIVE_BACK_WITHIN
        );
        self.violation(v);
    }

    /// Client `client`'s wait, begun at `began` (when its pauses had lasted `paused_then`)
    /// with its `-w` ending at `deadline` (true time), ended now: past its deadline by no more
    /// than its last try and give-back, and the time its client was paused meanwhile.
    pub fn wait_ended(
        &mut self,
        client: usize,
        began: Micros,
        paused_then: Micros,
        deadline: Micros,
    ) {
        let paused = self.clients[client].paused_for - paused_then;
        let bound =
            deadline + WAIT_OVERRUN_TRIES * self.live.op_timeout + GIVE_BACK_WITHIN + paused;
        if self.now > bound {
            let v = format!(
                "a wait ran past its deadline: c{client}'s wait, begun at {began} us with -w ending \
                 at {deadline} us, ended at {} us, more than {WAIT_OVERRUN_TRIES} --op-timeouts \
                 and 1 ms later (beside {paused} us paused)",
                self.now
            );
            self.violation(v);
        }
    }

    /// Holder `holder` of client `client` had its lease run out (the supervisor gave the lock up
    /// for lost) before its command ended, at `now`: the invariant it breaks unless it met a fault since its try was sent at
    /// `sent` (or its lock was deleted behind its back).
    pub fn lease_lost(&mut self, client: usize, holder: usize, sent: Micros) {
        if self.shutdown || self.check.was_broken(holder) {
            return;
        }
        if self.live.met[client].is_some_and(|m| m >= sent) {
            return;
        }
        let v = format!(
            "a holder lost its lease to no fault: c{client}'s command was stopped at its lease \
             deadline, though no fault touched it or a server since its try was sent at {sent} us"
        );
        self.violation(v);
    }

    /// The line after a release: every waiter in it before is in it still, but the releasing
    /// token and waiters nobody listens for (dead or gone: release.lua drops them).
    pub fn check_line_kept(&mut self, server: usize, call: &Call, before: &Store) {
        if call.name != "release" {
            return;
        }
        let (Some(queue), Some(token), Some(channel)) =
            (call.keys.get(2), call.arg("token"), call.arg("channel"))
        else {
            return;
        };
        let line = |s: &Store| match s.data.get(queue) {
            Some(Data::ZSet(z)) => z.iter().map(|(_, m)| m.clone()).collect(),
            _ => Vec::new(),
        };
        let after = line(&self.servers[server].store);
        let lost: Vec<String> = line(before)
            .into_iter()
            .filter(|m| m != token && !after.contains(m))
            .filter(|m| {
                let own = format!("{channel}:{m}");
                self.servers[server]
                    .listeners
                    .get(&own)
                    .is_some_and(|who| !who.is_empty())
            })
            .collect();
        if !lost.is_empty() {
            let v = format!(
                "the line did not survive a release: {token}'s release on {} dropped {lost:?}, \
                 who listened for their turn",
                self.servers[server].name
            );
            self.violation(v);
        }
    }

    /// Redlock: client `client` holds `token` now; if its grant missed a master, restart empty,
    /// soon, one of the masters it reached (never two restarts within `spacing`).
    pub fn restart_in_window(&mut self, token: &str, ttl: Micros) {
        if !self.live.restart_in_window
            || self
                .live
                .last_restart
                .is_some_and(|l| self.now < l + self.live.spacing)
        {
            return;
        }
        let key = self.lock_key.clone();
        let holds = |s: &Store| matches!(s.data.get(&key), Some(Data::Str(t)) if t == token);
        let reached: Vec<usize> = (0..self.servers.len())
            .filter(|s| self.servers[*s].up && holds(&self.servers[*s].store))
            .collect();
        if reached.len() == self.servers.len() || reached.is_empty() {
            return;
        }
        let s = reached[self.rng.range(0, reached.len() as u64 - 1) as usize];
        let at = self.now + self.rng.range(0, ttl / 4);
        let down = self.rng.range(1_000, ttl / 4);
        self.live.last_restart = Some(at);
        self.at(at, Kind::Fault(Fault::Crash(s)));
        self.at(
            at + down,
            Kind::Fault(Fault::Restart {
                server: s,
                keep: false,
            }),
        );
    }
}

/// What is left of a store once every client has left and every lease could have ended (no
/// key expired that would not have by then): nothing of the lock itself. Its record, the history
/// and the line may stay longer: the record keeps the fence for a minute after the lease, and a
/// waiter whose give-up was lost stays in line until the line's own expiry; `--once-per`'s
/// window record lives two windows and a minute.
pub fn left_after_leases(store: &Store) -> Option<String> {
    let left: Vec<&String> = store
        .data
        .keys()
        .filter(|k| {
            !["history", "state", "q", "once"]
                .iter()
                .any(|h| k.ends_with(&format!(":{h}")))
        })
        .collect();
    (!left.is_empty()).then(|| {
        format!(
            "left in the store once every client left and every lease could have ended: {left:?}"
        )
    })
}
