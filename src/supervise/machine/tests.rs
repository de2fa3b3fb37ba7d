//! The supervisor's state machine against a scripted world: events at set times on a virtual
//! clock, and a log of what it sent and when. No process is touched.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::{Event, Supervisor, World};
use crate::lock::Silent;
use crate::lock::{Limit, NotOwner, Timeline};
use crate::supervise::{AFTER_KILL, Enforce, Outcome, Renewal};

use crate::watchdog::{Loss, Report};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// What the supervisor did, at which offset from the start.
type Log = Rc<RefCell<Vec<(Duration, String)>>>;

/// A world whose events come at set offsets from its start, on a clock that moves only to the
/// next event or deadline.
struct Script {
    start: Instant,
    now: Instant,
    events: VecDeque<(Duration, Event)>,
    /// What was done, at what offset: "all TERM", "group HUP", "job stop", "resume fg", ...
    log: Log,
    /// How long rlock stays stopped when it stops like a job (Ctrl-Z, then `fg`).
    stopped_for: Duration,
}

impl Script {
    fn new(events: Vec<(u64, Event)>) -> (Script, Log) {
        let start = Instant::now();
        let log = Rc::new(RefCell::new(Vec::new()));
        let script = Script {
            start,
            now: start,
            events: events.into_iter().map(|(at, e)| (ms(at), e)).collect(),
            log: log.clone(),
            stopped_for: Duration::ZERO,
        };
        (script, log)
    }

    fn note(&self, what: String) {
        self.log.borrow_mut().push((self.now - self.start, what));
    }
}

impl World for Script {
    fn now(&self) -> Instant {
        self.now
    }

    fn next(&mut self, until: Instant) -> Option<Event> {
        assert!(
            until - self.start < Duration::from_secs(24 * 3600),
            "the supervisor waits for ever: {:?}",
            self.log.borrow()
        );
        match self.events.front() {
            Some((at, _)) if self.start + *at <= until => {
                let (at, event) = self.events.pop_front().expect("an event");
                self.now = self.now.max(self.start + at);
                Some(event)
            }
            _ => {
                self.now = self.now.max(until);
                None
            }
        }
    }

    fn pending(&self) -> bool {
        self.events
            .front()
            .is_some_and(|(at, _)| self.start + *at <= self.now)
    }

    fn signal_group(&mut self, sig: Signal) {
        self.note(format!("group {}", &sig.as_str()[3..]));
    }

    fn signal_all(&mut self, sig: Signal) {
        self.note(format!("all {}", &sig.as_str()[3..]));
    }

    fn stop_like_a_job(&mut self, sig: Signal) -> Option<bool> {
        self.note(format!("job stop {}", &sig.as_str()[3..]));
        self.now += self.stopped_for;
        Some(true)
    }

    fn resume(&mut self, foreground: bool) {
        self.note(format!("resume {}", if foreground { "fg" } else { "bg" }));
    }

    fn lease_renewed(&mut self, lease: Timeline) {
        let at = (lease.kill_at - self.start).as_millis();
        self.note(format!("guardian deadline {at}"));
    }
}

/// A lease that ends at `end`: the lost-signal `grace` before, SIGKILL at the end (the
/// timeline's own kill margin is `Lease::timeline`'s, tested there).
fn timeline(end: Instant, grace: Duration) -> Timeline {
    Timeline {
        ends: end,
        signal_at: end - grace,
        kill_at: end,
    }
}

/// The supervisor over a script whose events `events` makes from the script's start: a lease
/// of `ttl` ms granted at the start (renewed every `ttl / 3` when `renews`), `grace` ms, rlock
/// stopped for `stopped_for` ms when it stops like a job. Its outcome, and everything it did
/// (in order, at which ms; the renewal's start and stop too).
fn run_with(
    ttl: u64,
    grace: u64,
    renews: bool,
    stopped_for: u64,
    events: impl FnOnce(Instant) -> Vec<(u64, Event)>,
) -> (Outcome, Vec<(u64, String)>) {
    let (mut script, log) = Script::new(vec![]);
    let start = script.start;
    script.events = events(start)
        .into_iter()
        .map(|(at, e)| (ms(at), e))
        .collect();
    script.stopped_for = ms(stopped_for);
    let enforce = Enforce {
        lease: Some(timeline(start + ms(ttl), ms(grace))),
        renew_at: renews.then(|| start + ms(ttl / 3)),
        grace: ms(grace),
        lost_signal: Signal::SIGTERM,
        time_limit: None,
    };
    let renewals = log.clone();
    let renewal = move |r: Renewal| {
        let what = match r {
            Renewal::Start => "renewal start",
            Renewal::Stop => "renewal stop",
        };
        renewals
            .borrow_mut()
            .push((Duration::ZERO, what.to_string()));
        Ok(())
    };
    let outcome = Supervisor::new(script, enforce, &Silent, renewal).run();
    let log = log
        .borrow()
        .iter()
        .map(|(at, what)| (at.as_millis() as u64, what.clone()))
        .collect();
    (outcome, log)
}

