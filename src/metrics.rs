//! `exec --metrics-file PATH`: the last run of each key as Prometheus text (exposition format
//! 0.0.4), for node_exporter's textfile collector.
//!
//! Several keys may share one file (the cron jobs of a host): a run rewrites its own key's lines
//! and keeps every other line, under an exclusive flock of `PATH.lock`, so that two runs ending
//! together do not drop each other's lines. The file is written whole beside PATH and renamed
//! over it, so that the collector never reads half of it. The temporary file and the lock file
//! do not end in `.prom`, and the collector skips them.
//!
//! The path is not trusted, as a careful daemon treats a file in a directory others may write:
//! only a regular file, or none, is written (`check`, before the command starts); at the end the
//! file is opened without following a link, the opened descriptor is what is checked (a regular
//! file with one name), read (at most `MAX_READ` bytes, never waiting) and whose mode the new
//! file gets, so a link or another file swapped in after the check never has a line copied; the
//! temporary file is created exclusively (never through a link an attacker planted), its mode set
//! on its descriptor, and renamed over PATH; the lock file is never followed either, and one that
//! another user owns is not waited for; and only rlock's own families (`rlock_*`) are ever
//! rewritten: another tool's samples with a `key` label stay.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::fcntl::{Flock, FlockArg, OFlag};

use crate::lock::RunRecord;

/// The gauges of one key, in the order they are written, with their help.
const FAMILIES: [(&str, &str); 7] = [
    (
        "rlock_last_run_start_timestamp_seconds",
        "When the last run of the lock's command asked for the lock (Unix time).",
    ),
    (
        "rlock_last_run_end_timestamp_seconds",
        "When the last run ended (Unix time).",
    ),
    (
        "rlock_last_run_wait_seconds",
        "How long the last run waited for the lock (or before it gave up).",
    ),
    (
        "rlock_last_run_duration_seconds",
        "How long the last run held the lock (0 when it never got it).",
    ),
    (
        "rlock_last_run_exit_code",
        "rlock's exit code for the last run (the command's status, 75 busy, 76 lost, 79 superseded, 124 timed out, 128+N signal).",
    ),
    (
        "rlock_last_run_outcome",
        "How the last run ended: 1 for its outcome, 0 for the others.",
    ),
    (
        "rlock_last_success_timestamp_seconds",
        "When a run of the lock's command last ended with status 0 (Unix time).",
    ),
];

/// How long a run waits for another rlock writing the same file before it gives up its write,
/// when the lock file is its own user's: another user's lock file is tried once, since whoever
/// holds it may hold it for ever, and a run's end is never delayed by another user.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// The most of an existing metrics file read: a textfile collector's file is a few KiB, and a
/// path that never ends (`/dev/zero`) must not fill the memory.
const MAX_READ: u64 = 4 << 20;

/// Why `path` cannot be the metrics file (checked before the command starts): anything but a
/// regular file, or none at all (a link, even to a regular file, a directory, a FIFO, a device).
pub fn check(path: &Path) -> Result<(), String> {
    let what = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_file() => return Ok(()),
        Ok(meta) if meta.is_symlink() => {
            "a symbolic link (rlock follows none: name the file itself)"
        }
        Ok(meta) if meta.is_dir() => "a directory",
        Ok(_) => "not a regular file",
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("--metrics-file {}: {e}", path.display())),
    };
    Err(format!(
        "--metrics-file {} is {what}: it must be a regular file, or none",
        path.display()
    ))
}

