//! acquire.lua as a typed call: one try at taking a lock (or a slot of it) for a request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::Value;

use super::super::reply::{Crowd, Holder, Refusal, Reply, millis};
use super::super::{CHECK_WITHOUT_EXPIRY, Grant, Newest, Request, Sharing, Ttl};
use super::{Args, Call, sources};
use crate::backend::Script;

/// With --replicas, a grant counts only once the replicas have it.
pub static ACQUIRE: Script =
    Script::new("acquire", sources::ACQUIRE).replicated("grant", is_granted);

/// One try at taking the lock: acquire.lua's reply. (Public for `seams` only: `call` is private.)
#[derive(Debug)]
pub enum Attempt {
    Granted(Grant),
    Busy {
        pttl: i64,
        now_ms: i64,
        holder: Holder,
        /// The lease (ms) the holder's grant or last renewal asked for, where its record says:
        /// with `pttl`, how long a master restarted empty may have lost it for.
        lease_ms: Option<i64>,
        crowd: Option<Crowd>,
        /// The waiter's place in line (1 first), when it waits in line.
        place: Option<i64>,
    },
    Queued {
        wait_ms: i64,
    },
    /// A newer run displaced this waiter (`--newest`): who it is.
    Superseded {
        by: Holder,
    },
}

/// How many tries at a lock this process has made: each try is numbered, rising.
///
/// A try whose reply never came (a frozen server, a broken link) is given back (leave.lua) on
/// another connection, the first one dropped, and requests on different connections may run in
/// any order: a large request is read in pieces, and another connection's runs in between. So
/// the give-back after try N can run after try N+1 was granted, which rlock reports as held.
/// Therefore a grant records the number of the latest try that took or confirmed it, and a
/// give-back undoes only a grant of a try up to the number it carries (`tries_so_far` when it
/// is sent): never one that a later try took. (A token is only ever acquired by the process
/// that made it, so one process's numbers are all its grants can carry.)
static TRIES: AtomicU64 = AtomicU64::new(0);

/// The number of the latest try so far: what a give-back undoes up to.
pub(in crate::lock) fn tries_so_far() -> u64 {
    // One counter: its changes have one order, and a thread reads its own changes back.
    TRIES.load(Ordering::Relaxed)
}

/// acquire.lua for `req`: with `join`, a busy try keeps a place in line; `sent` is when it goes,
/// from which the grant's lease counts; `nth`, the try's number (`TRIES`).
pub(in crate::lock) struct Acquire<'a> {
    pub req: &'a Request<'a>,
    pub join: bool,
    pub sent: Instant,
    pub nth: u64,
}

impl<'a> Acquire<'a> {
    /// The next try for `req`, sent at `sent` (now, by the locker's clock).
    pub fn new(req: &'a Request<'a>, join: bool, sent: Instant) -> Self {
        Acquire {
            req,
            join,
            sent,
            nth: TRIES.fetch_add(1, Ordering::Relaxed) + 1,
        }
    }
}

impl Call for Acquire<'_> {
    type Reply = Attempt;

    fn script(&self) -> &'static Script {
        &ACQUIRE
    }

    fn keys(&self) -> Vec<&str> {
        self.req.key.keys().to_vec()
    }

    fn args(&self) -> Args {
        let Request {
            key,
            token,
            ttl,
            sharing,
            who,
            hold,
            newest,
            record: _,
        } = *self.req;
        let (mode, limit) = match sharing {
            Sharing::Exclusive => ("", 0),
            Sharing::Limit(n) => ("limit", n),
            Sharing::Shared => ("shared", 0),
        };
        Args::new()
            .with("token", token)
            .with("ttl", ttl.as_millis().max(1))
            .with("join", if self.join { "1" } else { "0" })
            .with("check", CHECK_WITHOUT_EXPIRY.as_millis())
            .with("channel", &key.channel)
            .with("host", &who.host)
            .with("pid", who.pid)
            .with("user", &who.user)
            .with("cmd", &who.command)
            .with("mode", mode)
            .with("limit", limit)
            .with("pidns", &who.pidns)
            .with("try", self.nth)
            .with_some("hold", hold.map(|h| h.as_millis().max(1)))
            .with_some(
                "newest",
                match newest {
                    Newest::Off => None,
                    Newest::Waiters => Some("1"),
                    Newest::Running => Some("2"),
                },
            )
    }

    fn decode(&self, reply: &[Value]) -> Result<Attempt, Refusal> {
        Ok(match answer(reply)? {
            Answer::Granted { fence, ttl } => Attempt::Granted(Grant {
                key: self.req.key.clone(),
                token: self.req.token.to_string(),
                fence,
                ttl: Ttl::Asked(ttl),
                sent: self.sent,
            }),
            Answer::Not(attempt) => attempt,
        })
    }
}

