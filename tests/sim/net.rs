//! The network and the servers: requests travel a client's connection (in order on it, with
//! the weather's delays, losses and duplicates), run as scripts on a server at their arrival
//! (or at its thaw), and their replies travel back; a master's writes reach its replicas, and
//! WAIT counts them.

use rlock::backend::{Fault, NodeError};

use super::Micros;
use super::lua::{Env, Exec, Scripting};
use super::server::{Call, Conn, Request, node_error};
use super::store::{Resp, Store};
use super::world::{Kind, World};

impl World {
    pub fn send(&mut self, thread: usize, node: usize, call: Call, timeout: Micros) -> usize {
        let client = self.threads[thread].client;
        let server = self.nodes[node];
        let generation = self.servers[server].generation;
        let conn = match self.current.get(&(client, node)) {
            Some(&c)
                if !self.conns[c].broken
                    && self.conns[c].server == server
                    && self.conns[c].generation == generation =>
            {
                c
            }
            _ => {
                self.conns.push(Conn {
                    server,
                    generation,
                    broken: false,
                    last_deliver: 0,
                    last_reply: 0,
                });
                let c = self.conns.len() - 1;
                self.current.insert((client, node), c);
                c
            }
        };
        let mut call = call;
        if let Some(plant) = self.script_plant {
            plant(&mut call);
        }
        if let Some(mutant) = &self.mutant {
            mutant.apply(&mut call);
        }
        self.sending(client, &call);
        let req = self.requests.len();
        let replicas = if call.replicated.is_some() {
            self.replicas
        } else {
            0
        };
        self.requests.push(Request {
            thread,
            client,
            server,
            conn,
            generation,
            call,
            wait_for: timeout,
            replicas,
            reply: None,
            waiting: None,
            result: None,
        });
        let name = self.requests[req].call.name;
        self.note(format!(
            "c{client} -> {} {name} (req {req})",
            self.servers[server].name
        ));
        if !self.servers[server].up {
            self.met(client);
            // Refused at once, if the refusal gets back.
            if let Some(d) = self.delay(client, server) {
                self.requests[req].reply = Some(Err(node_error(
                    Fault::Connect,
                    &self.servers[server].name,
                    "Connection refused",
                )));
                self.at(self.now + 2 * d, Kind::Reply { req });
            }
        } else if let Some(d) = self.delay(client, server) {
            let at = (self.now + d).max(self.conns[conn].last_deliver);
            self.conns[conn].last_deliver = at;
            self.at(at, Kind::Deliver { req, copy: false });
            if self.rng.chance(self.weather.duplicate)
                && let Some(d2) = self.delay(client, server)
            {
                // Replayed on the same connection, in its order.
                let again = (at + d2).max(self.conns[conn].last_deliver);
                self.conns[conn].last_deliver = again;
                self.at(again, Kind::Deliver { req, copy: true });
            }
        }
        self.at(self.now + timeout, Kind::Timeout { req });
        req
    }

    /// The result of request `req` (once it is done).
    pub fn result(&mut self, req: usize) -> Option<Result<redis::Value, NodeError>> {
        self.requests[req].result.take()
    }

    pub(super) fn finish(&mut self, req: usize, result: Result<redis::Value, NodeError>) {
        let r = &mut self.requests[req];
        if r.result.is_some() || r.thread == usize::MAX {
            return;
        }
        let (thread, conn) = (r.thread, r.conn);
        r.thread = usize::MAX;
        if let Err(e) = &result
            && matches!(e.kind, Fault::Timeout | Fault::Io | Fault::Connect)
        {
            self.conns[conn].broken = true;
        }
        self.requests[req].result = Some(result);
        self.threads[thread].pokable = false;
        self.ready(thread);
    }

    /// Handles one event.
    pub(super) fn deliver(&mut self, req: usize, copy: bool) {
        let (client, server, generation) = {
            let r = &self.requests[req];
            (r.client, r.server, r.generation)
        };
        let s = &self.servers[server];
        if !s.up || s.generation != generation || self.link(client, server).cut {
            self.met(client);
            return;
        }
        if self.servers[server].frozen {
            self.met(client);
            self.servers[server].backlog.push((req, copy));
            return;
        }
        self.execute(req, copy);
    }

    /// A server thaws: what reached it meanwhile runs, in order.
    pub fn thaw(&mut self, server: usize) {
        self.servers[server].frozen = false;
        for (req, copy) in std::mem::take(&mut self.servers[server].backlog) {
            if self.servers[server].generation == self.requests[req].generation {
                self.execute(req, copy);
            }
        }
    }

