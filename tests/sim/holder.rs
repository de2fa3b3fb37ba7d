//! One simulated holder: the grant's command runs while the library's renewal thread
//! (`watchdog::renew_loop`) keeps the lease, and is stopped at the moments the binary's
//! supervisor and guardian count down to: the lease's timeline (`Lease::timeline`), moved by
//! each renewal's, kept by the supervisor's own deadlines (`supervise::seams::Deadlines`), the
//! lost-signal and SIGKILL included. Then, with `--once-per`, the window is marked done (a run
//! that succeeded), and the lock is released (with `--hold-at-least`, release.lua keeps it).
//!
//! What is the simulation's own: how long the command runs and whether it succeeds (a command
//! ignores the lost-signal, the worst case), and how long a SIGKILL takes to land: the whole kill
//! margin the docs give it (docs/exec.md: a tenth of the TTL, at least 50 ms, at most half the
//! grace), counted here from the documented rule, not from the library's `kill_margin`.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rlock::lock::seams::Bug;
use rlock::lock::{Lease, LockKey, Locker, Sharing, Timeline, Window};
use rlock::supervise::seams::Deadlines;
use rlock::watchdog::{self, Loss, Report};

use super::Micros;
use super::seams::{SimClock, spawn};
use super::world::{Sim, me};

/// How long a SIGKILL sent at the lease's kill moment may take to land, by the docs: the
/// command is counted as running until then.
pub fn kill_lands_within(lease: &Lease) -> Duration {
    (lease.ttl / 10)
        .max(Duration::from_millis(50))
        .min(lease.grace / 2)
}

/// Who holds: the client, how it shares the lock, the bug planted in its code.
#[derive(Debug, Clone, Copy)]
pub struct Who {
    pub client: usize,
    pub sharing: Sharing,
    pub plant: Option<Bug>,
}

/// What the supervisor knows of one hold: its deadlines, whether the lock is given up for lost,
/// and the renewal thread's stop (dropped when the lock is given up).
struct Watch {
    deadlines: Deadlines,
    lost: bool,
    stop: Option<mpsc::Sender<()>>,
}

impl Watch {
    /// When the command is stopped at the latest, in true time, as things stand: SIGKILL's
    /// moment and the time it may take to land (or `was`, once SIGKILL has gone).
    fn stopped_by(&self, clock: &SimClock, lands: Duration, was: Micros) -> Micros {
        self.deadlines
            .kill_at()
            .map_or(was, |kill| clock.true_of(kill + lands))
    }
}

/// With `--once-per`: the window the run `token` fires in, by the server's clock, unless a run
/// did its work already (or the look failed: the run fails) and this round ends here.
pub fn fired(sim: &Sim, locker: &Locker, key: &LockKey, len: Duration, c: usize) -> Option<Window> {
    match locker.once_look(key, len) {
        Ok(look) => {
            let window = Window::at(look.now_ms, len);
            let done = look.done_for(window).cloned();
            let mut w = sim.lock();
            match done {
                Some(done) => {
                    w.note(format!(
                        "c{c}: window {} done already (by {:?}), skipped",
                        window.index, done.run
                    ));
                    None
                }
                None => {
                    w.note(format!("c{c}: fired in window {}", window.index));
                    Some(window)
                }
            }
        }
        Err(e) => {
            sim.lock()
                .note(format!("c{c}: the window's look failed: {e:?}"));
            None
        }
    }
}