/// `run_with` for a renewed lease and events at fixed times.
fn run(ttl: u64, grace: u64, events: Vec<(u64, Event)>) -> (Outcome, Vec<(u64, String)>) {
    run_with(ttl, grace, true, 0, |_| events)
}

fn said(log: &[(u64, String)]) -> Vec<&str> {
    log.iter().map(|(_, what)| what.as_str()).collect()
}

fn when(log: &[(u64, String)], what: &str) -> u64 {
    log.iter()
        .find(|(_, w)| w == what)
        .unwrap_or_else(|| panic!("no {what:?} in {log:?}"))
        .0
}

#[test]
fn a_command_that_ends_with_nothing_left_ends_the_run_at_once() {
    let (out, log) = run(
        30_000,
        7_500,
        vec![(100, Event::Exited(3, None)), (100, Event::Empty)],
    );
    assert_eq!(out.code, 3);
    assert!(out.lost.is_none());
    assert!(log.is_empty(), "nothing is sent: {log:?}");
}

#[test]
fn renewal_starts_when_the_first_one_is_due_and_not_before() {
    let (out, log) = run(
        30_000,
        7_500,
        vec![(15_000, Event::Exited(0, None)), (15_000, Event::Empty)],
    );
    assert_eq!(out.code, 0);
    assert_eq!(said(&log), ["renewal start"]);
}

#[test]
fn a_lease_that_runs_out_signals_everything_grace_before_and_kills_at_the_deadline() {
    let (out, log) = run(
        3_000,
        1_000,
        vec![
            (3_050, Event::Exited(137, Some(Signal::SIGKILL))),
            (3_060, Event::Empty),
        ],
    );
    assert_eq!(
        said(&log),
        ["renewal start", "renewal stop", "all TERM", "all KILL"]
    );
    assert_eq!(when(&log, "all TERM"), 2_000);
    assert_eq!(when(&log, "all KILL"), 3_000);
    assert!(matches!(out.lost, Some(Loss::RanOut { .. })));
    assert_eq!(out.code, 137);
}

#[test]
fn a_renewal_moves_both_deadlines() {
    let (out, log) = run_with(3_000, 1_000, false, 0, |start| {
        vec![
            (
                500,
                Event::Watchdog(Report::Renewed {
                    lease: timeline(start + ms(6_000), ms(1_000)),
                }),
            ),
            // The command never ends by itself: it is killed at the moved deadline.
            (6_050, Event::Exited(137, Some(Signal::SIGKILL))),
            (6_060, Event::Empty),
        ]
    });
    assert_eq!(when(&log, "all TERM"), 5_000);
    assert_eq!(when(&log, "all KILL"), 6_000);
    // The guardian, which enforces the lease on its own clock, hears of the move at once.
    assert_eq!(when(&log, "guardian deadline 6000"), 500);
    assert!(matches!(out.lost, Some(Loss::RanOut { .. })));
}

/// A renewal rlock took just before the lease's moment that reached the guardian too late: the
/// guardian stops the command at the old moment on its own clock and says so. The run is lost
/// (76, said), not a command that died of TERM on its own (143, silent).
#[test]
fn a_guardian_that_stops_the_command_on_its_own_clock_makes_the_run_lost() {
    let (out, log) = run_with(3_000, 1_000, false, 0, |start| {
        vec![
            (
                1_990,
                Event::Watchdog(Report::Renewed {
                    lease: timeline(start + ms(6_000), ms(1_000)),
                }),
            ),
            (2_001, Event::OwnClock { limit: false }),
            (2_010, Event::Exited(143, Some(Signal::SIGTERM))),
            (2_010, Event::Empty),
        ]
    });
    assert!(matches!(out.lost, Some(Loss::TooLate)), "{:?}", out.lost);
    assert_eq!(when(&log, "all TERM"), 2_001);
    assert!(said(&log).contains(&"renewal stop"));
    assert_eq!(out.code, 143);
}

