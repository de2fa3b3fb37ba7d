//! A run on record from its grant: `exec`'s entry `running`, sent with each try at the lock in
//! the same write (record.lua's `granted_to`) and written only where the try is granted, with
//! its grant's fence. A run whose rlock is killed a moment after its grant is on record all the
//! same, at no round trip more than the grant's.
//!
//! One server (or the master of a Sentinel or Cluster slot) only: a Redlock master's fence is
//! raised to the majority's after the grant (`raise_fences`), and a master that granted a try the
//! majority refused would keep the entry of a grant that never was. There the caller writes the
//! entry once the grant is known (`Locker::record`).

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::call::{self, acquire::Acquire, acquire::Attempt};
use super::history::{Keep, Record, RunRecord};
use crate::backend::{Fault, Node, NodeError};

/// The entry a run writes at its grant, and how long its history keeps.
#[derive(Debug)]
pub struct AtGrant {
    keep: Keep,
    /// The run's entry, its grant's time and fence left out (a try fills them in).
    run: RunRecord,
    /// The server refused the entry (an ACL without the history, a server without streams):
    /// the next tries go without it, each refusal being one more line in the server's ACL LOG.
    refused: AtomicBool,
    /// The entry's stream ID, once a try's write said it (the try granted).
    written: Mutex<Option<String>>,
}

impl AtGrant {
    /// `run`'s entry (`outcome` running) for a history that keeps `keep`.
    pub fn new(keep: Keep, run: RunRecord) -> Self {
        AtGrant {
            keep,
            run,
            refused: AtomicBool::new(false),
            written: Mutex::new(None),
        }
    }

    /// The stream ID of the entry the granted try wrote, if its write said it.
    pub fn written(&self) -> Option<String> {
        self.written.lock().ok()?.clone()
    }

    /// `try_` on `node` within `timeout`, with this entry in the same write. What becomes of the
    /// entry never changes the try's answer.
    pub(super) fn try_on(
        &self,
        node: &dyn Node,
        try_: &Acquire<'_>,
        timeout: Duration,
    ) -> Result<Attempt, NodeError> {
        if self.refused.load(Ordering::Relaxed) {
            return call::run(node, try_, timeout);
        }
        // Granted now, as far as this host can tell: the grant happens between the send and the
        // reply.
        let mut run = self.run.clone();
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        run.granted_ms = Some(now);
        run.wait_ms = run.asked_ms.map(|asked| (now - asked).max(0));
        let entries = run.entries();
        let record = Record {
            key: try_.req.key,
            keep: self.keep,
            entries: &entries,
            released_by: None,
            granted_to: Some(try_.req.token),
            running_id: None,
        };
        let (attempt, recorded) = call::run_then(node, try_, &record, timeout, Ok)?;
        match recorded {
            Ok(Some(id)) => {
                if let Ok(mut written) = self.written.lock() {
                    *written = Some(id);
                }
            }
            Ok(None) => {}
            Err(e) if matches!(e.kind, Fault::Denied | Fault::WrongType | Fault::Other) => {
                self.refused.store(true, Ordering::Relaxed);
            }
            Err(_) => {}
        }
        Ok(attempt)
    }
}
