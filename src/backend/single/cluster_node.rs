//! Telling a node of a Redis Cluster from a server on its own, before a listing.

use super::*;

impl Single {
    /// Fails when the server is a node of a Redis Cluster (`INFO cluster` says
    /// `cluster_enabled:1`); asked before a listing, until a server answers that it is on its
    /// own. A server that will not answer INFO (an ACL without it: see cluster_info.lua) is
    /// taken for what it most likely is, a server on its own.
    pub(super) fn refuse_cluster_node(&self, timeout: Duration) -> Result<(), NodeError> {
        if self.standalone.load(Ordering::Relaxed) {
            return Ok(());
        }
        let info = match self.eval_routed(&CLUSTER_INFO, &[], &[], timeout, false) {
            Ok(Routed::Done(Value::BulkString(text))) => {
                String::from_utf8_lossy(&text).into_owned()
            }
            Ok(Routed::Done(Value::VerbatimString { text, .. })) => text,
            // A server before Redis 7 whose ACL refuses INFO, even from a script.
            Err(e) if e.kind == Fault::Denied => String::new(),
            // No answer (down, frozen, loading, a wrong password): nothing is known, so nothing
            // is remembered; the listing fails as its SCAN would.
            Err(e) => return Err(e),
            // nil: the ACL user may not run INFO.
            Ok(_) => String::new(),
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
