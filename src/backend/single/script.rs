//! One script on a connection: EVALSHA with EVAL as its fallback, and the WAIT for replicas
//! after a write.

use super::*;

/// WAIT for `n` replicas, at most `timeout`: how many have this connection's writes. The
/// socket waits a little longer than the server does, so that the server's answer (fewer than
/// `n`) comes back rather than a timeout.
pub(super) fn wait_replicas(conn: &mut Wire, n: u32, timeout: Duration) -> RedisResult<i64> {
    let _ = conn.set_timeout(timeout + Duration::from_millis(500));
    let ms = timeout.as_millis().max(1) as u64;
    redis::cmd("WAIT").arg(n).arg(ms).query(conn)
}

/// EVALSHA, and EVAL when the server has no copy of the script (SCRIPT FLUSH, a restart, a
/// failover): one round trip in the common case, never a wrong answer.
pub(super) fn run_script(
    conn: &mut Wire,
    script: &Script,
    keys: &[&str],
    args: &[&str],
    asking: bool,
) -> RedisResult<Value> {
    let mut send = |verb: &str, body: &str| {
        if asking {
            redis::cmd("ASKING").query::<()>(conn)?;
        }
        let cmd = redis::cmd(verb)
            .arg(body)
            .arg(keys.len())
            .arg(keys)
            .arg(args)
            .to_owned();
        let Some(work) = WHILE_ASKED.take() else {
            return cmd.query::<Value>(conn);
        };
        // As `query` does, with `work` done while Redis answers (and done, whatever the send).
        let sent = conn.send_packed_command(&cmd.get_packed_command());
        work();
        sent?;
        loop {
            match conn.recv_response()? {
                Value::Push { .. } => continue,
                value => return value.extract_error(),
            }
        }
    };
    if script.always_eval {
        return send("EVAL", script.source);
    }
    match send("EVALSHA", script.sha) {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            send("EVAL", script.source)
        }
        other => other,
    }
}
