//! The scripts' side of a simulated server: Lua 5.1 (Redis's version, built from source by
//! mlua), with the `redis` object, `cjson` and the reply conversions Redis makes, over a
//! `Store`. The scripts run are rlock's own, the very text build.rs puts together.
//!
//! With the feature `lua54` the same scripts run in Lua 5.4, as Dragonfly and Garnet run them,
//! with no 5.1 shim: integers and floats are two kinds of number (an integer reply arrives as
//! an integer, `/` and `cjson.decode` give floats, `tostring(30000.0)` is "30000.0", a float
//! returned is not truncated into an integer reply), and there is no global `unpack`. A script
//! that leans on 5.1 answers differently there, and the invariants or the answers of
//! `tests.rs` show it.

use std::collections::BTreeSet;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use mlua::{DebugEvent, Function, HookTriggers, Lua, Table, Value, Variadic, VmState};

use super::store::{Resp, Server, Store};

/// What one script call sees of its server: its data, its clock, who listens on which channel
/// (for PUBLISH), and what INFO says. Handed to Lua for the call and taken back after.
pub struct Exec {
    pub store: Store,
    pub env: Env,
}

/// The server around the data.
pub struct Env {
    pub now_us: i64,
    /// Subscribers per channel.
    pub listeners: BTreeMap<String, i64>,
    /// What was published, in order, to a channel someone listens on.
    pub published: Vec<(String, String)>,
    pub info_server: String,
    pub info_replication: String,
}

impl Server for Env {
    fn publish(&mut self, channel: &str, message: &str) -> i64 {
        let heard = self.listeners.get(channel).copied().unwrap_or(0);
        if heard > 0 {
            self.published.push((channel.into(), message.into()));
        }
        heard
    }

    fn info(&self, section: &str) -> String {
        match section.to_ascii_lowercase().as_str() {
            "server" => self.info_server.clone(),
            "replication" => self.info_replication.clone(),
            _ => String::new(),
        }
    }
}

/// How the host hands a script what Redis gives it. `Redis`: Redis's own (a status reply as a
/// table `{ok = word}`; in Lua 5.1, the global `unpack`). `Plain`: as the hosts of some other
/// servers are (Dragonfly and Garnet run Lua 5.4 with 5.1 shims): a status reply as the plain
/// word, and `table.unpack` without the global `unpack`. The scripts must give the same answers
/// on both, in either Lua.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Host {
    #[default]
    Redis,
    Plain,
}

/// One server's Lua, its scripts compiled once (as Redis keeps them by SHA1).
pub struct Scripting {
    lua: Lua,
    compiled: HashMap<String, Function>,
    /// Thousands of instructions the script running has taken.
    steps: Arc<AtomicU64>,
}

/// The lines the scripts ran, by the script's SHA1, and each script's text: recorded only
/// while `COVERAGE` is on (the mutation pass's look at what its kill budget reaches), by the
/// Lua of a server started meanwhile.
pub static COVERAGE: AtomicBool = AtomicBool::new(false);
pub static LINES: Mutex<BTreeSet<(String, usize)>> = Mutex::new(BTreeSet::new());
pub static SOURCES: Mutex<BTreeMap<String, String>> = Mutex::new(BTreeMap::new());

/// Thousands of Lua instructions a script may take before it is stopped: a script that never
/// ends would hold its server (BUSY) for good. rlock's take a few hundred at most.
const STEPS: u64 = 10_000;

fn text(s: &mlua::String) -> String {
    String::from_utf8_lossy(&s.as_bytes()).into_owned()
}

/// A number as Redis passes it to a command: a whole number as its digits.
fn number_arg(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e17 {
        format!("{}", n as i64)
    } else {
        format!("{n}")
    }
}

/// C's `%.14g`: how Redis's cjson writes a number.
fn g14(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e14 {
        return format!("{}", n as i64);
    }
    let sci = format!("{n:.13e}");
    let (mantissa, exp) = sci.split_once('e').expect("an exponent");
    let exp: i32 = exp.parse().expect("a number");
    let trim = |s: String| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if !(-4..14).contains(&exp) {
        format!(
            "{}e{}{:02}",
            trim(mantissa.to_string()),
            if exp < 0 { '-' } else { '+' },
            exp.abs()
        )
    } else {
        trim(format!("{n:.*}", (13 - exp) as usize))
    }
}

