//! The seam between rlock and its scripts, one typed call per script, both directions: a call
//! owns its keys, its arguments by name (a flat ARGV, `name1, value1, name2, value2, ...`, that
//! common.lua's `args` reads into a table) and the type its reply decodes into, by name
//! (reply.rs). Whether a write must reach --replicas replicas is the script's, decided on the
//! decoded reply. Nothing on either side is found by its position.
//!
//! One file per script (or for the three small ones): `acquire.rs`, `release.rs`, `renew.rs`
//! (renew, leave, fence), `inspect.rs`; record and history are beside the runs they carry, in
//! `../history.rs`.

pub(super) mod acquire;
pub(super) mod inspect;
pub(super) mod release;
pub(super) mod renew;

use std::time::Duration;

use redis::Value;

use super::reply::Refusal;
use crate::backend::{Eval, Fault, Node, NodeError, Script};

/// The Lua sources and SHA1s of the scripts, from build.rs (which lists the files of each).
pub(super) mod sources {
    include!(concat!(env!("OUT_DIR"), "/scripts.rs"));
}

/// What a server said of itself (INFO server and INFO replication, asked of every Redlock
/// master before each grant with the plain command; see `ServerId::from_info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ServerId {
    /// INFO server's run_id: random, new at every start of the server.
    pub run_id: String,
    /// How long the server has run at least, so how long it has kept its data: INFO's
    /// uptime_in_seconds less one second, as it is the difference of two whole-second clock
    /// readings and may be up to a second more than the truth.
    pub uptime: Duration,
    /// The master it replicates ("host:port"), when it is a replica.
    pub replica_of: Option<String>,
    /// What it runs as, when not on its own: "cluster" (a node of a Redis Cluster, which holds
    /// only its own slots' keys) or "sentinel".
    pub mode: Option<String>,
}

/// The INFO sections `ServerId::from_info` reads, in its order.
pub(super) const IDENTITY_SECTIONS: [&str; 2] = ["server", "replication"];

impl ServerId {
    /// From the texts of INFO server and INFO replication; None without a run_id (a server
    /// that keeps its identity to itself).
    pub fn from_info(server: &str, replication: &str) -> Option<ServerId> {
        let field = |text: &str, name: &str| -> Option<String> {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let run_id = field(server, "run_id")?;
        let uptime: u64 = field(server, "uptime_in_seconds")
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let role = field(replication, "role").unwrap_or_else(|| "master".into());
        let replica_of = (role != "master").then(|| {
            let or_unknown = |v: Option<String>| v.unwrap_or_else(|| "?".into());
            format!(
                "{}:{}",
                or_unknown(field(replication, "master_host")),
                or_unknown(field(replication, "master_port"))
            )
        });
        // Valkey names the field server_mode.
        let mode = field(server, "redis_mode")
            .or_else(|| field(server, "server_mode"))
            .filter(|m| m != "standalone");
        Some(ServerId {
            run_id,
            uptime: Duration::from_secs(uptime.max(1) - 1),
            replica_of,
            mode,
        })
    }
}

/// A script's arguments by name: ARGV as `name1, value1, name2, value2, ...`. An argument
/// without a value (`None`) is left out, and the script reads it as nil.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Args(Vec<String>);

impl Args {
    pub fn new() -> Self {
        Args(Vec::new())
    }

    /// With `name` = `value`.
    pub fn with(mut self, name: &str, value: impl ToString) -> Self {
        self.0.push(name.to_string());
        self.0.push(value.to_string());
        self
    }

    /// With `name` = `value` when there is one.
    pub fn with_some(self, name: &str, value: Option<impl ToString>) -> Self {
        match value {
            Some(value) => self.with(name, value),
            None => self,
        }
    }

    /// The value of `name`, as the script reads it.
    #[cfg(test)]
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .chunks(2)
            .find(|pair| pair[0] == name)
            .map(|pair| pair[1].as_str())
    }

    fn as_strs(&self) -> Vec<&str> {
        self.0.iter().map(String::as_str).collect()
    }
}

/// One call of one script: what it sends and what its reply means.
pub(super) trait Call {
    /// What the reply decodes into.
    type Reply;

    fn script(&self) -> &'static Script;

    /// The keys the script declares (for a Cluster, all in one slot).
    fn keys(&self) -> Vec<&str>;

    /// The arguments, by name.
    fn args(&self) -> Args;

    /// The reply: a word, then fields by name (common.lua's `reply`); a refusal for a key
    /// that is not a lock, a lock of another kind, or a reply no version of the script gives.
    fn decode(&self, reply: &[Value]) -> Result<Self::Reply, Refusal>;
}

