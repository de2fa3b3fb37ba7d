//! Each failure's line, from its fields: the words users and their scripts see.

use std::time::Duration;

use nix::sys::signal::Signal;

use crate::backend::{Fault, NodeError};
use crate::exit::{Failure, LostHow};
use crate::lock::{
    About, Crowd, Holder, HolderPid, Interruption, NotOwner, Refused, RenewError, Seen, Waited,
};
use crate::watchdog::Loss;

fn jobs() -> About {
    About::Lock("jobs".into())
}

fn build7(since_ms: i64) -> Box<Holder> {
    Box::new(Holder {
        host: Some("build-7".into()),
        pid: Some(HolderPid::Pid(4411)),
        since_ms: Some(since_ms),
        ..Holder::default()
    })
}

fn busy(seen: Seen, waited: Waited) -> String {
    Failure::Busy {
        about: jobs(),
        seen,
        waited,
    }
    .to_string()
}

fn held(pttl: i64, crowd: Option<Crowd>) -> Seen {
    Seen::Held {
        pttl,
        now_ms: 1_000_000,
        holder: build7(1_000_000 - 133_000),
        crowd,
    }
}

fn node(kind: Fault, detail: &str) -> NodeError {
    NodeError {
        kind,
        node: "redis://h:6379".into(),
        detail: detail.into(),
    }
}

#[test]
fn a_busy_lock_names_its_holder_and_how_long_the_wait_was() {
    assert_eq!(
        busy(held(28_000, None), Waited::For(Duration::from_secs(5))),
        "lock 'jobs' is busy (held by build-7 pid 4411 for 2m13s, expires in 28s); gave up after 5.0s"
    );
    assert_eq!(
        busy(held(-1, None), Waited::NotAtAll),
        "lock 'jobs' is busy (held by build-7 pid 4411 for 2m13s, never expires); not waiting (-n)"
    );
    // The holder's label (or command), as another user wrote it: escaped, and cut.
    let Seen::Held { mut holder, .. } = held(28_000, None) else {
        unreachable!()
    };
    holder.command = Some(format!("deploy #42\u{1b}[31m {}", "x".repeat(200)));
    let seen = Seen::Held {
        pttl: 28_000,
        now_ms: 1_000_000,
        holder,
        crowd: None,
    };
    let line = busy(seen, Waited::NotAtAll);
    assert!(
        line.starts_with(
            "lock 'jobs' is busy (held by build-7 pid 4411 for 2m13s (deploy #42\\x1b[31m xxx"
        ),
        "{line}"
    );
    assert!(
        line.ends_with("x…), expires in 28s); not waiting (-n)"),
        "{line}"
    );
    assert_eq!(
        busy(Seen::Handed, Waited::NotAtAll),
        "lock 'jobs' is being handed to a process waiting for it; not waiting (-n)"
    );
    assert_eq!(
        busy(Seen::Handed, Waited::For(Duration::from_millis(250))),
        "lock 'jobs' is being handed to processes that waited longer; gave up after 250ms"
    );
}

#[test]
fn a_busy_semaphore_or_shared_lock_counts_its_holders() {
    let crowd = |holders, limit, exclusive_ahead| {
        Some(Crowd {
            holders,
            limit,
            exclusive_ahead,
        })
    };
    assert_eq!(
        busy(held(-2, crowd(3, 3, false)), Waited::NotAtAll),
        "lock 'jobs' is busy (held 3/3, by build-7 pid 4411 for 2m13s and 2 others; the first lease just released); not waiting (-n)"
    );
    assert_eq!(
        busy(held(900, crowd(2, 0, false)), Waited::NotAtAll),
        "lock 'jobs' is busy (shared by build-7 pid 4411 for 2m13s and 1 other; the last lease expires in 900ms); not waiting (-n)"
    );
    assert_eq!(
        busy(held(900, crowd(1, 0, true)), Waited::NotAtAll),
        "lock 'jobs' is busy (shared by build-7 pid 4411 for 2m13s, and an exclusive request waits first: shared requests queue behind it; the last lease expires in 900ms); not waiting (-n)"
    );
}

fn lost(how: LostHow) -> String {
    Failure::Lost { about: jobs(), how }.to_string()
}

