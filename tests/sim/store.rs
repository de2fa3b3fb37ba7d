//! A small in-memory model of the Redis commands rlock's scripts call: strings, hashes, sorted
//! sets and streams, with millisecond expiry by the server's own clock, and Redis's replies
//! (RESP) as they reach a script or a client.

use std::collections::BTreeMap;

/// A reply, as Redis gives it.
#[derive(Debug, Clone, PartialEq)]
pub enum Resp {
    Nil,
    Int(i64),
    Bulk(String),
    Status(String),
    Err(String),
    Array(Vec<Resp>),
}

/// One key's value.
#[derive(Debug, Clone, PartialEq)]
pub enum Data {
    Str(String),
    Hash(BTreeMap<String, String>),
    /// Members by (score, member), as Redis orders them.
    ZSet(Vec<(f64, String)>),
    /// Entries by id.
    Stream(Vec<(String, Vec<String>)>),
}

impl Data {
    fn type_name(&self) -> &'static str {
        match self {
            Data::Str(_) => "string",
            Data::Hash(_) => "hash",
            Data::ZSet(_) => "zset",
            Data::Stream(_) => "stream",
        }
    }
}

/// What a command needs from the server beyond its data.
pub trait Server {
    /// PUBLISH: how many subscribers heard it.
    fn publish(&mut self, channel: &str, message: &str) -> i64;
    /// INFO `section`.
    fn info(&self, section: &str) -> String;
}

/// One server's keys.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Store {
    pub data: BTreeMap<String, Data>,
    /// Absolute expiry, in milliseconds by the server's clock.
    pub expires: BTreeMap<String, i64>,
    /// The last stream id given (ms, seq).
    last_id: (i64, i64),
}

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// A score as Redis writes it: the shortest text that reads back the same.
pub fn score_text(score: f64) -> String {
    if score == f64::INFINITY {
        "inf".into()
    } else if score == f64::NEG_INFINITY {
        "-inf".into()
    } else {
        format!("{score}")
    }
}

fn parse_score(text: &str) -> Option<f64> {
    match text.to_ascii_lowercase().as_str() {
        "+inf" | "inf" => Some(f64::INFINITY),
        "-inf" => Some(f64::NEG_INFINITY),
        t => t.parse().ok(),
    }
}

/// A bound of ZCOUNT and friends: "(" for an open one.
fn parse_bound(text: &str) -> Option<(f64, bool)> {
    match text.strip_prefix('(') {
        Some(rest) => parse_score(rest).map(|s| (s, true)),
        None => parse_score(text).map(|s| (s, false)),
    }
}

fn within(score: f64, (min, min_open): (f64, bool), (max, max_open): (f64, bool)) -> bool {
    let above = if min_open { score > min } else { score >= min };
    let below = if max_open { score < max } else { score <= max };
    above && below
}

fn err(text: &str) -> Resp {
    Resp::Err(text.to_string())
}

fn int(n: usize) -> Resp {
    Resp::Int(n as i64)
}

impl Store {
    /// Drops every key whose expiry has come by `now_ms`.
    pub fn expire_all(&mut self, now_ms: i64) {
        let gone: Vec<String> = self
            .expires
            .iter()
            .filter(|(_, at)| **at < now_ms)
            .map(|(k, _)| k.clone())
            .collect();
        for key in gone {
            self.remove(&key);
        }
    }

    fn remove(&mut self, key: &str) -> bool {
        self.expires.remove(key);
        self.data.remove(key).is_some()
    }

    /// The key's value, unless it has expired by `now_ms` (it is then dropped).
    fn live(&mut self, key: &str, now_ms: i64) -> Option<&mut Data> {
        // Redis: a key is gone once now is past its expiry.
        if self.expires.get(key).is_some_and(|at| *at < now_ms) {
            self.remove(key);
        }
        self.data.get_mut(key)
    }

    /// Drops a hash or sorted set left empty, as Redis does.
    fn drop_if_empty(&mut self, key: &str) {
        let empty = match self.data.get(key) {
            Some(Data::Hash(h)) => h.is_empty(),
            Some(Data::ZSet(z)) => z.is_empty(),
            _ => false,
        };
        if empty {
            self.remove(key);
        }
    }

    fn hash(
        &mut self,
        key: &str,
        now: i64,
        create: bool,
    ) -> Result<Option<&mut BTreeMap<String, String>>, Resp> {
        if self.live(key, now).is_none() {
            if !create {
                return Ok(None);
            }
            self.data
                .insert(key.to_string(), Data::Hash(BTreeMap::new()));
        }
        match self.data.get_mut(key) {
            Some(Data::Hash(h)) => Ok(Some(h)),
            _ => Err(err(WRONGTYPE)),
        }
    }

