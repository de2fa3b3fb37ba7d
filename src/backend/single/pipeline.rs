//! Two scripts in one write: the release and the run's record, which must not share a script
//! (an ACL that refuses the history must not refuse the release) nor cost a round trip more.

use super::*;

impl Single {
    /// `first` and `second` in one write (EVALSHA each), their replies read in order; a script
    /// the server has no copy of is sent whole after them, and the second again after the first
    /// when only the first was missing (the second had run before it). None when the pair cannot go as one (a write that must WAIT for
    /// replicas, a script always sent whole), and `eval_then` sends them one after the other.
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
            let mut replies = Vec::with_capacity(2);
            while replies.len() < 2 {
                match c.recv_response()? {
                    Value::Push { .. } => continue,
                    value => replies.push(value.extract_error()),
                }
            }
            let no_script = |r: &RedisResult<Value>| {
                matches!(r, Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript))
            };
            // Sent whole, in order, when the server has no copy (a flush, a restart). When only
            // the first was missing, the second ran before it, and the second is one that
            // depends on the first (the record of what the release did): it runs again after.
            let first_missing = no_script(&replies[0]);
            for (n, (reply, eval)) in replies.iter_mut().zip([&first, &second]).enumerate() {
                if no_script(reply) || (n == 1 && first_missing) {
                    *reply = redis::cmd("EVAL")
                        .arg(eval.script.source)
                        .arg(eval.keys.len())
                        .arg(eval.keys)
                        .arg(eval.args)
                        .query(c);
                }
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