/// Rewrites `key`'s lines in the metrics file `path` for `run`, one of whose `outcomes` it had
/// (each gets a line of the outcome gauge); every other key's lines stay, and every line of
/// another tool's families. Ok(Some(why)) when the file could not be read as metrics and was
/// replaced whole.
pub fn write(
    path: &Path,
    key: &str,
    run: &RunRecord,
    outcomes: &[&str],
) -> io::Result<Option<String>> {
    let _lock = lock(&side_file(path, ".lock"))?;
    let (old, mode, replaced) = match read(path) {
        Ok((text, mode)) => (text, mode, None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => (String::new(), NEW_MODE, None),
        Err(e) if e.kind() == io::ErrorKind::InvalidData => {
            (String::new(), NEW_MODE, Some(e.to_string()))
        }
        Err(e) => return Err(e),
    };
    let mut families = parse(&old);
    let last_success = families
        .get(FAMILIES[6].0)
        .and_then(|f| f.samples.iter().find(|(k, _)| k.as_deref() == Some(key)))
        .and_then(|(_, line)| line.rsplit(' ').next().map(str::to_string));
    for (_, family) in families.iter_mut().filter(|(n, _)| n.starts_with("rlock_")) {
        family.samples.retain(|(k, _)| k.as_deref() != Some(key));
    }
    let label = format!("key=\"{}\"", escape(key));
    let seconds = |ms: Option<i64>| format!("{:.3}", ms.unwrap_or(0) as f64 / 1000.0);
    let outcome = run.outcome.as_deref().unwrap_or("");
    let success = (outcome == "ok")
        .then(|| seconds(run.ended_ms))
        .or(last_success);
    for (i, (name, help)) in FAMILIES.iter().enumerate() {
        let family = families.entry(name.to_string()).or_default();
        family.help = Some(format!("# HELP {name} {help}"));
        family.kind = Some(format!("# TYPE {name} gauge"));
        let mut add = |labels: String, value: String| {
            let line = format!("{name}{{{labels}}} {value}");
            family.samples.push((Some(key.to_string()), line));
        };
        match i {
            0 => add(label.clone(), seconds(run.asked_ms)),
            1 => add(label.clone(), seconds(run.ended_ms)),
            2 => add(label.clone(), seconds(run.wait_ms)),
            3 => add(label.clone(), seconds(run.held_ms)),
            4 => add(label.clone(), run.code.unwrap_or(0).to_string()),
            5 => {
                for o in outcomes {
                    let value = if *o == outcome { "1" } else { "0" };
                    add(format!("{label},outcome=\"{}\"", escape(o)), value.into());
                }
            }
            _ => {
                if let Some(at) = &success {
                    add(label.clone(), at.clone());
                }
            }
        }
    }
    replace(path, &render(&families), mode)?;
    Ok(replaced)
}

/// The mode of a new metrics file: the collector may run as another user.
const NEW_MODE: u32 = 0o644;

/// The text of the metrics file at `path` and its permission bits, both from the one descriptor
/// opened (never through a link) and checked: NotFound when there is none; InvalidData (it is
/// then replaced whole, its mode not kept) when it is longer than `MAX_READ`, not UTF-8, or has
/// another name too (a hard link: whatever it is, its lines are not copied). Never waits: a
/// FIFO or a device put there since `check` is refused, not read; so is a link.
fn read(path: &Path) -> io::Result<(String, u32)> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK).bits())
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(code) if code == nix::errno::Errno::ELOOP as i32 => io::Error::other(format!(
                "{} is a symbolic link now, and rlock follows none",
                path.display()
            )),
            _ => e,
        })?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::other(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    if meta.nlink() != 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("it has {} names (hard links)", meta.nlink()),
        ));
    }
    let mut raw = Vec::new();
    file.take(MAX_READ + 1).read_to_end(&mut raw)?;
    if raw.len() as u64 > MAX_READ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("it is longer than {MAX_READ} bytes"),
        ));
    }
    let text = String::from_utf8(raw)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "it is not UTF-8 text"))?;
    Ok((text, meta.mode() & 0o777))
}

/// The lines of one metric family in the file.
#[derive(Default)]
struct Family {
    help: Option<String>,
    kind: Option<String>,
    /// Each sample's `key` label (None when it has none) and its line.
    samples: Vec<(Option<String>, String)>,
}

/// The families of a metrics file, by name. Comments other than HELP and TYPE are dropped.
fn parse(text: &str) -> BTreeMap<String, Family> {
    let mut families: BTreeMap<String, Family> = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim_end();
        if let Some(comment) = line.strip_prefix("# ") {
            let mut words = comment.splitn(3, ' ');
            let (what, name) = (words.next(), words.next());
            if let Some(name) = name {
                let family = families.entry(name.to_string()).or_default();
                match what {
                    Some("HELP") => family.help = Some(line.to_string()),
                    Some("TYPE") => family.kind = Some(line.to_string()),
                    _ => {}
                }
            }
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name = line.split(['{', ' ']).next().unwrap_or(line);
        families
            .entry(name.to_string())
            .or_default()
            .samples
            .push((key_label(line), line.to_string()));
    }
    families
}