fn argv(args: Variadic<Value>) -> mlua::Result<Vec<String>> {
    args.iter()
        .map(|v| match v {
            Value::String(s) => Ok(text(s)),
            Value::Integer(i) => Ok(i.to_string()),
            Value::Number(n) => Ok(number_arg(*n)),
            _ => Err(mlua::Error::RuntimeError(
                "ERR Lua redis lib command arguments must be strings or integers".into(),
            )),
        })
        .collect()
}

/// A reply as a script sees it, on `host`.
fn to_lua(lua: &Lua, r: Resp, host: Host) -> mlua::Result<Value> {
    Ok(match r {
        Resp::Nil => Value::Boolean(false),
        // Redis's Lua 5.1 has one number type; a Lua 5.4 host hands an integer reply over as
        // an integer (Dragonfly's `lua_pushinteger`), whose arithmetic with `/` turns float.
        #[cfg(feature = "lua51")]
        Resp::Int(i) => Value::Number(i as f64),
        #[cfg(feature = "lua54")]
        Resp::Int(i) => Value::Integer(i),
        Resp::Bulk(s) => Value::String(lua.create_string(&s)?),
        Resp::Status(s) if host == Host::Plain => Value::String(lua.create_string(&s)?),
        Resp::Status(s) => {
            let t = lua.create_table()?;
            t.set("ok", s)?;
            Value::Table(t)
        }
        Resp::Err(e) => {
            let t = lua.create_table()?;
            t.set("err", e)?;
            Value::Table(t)
        }
        Resp::Array(items) => {
            let t = lua.create_table()?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item, host)?)?;
            }
            Value::Table(t)
        }
    })
}

/// A script's return value as Redis turns it into a reply.
fn to_resp(v: &Value) -> Resp {
    match v {
        Value::Nil | Value::Boolean(false) => Resp::Nil,
        Value::Boolean(true) => Resp::Int(1),
        Value::Integer(i) => Resp::Int(*i),
        // Redis truncates a number to an integer reply; a Lua 5.4 host may send a float as a
        // double (Dragonfly does), which no client of rlock's reads as a number: a script that
        // returns a float answers differently there, and the run shows it.
        #[cfg(feature = "lua51")]
        Value::Number(n) => Resp::Int(n.trunc() as i64),
        #[cfg(feature = "lua54")]
        Value::Number(n) => Resp::Bulk(format!("{n:?}")),
        Value::String(s) => Resp::Bulk(text(s)),
        Value::Table(t) => {
            if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
                return Resp::Err(text(&e));
            }
            if let Ok(Value::String(s)) = t.raw_get::<Value>("ok") {
                return Resp::Status(text(&s));
            }
            let mut out = Vec::new();
            for i in 1.. {
                match t.raw_get::<Value>(i) {
                    Ok(Value::Nil) | Err(_) => break,
                    Ok(item) => out.push(to_resp(&item)),
                }
            }
            Resp::Array(out)
        }
        _ => Resp::Nil,
    }
}

fn json_encode(v: &Value, out: &mut String) -> mlua::Result<()> {
    match v {
        Value::Nil => out.push_str("null"),
        Value::Boolean(b) => out.push_str(if *b { "true" } else { "false" }),
        // (mlua hands Lua 5.1's whole numbers over as integers: cjson writes them as any.)
        Value::Integer(i) => out.push_str(&g14(*i as f64)),
        Value::Number(n) => out.push_str(&g14(*n)),
        Value::String(s) => out.push_str(&serde_json::to_string(&text(s)).expect("a string")),
        Value::Table(t) => {
            let len = t.raw_len();
            let pairs = t.clone().pairs::<Value, Value>().count();
            if len > 0 && pairs == len {
                out.push('[');
                for i in 1..=len {
                    if i > 1 {
                        out.push(',');
                    }
                    json_encode(&t.raw_get::<Value>(i)?, out)?;
                }
                out.push(']');
            } else {
                out.push('{');
                let mut first = true;
                for pair in t.clone().pairs::<Value, Value>() {
                    let (k, v) = pair?;
                    let key = match &k {
                        Value::String(s) => text(s),
                        Value::Integer(i) => i.to_string(),
                        Value::Number(n) => g14(*n),
                        _ => {
                            return Err(mlua::Error::RuntimeError(
                                "Cannot serialise table: key".into(),
                            ));
                        }
                    };
                    if !first {
                        out.push(',');
                    }
                    first = false;
                    out.push_str(&serde_json::to_string(&key).expect("a string"));
                    out.push(':');
                    json_encode(&v, out)?;
                }
                out.push('}');
            }
        }
        _ => return Err(mlua::Error::RuntimeError("Cannot serialise value".into())),
    }
    Ok(())
}