#[test]
fn a_lost_lock_says_why_and_what_the_command_was_sent() {
    let running = |loss| LostHow::Running {
        loss,
        signal: Signal::SIGTERM,
    };
    assert_eq!(
        lost(running(Loss::NotOwner(NotOwner::Taken))),
        "lost lock 'jobs' while the command ran: Redis says the token no longer owns it (another owner holds it); sent SIGTERM to everything the command started"
    );
    assert_eq!(
        lost(running(Loss::Replaced(node(
            Fault::WrongType,
            "WRONGTYPE Operation against a key"
        )))),
        "lost lock 'jobs' while the command ran: the key was replaced: WRONGTYPE Operation against a key; sent SIGTERM to everything the command started"
    );
    let ran_out = |last| Loss::RanOut {
        grace: Duration::from_secs(2),
        last,
    };
    assert_eq!(
        lost(running(ran_out(None))),
        "lost lock 'jobs' while the command ran: could not renew it before the last 2s of its lease (--grace) (no renewal succeeded); sent SIGTERM to everything the command started"
    );
    assert_eq!(
        lost(running(Loss::TooLate)),
        "lost lock 'jobs' while the command ran: the guardian stopped the command at the lease's moment, as the renewal came too late to reach it; sent SIGTERM to everything the command started"
    );
    let timeout = RenewError::Node(node(Fault::Timeout, "timed out"));
    assert_eq!(
        lost(running(ran_out(Some(timeout)))),
        "lost lock 'jobs' while the command ran: could not renew it before the last 2s of its lease (--grace) (redis://h:6379: timed out); sent SIGTERM to everything the command started"
    );
    assert_eq!(
        lost(LostHow::AtRelease),
        "lost lock 'jobs' while the command ran: it was no longer held by this token when the command ended (broken or expired between two renewals)"
    );
    assert_eq!(
        lost(LostHow::Inherited(NotOwner::Gone)),
        "lock 'jobs' inherited from the shell is no longer held (it expired or was deleted); not running the command"
    );
}

#[test]
fn a_renewal_error_is_the_node_and_what_it_said() {
    let io = std::io::Error::other("no threads left");
    assert_eq!(
        RenewError::NoThread(io).to_string(),
        "cannot start the renewal thread: no threads left"
    );
    assert_eq!(
        RenewError::Node(node(Fault::Connect, "refused")).to_string(),
        "redis://h:6379: refused"
    );
}

#[test]
fn a_refused_token_is_told_what_was_not_done() {
    let refused = |refused| {
        Failure::NotPermitted {
            about: jobs(),
            refused,
        }
        .to_string()
    };
    assert_eq!(
        refused(Refused::ReleaseHeldByOther),
        "lock 'jobs' is held by another owner, not by this token; nothing was changed (use --force to break it)"
    );
    assert_eq!(
        refused(Refused::ReleaseNotHeld),
        "lock 'jobs' is not held by this token: it expired or was broken before the release; nothing was changed"
    );
    assert_eq!(
        refused(Refused::Renew(NotOwner::NoMajority)),
        "lock 'jobs' is not held by this token (a majority of the Redlock nodes no longer hold it); it was not extended"
    );
}

#[test]
fn an_outage_and_an_interruption_read_as_before() {
    let outage = Failure::Outage {
        last: Box::new(Failure::redis(
            jobs(),
            node(Fault::Connect, "Connection refused"),
        )),
        waited: Duration::from_millis(1500),
        down_for: Duration::from_millis(1200),
    };
    assert_eq!(
        outage.to_string(),
        "Redis unavailable for lock 'jobs': redis://h:6379: Connection refused; check that the server is up and --url is right; gave up after 1.5s, Redis unavailable for the last 1.2s"
    );
    let interrupted = |when| {
        Failure::Interrupted {
            about: jobs(),
            signal: Signal::SIGINT,
            when,
        }
        .to_string()
    };
    assert_eq!(
        interrupted(Interruption::Waiting),
        "interrupted by SIGINT while waiting for lock 'jobs'"
    );
    assert_eq!(
        interrupted(Interruption::BeforeStart),
        "interrupted by SIGINT before the command started; lock 'jobs' released"
    );
}

#[test]
fn a_failure_stays_small_enough_to_return() {
    // clippy's result_large_err draws the line at 128 bytes.
    assert!(std::mem::size_of::<Failure>() <= 128);
}

#[test]
fn a_superseded_run_names_the_newer_one_and_exits_79() {
    let by = Box::new(Holder {
        host: Some("runner-3".into()),
        pid: Some(HolderPid::Pid(4411)),
        user: Some("ci".into()),
        command: Some("deploy #43".into()),
        since_ms: Some(5),
        ..Holder::default()
    });
    let waiting = Failure::Superseded {
        about: jobs(),
        by: by.clone(),
        running: None,
    };
    assert_eq!(
        waiting.to_string(),
        "lock 'jobs' was superseded by a newer run, ci@runner-3 pid 4411 (deploy #43): this run left the line"
    );
    assert_eq!(waiting.exit_code(75), 79);
    let running = Failure::Superseded {
        about: jobs(),
        by,
        running: Some(Signal::SIGTERM),
    };
    assert_eq!(
        running.to_string(),
        "lock 'jobs' was superseded by a newer run, ci@runner-3 pid 4411 (deploy #43): its command was stopped (SIGTERM) and the lock handed on"
    );
    assert_eq!(running.exit_code(69), 79);
}