/// What outlived the leader got the lost-signal from rlock: the guardian's SIGKILL on its own
/// clock then keeps the lease's moment of that time, which later renewals do not move. The run
/// is not lost for it.
#[test]
fn the_guardians_kill_of_leftovers_on_its_own_clock_is_no_loss() {
    let (out, log) = run_with(3_000, 1_000, false, 0, |start| {
        vec![
            (1_000, Event::Exited(0, None)),
            (
                1_100,
                Event::Watchdog(Report::Renewed {
                    lease: timeline(start + ms(6_000), ms(1_000)),
                }),
            ),
            (1_900, Event::OwnClock { limit: false }),
            (1_910, Event::Empty),
        ]
    });
    assert_eq!(when(&log, "all TERM"), 1_000);
    assert!(out.lost.is_none(), "{:?}", out.lost);
    assert_eq!(out.code, 0);
}

/// The guardian's word at a moment rlock's own moments also say: rlock's own reason stands
/// (the lease ran out), and the time limit's word changes nothing.
#[test]
fn the_guardians_word_at_rlocks_own_moment_changes_nothing() {
    let (out, _) = run(
        3_000,
        1_000,
        vec![
            (2_000, Event::OwnClock { limit: false }),
            (2_010, Event::OwnClock { limit: true }),
            (2_020, Event::Exited(143, Some(Signal::SIGTERM))),
            (2_020, Event::Empty),
        ],
    );
    assert!(
        matches!(out.lost, Some(Loss::RanOut { .. })),
        "{:?}",
        out.lost
    );
}

#[test]
fn redis_saying_the_lock_is_gone_signals_at_once_and_kills_grace_later() {
    let (out, log) = run(
        30_000,
        500,
        vec![
            (
                1_000,
                Event::Watchdog(Report::Lost(Loss::NotOwner(NotOwner::Gone))),
            ),
            (1_600, Event::Exited(137, Some(Signal::SIGKILL))),
            (1_600, Event::Empty),
        ],
    );
    assert_eq!(when(&log, "all TERM"), 1_000);
    assert_eq!(when(&log, "all KILL"), 1_500);
    assert!(matches!(out.lost, Some(Loss::NotOwner(NotOwner::Gone))));
}

#[test]
fn renewals_that_come_after_the_loss_change_nothing() {
    let (out, log) = run_with(30_000, 500, false, 0, |start| {
        vec![
            (
                1_000,
                Event::Watchdog(Report::Lost(Loss::NotOwner(NotOwner::Taken))),
            ),
            (
                1_100,
                Event::Watchdog(Report::Renewed {
                    lease: timeline(start + ms(60_000), ms(500)),
                }),
            ),
            (1_600, Event::Exited(137, Some(Signal::SIGKILL))),
            (1_600, Event::Empty),
        ]
    });
    assert_eq!(said(&log), ["renewal stop", "all TERM", "all KILL"]);
    assert_eq!(
        when(&log, "all KILL"),
        1_500,
        "the late renewal moved the kill"
    );
    assert!(matches!(out.lost, Some(Loss::NotOwner(NotOwner::Taken))));
}

#[test]
fn what_the_command_leaves_running_is_stopped_before_the_run_ends() {
    let (out, log) = run(
        30_000,
        2_000,
        vec![(1_000, Event::Exited(3, None)), (3_010, Event::Empty)],
    );
    assert_eq!(said(&log), ["all TERM", "all KILL"]);
    assert_eq!(when(&log, "all TERM"), 1_000);
    assert_eq!(when(&log, "all KILL"), 3_000);
    assert_eq!(out.code, 3, "the command's own status");
    assert!(out.lost.is_none(), "the lock was not lost");
}

#[test]
fn leftovers_that_obey_the_lost_signal_cost_no_grace() {
    let (out, log) = run(
        30_000,
        2_000,
        vec![(1_000, Event::Exited(0, None)), (1_050, Event::Empty)],
    );
    assert_eq!(said(&log), ["all TERM"]);
    assert_eq!(out.code, 0);
}

#[test]
fn the_leaders_end_and_empty_told_together_are_no_leftovers() {
    let (_, log) = run(
        30_000,
        2_000,
        vec![(1_000, Event::Exited(0, None)), (1_000, Event::Empty)],
    );
    assert!(log.is_empty(), "a lost-signal for an empty tree: {log:?}");
}

