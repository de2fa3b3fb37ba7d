//! `--events json`: each step of a lock as one JSON object a line, for log pipelines and log
//! shippers (docs/inspect.md, "Events"). The human lines stay as they are; events go beside them
//! on stderr, or to `--events-to`. Field names follow OpenTelemetry's semantic conventions where
//! one fits (`host.name`, `process.pid`, `process.exit.code`, `error.type`).
//!
//! An event carries what the history keeps and no more: the holder's label or program (masked
//! as the history masks it), never a token or the command's arguments. A write that fails is said
//! once and never changes the run.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

/// Where the events go.
enum Sink {
    Stderr,
    File(File),
    /// The file could not be opened (said once, at the start).
    Nowhere,
}

/// The events of one rlock process.
pub struct Events {
    sink: Mutex<Sink>,
    /// A write failed (said once).
    failed: AtomicBool,
    /// This process's own fields, in every event: host.name, process.pid.
    host: String,
    /// The lock this process works on, for the events that come without one (a renewal).
    key: std::sync::OnceLock<String>,
}

impl Events {
    /// Events as `--events` and `--events-to` ask; None without `--events`. A file that cannot
    /// be opened is said once, and the run goes on without its events.
    pub fn new(format: Option<&str>, to: Option<&Path>) -> Option<Events> {
        format?;
        let sink = match to {
            None => Sink::Stderr,
            Some(path) => match open(path) {
                Ok(file) => Sink::File(file),
                Err(e) => {
                    crate::output::message(&format!(
                        "--events-to {}: {e}; the run goes on without its events",
                        path.display()
                    ));
                    Sink::Nowhere
                }
            },
        };
        Some(Events {
            sink: Mutex::new(sink),
            failed: AtomicBool::new(false),
            host: crate::identity::Identity::current(0, String::new()).host,
            key: std::sync::OnceLock::new(),
        })
    }

    /// The lock this process works on: the key of the events that name none.
    pub fn working_on(&self, key: &str) {
        let _ = self.key.set(key.to_string());
    }

    /// Writes event `name` for lock `key` (or, when empty, the one this process works on) with
    /// `fields`, as one line.
    pub fn emit(&self, name: &str, key: &str, fields: Value) {
        let key = match key {
            "" => self.key.get().map_or("", String::as_str),
            key => key,
        };
        let mut event = Map::new();
        event.insert("time".into(), json!(now_rfc3339()));
        event.insert("event".into(), json!(name));
        event.insert("key".into(), json!(key));
        if let Value::Object(fields) = fields {
            for (name, value) in fields {
                if !value.is_null() {
                    event.insert(name, value);
                }
            }
        }
        event.insert("host.name".into(), json!(self.host));
        event.insert("process.pid".into(), json!(std::process::id()));
        let mut line = Value::Object(event).to_string();
        line.push('\n');
        let written = match &mut *self.sink.lock().unwrap_or_else(|e| e.into_inner()) {
            Sink::Stderr => std::io::stderr().lock().write_all(line.as_bytes()),
            Sink::File(file) => file.write_all(line.as_bytes()),
            Sink::Nowhere => Ok(()),
        };
        if let Err(e) = written
            && !self.failed.swap(true, Ordering::Relaxed)
        {
            crate::output::message(&format!(
                "the events could not be written ({e}); the run goes on without them"
            ));
        }
    }
}

/// The events file: appended to, created if missing, never through a symbolic link, and never a
/// FIFO or device that could block (but /dev/fd/N, a descriptor the caller opened, is taken as
/// it is).
fn open(path: &Path) -> std::io::Result<File> {
    if let Some(fd) = path.to_str().and_then(|p| p.strip_prefix("/dev/fd/")) {
        let fd: i32 = fd
            .parse()
            .map_err(|_| std::io::Error::other("not a descriptor"))?;
        let file = File::options()
            .append(true)
            .open(format!("/proc/self/fd/{fd}"))?;
        return Ok(file);
    }
    let file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o644)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.file_type().is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(file)
}

/// Now, UTC, with milliseconds: `2026-12-07T04:20:31.123Z`.
fn now_rfc3339() -> String {
    let now = SystemTime::now();
    let ms = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_millis());
    let secs = humantime::format_rfc3339_seconds(now).to_string();
    format!("{}.{ms:03}Z", secs.trim_end_matches('Z'))
}
