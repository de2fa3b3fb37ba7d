//! `exec --once-per DUR`: at most one successful run per window of DUR, and a run in every window
//! in which any host fired. Windows are counted by the server's clock from the Unix epoch (every
//! host agrees which window "now" is), and the key's window record (`{K}:once`, once.lua) says
//! the latest window whose run succeeded. A run looks at the record when it fires (the window it
//! fired in is its own from then on, however long it waits) and again once it holds the lock;
//! only a run that succeeded marks its window, owner-checked, before it gives the lock back. A
//! failed run leaves its window open: the next firing in it runs again.

use std::time::Duration;

use redis::Value;

use super::call::{self, Args, Call, sources};
use super::error::Error;
use super::key::LockKey;
use super::locker::Locker;
use super::reply::{Refusal, Reply};
use crate::backend::Script;

/// A mark is a write the window's later firings rely on: with --replicas it must reach them.
pub static ONCE: Script = Script::new("once", sources::ONCE).replicated("window mark", is_marked);

fn is_marked(reply: &Value) -> bool {
    let Value::Array(items) = reply else {
        return false;
    };
    items
        .first()
        .is_some_and(|w| matches!(w, Value::BulkString(b) if b == b"marked"))
}

/// The window a run fired in, by the server's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Whole windows since the Unix epoch.
    pub index: i64,
    pub len: Duration,
}

impl Window {
    /// The window that holds `now_ms` (the server's clock).
    pub fn at(now_ms: i64, len: Duration) -> Window {
        let len_ms = len.as_millis().max(1) as i64;
        Window {
            index: now_ms.div_euclid(len_ms),
            len,
        }
    }

    /// When the window began, ms since the epoch by the server's clock.
    pub fn start_ms(&self) -> i64 {
        self.index * self.len.as_millis() as i64
    }
}

/// The run that did the latest window on record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowDone {
    pub index: i64,
    pub host: Option<String>,
    pub run: Option<String>,
    /// When it marked the window, server ms.
    pub at_ms: Option<i64>,
}

/// What the window record says now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Look {
    /// The server's clock, ms.
    pub now_ms: i64,
    pub done: Option<WindowDone>,
}

impl Look {
    /// The run that already did `window`'s work (or a later window's), if one did.
    pub fn done_for(&self, window: Window) -> Option<&WindowDone> {
        self.done.as_ref().filter(|d| d.index >= window.index)
    }
}

/// once.lua's `look`.
struct LookAt<'a> {
    key: &'a LockKey,
    record: String,
    len: Duration,
}

impl Call for LookAt<'_> {
    type Reply = Look;

    fn script(&self) -> &'static Script {
        &ONCE
    }

    fn keys(&self) -> Vec<&str> {
        vec![&self.key.redis_key, &self.record]
    }

    fn args(&self) -> Args {
        Args::new()
            .with("op", "look")
            .with("window_ms", self.len.as_millis().max(1))
    }

    fn decode(&self, reply: &[Value]) -> Result<Look, Refusal> {
        let reply = Reply::parse(reply)?;
        if reply.word != "look" {
            return Err(Refusal::Unexpected);
        }
        let f = &reply.fields;
        Ok(Look {
            now_ms: f.need_int("now")?,
            done: f
                .text("done")
                .map(|d| d.parse::<i64>().map_err(|_| Refusal::Unexpected))
                .transpose()?
                .map(|index| WindowDone {
                    index,
                    host: f.text("host"),
                    run: f.text("run"),
                    at_ms: f
                        .text("at")
                        .and_then(|a| a.parse::<f64>().ok())
                        .map(|a| a as i64),
                }),
        })
    }
}

/// once.lua's `mark`.
struct Mark<'a> {
    key: &'a LockKey,
    record: String,
    token: &'a str,
    window: Window,
    host: &'a str,
    run: &'a str,
}

impl Call for Mark<'_> {
    /// False when the token no longer holds the lock (nothing was written).
    type Reply = bool;

    fn script(&self) -> &'static Script {
        &ONCE
    }

    fn keys(&self) -> Vec<&str> {
        vec![&self.key.redis_key, &self.record]
    }

    fn args(&self) -> Args {
        Args::new()
            .with("op", "mark")
            .with("window_ms", self.window.len.as_millis().max(1))
            .with("token", self.token)
            .with("window", self.window.index)
            .with("host", self.host)
            .with("run", self.run)
    }

    fn decode(&self, reply: &[Value]) -> Result<bool, Refusal> {
        match Reply::parse(reply)?.word.as_str() {
            "marked" => Ok(true),
            "not-owner" => Ok(false),
            _ => Err(Refusal::Unexpected),
        }
    }
}

impl Locker {
    /// The window record of `key` for windows of `len`, and the server's clock. One Redis (or
    /// the Sentinels' master, or the key's Cluster node): `--once-per` is refused on Redlock.
    pub fn once_look(&self, key: &LockKey, len: Duration) -> Result<Look, Error> {
        let call = LookAt {
            key,
            record: key.once(),
            len,
        };
        self.on_the_node(key, &call)
    }

    /// `call` on the one node (`--once-per` is refused on Redlock before anything is sent).
    fn on_the_node<C: Call<Reply = R> + Sync, R: Send>(
        &self,
        key: &LockKey,
        call: &C,
    ) -> Result<R, Error> {
        self.on_all(|n| call::run(n, call, self.op_timeout))
            .into_iter()
            .next()
            .expect("one node")
            .map_err(|e| Error::redis(key, e))
    }

    /// Marks `window` done by this run, if `token` still holds the lock; false if it does not.
    pub fn once_mark(
        &self,
        key: &LockKey,
        token: &str,
        window: Window,
        host: &str,
        run: &str,
    ) -> Result<bool, Error> {
        let call = Mark {
            key,
            record: key.once(),
            token,
            window,
            host,
            run,
        };
        self.on_the_node(key, &call)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_count_from_the_epoch_by_the_server_clock() {
        let minute = Duration::from_secs(60);
        assert_eq!(Window::at(0, minute).index, 0);
        assert_eq!(Window::at(59_999, minute).index, 0);
        assert_eq!(Window::at(60_000, minute).index, 1);
        assert_eq!(
            Window::at(1_800_000_030_123, minute).start_ms(),
            1_800_000_000_000
        );
        let done = |index| Look {
            now_ms: 0,
            done: Some(WindowDone {
                index,
                host: None,
                run: None,
                at_ms: None,
            }),
        };
        let w = Window::at(120_000, minute);
        assert!(done(2).done_for(w).is_some(), "this window's run");
        assert!(
            done(3).done_for(w).is_some(),
            "a later window's run covers it"
        );
        assert!(
            done(1).done_for(w).is_none(),
            "the previous window's does not"
        );
    }
}
