//! One Redis server, reached over one reused connection.

use std::sync::Mutex;
use std::time::Duration;

use redis::{Connection, Value};

use super::{ErrorKind, Node, NodeError, Script};

pub struct Single {
    client: redis::Client,
    name: String,
    conn: Mutex<Option<Connection>>,
}

impl Single {
    pub fn new(client: redis::Client, name: String) -> Self {
        Single {
            client,
            name,
            conn: Mutex::new(None),
        }
    }

    fn err(&self, e: &redis::RedisError) -> NodeError {
        NodeError::from_redis(&self.name, e)
    }

    fn open(&self, timeout: Duration) -> Result<Connection, NodeError> {
        let conn = self
            .client
            .get_connection_with_timeout(timeout)
            .map_err(|e| {
                let mut err = self.err(&e);
                // Nothing was sent yet, so a timeout here is a failure to connect.
                if matches!(err.kind, ErrorKind::Timeout | ErrorKind::Io) {
                    err.kind = ErrorKind::Connect;
                }
                err
            })?;
        Ok(conn)
    }
}

impl Single {
    /// What the server says it is (ROLE): "master", "slave" or "sentinel".
    pub fn role(&self, timeout: Duration) -> Result<String, NodeError> {
        let mut conn = self.open(timeout)?;
        let _ = conn.set_read_timeout(Some(timeout));
        let reply: Vec<Value> = redis::cmd("ROLE")
            .query(&mut conn)
            .map_err(|e| self.err(&e))?;
        match reply.first() {
            Some(Value::BulkString(b)) => Ok(String::from_utf8_lossy(b).into_owned()),
            Some(Value::SimpleString(s)) => Ok(s.clone()),
            other => Ok(format!("{other:?}")),
        }
    }
}

/// EVALSHA, and EVAL when the server has no copy of the script (SCRIPT FLUSH, a restart, a
/// failover): one round trip in the common case, never a wrong answer.
pub(crate) fn run_script(
    conn: &mut dyn redis::ConnectionLike,
    script: &Script,
    keys: &[&str],
    args: &[&str],
) -> redis::RedisResult<Value> {
    let result = redis::cmd("EVALSHA")
        .arg(script.sha())
        .arg(keys.len())
        .arg(keys)
        .arg(args)
        .query::<Value>(conn);
    match result {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            redis::cmd("EVAL")
                .arg(script.source)
                .arg(keys.len())
                .arg(keys)
                .arg(args)
                .query::<Value>(conn)
        }
        other => other,
    }
}

impl Node for Single {
    fn eval(
        &self,
        script: &Script,
        keys: &[&str],
        args: &[&str],
        timeout: Duration,
    ) -> Result<Value, NodeError> {
        let mut slot = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        // A reused connection may have died since its last use (a restarted server): then
        // retry once on a fresh one. Every script is idempotent for the same token.
        for _ in 0..2 {
            let fresh = slot.is_none();
            let conn = match slot.as_mut() {
                Some(c) => c,
                None => slot.insert(self.open(timeout)?),
            };
            let _ = conn.set_read_timeout(Some(timeout));
            let _ = conn.set_write_timeout(Some(timeout));
            match run_script(conn, script, keys, args) {
                Ok(v) => return Ok(v),
                Err(e) => {
                    let err = self.err(&e);
                    if err.is_transport() {
                        *slot = None;
                        if !fresh && err.kind == ErrorKind::Io {
                            continue;
                        }
                    }
                    return Err(err);
                }
            }
        }
        unreachable!("the second attempt always uses a fresh connection")
    }

    fn scan(&self, pattern: &str, timeout: Duration) -> Result<Vec<String>, NodeError> {
        let mut conn = self.open(timeout)?;
        let _ = conn.set_read_timeout(Some(timeout));
        scan_connection(&mut conn, pattern).map_err(|e| self.err(&e))
    }

    fn subscriber(&self, _key: &str, timeout: Duration) -> Result<Connection, NodeError> {
        self.open(timeout)
    }

    fn name(&self) -> &str {
        &self.name
    }
}

/// SCAN to the end on one server.
pub(crate) fn scan_connection(
    conn: &mut dyn redis::ConnectionLike,
    pattern: &str,
) -> redis::RedisResult<Vec<String>> {
    let mut keys = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query(conn)?;
        keys.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    keys.sort();
    keys.dedup();
    Ok(keys)
}