/// Runs `call` on `node`, its reply expected within `timeout`, and decodes the reply; a
/// refusal is the node's error.
pub(super) fn run<C: Call>(
    node: &dyn Node,
    call: &C,
    timeout: Duration,
) -> Result<C::Reply, NodeError> {
    run_as(node, call, timeout, Ok)
}

/// As `run`, the decoded reply then taken as `then` says: a reply the caller cannot take (an
/// answer to another kind of request) is refused as a reply no script gives.
pub(super) fn run_as<C: Call, T>(
    node: &dyn Node,
    call: &C,
    timeout: Duration,
    then: impl FnOnce(C::Reply) -> Result<T, Refusal>,
) -> Result<T, NodeError> {
    let args = call.args();
    let keys = call.keys();
    // Some services (ElastiCache Serverless) refuse a script without keys.
    debug_assert!(!keys.is_empty(), "{} without keys", call.script().name);
    let value = node.eval(call.script(), &keys, &args.as_strs(), timeout)?;
    decoded(node, call, value, then)
}

/// `first`, then `second`, in one round trip where the node can send both at once
/// (`Node::eval_then`), each reply decoded (the first's as `run_as` does); the second's failure
/// is its own, never the first's.
pub(super) fn run_then<A: Call, B: Call, T>(
    node: &dyn Node,
    first: &A,
    second: &B,
    timeout: Duration,
    then: impl FnOnce(A::Reply) -> Result<T, Refusal>,
) -> Result<(T, Result<B::Reply, NodeError>), NodeError> {
    let (first_args, second_args) = (first.args(), second.args());
    let (first_keys, second_keys) = (first.keys(), second.keys());
    debug_assert!(!first_keys.is_empty() && !second_keys.is_empty());
    let (first_argv, second_argv) = (first_args.as_strs(), second_args.as_strs());
    let eval = |script, keys, args| Eval { script, keys, args };
    let (value, second_value) = node.eval_then(
        eval(first.script(), &first_keys, &first_argv),
        eval(second.script(), &second_keys, &second_argv),
        timeout,
    )?;
    let first_reply = decoded(node, first, value, then)?;
    let second_reply = second_value.and_then(|v| decoded(node, second, v, Ok));
    Ok((first_reply, second_reply))
}

/// `call`'s reply `value`, decoded and taken as `then` says; a refusal is the node's error.
fn decoded<C: Call, T>(
    node: &dyn Node,
    call: &C,
    value: Value,
    then: impl FnOnce(C::Reply) -> Result<T, Refusal>,
) -> Result<T, NodeError> {
    let script = call.script();
    let reply = match value {
        Value::Array(items) => items,
        other => vec![other],
    };
    call.decode(&reply).and_then(then).map_err(|refusal| {
        let (kind, detail) = match refusal {
            Refusal::WrongType(kind) => (Fault::WrongType, format!("it is a {kind}")),
            Refusal::Mismatch(held) => (Fault::Mismatch, held.to_string()),
            Refusal::Missing(field) => (
                Fault::BadReply,
                format!(
                    "unexpected reply to {}, without its '{field}': {}",
                    script.name,
                    shown(&reply)
                ),
            ),
            Refusal::Unexpected => (
                Fault::BadReply,
                format!("unexpected reply to {}: {}", script.name, shown(&reply)),
            ),
            Refusal::Nonsense(field, value) => (
                Fault::BadReply,
                format!("{}'s reply gives '{field}' as {value}", script.name),
            ),
        };
        NodeError {
            kind,
            node: node.name().into(),
            detail,
        }
    })
}

