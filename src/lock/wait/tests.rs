//! Unit tests of the wait's state machine, against a scripted `Node` (no server): what a waiter
//! does with each answer the acquire script can give, with outages, and with its deadline; and
//! against scripted `Tries` (no node at all): the loop alone, given the answers of its tries.
//! The outcomes are read as the user gets them, as `Failure`s (their words and codes are exit's).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Mutex;

use redis::Value;

use super::*;
use crate::backend::{Fault, Node, NodeError, Script};
use crate::exit::{Code, Failure};
use crate::lock::Ttl;
use crate::lock::test_request::with_request;

/// A node that answers the acquire script from a list, and everything else (the give-back)
/// with "left". It has no pub/sub (as if the ACL refused it): a waiter sleeps until the lease it
/// was told of ends.
struct Scripted {
    answers: Mutex<VecDeque<Result<Value, NodeError>>>,
}

impl Scripted {
    fn new(answers: Vec<Result<Value, NodeError>>) -> Self {
        Scripted {
            answers: Mutex::new(answers.into()),
        }
    }
}

impl Node for Scripted {
    fn eval(
        &self,
        script: &Script,
        _keys: &[&str],
        _args: &[&str],
        _timeout: Duration,
    ) -> Result<Value, NodeError> {
        if script.name != "acquire" {
            return Ok(bulk("left"));
        }
        self.answers
            .lock()
            .unwrap()
            .pop_front()
            .expect("the test scripted too few answers")
    }

    fn scan(&self, _: &str, _: Duration) -> Result<Vec<String>, NodeError> {
        Ok(Vec::new())
    }

    fn subscriber(&self, _: &str, _: &str, _: Duration) -> Result<Subscriber, NodeError> {
        Err(fault(Fault::Denied, "no pub/sub here"))
    }

    fn name(&self) -> &str {
        "scripted"
    }
}

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

fn fault(kind: Fault, detail: &str) -> NodeError {
    NodeError {
        kind,
        node: "scripted".into(),
        detail: detail.into(),
    }
}

fn granted(fence: i64) -> Result<Value, NodeError> {
    Ok(Value::Array(vec![
        bulk("ok"),
        bulk("fence"),
        Value::Int(fence),
        bulk("ttl"),
        Value::Int(30_000),
    ]))
}

fn busy(pttl_ms: i64) -> Result<Value, NodeError> {
    Ok(Value::Array(vec![
        bulk("busy"),
        bulk("pttl"),
        Value::Int(pttl_ms),
        bulk("now"),
        Value::Int(1_000),
    ]))
}

/// No signal ever comes.
struct Calm;

impl Interrupt for Calm {
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    fn take(&self) -> Option<Signal> {
        None
    }
}

/// Keeps what it was told, as text.
#[derive(Default)]
struct Heard(RefCell<Vec<String>>);

impl Observer for Heard {
    fn observe(&self, note: Note<'_>) {
        let kind = match note {
            Note::WaitBegins { .. } => "wait begins",
            Note::StillWaiting { .. } => "still waiting",
            Note::OutageBegan { .. } => "outage began",
            Note::OutageEnded { .. } => "outage ended",
            Note::ServerFull { .. } => "server full",
            Note::RoomAgain { .. } => "room again",
            Note::RenewalFailed { .. } => "renewal failed",
            Note::RenewedLate { .. } => "renewed late",
            Note::Spread { .. } => "spread",
        };
        self.0.borrow_mut().push(kind.into());
    }
}

/// Runs one acquire against a node that gives `answers`, with `policy`: the outcome, what was
/// heard, and how long it took.
fn acquire(
    answers: Vec<Result<Value, NodeError>>,
    policy: WaitPolicy,
) -> (Result<Grant, Failure>, Vec<String>, Duration) {
    let node = Scripted::new(answers);
    let locker = Locker::new(vec![Box::new(node)], Duration::from_millis(100));
    let heard = Heard::default();
    let hooks = Hooks {
        interrupt: &Calm,
        observer: &heard,
    };
    let start = Instant::now();
    let outcome = with_request(|req| locker.acquire(req, policy, hooks)).map_err(Failure::from);
    let took = start.elapsed();
    (outcome, heard.0.into_inner(), took)
}

