//! The faults a run can meet, and how a seed plans them: servers frozen, crashed and restarted
//! (with their data or empty), failed over to a replica, links cut or slowed, clients paused.
//! Message delay, loss and duplication are the weather (`world::Weather`).

use super::Micros;
use super::model::{Fault, Model};
use super::store::Data;
use super::world::{Kind, World};

impl World {
    /// Makes fault `f` happen now (its event has come).
    pub fn strike(&mut self, f: Fault) {
        apply(self, f);
    }
}

fn apply(w: &mut World, f: Fault) {
    w.note(format!("FAULT {f:?}"));
    w.fault_met(&f);
    match f {
        Fault::Freeze(s) => w.servers[s].frozen = w.servers[s].up,
        Fault::Delete(s) => {
            if w.servers[s].up && !w.servers[s].frozen && w.servers[s].master.is_none() {
                let key = w.lock_key.clone();
                let now = w.now;
                let held: Vec<String> = match w.servers[s].store.data.remove(&key) {
                    Some(Data::Str(token)) => vec![token],
                    Some(Data::ZSet(holders)) => holders.into_iter().map(|(_, t)| t).collect(),
                    _ => Vec::new(),
                };
                w.servers[s].store.expires.remove(&key);
                for token in held {
                    w.check.broken(&token, now);
                }
            }
        }
        Fault::Flush(node) => {
            let s = w.nodes[node];
            if w.servers[s].up && !w.servers[s].frozen {
                let key = w.lock_key.clone();
                let now = w.now;
                let held: Vec<String> = match w.servers[s].store.data.get(&key) {
                    Some(Data::Str(token)) => vec![token.clone()],
                    Some(Data::ZSet(holders)) => holders.iter().map(|(_, t)| t.clone()).collect(),
                    _ => Vec::new(),
                };
                w.servers[s].store = Default::default();
                for token in held {
                    w.check.broken(&token, now);
                }
            }
        }
        Fault::LoseState(node) => {
            let s = w.nodes[node];
            if w.servers[s].up && !w.servers[s].frozen {
                let state = format!("{}:state", w.lock_key);
                w.servers[s].store.data.remove(&state);
                w.servers[s].store.expires.remove(&state);
            }
        }
        Fault::Thaw(s) => w.thaw(s),
        Fault::Crash(s) => w.crash(s),
        Fault::Restart { server, keep } => w.restart(server, keep),
        Fault::Cut { client, server } => w.link(client, server).cut = true,
        Fault::Heal { client, server } => w.link(client, server).cut = false,
        Fault::Slow {
            client,
            server,
            extra,
        } => w.link(client, server).extra = extra,
        Fault::Pause { client, until } => w.pause(client, until),
        Fault::Resume(client) => w.unpause(client),
        Fault::Failover(node) => {
            let master = w.nodes[node];
            let Some(&replica) = w.servers[master].replicas.first() else {
                return;
            };
            w.crash(master);
            w.servers[master].replicas.clear();
            w.servers[replica].master = None;
            w.nodes[node] = replica;
            w.note(format!(
                "{} is the master now (it has write {} of {})",
                w.servers[replica].name, w.servers[replica].applied, w.servers[master].offset
            ));
        }
        Fault::Replication { replica, cut } => w.servers[replica].repl_cut = cut,
        Fault::Rejoin { server, master } => {
            w.restart(server, false);
            w.servers[server].master = Some(master);
            w.servers[server].applied = w.servers[master].offset;
            w.servers[server].store = w.servers[master].store.clone();
            w.servers[server].offset = 0;
            w.servers[master].replicas.push(server);
        }
    }
}

/// Server `server` crashes at `t` and starts again `down` later, with its data or empty.
fn crash(w: &mut World, server: usize, t: Micros, down: Micros, keep: bool) {
    w.at(t, Kind::Fault(Fault::Crash(server)));
    w.at(t + down, Kind::Fault(Fault::Restart { server, keep }));
}

