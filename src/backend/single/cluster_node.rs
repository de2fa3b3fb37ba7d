//! What a server says of itself, with the plain INFO command (never from a script: Redis
//! Cloud and the services built on it refuse INFO in scripts, and ElastiCache Serverless
//! refuses scripts without keys): Redlock's identity check, and telling a node of a Redis
//! Cluster from a server on its own before a listing.

use super::*;

impl Single {
    /// INFO, one text per section of `sections`, in one write: one round trip. (Sent and read
    /// as `pipelined` does: a reply that does not come is a timeout, as for a script.)
    pub(super) fn info_sections(
        &self,
        sections: &[&str],
        timeout: Duration,
    ) -> Result<Vec<String>, NodeError> {
        let replies = self
            .call(timeout, |c| {
                let mut all = Vec::new();
                for section in sections {
                    all.extend(redis::cmd("INFO").arg(*section).get_packed_command());
                }
                c.send_packed_command(&all)?;
                // Every reply is read, an error reply among them too, so that none is left on
                // the connection for the next request to take for its own.
                let mut replies = Vec::with_capacity(sections.len());
                while replies.len() < sections.len() {
                    match c.recv_response()? {
                        Value::Push { .. } => continue,
                        value => replies.push(value.extract_error()),
                    }
                }
                replies.into_iter().collect::<RedisResult<Vec<Value>>>()
            })?
            .map_err(|e| self.err(&e))?;
        replies
            .into_iter()
            .map(|reply| match reply {
                Value::BulkString(text) => Ok(String::from_utf8_lossy(&text).into_owned()),
                Value::VerbatimString { text, .. } => Ok(text),
                other => Err(NodeError {
                    kind: Fault::Other,
                    node: self.name.clone(),
                    detail: format!("unexpected reply to INFO: {other:?}"),
                }),
            })
            .collect()
    }

    /// Fails when the server is a node of a Redis Cluster (`INFO cluster` says
    /// `cluster_enabled:1`); asked before a listing, until a server answers that it is on its
    /// own. A server that will not answer INFO (an ACL without it, a service that does not
    /// offer it) is taken for what it most likely is, a server on its own. (The ACL LOG then
    /// keeps the refusal: a script could check the right first, but scripts may not run INFO
    /// everywhere.)
    pub(super) fn refuse_cluster_node(&self, timeout: Duration) -> Result<(), NodeError> {
        if self.standalone.load(Ordering::Relaxed) {
            return Ok(());
        }
        let info = match self.info_sections(&["cluster"], timeout) {
            Ok(mut texts) => texts.pop().unwrap_or_default(),
            Err(e) if e.kind == Fault::Denied => String::new(),
            // No answer (down, frozen, loading, a wrong password): nothing is known, so nothing
            // is remembered; the listing fails as its SCAN would.
            Err(e) if e.kind != Fault::Other => return Err(e),
            // A service without INFO.
            Err(_) => String::new(),
        };
        if info.lines().any(|l| l.trim() == "cluster_enabled:1") {
            return Err(NodeError {
                kind: Fault::ClusterNode,
                node: self.name.clone(),
                detail:
                    "the server is a node of a Redis Cluster and holds only its own slots' keys"
                        .into(),
            });
        }
        self.standalone.store(true, Ordering::Relaxed);
        Ok(())
    }

    /// Every key matching `pattern` on this server alone (SCAN, never KEYS).
    pub(crate) fn scan_keys(
        &self,
        pattern: &str,
        timeout: Duration,
    ) -> Result<Vec<String>, NodeError> {
        let mut keys = Vec::new();
        let mut cursor: u64 = 0;
        loop {
            let (next, batch): (u64, Vec<Vec<u8>>) = self.query(
                redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(pattern)
                    .arg("COUNT")
                    .arg(1000),
                timeout,
            )?;
            // A key name that is not UTF-8 cannot be named with -k either: it is left out
            // rather than failing the whole listing.
            keys.extend(batch.into_iter().filter_map(|k| String::from_utf8(k).ok()));
            if next == 0 {
                break;
            }
            cursor = next;
        }
        keys.sort();
        keys.dedup();
        Ok(keys)
    }
}
