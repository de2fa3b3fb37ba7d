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
use crate::lock::test_request::with_request;

/// A node that answers the acquire script from a list, and everything else (the give-back)
/// with "left". It has no pub/sub: a waiter sleeps until the lease it was told of ends.
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
        Err(fault(Fault::Connect, "no pub/sub here"))
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
            Note::RenewalFailed { .. } => "renewal failed",
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
    assert_eq!(grant.ttl, Duration::from_secs(30));
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
