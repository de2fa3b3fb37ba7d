//! --replicas on one server: WAIT after a write, and what its answer makes of the write.

use super::*;

impl Single {
    /// A script's reply, once its `write` (a grant, a renewal) reached the replicas that
    /// --replicas asks for: `acked` is the WAIT's answer (None when no WAIT was due), an error
    /// when the server refused the WAIT or too few replicas acknowledged within `timeout`.
    pub(super) fn replicated_or_not(
        &self,
        value: Value,
        acked: Option<redis::RedisResult<i64>>,
        write: &str,
        timeout: Duration,
    ) -> Result<Routed, NodeError> {
        match acked {
            Some(Err(e)) => {
                let err = self.err(&e);
                // A server without WAIT (Garnet, older Dragonfly): a setting it cannot serve (78).
                if err.kind == Fault::Other
                    && err.detail.to_ascii_lowercase().contains("unknown command")
                {
                    return Err(NodeError {
                        kind: Fault::WrongMode,
                        detail: format!(
                            "the server does not offer WAIT ({}), so --replicas cannot be used with it: drop --replicas for this server",
                            err.detail
                        ),
                        ..err
                    });
                }
                Err(NodeError {
                    // A refusal by the ACL stays one (77, and the list of rights).
                    kind: if err.kind == Fault::Denied {
                        Fault::Denied
                    } else {
                        Fault::Replicas
                    },
                    detail: format!(
                        "the server refused to WAIT for replicas after the {write} (--replicas {}): {}",
                        self.replicas, err.detail
                    ),
                    ..err
                })
            }
            Some(Ok(acked)) if acked < i64::from(self.replicas) => Err(NodeError {
                kind: Fault::Replicas,
                node: self.name.clone(),
                detail: format!(
                    "only {acked} of {} replicas acknowledged the {write} within {} (--replicas {})",
                    self.replicas,
                    crate::output::human_duration(timeout),
                    self.replicas
                ),
            }),
            _ => Ok(Routed::Done(value)),
        }
    }
}