fn json_decode(lua: &Lua, v: &serde_json::Value) -> mlua::Result<Value> {
    use serde_json::Value as J;
    Ok(match v {
        J::Null => Value::Nil,
        J::Bool(b) => Value::Boolean(*b),
        J::Number(n) => Value::Number(n.as_f64().unwrap_or(0.0)),
        J::String(s) => Value::String(lua.create_string(s)?),
        J::Array(items) => {
            let t = lua.create_table()?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, json_decode(lua, item)?)?;
            }
            Value::Table(t)
        }
        J::Object(fields) => {
            let t = lua.create_table()?;
            for (k, item) in fields {
                t.raw_set(k.as_str(), json_decode(lua, item)?)?;
            }
            Value::Table(t)
        }
    })
}

/// `redis.call` (errors raised) or `redis.pcall` (errors returned as `{err = ...}`).
fn command(lua: &Lua, args: Variadic<Value>, raise: bool) -> mlua::Result<Value> {
    let argv = argv(args)?;
    let reply = {
        let mut exec = lua.app_data_mut::<Exec>().expect("a call in progress");
        let Exec { store, env } = &mut *exec;
        let now = env.now_us;
        store.command(&argv, now, env)
    };
    let host = lua.app_data_ref::<Host>().map_or(Host::Redis, |h| *h);
    match reply {
        Resp::Err(e) if raise => Err(mlua::Error::RuntimeError(e)),
        r => to_lua(lua, r, host),
    }
}

impl Scripting {
    pub fn new() -> Self {
        Scripting::on(Host::Redis)
    }

    /// A server's Lua as `host` gives it.
    pub fn on(host: Host) -> Self {
        let lua = Lua::new();
        lua.set_app_data(host);
        let set_up = || -> mlua::Result<()> {
            let redis: Table = lua.create_table()?;
            redis.set(
                "call",
                lua.create_function(|lua, args: Variadic<Value>| command(lua, args, true))?,
            )?;
            redis.set(
                "pcall",
                lua.create_function(|lua, args: Variadic<Value>| command(lua, args, false))?,
            )?;
            redis.set(
                "sha1hex",
                lua.create_function(|_, s: mlua::String| {
                    Ok(sha1_smol::Sha1::from(&s.as_bytes()[..])
                        .digest()
                        .to_string())
                })?,
            )?;
            lua.globals().set("redis", redis)?;
            let cjson: Table = lua.create_table()?;
            cjson.set(
                "encode",
                lua.create_function(|_, v: Value| {
                    let mut out = String::new();
                    json_encode(&v, &mut out)?;
                    Ok(out)
                })?,
            )?;
            cjson.set(
                "decode",
                lua.create_function(|lua, s: mlua::String| {
                    let parsed: serde_json::Value = serde_json::from_slice(&s.as_bytes())
                        .map_err(|e| mlua::Error::RuntimeError(format!("Expected value: {e}")))?;
                    json_decode(lua, &parsed)
                })?,
            )?;
            lua.globals().set("cjson", cjson)?;
            if host == Host::Plain {
                lua.load("table.unpack = table.unpack or unpack; unpack = nil")
                    .exec()?;
            }
            Ok(())
        };
        set_up().expect("the scripting environment");
        let steps = Arc::new(AtomicU64::new(0));
        let counted = steps.clone();
        let triggers = match COVERAGE.load(Ordering::Relaxed) {
            true => HookTriggers::new().every_nth_instruction(1000).every_line(),
            false => HookTriggers::new().every_nth_instruction(1000),
        };
        lua.set_hook(triggers, move |_, debug| {
            if debug.event() == DebugEvent::Line {
                let chunk = debug.source().source.map(|s| s.to_string());
                if let (Some(chunk), Some(line)) = (chunk, debug.current_line())
                    && let Some(sha) = chunk.strip_prefix("@user_script_")
                {
                    let mut lines = LINES.lock().unwrap_or_else(|p| p.into_inner());
                    lines.insert((sha.to_string(), line));
                }
                return Ok(VmState::Continue);
            }
            match counted.fetch_add(1, Ordering::Relaxed) < STEPS {
                true => Ok(VmState::Continue),
                false => Err(mlua::Error::RuntimeError(
                    "BUSY the script ran for too long".into(),
                )),
            }
        })
        .expect("a hook");
        Scripting {
            lua,
            compiled: HashMap::new(),
            steps,
        }
    }