/// A reply rlock cannot use, for a message: its start, on one line, as Rust prints it (a reply
/// may be as large as the reply limits allow).
fn shown(reply: &[Value]) -> String {
    const SHOWN: usize = 200;
    let text = format!("{reply:?}");
    match text.char_indices().nth(SHOWN) {
        Some((cut, _)) => format!("{}...", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::acquire::ACQUIRE;
    use super::inspect::INSPECT;
    use super::release::RELEASE;
    use super::renew::{FENCE, LEAVE, RENEW};
    use super::*;
    use crate::lock::history::{HISTORY, RECORD};

    /// Every script rlock sends.
    const EVERY_SCRIPT: [&Script; 9] = [
        &ACQUIRE,
        &RELEASE,
        &RENEW,
        &LEAVE,
        &INSPECT,
        &FENCE,
        &RECORD,
        &HISTORY,
        &crate::lock::ONCE,
    ];

    #[test]
    fn script_hashes_are_what_redis_computes() {
        for script in EVERY_SCRIPT {
            let sha = redis::Script::new(script.source).get_hash().to_string();
            assert_eq!(script.sha, sha, "SHA1 of {}", script.name);
        }
        // Without what is only a comment.
        let code = |lua: &str| -> Vec<String> {
            lua.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with("--"))
                .map(String::from)
                .collect()
        };
        let sent = code(ACQUIRE.source);
        assert!(sent.starts_with(&code(include_str!("common.lua"))));
        assert!(sent.ends_with(&code(include_str!("acquire.lua"))));
        assert_eq!(
            sent.len(),
            ACQUIRE.source.lines().count(),
            "no comment is sent"
        );
    }

    #[test]
    fn the_give_back_fits_in_one_read_of_the_server() {
        // Sent whole, often to a server that has just stalled: in one 16 KB read of its query
        // buffer, it runs when the server thaws rather than after what other connections sent
        // later (the next try). The order no longer decides what the lock holds (acquire.rs's
        // TRIES), but a give-back that runs first leaves less behind. Keys have no length
        // limit, and each goes four times (three keys, the wake channel): this holds for names
        // up to 1,000 bytes.
        let key = crate::lock::key::LockKey::new("rlock:", &"k".repeat(1000)).unwrap();
        let leave = renew::Leave::new(&key, "00000000-0000-0000-0000-000000000000");
        let args = leave.args();
        let request = redis::cmd("EVAL")
            .arg(LEAVE.source)
            .arg(3)
            .arg(&key.keys()[..])
            .arg(args.as_strs())
            .get_packed_command();
        assert!(request.len() < 16 * 1024, "{} bytes", request.len());
    }

    #[test]
    fn a_server_says_who_it_is_with_info() {
        let server = "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\nrun_id:ab12\r\nuptime_in_seconds:61\r\n";
        let id = ServerId::from_info(server, "# Replication\r\nrole:master\r\n").unwrap();
        assert_eq!(
            (id.run_id.as_str(), id.uptime, id.replica_of, id.mode),
            ("ab12", Duration::from_secs(60), None, None)
        );
        // Valkey's server_mode; a replica names its master.
        let valkey = "run_id:cd34\r\nserver_mode:cluster\r\nuptime_in_seconds:0\r\n";
        let replica = "role:slave\r\nmaster_host:10.0.0.1\r\nmaster_port:6379\r\n";
        let id = ServerId::from_info(valkey, replica).unwrap();
        assert_eq!(id.replica_of.as_deref(), Some("10.0.0.1:6379"));
        assert_eq!(id.mode.as_deref(), Some("cluster"));
        assert_eq!(id.uptime, Duration::ZERO);
        // Without a run_id (a proxy, a service that hides it): it will not say who it is.
        assert_eq!(ServerId::from_info("redis_version:7.0.15\r\n", ""), None);
    }

    #[test]
    fn no_script_asks_info_or_config() {
        // Redis Cloud and the services built on it refuse them in scripts: what a server says
        // of itself is asked with plain commands (backend/single/cluster_node.rs).
        for script in EVERY_SCRIPT {
            let upper = script.source.to_ascii_uppercase();
            for command in ["\"INFO\"", "'INFO'", "\"CONFIG\"", "'CONFIG'"] {
                assert!(!upper.contains(command), "{} calls {command}", script.name);
            }
        }
    }

    #[test]
    fn no_script_reads_an_argument_by_its_position() {
        // common.lua's `args` (and record.lua's copy of it) read ARGV once, by name.
        for file in [
            include_str!("acquire.lua"),
            include_str!("release.lua"),
            include_str!("renew.lua"),
            include_str!("leave.lua"),
            include_str!("fence.lua"),
            include_str!("inspect.lua"),
            include_str!("history.lua"),
            include_str!("once.lua"),
            include_str!("multi.lua"),
            include_str!("slot.lua"),
        ] {
            assert!(!file.contains("ARGV["), "{file}");
        }
    }

    #[test]
    fn arguments_go_by_name_and_absent_ones_are_left_out() {
        let args = Args::new()
            .with("token", "t1")
            .with("ttl", 30_000)
            .with_some("limit", None::<u32>);
        assert_eq!(args.as_strs(), ["token", "t1", "ttl", "30000"]);
        assert_eq!(args.get("ttl"), Some("30000"));
        assert_eq!(args.get("limit"), None);
    }
}