/// Plans the faults of one run of `length` over `servers` servers and `clients` clients, as
/// `model` allows; `ttl` scales how long each lasts.
pub fn plan(w: &mut World, model: Model, length: Micros, ttl: Micros) {
    let servers = w.servers.len();
    let clients = w.clients.len();
    // Faults on a server (freeze, restart) come one at a time, never overlapping.
    let mut t = w.rng.range(0, ttl);
    let mut last_empty: Option<Micros> = None;
    let mut empties = 0;
    while t < length {
        let s = w.rng.range(0, servers as u64 - 1) as usize;
        let d = w.rng.range(ttl / 20, ttl * 2);
        match w.rng.range(0, 4) {
            0 if model.freezes => {
                w.at(t, Kind::Fault(Fault::Freeze(s)));
                w.at(t + d, Kind::Fault(Fault::Thaw(s)));
            }
            1 if model.empty_restarts > empties && last_empty.is_none_or(|l| t > l + 3 * ttl) => {
                empties += 1;
                last_empty = Some(t);
                let down = w.rng.range(1_000, ttl / 2);
                crash(w, s, t, down, false);
            }
            2 if model.restarts => {
                let down = w.rng.range(1_000, ttl);
                crash(w, s, t, down, true);
            }
            3 if model.failovers => {
                let master = w.nodes[0];
                if let Some(&replica) = w.servers[master].replicas.first() {
                    w.at(t, Kind::Fault(Fault::Failover(0)));
                    w.at(
                        t + d,
                        Kind::Fault(Fault::Rejoin {
                            server: master,
                            master: replica,
                        }),
                    );
                    // One failover a run: the plan cannot know who is master after it.
                    t = length;
                    continue;
                }
            }
            4 if model.deletes => {
                let master = w.nodes[0];
                w.at(t, Kind::Fault(Fault::Delete(master)));
            }
            _ => {}
        }
        // Lost data on node 0's master of the moment (drawn only by the models that lose it, so
        // that the other models' seeds plan what they always did).
        if (model.flushes || model.lost_state) && w.rng.chance(0.3) {
            let at = t + w.rng.range(0, d);
            match w.rng.chance(0.5) {
                true if model.flushes => w.at(at, Kind::Fault(Fault::Flush(0))),
                _ if model.lost_state => w.at(at, Kind::Fault(Fault::LoseState(0))),
                _ => {}
            }
        }
        t += d + w.rng.range(ttl / 10, 2 * ttl);
    }
    // Link faults, each on one client's link to one server.
    let mut t = w.rng.range(0, ttl);
    while t < length && (model.partitions || model.slow_links) {
        let c = w.rng.range(0, clients as u64 - 1) as usize;
        let s = w.rng.range(0, servers as u64 - 1) as usize;
        let d = w.rng.range(ttl / 10, ttl * 3);
        if model.partitions && w.rng.chance(0.6) {
            w.at(
                t,
                Kind::Fault(Fault::Cut {
                    client: c,
                    server: s,
                }),
            );
            w.at(
                t + d,
                Kind::Fault(Fault::Heal {
                    client: c,
                    server: s,
                }),
            );
        } else if model.slow_links {
            let extra = w.rng.range(ttl / 50, ttl / 4);
            w.at(
                t,
                Kind::Fault(Fault::Slow {
                    client: c,
                    server: s,
                    extra,
                }),
            );
            w.at(
                t + d,
                Kind::Fault(Fault::Slow {
                    client: c,
                    server: s,
                    extra: 0,
                }),
            );
        }
        t += w.rng.range(ttl / 4, ttl * 3);
    }
    if model.failovers
        && let Some(&replica) = w.servers[w.nodes[0]].replicas.first()
    {
        let mut t = w.rng.range(0, ttl * 2);
        while t < length {
            let d = w.rng.range(ttl / 10, ttl * 2);
            w.at(t, Kind::Fault(Fault::Replication { replica, cut: true }));
            w.at(
                t + d,
                Kind::Fault(Fault::Replication {
                    replica,
                    cut: false,
                }),
            );
            t += d + w.rng.range(ttl, ttl * 4);
        }
    }
    if model.pauses {
        let mut t = w.rng.range(0, ttl * 2);
        while t < length {
            let c = w.rng.range(0, clients as u64 - 1) as usize;
            let d = w.rng.range(ttl / 10, ttl * 2);
            w.at(
                t,
                Kind::Fault(Fault::Pause {
                    client: c,
                    until: t + d,
                }),
            );
            w.at(t + d, Kind::Fault(Fault::Resume(c)));
            t += d + w.rng.range(ttl, ttl * 4);
        }
    }
}
