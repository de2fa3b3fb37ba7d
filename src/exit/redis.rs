//! The words of a Redis endpoint's failure (`Failure::Redis`): one line per fault, saying what
//! happened and what to do.

use super::About;
use crate::backend::{Fault, NodeError, TlsRefusal};

/// The user's one line for `error` on a request about `about`: what happened and what to do.
/// (Its exit code is exit.rs's, by the fault.)
pub(super) fn line(error: &NodeError, about: &About) -> String {
    match error.kind {
        Fault::Connect | Fault::Unresolved | Fault::Timeout | Fault::Io | Fault::NotServing => {
            format!(
                "Redis unavailable for {about}: {error}; check that the server is up and --url is right"
            )
        }
        Fault::Tls(refusal) => {
            let hint = match refusal {
                TlsRefusal::ClientCertificateWanted => {
                    "the server asks for a client certificate: give --tls-cert and --tls-key"
                }
                TlsRefusal::Untrusted => {
                    "the server's TLS certificate was not trusted: check --tls-ca (and the host name in the URL)"
                }
                TlsRefusal::Refused => {
                    "the server refused the TLS handshake: check --tls-cert, --tls-key and --tls-ca"
                }
            };
            format!("cannot reach Redis securely for {about}: {error}; {hint}")
        }
        Fault::Full => format!(
            "Redis is full for {about}: {error} (maxclients); raise its maxclients if this lasts"
        ),
        Fault::NoMaster => format!(
            "no Sentinel names a master for {about}: {error}; check the master's name given to --sentinel (a Sentinel's 'sentinel monitor NAME')"
        ),
        Fault::Migrating => format!(
            "Redis Cluster is moving the slot of {about} between masters (TRYAGAIN): {error}; retried for --op-timeout; it passes when the migration (redis-cli --cluster reshard) moves the lock's keys"
        ),
        Fault::ClusterDown => format!(
            "Redis Cluster cannot serve {about} now (CLUSTERDOWN): {error}; a master of the cluster is down and not yet failed over; check CLUSTER INFO"
        ),
        Fault::NotRedis => format!("Redis unavailable for {about}: {error}"),
        Fault::NoPassword => format!("Redis refused rlock for {about}: {error}"),
        Fault::Credential => format!(
            "no password to log in with for {about}: {error}; check the command (rlock runs it with sh -c for every new connection: it must print the password and exit 0 within --connect-timeout)"
        ),
        Fault::Auth => format!(
            "Redis refused rlock for {about}: {error}; check --password-file, --password-command, $RLOCK_PASSWORD/$REDISCLI_AUTH or the URL's password, and the user's ACL"
        ),
        Fault::Denied => match refused_command(&error.detail) {
            Some(command) => format!(
                "Redis refused the command {command} that rlock needs for {about}: {error}; either the user's ACL lacks it (give the user the rights listed in docs/connecting.md, \"ACL: the rights a lock user needs\") or the service does not offer {command} to its users"
            ),
            None => format!(
                "Redis's ACL refused what rlock needs for {about}: {error}; give the user the keys, channels and rights listed in docs/connecting.md (\"ACL: the rights a lock user needs\")"
            ),
        },
        Fault::Mismatch => format!(
            "{about} is held as {}; every holder of a lock must ask for the same kind; nothing was changed",
            error.detail
        ),
        Fault::WrongType => format!(
            "{about} holds a value rlock cannot treat as a lock ({}); nothing was changed",
            error.detail
        ),
        Fault::Replicas => format!(
            "{about}: {error}; check the replicas and their links (INFO replication), or lower --replicas"
        ),
        Fault::Other => format!("Redis answered an error for {about}: {error}"),
        Fault::BadReply => format!(
            "Redis answered {about} with a reply rlock cannot believe: {error}; check what answers at --url"
        ),
        Fault::TooOld => {
            format!(
                "Redis is too old for {about}, or does not offer a command rlock's scripts call there (a server without streams has no history): {error}; rlock needs Redis 5.0 or later"
            )
        }
        Fault::WrongMode => format!("wrong kind of server for {about}: {error}"),
        Fault::ClusterNode => format!(
            "cannot list {about} from {error}; add --cluster (or set RLOCK_CLUSTER=1) to list the locks of every master"
        ),
        Fault::Setup => format!("cannot reach Redis for {about}: {error}"),
        Fault::Config => format!(
            "Redis refused the connection settings for {about}: {error}; check the database number in --url"
        ),
    }
}

/// The command a NOPERM refusal names (Redis says "... to run the 'zadd' command"), upper-case;
/// None for a refused key or channel.
fn refused_command(detail: &str) -> Option<String> {
    let (before, _) = detail.split_once("' command")?;
    let name = &before[before.rfind('\'')? + 1..];
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '|' || c == '-' || c == '_');
    plain.then(|| name.to_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_names_the_command_and_both_reasons() {
        let error = NodeError {
            kind: Fault::Denied,
            node: "redis://h:6379".into(),
            detail: "NOPERM User locker has no permissions to run the 'wait' command".into(),
        };
        let said = line(&error, &About::Lock("jobs".into()));
        assert!(said.contains("the command WAIT"), "{said}");
        assert!(said.contains("the user's ACL lacks it"), "{said}");
        assert!(said.contains("does not offer WAIT"), "{said}");
        let key = NodeError {
            detail: "NOPERM No permissions to access a key".into(),
            ..error
        };
        let said = line(&key, &About::Lock("jobs".into()));
        assert!(
            said.contains("ACL refused") && !said.contains("offer"),
            "{said}"
        );
        assert_eq!(
            refused_command(
                "NOPERM this user has no permissions to run the 'cluster|slots' command"
            ),
            Some("CLUSTER|SLOTS".into())
        );
    }
}