fn forever() -> WaitPolicy {
    WaitPolicy {
        wait: None,
        no_wait: false,
    }
}

#[test]
fn a_busy_lock_is_tried_again_when_its_lease_ends_then_granted() {
    let (outcome, heard, took) = acquire(vec![busy(40), busy(40), granted(7)], forever());
    let grant = outcome.expect("granted");
    assert_eq!(grant.fence, 7);
    assert_eq!(grant.ttl, Ttl::Asked(Duration::from_secs(30)));
    // The first busy answer subscribes and tries again at once; the second sleeps its 40 ms.
    assert!(took >= Duration::from_millis(40), "{took:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(heard, ["wait begins"]);
}

#[test]
fn an_outage_is_ridden_out_and_said_once_when_it_begins_and_ends() {
    let answers = vec![
        Err(fault(Fault::Connect, "Connection refused")),
        Err(fault(Fault::Timeout, "timed out")),
        Err(fault(Fault::NotServing, "LOADING")),
        granted(9),
    ];
    let (outcome, heard, took) = acquire(answers, forever());
    assert_eq!(outcome.expect("granted after the outage").fence, 9);
    assert_eq!(heard, ["outage began", "outage ended"]);
    // Backoff 50 ms, then 100 ms, then 200 ms, each less up to a quarter: at least ~260 ms.
    assert!(took >= Duration::from_millis(250), "{took:?}");
}

#[test]
fn a_bounded_wait_gives_up_busy_at_its_deadline() {
    let policy = WaitPolicy {
        wait: Some(Duration::from_millis(80)),
        ..forever()
    };
    let (outcome, _, took) = acquire(vec![busy(60_000), busy(60_000), busy(60_000)], policy);
    match outcome {
        Err(busy @ Failure::Busy { .. }) => {
            assert_eq!(busy.exit_code(75), 75);
            let message = busy.to_string();
            assert!(message.contains("gave up after"), "{message}");
        }
        other => panic!("expected busy, got {other:?}"),
    }
    assert!(
        took >= Duration::from_millis(80) && took < Duration::from_secs(1),
        "{took:?}"
    );
}

#[test]
fn a_wait_that_ends_during_an_outage_is_unavailable() {
    let policy = WaitPolicy {
        wait: Some(Duration::from_millis(120)),
        ..forever()
    };
    let answers = (0..20)
        .map(|_| Err(fault(Fault::Connect, "Connection refused")))
        .collect();
    let (outcome, heard, _) = acquire(answers, policy);
    match outcome {
        Err(outage @ Failure::Outage { .. }) => {
            let message = outage.to_string();
            assert!(
                message.contains("Redis unavailable throughout"),
                "{message}"
            )
        }
        other => panic!("expected unavailable, got {other:?}"),
    }
    assert_eq!(heard, ["outage began"]);
}

#[test]
fn an_error_that_never_heals_ends_the_wait_at_once() {
    let (outcome, heard, took) = acquire(
        vec![Err(fault(
            Fault::Tls(crate::backend::TlsRefusal::Untrusted),
            "invalid peer certificate: UnknownIssuer",
        ))],
        forever(),
    );
    assert!(
        matches!(&outcome, Err(f) if f.code() == Some(Code::Config)),
        "{outcome:?}"
    );
    assert!(heard.is_empty(), "{heard:?}");
    assert!(took < Duration::from_millis(50), "{took:?}");
}

#[test]
fn no_wait_answers_busy_at_once() {
    let policy = WaitPolicy {
        no_wait: true,
        ..forever()
    };
    let (outcome, heard, _) = acquire(vec![busy(60_000)], policy);
    match outcome {
        Err(busy @ Failure::Busy { .. }) => {
            let message = busy.to_string();
            assert!(message.ends_with("not waiting (-n)"), "{message}")
        }
        other => panic!("expected busy, got {other:?}"),
    }
    assert!(heard.is_empty());
}

/// Tries that answer from a list, with no node under them: the wait's loop alone. They count
/// the times the waiter left the line and hung up, keep whether each try asked to join the
/// line, and have no wake channel (a waiter sleeps until the lease or claim window it was told
/// of ends); a subscription fails as listed, and succeeds once the list is out.
struct Listed {
    answers: RefCell<VecDeque<Result<Attempt, Error>>>,
    subscriptions: RefCell<VecDeque<Error>>,
    joins: RefCell<Vec<bool>>,
    left: std::cell::Cell<usize>,
    hung_up: std::cell::Cell<usize>,
}

impl Listed {
    fn new(answers: Vec<Result<Attempt, Error>>) -> Self {
        Listed {
            answers: RefCell::new(answers.into()),
            subscriptions: RefCell::default(),
            joins: RefCell::default(),
            left: std::cell::Cell::new(0),
            hung_up: std::cell::Cell::new(0),
        }
    }

    /// The same, its first subscriptions failing with `failures`.
    fn subscribing(self, failures: Vec<Error>) -> Self {
        Listed {
            subscriptions: RefCell::new(failures.into()),
            ..self
        }
    }
}

impl Tries for Listed {
    fn attempt(&self, join: bool, _within: Option<Duration>) -> Result<Attempt, Error> {
        self.joins.borrow_mut().push(join);
        self.answers
            .borrow_mut()
            .pop_front()
            .expect("the test listed too few answers")
    }

    fn leave(&self, _within: Option<Duration>) {
        self.left.set(self.left.get() + 1);
    }

    fn subscribe(&self, _within: Option<Duration>) -> Result<Vec<Subscriber>, Error> {
        match self.subscriptions.borrow_mut().pop_front() {
            Some(failure) => Err(failure),
            None => Ok(Vec::new()),
        }
    }

    fn hang_up(&self) {
        self.hung_up.set(self.hung_up.get() + 1);
    }

    fn races(&self) -> bool {
        false
    }

    fn first_contact(&self) -> Duration {
        Duration::from_millis(100)
    }

    fn clock(&self) -> &dyn crate::clock::Clock {
        &crate::clock::System
    }
}

/// Waits by `tries`, with `policy` and `interrupt`: the outcome, as the user gets it, and how
/// long it took.
fn wait_by(
    tries: &Listed,
    policy: WaitPolicy,
    interrupt: &dyn Interrupt,
) -> (Result<Grant, Failure>, Duration) {
    let key = LockKey::new("rlock:", "jobs").unwrap();
    let hooks = Hooks {
        interrupt,
        observer: &crate::lock::Silent,
    };
    let start = Instant::now();
    let outcome = wait_for(tries, &key, "tok", policy, hooks).map_err(Failure::from);
    (outcome, start.elapsed())
}

fn handed(wait_ms: i64) -> Result<Attempt, Error> {
    Ok(Attempt::Queued { wait_ms })
}

fn grant(fence: i64) -> Result<Attempt, Error> {
    Ok(Attempt::Granted(Grant {
        key: LockKey::new("rlock:", "jobs").unwrap(),
        token: "tok".into(),
        fence,
        ttl: Ttl::Asked(Duration::from_secs(30)),
        sent: Instant::now(),
    }))
}

fn down() -> Result<Attempt, Error> {
    let error = fault(Fault::Connect, "Connection refused");
    Err(Error::redis(About::Lock("jobs".into()), error))
}

#[test]
fn a_lock_handed_to_another_is_tried_again_when_its_claim_window_ends() {
    let tries = Listed::new(vec![handed(30), handed(30), grant(4)]);
    let (outcome, took) = wait_by(&tries, forever(), &Calm);
    assert_eq!(outcome.expect("granted").fence, 4);
    // The first answer subscribes and tries again at once; the second sleeps out the window.
    assert!(took >= Duration::from_millis(30), "{took:?}");
    assert_eq!(
        tries.left.get(),
        0,
        "a waiter that got the lock leaves no line"
    );
}

#[test]
fn a_run_that_never_reaches_redis_gives_up_after_its_first_contact() {
    let tries = Listed::new((0..20).map(|_| down()).collect());
    let (outcome, took) = wait_by(&tries, forever(), &Calm);
    match outcome {
        Err(f @ Failure::NeverReached { .. }) => {
            assert_eq!(f.code(), Some(Code::Unavailable));
            let message = f.to_string();
            assert!(message.contains("without reaching it once"), "{message}");
        }
        other => panic!("expected never reached, got {other:?}"),
    }
    assert!(took >= Duration::from_millis(100), "{took:?}");
    // Redis never answered: the waiter does not leave the line again (a try that got no
    // answer has already tried).
    assert_eq!(tries.left.get(), 0);
}

#[test]
fn no_wait_rides_out_a_first_contact_then_answers() {
    let once = WaitPolicy {
        no_wait: true,
        ..forever()
    };
    let tries = Listed::new(vec![down(), down(), grant(7)]);
    let (outcome, _) = wait_by(&tries, once.clone(), &Calm);
    assert_eq!(outcome.expect("granted after the outage").fence, 7);

    let tries = Listed::new((0..20).map(|_| down()).collect());
    let (outcome, took) = wait_by(&tries, once, &Calm);
    match outcome {
        Err(f @ Failure::NeverReached { .. }) => assert_eq!(f.code(), Some(Code::Unavailable)),
        other => panic!("expected never reached, got {other:?}"),
    }
    assert!(took >= Duration::from_millis(100), "{took:?}");
    assert_eq!(tries.left.get(), 0, "a single try never joins the line");
}

/// A SIGTERM, from the second look on.
struct TermSoon(std::cell::Cell<u32>);

impl Interrupt for TermSoon {
    fn fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }

    fn take(&self) -> Option<Signal> {
        self.0.set(self.0.get() + 1);
        (self.0.get() > 1).then_some(Signal::SIGTERM)
    }
}

