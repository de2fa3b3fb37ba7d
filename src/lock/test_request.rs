//! For unit tests: the request every test makes, an exclusive lock 'jobs' for token "tok".

use std::time::Duration;

use super::{LockKey, Request, Sharing};
use crate::identity::Identity;

/// Runs `f` with an exclusive request for lock 'jobs' (prefix "rlock:"), token "tok", a 30 s
/// lease, held by a made-up process.
pub fn with_request<T>(f: impl FnOnce(&Request) -> T) -> T {
    let key = LockKey::new("rlock:", "jobs").unwrap();
    let who = Identity {
        host: "h".into(),
        pid: 1,
        user: "u".into(),
        command: "c".into(),
        pidns: String::new(),
    };
    f(&Request {
        key: &key,
        token: "tok",
        ttl: Duration::from_secs(30),
        sharing: Sharing::Exclusive,
        who: &who,
        hold: None,
        newest: super::Newest::Off,
        record: None,
    })
}