/// Holds a grant: the command runs until it ends or is stopped by the lease's moments, the
/// renewal thread renews, the window is marked (`--once-per`), then the lock is released.
pub fn hold(
    sim: &Arc<Sim>,
    locker: &Arc<Locker>,
    clock: &Arc<SimClock>,
    plan: Who,
    lease: Lease,
    grant: rlock::lock::Grant,
    window: Option<Window>,
) {
    let c = plan.client;
    let ttl_us = lease.ttl.as_micros() as Micros;
    let lands = kill_lands_within(&lease);
    // The grant's moments, as exec makes them once and tells the guardian at its launch.
    let first: Timeline = lease.timeline(grant.sent);
    let watch = Arc::new(Mutex::new(Watch {
        deadlines: Deadlines::new(Some(first), lease.grace),
        lost: false,
        stop: None,
    }));
    let first_stop = clock.true_of(first.kill_at + lands);
    let (holder, sent) = {
        let mut w = sim.lock();
        if w.shutdown {
            return;
        }
        let now = w.now;
        let shared = plan.sharing == Sharing::Shared;
        let sent = clock.true_of(grant.sent);
        let (id, broken) =
            w.check
                .granted(now, sent, c, &grant.token, shared, grant.fence, first_stop);
        w.note(format!(
            "c{c} HOLDS {} (fence {}) until {first_stop} us",
            grant.token, grant.fence
        ));
        if let Some(v) = broken {
            w.violation(v);
        }
        w.restart_in_window(&grant.token, ttl_us);
        (id, sent)
    };
    if let Some(window) = window {
        // A run that held the lock while this one waited may have done the window's work.
        let done = match locker.once_look(&grant.key, window.len) {
            Ok(look) => look.done_for(window).is_some(),
            Err(e) => {
                sim.lock()
                    .note(format!("c{c}: the window's look failed: {e:?}"));
                true
            }
        };
        if done {
            {
                let mut w = sim.lock();
                let now = w.now;
                w.check.ended(holder, now);
                w.note(format!("c{c}: window {} done meanwhile", window.index));
            }
            let released = locker.release(&grant.key, &grant.token);
            sim.lock()
                .note(format!("c{c} release of {}: {released:?}", grant.token));
            return;
        }
        sim.lock().once_starts(&grant.token, window.index);
    }
    let (length, succeeds) = {
        let mut w = sim.lock();
        let length = match w.rng.range(0, 2) {
            0 => w.rng.range(ttl_us / 20, ttl_us / 2),
            1 => w.rng.range(ttl_us, ttl_us * 3),
            _ => w.rng.range(ttl_us * 3, ttl_us * 6),
        };
        (length, w.rng.range(0, 3) > 0)
    };
    let (stop, stopped) = mpsc::channel::<()>();
    watch.lock().expect("the watch").stop = Some(stop);
    let me = me();
    let renewer = {
        let (sim2, locker, clock2, grant, watch2) = (
            sim.clone(),
            locker.clone(),
            clock.clone(),
            grant.clone(),
            watch.clone(),
        );
        spawn(sim, c, plan.plant, move || {
            let report = |r: Report| {
                let mut w = sim2.lock();
                let now = w.now;
                let mut watch = watch2.lock().expect("the watch");
                // As the supervisor (`Machine::handle`): reports once the lock is given up
                // for lost change nothing.
                match r {
                    Report::Renewed { lease: moments } => {
                        if !watch.lost {
                            watch.deadlines.renewed(moments);
                        }
                        let usable = lease.ttl - rlock::lock::drift(lease.ttl);
                        let sent = clock2.true_of(moments.ends - usable);
                        let by = watch.stopped_by(&clock2, lands, w.check.deadline(holder));
                        w.note(format!("c{c} renewed, stopped by {by} us"));
                        if let Some(v) = w.check.renewed(holder, now, sent, by) {
                            w.violation(v);
                        }
                    }
                    Report::Lost(why) if !watch.lost => {
                        // Stopped for a newer run (`--cancel-running`): its lease ends by
                        // design, which the liveness check must not count as a lease lost to
                        // no fault.
                        if matches!(why, Loss::Superseded(_)) {
                            w.live.met[c] = Some(now);
                        }
                        watch.lost = true;
                        watch.stop = None;
                        watch.deadlines.lock_lost(clock2.at(now));
                        let by = watch.stopped_by(&clock2, lands, w.check.deadline(holder));
                        w.note(format!("c{c} lost: {why:?}, stopped by {by} us"));
                        if let Some(v) = w.check.renewed(holder, now, 0, by) {
                            w.violation(v);
                        }
                        w.poke(me);
                    }
                    other => w.note(format!("c{c} renewal: {other:?}")),
                }
            };
            watchdog::renew_loop(&locker, &grant, lease, stopped, report);
        })
    };
    let ends = clock.now_true() + length;
    // When the SIGKILL that stopped the command landed (true time), if one did.
    let killed = loop {
        let (now, over, told) = {
            let w = sim.lock();
            (w.now, w.shutdown, w.check.deadline(holder))
        };
        if over {
            break None;
        }
        if now >= told && now < ends {
            // The guardian's SIGKILL landed at the moment it was last told, while this rlock,
            // stopped, took a renewal too late to tell it (exec's `Loss::TooLate`): the lock is
            // given up for lost, the command is gone.
            let mut watch = watch.lock().expect("the watch");
            watch.lost = true;
            watch.stop = None;
            break Some(told);
        }
        let (due, next) = {
            let mut watch = watch.lock().expect("the watch");
            let due = watch.deadlines.due(clock.at(now));
            if due.runs_out {
                // No renewal came in time: the lock is given up for lost, the lost-signal goes
                // (the command ignores it), and the renewals stop.
                watch.lost = true;
                watch.stop = None;
            }
            (due, watch.deadlines.next())
        };
        if due.runs_out {
            let mut w = sim.lock();
            w.note(format!("c{c} lease of {} ran out", grant.token));
            if now < ends {
                w.lease_lost(c, holder, sent);
            }
        }
        if due.kill {
            break Some(clock.true_of(clock.at(now) + lands));
        }
        if now >= ends {
            break None;
        }
        let end = clock.at(ends);
        clock.sleep(next.map_or(end, |n| n.min(end)));
    };
    if let Some(landed) = killed {
        // SIGKILL went: the command is gone once it has landed.
        sim.lock()
            .note(format!("c{c} command of {} killed", grant.token));
        clock.sleep(clock.at(landed));
    }
    {
        let mut w = sim.lock();
        let now = w.now;
        w.check.ended(holder, now);
        w.note(format!("c{c} command of {} ended", grant.token));
    }
    let stop = watch.lock().expect("the watch").stop.take();
    drop(stop);
    sim.lock().poke(renewer);
    sim.join(me, renewer);
    let lost = watch.lock().expect("the watch").lost;
    if let Some(window) = window
        && succeeds
        && killed.is_none()
        && !lost
    {
        let marked = locker.once_mark(&grant.key, &grant.token, window, "sim", &grant.token);
        let mut w = sim.lock();
        w.note(format!(
            "c{c} mark of window {} by {}: {marked:?}",
            window.index, grant.token
        ));
        if matches!(marked, Ok(true)) {
            w.once_marked(&grant.token, window.index);
        }
    }
    let released = locker.release(&grant.key, &grant.token);
    sim.lock()
        .note(format!("c{c} release of {}: {released:?}", grant.token));
}