    /// Forgets what a server held in memory for its connections (a crash).
    pub fn crash(&mut self, server: usize) {
        let s = &mut self.servers[server];
        s.up = false;
        s.frozen = false;
        s.backlog.clear();
        s.generation += 1;
        s.listeners.clear();
        self.crash_ears(server);
    }

    /// Starts a crashed server again, empty unless `keep`.
    pub fn restart(&mut self, server: usize, keep: bool) {
        let run = self.rng.next();
        let now = self.now;
        let s = &mut self.servers[server];
        s.up = true;
        s.run_id = format!("{run:040x}");
        s.started = now as i64;
        s.scripting = Scripting::on(s.host);
        if !keep {
            s.store = Store::default();
        }
    }

    pub(super) fn info(&self, server: usize) -> (String, String) {
        let s = &self.servers[server];
        let uptime = (self.now as i64 - s.started) / 1_000_000;
        let info_server = format!(
            "# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\nrun_id:{}\r\nuptime_in_seconds:{uptime}\r\n",
            s.run_id
        );
        let info_replication = match s.master {
            Some(m) => format!(
                "# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\nmaster_port:{}\r\n",
                7000 + m
            ),
            None => "# Replication\r\nrole:master\r\n".into(),
        };
        (info_server, info_replication)
    }

    pub(super) fn execute(&mut self, req: usize, copy: bool) {
        let server = self.requests[req].server;
        let (client, conn) = (self.requests[req].client, self.requests[req].conn);
        let (info_server, info_replication) = self.info(server);
        let now_us = self.servers[server].clock_us(self.now);
        self.prune_ears(server);
        let listeners = self.servers[server]
            .listeners
            .iter()
            .map(|(ch, who)| (ch.clone(), who.len() as i64))
            .collect();
        let call = self.requests[req].call.clone();
        let exec = Exec {
            store: std::mem::take(&mut self.servers[server].store),
            env: Env {
                now_us,
                listeners,
                published: Vec::new(),
                info_server,
                info_replication,
            },
        };
        let before = exec.store.clone();
        let s = &mut self.servers[server];
        let (reply, exec) = s
            .scripting
            .eval(&call.sha, &call.source, &call.keys, &call.args, exec);
        s.store = exec.store;
        let name = s.name.clone();
        self.note(format!(
            "{name} runs {} for c{client}{}: {}",
            call.name,
            if copy { " (a duplicate)" } else { "" },
            short(&reply)
        ));
        self.check_store(server, &call, &before, &reply);
        // No fault of the model gives a key another type or takes a right away: a script that
        // fails did so of itself.
        if let Resp::Err(e) = &reply
            && call.name != "INFO"
        {
            self.violation(format!("{name}: the script {} failed: {e}", call.name));
        }
        if call.name == "SUBSCRIBE" {
            self.subscribe_at(server, req, &call.args[0]);
        }
        for (channel, message) in exec.env.published {
            self.publish(server, &channel, &message);
        }
        // Replication: every script's effects, in order.
        if !self.servers[server].replicas.is_empty() && self.servers[server].store != before {
            let s = &mut self.servers[server];
            s.offset += 1;
            let offset = s.offset;
            s.snapshots.push_back((offset, s.store.clone()));
            if s.snapshots.len() > 64 {
                s.snapshots.pop_front();
            }
            for replica in self.servers[server].replicas.clone() {
                let (lo, hi) = self.weather.replication;
                let d = self.rng.range(lo, hi);
                self.at(self.now + d, Kind::Replicate { replica, offset });
            }
        }
        if copy {
            return;
        }
        let result = match reply {
            Resp::Err(e) => Err(node_error(classify(&e), &name, &e)),
            r => Ok(value(r)),
        };
        let must_wait = self.requests[req].replicas > 0
            && matches!((&result, self.requests[req].call.replicated), (Ok(v), Some(when)) if when(v));
        self.requests[req].reply = Some(result);
        if must_wait {
            let offset = self.servers[server].offset;
            self.requests[req].waiting = Some(offset);
            let wait = self.requests[req].wait_for;
            self.at(self.now + wait, Kind::WaitOver { req });
            self.check_wait(req);
            return;
        }
        self.send_reply(req, client, server, conn);
    }