    fn zset(
        &mut self,
        key: &str,
        now: i64,
        create: bool,
    ) -> Result<Option<&mut Vec<(f64, String)>>, Resp> {
        if self.live(key, now).is_none() {
            if !create {
                return Ok(None);
            }
            self.data.insert(key.to_string(), Data::ZSet(Vec::new()));
        }
        match self.data.get_mut(key) {
            Some(Data::ZSet(z)) => Ok(Some(z)),
            _ => Err(err(WRONGTYPE)),
        }
    }

    /// Runs one command at `now_us` (the server's clock, microseconds).
    pub fn command(&mut self, argv: &[String], now_us: i64, server: &mut dyn Server) -> Resp {
        match self.run(argv, now_us, server) {
            Ok(r) | Err(r) => r,
        }
    }

    fn run(&mut self, argv: &[String], now_us: i64, server: &mut dyn Server) -> Result<Resp, Resp> {
        let now = now_us.div_euclid(1000);
        let name = argv
            .first()
            .map(|s| s.to_ascii_uppercase())
            .unwrap_or_default();
        let arg = |i: usize| -> Result<&str, Resp> {
            argv.get(i).map(String::as_str).ok_or_else(|| {
                err(&format!(
                    "ERR wrong number of arguments for '{}' command",
                    name.to_lowercase()
                ))
            })
        };
        let num = |i: usize| -> Result<i64, Resp> {
            arg(i)?
                .parse::<i64>()
                .map_err(|_| err("ERR value is not an integer or out of range"))
        };
        Ok(match name.as_str() {
            "TIME" => Resp::Array(vec![
                Resp::Bulk(now_us.div_euclid(1_000_000).to_string()),
                Resp::Bulk(now_us.rem_euclid(1_000_000).to_string()),
            ]),
            "GET" => match self.live(arg(1)?, now) {
                None => Resp::Nil,
                Some(Data::Str(s)) => Resp::Bulk(s.clone()),
                Some(_) => return Err(err(WRONGTYPE)),
            },
            "SET" => {
                let (key, value) = (arg(1)?.to_string(), arg(2)?.to_string());
                let (mut px, mut nx, mut xx) = (None, false, false);
                let mut i = 3;
                while i < argv.len() {
                    match argv[i].to_ascii_uppercase().as_str() {
                        "PX" => {
                            px = Some(num(i + 1)?);
                            i += 1;
                        }
                        "NX" => nx = true,
                        "XX" => xx = true,
                        _ => return Err(err("ERR syntax error")),
                    }
                    i += 1;
                }
                let exists = self.live(&key, now).is_some();
                if (nx && exists) || (xx && !exists) {
                    return Ok(Resp::Nil);
                }
                if px.is_some_and(|ms| ms <= 0) {
                    return Err(err("ERR invalid expire time in 'set' command"));
                }
                self.data.insert(key.clone(), Data::Str(value));
                match px {
                    Some(ms) => self.expires.insert(key, now + ms),
                    None => self.expires.remove(&key),
                };
                Resp::Status("OK".into())
            }
            "DEL" => {
                let mut n = 0;
                for key in &argv[1..] {
                    if self.live(key, now).is_some() {
                        self.remove(key);
                        n += 1;
                    }
                }
                int(n)
            }
            "TYPE" => Resp::Status(
                self.live(arg(1)?, now)
                    .map_or("none", |d| d.type_name())
                    .into(),
            ),
            "PTTL" => {
                let key = arg(1)?;
                match self.live(key, now) {
                    None => Resp::Int(-2),
                    Some(_) => Resp::Int(self.expires.get(key).map_or(-1, |at| at - now)),
                }
            }
            "PEXPIRE" => {
                let (key, ms) = (arg(1)?.to_string(), num(2)?);
                if self.live(&key, now).is_none() {
                    return Ok(Resp::Int(0));
                }
                if ms <= 0 {
                    self.remove(&key);
                } else {
                    self.expires.insert(key, now + ms);
                }
                Resp::Int(1)
            }
            "HGET" => {
                let field = arg(2)?;
                match self.hash(arg(1)?, now, false)? {
                    Some(h) => h.get(field).map_or(Resp::Nil, |v| Resp::Bulk(v.clone())),
                    None => Resp::Nil,
                }
            }
            "HMGET" => {
                let key = arg(1)?;
                let h = self.hash(key, now, false)?;
                Resp::Array(
                    argv[2..]
                        .iter()
                        .map(|f| {
                            h.as_ref()
                                .and_then(|h| h.get(f))
                                .map_or(Resp::Nil, |v| Resp::Bulk(v.clone()))
                        })
                        .collect(),
                )
            }
            "HSET" => {
                if argv.len() < 4 || !argv.len().is_multiple_of(2) {
                    return Err(err("ERR wrong number of arguments for 'hset' command"));
                }
                let h = self.hash(arg(1)?, now, true)?.expect("created");
                let mut added = 0;
                for pair in argv[2..].chunks(2) {
                    added += usize::from(h.insert(pair[0].clone(), pair[1].clone()).is_none());
                }
                int(added)
            }
            "HDEL" => {
                let key = arg(1)?.to_string();
                let removed = match self.hash(&key, now, false)? {
                    Some(h) => argv[2..].iter().filter(|f| h.remove(*f).is_some()).count(),
                    None => 0,
                };
                self.drop_if_empty(&key);
                int(removed)
            }
            "HEXISTS" => {
                let field = arg(2)?;
                let h = self.hash(arg(1)?, now, false)?;
                Resp::Int(i64::from(h.is_some_and(|h| h.contains_key(field))))
            }
            "HKEYS" => match self.hash(arg(1)?, now, false)? {
                Some(h) => Resp::Array(h.keys().cloned().map(Resp::Bulk).collect()),
                None => Resp::Array(Vec::new()),
            },
            "ZADD" => {
                let key = arg(1)?.to_string();
                let (mut nx, mut xx, mut i) = (false, false, 2);
                loop {
                    match arg(i)?.to_ascii_uppercase().as_str() {
                        "NX" => nx = true,
                        "XX" => xx = true,
                        _ => break,
                    }
                    i += 1;
                }
                if !(argv.len() - i).is_multiple_of(2) || argv.len() == i {
                    return Err(err("ERR syntax error"));
                }
                let mut pairs = Vec::new();
                for pair in argv[i..].chunks(2) {
                    let score = parse_score(&pair[0])
                        .filter(|s| !s.is_nan())
                        .ok_or_else(|| err("ERR value is not a valid float"))?;
                    pairs.push((score, pair[1].clone()));
                }
                if xx && self.live(&key, now).is_none() {
                    return Ok(Resp::Int(0));
                }
                let z = self.zset(&key, now, true)?.expect("created");
                let mut added = 0;
                for (score, member) in pairs {
                    let at = z.iter().position(|(_, m)| *m == member);
                    match at {
                        Some(_) if nx => {}
                        Some(at) => z[at].0 = score,
                        None if xx => {}
                        None => {
                            z.push((score, member));
                            added += 1;
                        }
                    }
                }
                z.sort_by(|a, b| a.0.total_cmp(&b.0).then_with(|| a.1.cmp(&b.1)));
                self.drop_if_empty(&key);
                int(added)
            }
            "ZREM" => {
                let key = arg(1)?.to_string();
                let removed = match self.zset(&key, now, false)? {
                    Some(z) => {
                        let before = z.len();
                        z.retain(|(_, m)| !argv[2..].contains(m));
                        before - z.len()
                    }
                    None => 0,
                };
                self.drop_if_empty(&key);
                int(removed)
            }
            "ZSCORE" => {
                let member = arg(2)?;
                match self.zset(arg(1)?, now, false)? {
                    Some(z) => z
                        .iter()
                        .find(|(_, m)| m == member)
                        .map_or(Resp::Nil, |(s, _)| Resp::Bulk(score_text(*s))),
                    None => Resp::Nil,
                }
            }
            "ZCARD" => Resp::Int(
                self.zset(arg(1)?, now, false)?
                    .map_or(0, |z| z.len() as i64),
            ),
            "ZRANGE" => {
                let (start, stop) = (num(2)?, num(3)?);
                let scores = argv
                    .get(4)
                    .is_some_and(|w| w.eq_ignore_ascii_case("WITHSCORES"));
                let z = self.zset(arg(1)?, now, false)?.cloned().unwrap_or_default();
                let len = z.len() as i64;
                let norm = |i: i64| if i < 0 { (len + i).max(0) } else { i };
                let (from, to) = (norm(start), norm(stop).min(len - 1));
                let mut out = Vec::new();
                if from <= to {
                    for (score, member) in &z[from as usize..=to as usize] {
                        out.push(Resp::Bulk(member.clone()));
                        if scores {
                            out.push(Resp::Bulk(score_text(*score)));
                        }
                    }
                }
                Resp::Array(out)
            }
            "ZCOUNT" | "ZRANGEBYSCORE" | "ZREMRANGEBYSCORE" => {
                let key = arg(1)?.to_string();
                let bad = || err("ERR min or max is not a float");
                let min = parse_bound(arg(2)?).ok_or_else(bad)?;
                let max = parse_bound(arg(3)?).ok_or_else(bad)?;
                let Some(z) = self.zset(&key, now, false)? else {
                    return Ok(match name.as_str() {
                        "ZRANGEBYSCORE" => Resp::Array(Vec::new()),
                        _ => Resp::Int(0),
                    });
                };
                let inside = |s: f64| within(s, min, max);
                match name.as_str() {
                    "ZCOUNT" => int(z.iter().filter(|(s, _)| inside(*s)).count()),
                    "ZRANGEBYSCORE" => Resp::Array(
                        z.iter()
                            .filter(|(s, _)| inside(*s))
                            .map(|(_, m)| Resp::Bulk(m.clone()))
                            .collect(),
                    ),
                    _ => {
                        let before = z.len();
                        z.retain(|(s, _)| !inside(*s));
                        let n = before - z.len();
                        self.drop_if_empty(&key);
                        int(n)
                    }
                }
            }
            "XADD" => {
                let key = arg(1)?.to_string();
                let mut i = 2;
                let mut maxlen = None;
                if arg(i)?.eq_ignore_ascii_case("MAXLEN") {
                    i += 1;
                    if arg(i)? == "~" || arg(i)? == "=" {
                        i += 1;
                    }
                    maxlen = Some(num(i)?.max(0) as usize);
                    i += 1;
                }
                if arg(i)? != "*" || !(argv.len() - i - 1).is_multiple_of(2) || argv.len() == i + 1
                {
                    return Err(err("ERR syntax error"));
                }
                let id = if now > self.last_id.0 {
                    (now, 0)
                } else {
                    (self.last_id.0, self.last_id.1 + 1)
                };
                self.last_id = id;
                let id = format!("{}-{}", id.0, id.1);
                if self.live(&key, now).is_none() {
                    self.data.insert(key.clone(), Data::Stream(Vec::new()));
                }
                let Some(Data::Stream(entries)) = self.data.get_mut(&key) else {
                    return Err(err(WRONGTYPE));
                };
                entries.push((id.clone(), argv[i + 1..].to_vec()));
                if let Some(max) = maxlen
                    && entries.len() > max
                {
                    entries.drain(..entries.len() - max);
                }
                Resp::Bulk(id)
            }
            "XDEL" => {
                let ids = argv[2..].to_vec();
                match self.data.get_mut(arg(1)?) {
                    Some(Data::Stream(entries)) => {
                        let before = entries.len();
                        entries.retain(|(id, _)| !ids.contains(id));
                        int(before - entries.len())
                    }
                    None => Resp::Int(0),
                    Some(_) => return Err(err(WRONGTYPE)),
                }
            }
            "XREVRANGE" => {
                let count = match argv.get(4) {
                    Some(w) if w.eq_ignore_ascii_case("COUNT") => num(5)?.max(0) as usize,
                    _ => usize::MAX,
                };
                let (newest, oldest) = (stream_id(arg(2)?, true)?, stream_id(arg(3)?, false)?);
                match self.live(arg(1)?, now) {
                    None => Resp::Array(Vec::new()),
                    Some(Data::Stream(entries)) => Resp::Array(
                        entries
                            .iter()
                            .rev()
                            .filter(|(id, _)| {
                                stream_id(id, false).is_ok_and(|id| oldest <= id && id <= newest)
                            })
                            .take(count)
                            .map(|(id, fields)| {
                                Resp::Array(vec![
                                    Resp::Bulk(id.clone()),
                                    Resp::Array(fields.iter().cloned().map(Resp::Bulk).collect()),
                                ])
                            })
                            .collect(),
                    ),
                    Some(_) => return Err(err(WRONGTYPE)),
                }
            }
            "PUBLISH" => Resp::Int(server.publish(arg(1)?, arg(2)?)),
            "INFO" => Resp::Bulk(server.info(argv.get(1).map_or("", String::as_str))),
            _ => {
                return Err(err(&format!(
                    "ERR unknown command '{}'",
                    name.to_lowercase()
                )));
            }
        })
    }
}

/// A stream ID as XREVRANGE reads a bound: `+`, `-`, `MS-SEQ`, or `MS` (its first sequence
/// number as the oldest bound, its last as the newest).
fn stream_id(word: &str, newest: bool) -> Result<(i64, i64), Resp> {
    let bad = || err("ERR Invalid stream ID specified as stream command argument");
    Ok(match word {
        "+" => (i64::MAX, i64::MAX),
        "-" => (0, 0),
        _ => match word.split_once('-') {
            Some((ms, seq)) => (
                ms.parse().map_err(|_| bad())?,
                seq.parse().map_err(|_| bad())?,
            ),
            None => (
                word.parse().map_err(|_| bad())?,
                if newest { i64::MAX } else { 0 },
            ),
        },
    })
}
