//! Two scripts in one write: the release and the run's record, or a try at the lock and the
//! run's entry at its grant, which must not share a script (an ACL that refuses the history must
//! not refuse the lock) nor cost a round trip more.

use super::*;

impl Single {
    /// `first` and `second` in one write (EVALSHA each), their replies read in order; the scripts
    /// the server has no copy of are sent whole after them, in one write, and the second again
    /// after the first when only the first was missing (the second had run before it). None when
    /// the pair cannot go as one (a write that must WAIT for replicas, a script always sent
    /// whole), and `eval_then` sends them one after the other.
    pub(super) fn pipelined(
        &self,
        first: Eval<'_>,
        second: Eval<'_>,
        timeout: Duration,
    ) -> Option<Result<Replies, NodeError>> {
        let waits = |e: &Eval<'_>| e.script.replicated.is_some() && self.replicas > 0;
        if waits(&first) || waits(&second) || first.script.always_eval || second.script.always_eval
        {
            return None;
        }
        let packed = |e: &Eval<'_>, verb: &str, body: &str| {
            redis::cmd(verb)
                .arg(body)
                .arg(e.keys.len())
                .arg(e.keys)
                .arg(e.args)
                .get_packed_command()
        };
        let ran = self.call(timeout, |c| {
            let mut both = packed(&first, "EVALSHA", first.script.sha);
            both.extend(packed(&second, "EVALSHA", second.script.sha));
            let sent = c.send_packed_command(&both);
            if let Some(work) = WHILE_ASKED.take() {
                work();
            }
            sent?;
            let first_reply = next_reply(c)?;
            // A server that refused the first and then closed the connection (an unauthenticated
            // client's long command) has said why: the second's failure is the connection's.
            let second_reply = match next_reply(c) {
                Err(e) if first_reply.is_err() => Err(e),
                second => second?,
            };
            let mut replies = vec![first_reply, second_reply];
            let no_script = |r: &RedisResult<Value>| {
                matches!(r, Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript))
            };
            // Sent whole, in order, when the server has no copy (a flush, a restart), again in
            // one write: a second that records what the first did is sent with it (an rlock
            // killed a moment after a grant has its run on record). When only the first was
            // missing, the second ran before it, and the second is one that depends on the
            // first (the record of what the release or the grant did): it runs again after.
            let first_missing = no_script(&replies[0]);
            let again: Vec<usize> = (0..2)
                .filter(|&n| no_script(&replies[n]) || (n == 1 && first_missing))
                .collect();
            let evals = [&first, &second];
            let mut whole = Vec::new();
            for &n in &again {
                whole.extend(packed(evals[n], "EVAL", evals[n].script.source));
            }
            // A connection that breaks meanwhile is each reply's failure, as a reply's own.
            let sent = match whole.is_empty() {
                true => Ok(()),
                false => c.send_packed_command(&whole),
            };
            for &n in &again {
                replies[n] = sent.clone().and_then(|_| next_reply(c)?);
            }
            let second = replies.pop().expect("two replies");
            let first = replies.pop().expect("two replies");
            Ok((first, second))
        });
        let (first_reply, second_reply) = match ran {
            Ok(Ok(replies)) => replies,
            Ok(Err(e)) => return Some(Err(self.err(&e))),
            Err(e) => return Some(Err(e)),
        };
        let second_reply = second_reply.map_err(|e| self.err(&e));
        match first_reply {
            Ok(value) => Some(Ok((value, second_reply))),
            // An error reply (a redirection, a refusal): the first alone again, for `eval`'s
            // reading of it (a script that fails writes nothing); the second stands as it ran.
            Err(_) => Some(
                self.eval(first.script, first.keys, first.args, timeout)
                    .map(|value| (value, second_reply)),
            ),
        }
    }
}

/// The next reply on `c` (a push message skipped): the server's answer, an error reply as the
/// inner error; the outer error is the connection's.
fn next_reply(c: &mut Wire) -> RedisResult<RedisResult<Value>> {
    loop {
        match c.recv_response()? {
            Value::Push { .. } => continue,
            value => return Ok(value.extract_error()),
        }
    }
}