    pub(super) fn send_reply(&mut self, req: usize, client: usize, server: usize, conn: usize) {
        if let Some(d) = self.delay(client, server) {
            let at = (self.now + d).max(self.conns[conn].last_reply);
            self.conns[conn].last_reply = at;
            self.at(at, Kind::Reply { req });
        }
    }

    /// How many replicas of `server` have its write `offset`.
    pub(super) fn acked(&self, server: usize, offset: u64) -> u32 {
        self.servers[server]
            .replicas
            .iter()
            .filter(|r| self.servers[**r].up && self.servers[**r].applied >= offset)
            .count() as u32
    }

    /// A WAIT that has its replicas answers at once.
    pub(super) fn check_wait(&mut self, req: usize) {
        let Some(offset) = self.requests[req].waiting else {
            return;
        };
        let server = self.requests[req].server;
        if self.acked(server, offset) >= self.requests[req].replicas {
            self.requests[req].waiting = None;
            let (client, conn) = (self.requests[req].client, self.requests[req].conn);
            self.send_reply(req, client, server, conn);
        }
    }

    pub(super) fn wait_over(&mut self, req: usize) {
        let Some(offset) = self.requests[req].waiting.take() else {
            return;
        };
        let server = self.requests[req].server;
        let acked = self.acked(server, offset);
        let name = self.servers[server].name.clone();
        self.requests[req].reply = Some(Err(node_error(
            Fault::Replicas,
            &name,
            &format!(
                "only {acked} of {} replicas acknowledged",
                self.requests[req].replicas
            ),
        )));
        let (client, conn) = (self.requests[req].client, self.requests[req].conn);
        self.send_reply(req, client, server, conn);
    }

    pub(super) fn replicate(&mut self, replica: usize, offset: u64) {
        let Some(master) = self.servers[replica].master else {
            return;
        };
        if !self.servers[replica].up || self.servers[replica].repl_cut || !self.servers[master].up {
            return;
        }
        // The stream brings everything up to the master's latest write it has sent.
        let Some(store) = self.servers[master]
            .snapshots
            .iter()
            .rev()
            .find(|(o, _)| *o <= offset)
            .map(|(o, s)| (*o, s.clone()))
        else {
            return;
        };
        if store.0 > self.servers[replica].applied {
            self.servers[replica].applied = store.0;
            self.servers[replica].store = store.1;
        }
        let waiting: Vec<usize> = (0..self.requests.len())
            .filter(|r| self.requests[*r].waiting.is_some() && self.requests[*r].server == master)
            .collect();
        for req in waiting {
            self.check_wait(req);
        }
    }

    /// The store-level invariants after a script ran.
    pub(super) fn check_store(&mut self, server: usize, call: &Call, before: &Store, reply: &Resp) {
        let now_ms = self.servers[server].clock_us(self.now) / 1000;
        if call.name == "acquire"
            && matches!(reply, Resp::Array(items) if items.first() == Some(&Resp::Bulk("ok".into())))
            && let Some(token) = call.arg("token")
        {
            self.check.regranted(token);
        }
        self.check_line_kept(server, call, before);
        self.check_terms(server, call, before, reply);
        if self.replies
            && let Some(v) = super::replies::contradiction(
                call,
                before,
                &self.servers[server].store,
                reply,
                now_ms,
            )
        {
            self.violation(format!("{}: {v}", self.servers[server].name));
        }
        if let Some(v) =
            self.check
                .line_order(call, before, &self.servers[server].store, reply, now_ms)
        {
            self.violation(v);
        }
        if let Some(v) = self
            .check
            .displacement(call, &self.servers[server].store, reply)
        {
            self.violation(v);
        }
    }
}

fn short(r: &Resp) -> String {
    let s = format!("{r:?}");
    s.chars().take(160).collect()
}

fn classify(e: &str) -> Fault {
    if e.contains("WRONGTYPE") {
        Fault::WrongType
    } else if e.contains("NOPERM") {
        Fault::Denied
    } else {
        Fault::Other
    }
}

/// A reply as the redis crate gives it.
pub fn value(r: Resp) -> redis::Value {
    match r {
        Resp::Nil => redis::Value::Nil,
        Resp::Int(i) => redis::Value::Int(i),
        Resp::Bulk(s) => redis::Value::BulkString(s.into_bytes()),
        Resp::Status(s) => redis::Value::SimpleString(s),
        Resp::Err(e) => redis::Value::SimpleString(e),
        Resp::Array(items) => redis::Value::Array(items.into_iter().map(value).collect()),
    }
}