/// acquire.lua's reply, before it is tied to its request.
enum Answer {
    Granted { fence: i64, ttl: Duration },
    Not(Attempt),
}

fn answer(r: &[Value]) -> Result<Answer, Refusal> {
    let reply = Reply::parse(r)?;
    let f = &reply.fields;
    Ok(match reply.word.as_str() {
        "ok" => Answer::Granted {
            fence: believable_fence(f.need_int("fence")?)?,
            ttl: believable_ttl(f.need_int("ttl")?)?,
        },
        "busy" => Answer::Not(Attempt::Busy {
            pttl: f.need_int("pttl")?,
            now_ms: f.need_int("now")?,
            holder: f.holder(),
            lease_ms: f.int("ttl"),
            crowd: match f.int("holders") {
                Some(holders) => Some(Crowd {
                    holders,
                    limit: f.need_int("limit")?,
                    exclusive_ahead: f.int("ahead") == Some(1),
                }),
                None => None,
            },
            place: f.int("place"),
        }),
        "queued" => Answer::Not(Attempt::Queued {
            wait_ms: f.need_int("wait")?,
        }),
        "superseded" => Answer::Not(Attempt::Superseded { by: f.holder() }),
        "mismatch" => {
            return Err(Refusal::Mismatch(match f.need_text("held")?.as_str() {
                "exclusive" => Sharing::Exclusive,
                "shared" => Sharing::Shared,
                "limit" => Sharing::Limit(
                    u32::try_from(f.need_int("limit")?).map_err(|_| Refusal::Unexpected)?,
                ),
                _ => return Err(Refusal::Unexpected),
            }));
        }
        "wrongtype" => return Err(reply.wrong_type()),
        _ => return Err(Refusal::Unexpected),
    })
}

/// The largest fence a grant may carry, exclusive: 2^53, the last integer every JSON reader and
/// every double (Lua 5.1's numbers) holds exactly. A counter raised once per microsecond
/// reaches it in 285 years.
pub(crate) const FENCE_LIMIT: i64 = 1 << 53;

/// A grant's fence, if it is one acquire.lua can give: a positive integer below `FENCE_LIMIT`.
/// Anything else (0, a negative number, a counter past what a double holds) is a lie or a
/// corruption, and exporting it as RLOCK_FENCE would let a stale holder pass a fencing check.
fn believable_fence(fence: i64) -> Result<i64, Refusal> {
    match fence {
        1..FENCE_LIMIT => Ok(fence),
        _ => Err(Refusal::Nonsense("fence", fence.to_string())),
    }
}

/// A grant's lease, if it is one: a positive number of milliseconds. A lease of none would be
/// supervised as if it had expired already.
fn believable_ttl(ms: i64) -> Result<Duration, Refusal> {
    match ms {
        1.. => Ok(millis(ms)),
        _ => Err(Refusal::Nonsense("ttl", format!("{ms} ms"))),
    }
}