#[test]
fn a_signal_ends_the_wait_and_the_waiter_leaves_the_line() {
    let tries = Listed::new(vec![handed(60_000), handed(60_000)]);
    let (outcome, took) = wait_by(&tries, forever(), &TermSoon(Default::default()));
    match outcome {
        Err(f @ Failure::Interrupted { .. }) => assert_eq!(f.exit_code(75), 143),
        other => panic!("expected interrupted, got {other:?}"),
    }
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert_eq!(tries.left.get(), 1, "the waiter leaves the line once");
}

fn full() -> Error {
    let error = fault(Fault::Full, "max number of clients reached");
    Error::redis(About::Lock("jobs".into()), error)
}

fn busy_attempt() -> Result<Attempt, Error> {
    Ok(Attempt::Busy {
        pttl: 60_000,
        now_ms: 1_000,
        holder: Default::default(),
        lease_ms: None,
        crowd: None,
        place: None,
    })
}

/// A waiter takes a place in line only once it can hear its wake-up: one that the server has no
/// room to subscribe (maxclients) waits out of line, having hung up its other connection to
/// make room, and joins once subscribed; it says so with -v only.
#[test]
fn a_waiter_joins_the_line_only_once_subscribed() {
    let tries =
        Listed::new(vec![busy_attempt(), busy_attempt(), grant(5)]).subscribing(vec![full()]);
    let key = LockKey::new("rlock:", "jobs").unwrap();
    let heard = Heard::default();
    let hooks = Hooks {
        interrupt: &Calm,
        observer: &heard,
    };
    let grant = wait_for(&tries, &key, "tok", forever(), hooks).expect("granted");
    assert_eq!(grant.fence, 5);
    assert_eq!(*tries.joins.borrow(), [false, false, true]);
    assert_eq!(
        tries.hung_up.get(),
        1,
        "hung up while it could not subscribe"
    );
    assert_eq!(heard.0.into_inner(), ["server full", "room again"]);
}

/// A full server is there: a run whose every try so far met one waits for room beyond its first
/// contact (`--connect-timeout`), as for a busy lock.
#[test]
fn a_full_server_is_waited_for_beyond_the_first_contact() {
    let mut answers: Vec<_> = (0..4).map(|_| Err(full())).collect();
    answers.push(grant(6));
    let tries = Listed::new(answers);
    let (outcome, took) = wait_by(&tries, forever(), &Calm);
    assert_eq!(outcome.expect("granted once there is room").fence, 6);
    // Backoff 50, 100, 200 and 400 ms (each less up to a quarter): well past the 100 ms first
    // contact.
    assert!(took > tries.first_contact() * 4, "{took:?}");
}