#[test]
fn after_the_kill_the_run_ends_within_after_kill_even_if_something_lingers() {
    // The leader is gone, but the guardian never says that nothing else runs (a process stuck
    // in the kernel, say): the run ends AFTER_KILL after the SIGKILL, not never.
    let (script, log) = Script::new(vec![(3_010, Event::Exited(137, Some(Signal::SIGKILL)))]);
    let start = script.start;
    let enforce = Enforce {
        lease: Some(timeline(start + ms(3_000), ms(1_000))),
        renew_at: None,
        grace: ms(1_000),
        lost_signal: Signal::SIGTERM,
        time_limit: None,
    };
    let mut supervisor = Supervisor::new(script, enforce, &Silent, |_| Ok(()));
    let out = supervisor.step_to_end();
    assert_eq!(
        supervisor.world.now - start,
        ms(3_000) + AFTER_KILL,
        "{:?}",
        log.borrow()
    );
    assert!(out.lost.is_some());
}

#[test]
fn a_signal_is_passed_on_to_the_group_once_and_a_stopped_group_is_continued() {
    let (out, log) = run(
        30_000,
        7_500,
        vec![
            (100, Event::Signal(Signal::SIGHUP)),
            (200, Event::Stopped(Signal::SIGSTOP)),
            (300, Event::Signal(Signal::SIGUSR1)),
            (400, Event::Continued),
            (500, Event::Signal(Signal::SIGUSR2)),
            (600, Event::Exited(0, None)),
            (600, Event::Empty),
        ],
    );
    assert_eq!(
        said(&log),
        ["group HUP", "group USR1", "group CONT", "group USR2"]
    );
    assert_eq!(out.code, 0);
}

#[test]
fn ctrl_z_stops_rlock_like_a_job_and_continues_the_command_after() {
    let (_, log) = run(
        30_000,
        7_500,
        vec![
            (100, Event::Stopped(Signal::SIGTSTP)),
            (200, Event::Continued),
            (300, Event::Exited(0, None)),
            (300, Event::Empty),
        ],
    );
    assert_eq!(said(&log), ["job stop TSTP", "resume fg"]);
}

#[test]
fn a_lease_that_ran_out_while_rlock_was_stopped_is_not_continued() {
    // Ctrl-Z at 100 ms, `fg` 5 s later: the lease (3 s) ran out meanwhile. The command gets the
    // lost-signal and SIGKILL, never a SIGCONT of its own.
    let (out, log) = run_with(3_000, 1_000, false, 5_000, |_| {
        vec![
            (100, Event::Stopped(Signal::SIGTSTP)),
            (5_200, Event::Exited(137, Some(Signal::SIGKILL))),
            (5_200, Event::Empty),
        ]
    });
    assert_eq!(
        said(&log),
        ["job stop TSTP", "renewal stop", "all TERM", "all KILL"]
    );
    assert!(out.lost.is_some());
}

#[test]
fn a_time_limit_stops_everything_and_kills_grace_later_while_the_lock_is_kept() {
    // A command that ignores the lost-signal: SIGKILL ends it `grace` after its time limit. The
    // lease, renewed meanwhile, is not given up for lost.
    let (script, log) = Script::new(vec![
        (3_005, Event::Exited(137, Some(Signal::SIGKILL))),
        (3_010, Event::Empty),
    ]);
    let start = script.start;
    let enforce = Enforce {
        lease: Some(timeline(start + ms(30_000), ms(1_000))),
        renew_at: Some(start + ms(10_000)),
        grace: ms(1_000),
        lost_signal: Signal::SIGTERM,
        time_limit: Some(Limit {
            signal_at: start + ms(2_000),
            kill_at: start + ms(3_000),
        }),
    };
    let out = Supervisor::new(script, enforce, &Silent, |_| Ok(())).run();
    let log: Vec<(u64, String)> = log
        .borrow()
        .iter()
        .map(|(at, what)| (at.as_millis() as u64, what.clone()))
        .collect();
    assert_eq!(said(&log), ["all TERM", "all KILL"]);
    assert_eq!(
        (when(&log, "all TERM"), when(&log, "all KILL")),
        (2_000, 3_000)
    );
    assert!(out.timed_out);
    assert!(out.lost.is_none(), "the lock is still ours");
    assert!(!out.leftovers);
}