/// True for a grant: what --replicas must see reach the replicas. Decoded as every reply is,
/// by name.
fn is_granted(reply: &Value) -> bool {
    let Value::Array(items) = reply else {
        return false;
    };
    matches!(answer(items), Ok(Answer::Granted { .. }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::test_request::with_request;

    #[test]
    fn an_acquire_sends_its_arguments_by_name() {
        with_request(|req| {
            let call = Acquire::new(req, true, Instant::now());
            let later = Acquire::new(req, true, Instant::now());
            assert!(later.nth > call.nth, "tries are numbered, rising");
            // (Other tests, on other threads, may have tried since.)
            assert!(tries_so_far() >= later.nth);
            let args = call.args();
            assert_eq!(args.get("token"), Some(req.token));
            assert_eq!(args.get("join"), Some("1"));
            assert_eq!(args.get("channel"), Some(req.key.channel.as_str()));
            assert_eq!(args.get("host"), Some(req.who.host.as_str()));
            assert_eq!(args.get("mode"), Some(""));
            assert_eq!(args.get("try"), Some(call.nth.to_string().as_str()));
            // Newest wins is off: the script is not even told of it.
            assert_eq!(args.get("newest"), None);
            assert_eq!(call.keys(), req.key.keys());
        });
    }

    #[test]
    fn newest_wins_is_sent_by_name_and_a_displaced_try_is_no_grant() {
        with_request(|req| {
            for (newest, sent) in [(Newest::Waiters, "1"), (Newest::Running, "2")] {
                let req = Request { newest, ..*req };
                let call = Acquire::new(&req, true, Instant::now());
                assert_eq!(call.args().get("newest"), Some(sent));
            }
        });
        let reply: Vec<Value> = [
            "superseded",
            "host",
            "ci-2",
            "pid",
            "7",
            "cmd",
            "deploy #43",
        ]
        .map(|w| Value::SimpleString(w.into()))
        .to_vec();
        let Ok(Answer::Not(Attempt::Superseded { by })) = answer(&reply) else {
            panic!("not superseded");
        };
        assert_eq!(by.host.as_deref(), Some("ci-2"));
        assert_eq!(by.command.as_deref(), Some("deploy #43"));
        assert!(!is_granted(&Value::Array(reply)));
    }

    #[test]
    fn a_grant_without_its_fence_is_no_grant() {
        let r = |fields: &[(&str, i64)]| {
            let mut v = vec![Value::SimpleString("ok".into())];
            for (name, n) in fields {
                v.push(Value::SimpleString(name.to_string()));
                v.push(Value::Int(*n));
            }
            v
        };
        assert!(matches!(
            answer(&r(&[("fence", 7), ("ttl", 100)])),
            Ok(Answer::Granted { fence: 7, .. })
        ));
        assert_eq!(
            answer(&r(&[("ttl", 100)])).err(),
            Some(Refusal::Missing("fence"))
        );
        assert!(is_granted(&Value::Array(r(&[("fence", 7), ("ttl", 100)]))));
        assert!(!is_granted(&Value::Array(r(&[("ttl", 100)]))));
    }

    #[test]
    fn a_grant_with_a_nonsense_fence_or_lease_is_no_grant() {
        let r = |fence: i64, ttl: i64| {
            vec![
                Value::SimpleString("ok".into()),
                Value::SimpleString("fence".into()),
                Value::Int(fence),
                Value::SimpleString("ttl".into()),
                Value::Int(ttl),
            ]
        };
        for fence in [-1, 0, FENCE_LIMIT, FENCE_LIMIT + 1, i64::MAX, i64::MIN] {
            assert_eq!(
                answer(&r(fence, 30_000)).err(),
                Some(Refusal::Nonsense("fence", fence.to_string())),
                "fence {fence}"
            );
            assert!(!is_granted(&Value::Array(r(fence, 30_000))));
        }
        for ttl in [0, -1, i64::MIN] {
            assert_eq!(
                answer(&r(7, ttl)).err(),
                Some(Refusal::Nonsense("ttl", format!("{ttl} ms"))),
                "ttl {ttl}"
            );
        }
        for fence in [1, FENCE_LIMIT - 1] {
            assert!(matches!(answer(&r(fence, 1)), Ok(Answer::Granted { .. })));
        }
    }
}