/// The file's text: each family's HELP, TYPE and samples together (the format wants them so),
/// families by name, samples by key.
fn render(families: &BTreeMap<String, Family>) -> String {
    let mut out = String::new();
    for family in families.values().filter(|f| !f.samples.is_empty()) {
        for line in family.help.iter().chain(&family.kind) {
            out.push_str(line);
            out.push('\n');
        }
        let mut samples: Vec<_> = family.samples.iter().collect();
        samples.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, line) in samples {
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// A label value as the format writes it: `\`, `"` and line feeds escaped.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// The value of a sample line's `key` label, unescaped; None when it has none.
fn key_label(line: &str) -> Option<String> {
    let labels = &line[line.find('{')? + 1..];
    let start = ["key=\"", ",key=\""]
        .iter()
        .filter_map(|p| {
            labels
                .find(p)
                .filter(|&i| p.starts_with(',') || i == 0)
                .map(|i| i + p.len())
        })
        .min()?;
    let mut out = String::new();
    let mut chars = labels[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

/// `path` with `suffix` added to its file name.
fn side_file(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(suffix);
    path.with_file_name(name)
}

/// An exclusive flock of `path` (created if need be, never through a link, and only a regular
/// file), waited for at most `LOCK_WAIT` when the file is this user's, not at all when another
/// user's (whose holder need never let go): that run's write is then given up.
fn lock(path: &Path) -> io::Result<Flock<File>> {
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK).bits())
            .open(path)
            .map_err(|e| io::Error::other(format!("cannot open {}: {e}", path.display())))?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            return Err(io::Error::other(format!(
                "{} is not a regular file",
                path.display()
            )));
        }
        let owner = meta.uid();
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => return Ok(locked),
            Err((_, nix::errno::Errno::EWOULDBLOCK))
                if owner != nix::unistd::geteuid().as_raw() =>
            {
                return Err(io::Error::other(format!(
                    "its lock file {} belongs to uid {owner} and is held: another user's lock \
                     is not waited for",
                    path.display()
                )));
            }
            Err((_, nix::errno::Errno::EWOULDBLOCK)) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err((_, e)) => {
                return Err(io::Error::other(format!(
                    "cannot lock {}: {e}",
                    path.display()
                )));
            }
        }
    }
}

/// Puts `text` at `path` at once: written to a new file beside it (same file system, a name of
/// its own made with O_EXCL, so never a file or link already there), given `mode` on its
/// descriptor, then renamed over PATH (a rename replaces a link, never writes through it).
fn replace(path: &Path, text: &str, mode: u32) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!("{name}."))
        .suffix(".tmp")
        .tempfile_in(dir)?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))?;
    tmp.write_all(text.as_bytes())?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped_and_read_back() {
        let odd = "a\"b\\c\nd";
        let line = format!("m{{key=\"{}\",outcome=\"ok\"}} 1", escape(odd));
        assert_eq!(key_label(&line).as_deref(), Some(odd));
        assert_eq!(key_label("m{monkey=\"x\"} 1"), None);
        assert_eq!(key_label("m{a=\"1\",key=\"k\"} 1").as_deref(), Some("k"));
        assert_eq!(key_label("m 1"), None);
    }

    #[test]
    fn families_keep_their_lines_together() {
        let text = "# HELP a x\n# TYPE a gauge\na{key=\"1\"} 1\n# TYPE b gauge\nb{key=\"1\"} 2\na{key=\"2\"} 3\n";
        let out = render(&parse(text));
        assert_eq!(
            out,
            "# HELP a x\n# TYPE a gauge\na{key=\"1\"} 1\na{key=\"2\"} 3\n# TYPE b gauge\nb{key=\"1\"} 2\n"
        );
    }
}