    /// From now on `redis.acl_check_cmd` (Redis 7's) refuses `command` and allows every other,
    /// as it does for an ACL user without that one right.
    pub fn deny(&mut self, command: &str) {
        let denied = command.to_ascii_lowercase();
        let check = self
            .lua
            .create_function(move |_, args: Variadic<Value>| {
                Ok(match args.first() {
                    Some(Value::String(s)) => s.to_string_lossy().to_ascii_lowercase() != denied,
                    _ => true,
                })
            })
            .expect("a function");
        let redis: Table = self.lua.globals().get("redis").expect("the redis object");
        redis.set("acl_check_cmd", check).expect("acl_check_cmd");
    }

    /// Runs `source` (known by `sha`) with `keys` and `args` against `exec`; the reply, or the
    /// script's error, and `exec` back.
    pub fn eval(
        &mut self,
        sha: &str,
        source: &str,
        keys: &[String],
        args: &[String],
        exec: Exec,
    ) -> (Resp, Exec) {
        let function = match self.compiled.get(sha) {
            Some(f) => f.clone(),
            None => {
                let f = self
                    .lua
                    .load(source)
                    .set_name(format!("@user_script_{sha}"))
                    .into_function()
                    .expect("rlock's scripts compile");
                self.compiled.insert(sha.to_string(), f.clone());
                if COVERAGE.load(Ordering::Relaxed) {
                    let mut sources = SOURCES.lock().unwrap_or_else(|p| p.into_inner());
                    sources.insert(sha.to_string(), source.to_string());
                }
                f
            }
        };
        let globals = self.lua.globals();
        let seq = |items: &[String]| -> Table {
            let t = self.lua.create_table().expect("a table");
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, self.lua.create_string(item).expect("a string"))
                    .expect("set");
            }
            t
        };
        globals.set("KEYS", seq(keys)).expect("KEYS");
        globals.set("ARGV", seq(args)).expect("ARGV");
        self.lua.set_app_data(exec);
        self.steps.store(0, Ordering::Relaxed);
        let result = function.call::<Value>(());
        let exec = self
            .lua
            .remove_app_data::<Exec>()
            .expect("the call's server");
        let reply = match result {
            Ok(v) => to_resp(&v),
            Err(e) => Resp::Err(error_text(&e)),
        };
        (reply, exec)
    }
}

/// A script's error as Redis reports it: its own message, without Lua's wrapping.
fn error_text(e: &mlua::Error) -> String {
    match e {
        mlua::Error::RuntimeError(m) => m.clone(),
        mlua::Error::CallbackError { cause, .. } => error_text(cause),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cjson_writes_numbers_as_redis_does() {
        let mut lua = Scripting::new();
        let exec = Exec {
            store: Store::default(),
            env: Env {
                now_us: 0,
                listeners: BTreeMap::new(),
                published: Vec::new(),
                info_server: String::new(),
                info_replication: String::new(),
            },
        };
        let source = "return cjson.encode({1780000000123456, 30000, 0.5})";
        let (reply, _) = lua.eval("x", source, &[], &[], exec);
        assert_eq!(reply, Resp::Bulk("[1.7800000001235e+15,30000,0.5]".into()));
    }

    #[test]
    fn numbers_are_written_as_redis_writes_them() {
        assert_eq!(g14(30000.0), "30000");
        assert_eq!(g14(1_780_000_000_000_001.0), "1.78e+15");
        assert_eq!(g14(0.5), "0.5");
        assert_eq!(g14(123_456_789_012_345.0), "1.2345678901234e+14");
        assert_eq!(number_arg(1_780_000_000_000_001.0), "1780000000000001");
        assert_eq!(number_arg(1.5), "1.5");
    }
}
