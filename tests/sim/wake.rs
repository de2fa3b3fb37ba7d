//! The waiters' wake channels, as the simulation carries them to the library's own waiter
//! (`Locker::acquire`): a subscription is a real `Subscriber` on one end of a Unix socket pair
//! whose other end, an `Ear`, plays the server's side of the connection.
//!
//! SUBSCRIBE travels the simulated network like any request (`SimNode::subscriber`), and the
//! server counts the listener from the moment it runs it. A message published to the channel
//! reaches the ear after the weather's delay, written there as Redis pushes it, and wakes the
//! waiter's sleep (`SimClock::poll`), whose own code then reads and parses it. A crash closes
//! the server's ears (the waiter reads the end of its connection, and subscribes again); a
//! waiter that drops its subscriber closes its end, which the server notices before it next runs
//! a script, and stops counting the listener.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;

use super::server::Ear;
use super::world::{Kind, World};

/// Redis's push of `message` on `channel` (RESP2).
fn push(channel: &str, message: &str) -> Vec<u8> {
    format!(
        "*3\r\n$7\r\nmessage\r\n${}\r\n{channel}\r\n${}\r\n{message}\r\n",
        channel.len(),
        message.len()
    )
    .into_bytes()
}

impl World {
    /// Server `server` runs request `req`, a SUBSCRIBE to `channel`: from now on it counts the
    /// client as a listener, and keeps an end of the connection for it (a duplicate of the
    /// request subscribes nothing more).
    pub fn subscribe_at(&mut self, server: usize, req: usize, channel: &str) {
        // A duplicate subscribes nothing more; a client that stopped waiting for the reply has
        // closed the connection.
        if self.ears.iter().any(|e| e.req == req) || self.requests[req].result.is_some() {
            return;
        }
        let (client, thread) = (self.requests[req].client, self.requests[req].thread);
        let (mut ours, theirs) = UnixStream::pair().expect("a socket pair");
        // The confirmation, there before the subscriber reads it.
        let confirm = format!(
            "*3\r\n$9\r\nsubscribe\r\n${}\r\n{channel}\r\n:1\r\n",
            channel.len()
        );
        ours.write_all(confirm.as_bytes()).expect("room for it");
        ours.set_nonblocking(true).expect("a socket");
        self.ears.push(Ear {
            client,
            server,
            channel: channel.to_string(),
            req,
            thread,
            sock: Some(ours),
            theirs: Some(theirs),
        });
        self.servers[server]
            .listeners
            .entry(channel.to_string())
            .or_default()
            .push(client);
    }

    /// The client's end of the subscription thread `thread` asked for, once its reply came.
    /// (Whatever else that thread's SUBSCRIBE left, a duplicate's or a late one's, is closed.)
    pub fn take_subscription(&mut self, thread: usize) -> Option<UnixStream> {
        let mine = self
            .ears
            .iter_mut()
            .filter(|e| e.thread == thread && e.theirs.is_some())
            .max_by_key(|e| e.req)?;
        mine.theirs.take()
    }

    /// The subscriptions thread `thread` asked for and will never take (the reply was lost):
    /// their client ends close.
    pub fn abandon_subscriptions(&mut self, thread: usize) {
        for e in self.ears.iter_mut().filter(|e| e.thread == thread) {
            e.theirs = None;
        }
    }

    /// Server `server` published `message` on `channel`: it reaches every ear there after the
    /// weather's delay (or never).
    pub fn publish(&mut self, server: usize, channel: &str, message: &str) {
        let ears: Vec<(usize, usize)> = (0..self.ears.len())
            .filter(|&i| {
                let e = &self.ears[i];
                e.server == server && e.channel == channel && e.sock.is_some()
            })
            .map(|i| (i, self.ears[i].client))
            .collect();
        for (ear, client) in ears {
            if let Some(d) = self.delay(client, server) {
                let message = message.to_string();
                self.at(self.now + d, Kind::Heard { ear, message });
            }
        }
    }

    /// A published message reaches ear `ear`: written there, it wakes the client's sleep.
    pub fn heard(&mut self, ear: usize, message: &str) {
        let e = &mut self.ears[ear];
        let Some(sock) = e.sock.as_mut() else {
            return;
        };
        let bytes = push(&e.channel, message);
        // A client that has closed its end hears nothing.
        let _ = sock.write_all(&bytes);
        let client = e.client;
        self.note(format!("c{client} hears {message:?}"));
        if let Some(thread) = self.clients[client].listening {
            self.poke(thread);
        }
    }

    /// Before server `server` runs a script: the ears whose client has closed its end are
    /// closed, and their listeners no longer counted.
    pub fn prune_ears(&mut self, server: usize) {
        if !self.servers[server]
            .listeners
            .values()
            .any(|who| !who.is_empty())
        {
            return;
        }
        for i in 0..self.ears.len() {
            let e = &mut self.ears[i];
            if e.server != server {
                continue;
            }
            let Some(sock) = e.sock.as_mut() else {
                continue;
            };
            // What the client sent (its SUBSCRIBE) is read and dropped; the end of the
            // connection closes the ear.
            let mut buf = [0u8; 256];
            let closed = loop {
                match sock.read(&mut buf) {
                    Ok(0) => break true,
                    Ok(_) => {}
                    Err(err) if err.kind() == ErrorKind::WouldBlock => break false,
                    Err(_) => break true,
                }
            };
            if closed {
                self.close_ear(i);
            }
        }
    }

    /// Server `server` crashed: its connections end, and each client that listened there reads
    /// the end of its subscription.
    pub fn crash_ears(&mut self, server: usize) {
        for i in 0..self.ears.len() {
            if self.ears[i].server == server && self.ears[i].sock.is_some() {
                self.close_ear(i);
                let client = self.ears[i].client;
                if let Some(thread) = self.clients[client].listening {
                    self.poke(thread);
                }
            }
        }
    }

    fn close_ear(&mut self, i: usize) {
        let e = &mut self.ears[i];
        e.sock = None;
        e.theirs = None;
        let (server, client) = (e.server, e.client);
        if let Some(who) = self.servers[server].listeners.get_mut(&e.channel)
            && let Some(at) = who.iter().position(|c| *c == client)
        {
            who.remove(at);
        }
    }
}
