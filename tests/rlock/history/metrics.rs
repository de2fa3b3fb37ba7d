//! `--metrics-file`: Prometheus text that `prometheus_client`'s parser reads (installed from PyPI
//! into a virtual environment under target/, once; a test fails if it cannot be), the other keys'
//! lines kept, the last success kept across failures, never seen half-written, and a write that
//! fails changes nothing else.

use super::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Instant;

/// The virtual environment's python, with prometheus_client installed (once per test binary).
fn parser_python() -> PathBuf {
    static READY: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut ready = READY.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(python) = ready.as_ref() {
        return python.clone();
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/prometheus-venv");
    let python = venv.join("bin/python");
    let has_it = |python: &Path| {
        Command::new(python)
            .args(["-c", "import prometheus_client.parser"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if !has_it(&python) {
        let made = Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(&venv)
            .output();
        assert!(
            made.as_ref().is_ok_and(|o| o.status.success()),
            "the metrics tests need python3 with venv (apt-get install python3-venv): {made:?}"
        );
        let pip = Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .arg("prometheus_client==0.26.0")
            .output()
            .expect("run pip");
        assert!(
            pip.status.success() && has_it(&python),
            "the metrics tests check the file with prometheus_client's parser, and pip could not \
             install it into {}: {}",
            venv.display(),
            String::from_utf8_lossy(&pip.stderr)
        );
    }
    *ready = Some(python.clone());
    python
}

/// Every sample of a metrics file as prometheus_client's parser reads it: name, labels (sorted,
/// `k=v,...`) and value; panics with the parser's error if the file is not valid text format.
pub(super) fn parse(path: &Path) -> BTreeMap<(String, String), f64> {
    const SCRIPT: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = []
for family in text_string_to_metric_families(open(sys.argv[1]).read()):
    assert family.type == "gauge", family
    assert family.documentation, family
    for s in family.samples:
        out.append([s.name, ",".join("%s=%s" % kv for kv in sorted(s.labels.items())), s.value])
print(json.dumps(out))
"#;
    let out = Command::new(parser_python())
        .args(["-c", SCRIPT])
        .arg(path)
        .output()
        .expect("run the parser");
    assert!(
        out.status.success(),
        "prometheus_client cannot parse {}: {}\n{}",
        path.display(),
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(path).unwrap_or_default()
    );
    let samples: Vec<(String, String, f64)> =
        serde_json::from_slice(&out.stdout).expect("the parser's JSON");
    samples.into_iter().map(|(n, l, v)| ((n, l), v)).collect()
}

pub(super) fn sample(
    samples: &BTreeMap<(String, String), f64>,
    name: &str,
    labels: &str,
) -> Option<f64> {
    samples
        .get(&(format!("rlock_{name}"), labels.to_string()))
        .copied()
}

#[test]
fn the_metrics_file_parses_as_prometheus_text_and_keeps_the_other_keys() {
    let server = RedisServer::start();
    let dir = tempdir();
    let file = dir.path().join("rlock.prom");
    let m = file.to_str().unwrap();
    let odd = "we\"ird\\key x";
    assert_eq!(
        exec(&server, "a", &["--metrics-file", m, "--", "sleep", "0.2"]).code,
        0
    );
    let out = exec(
        &server,
        "b",
        &["--metrics-file", m, "--", "sh", "-c", "exit 3"],
    );
    assert_eq!(out.code, 3, "{out}");
    let out = run(rlock_at(&server).env("RLOCK_METRICS_FILE", m).args([
        "exec",
        "-k",
        odd,
        "--",
        "sh",
        "-c",
        "kill -TERM $$",
    ]));
    assert_eq!(out.code, 143, "{out}");
    let s = parse(&file);
    let (a, b, c) = ("key=a", "key=b", &format!("key={odd}"));
    assert_eq!(sample(&s, "last_run_exit_code", a), Some(0.0));
    assert_eq!(sample(&s, "last_run_exit_code", b), Some(3.0));
    assert_eq!(sample(&s, "last_run_exit_code", c), Some(143.0));
    let held = sample(&s, "last_run_duration_seconds", a).unwrap();
    assert!((0.2..5.0).contains(&held), "{held}");
    assert!(sample(&s, "last_run_wait_seconds", a).unwrap() < 5.0);
    let start = sample(&s, "last_run_start_timestamp_seconds", a).unwrap();
    let end = sample(&s, "last_run_end_timestamp_seconds", a).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        start <= end && end <= now && now - start < 60.0,
        "{start} {end} {now}"
    );
    let success_a = sample(&s, "last_success_timestamp_seconds", a);
    assert_eq!(success_a, Some(end));
    assert_eq!(
        sample(&s, "last_success_timestamp_seconds", b),
        None,
        "b never succeeded"
    );
    for (key, outcome) in [(a, "ok"), (b, "failed"), (c.as_str(), "signal")] {
        for o in [
            "ok",
            "failed",
            "signal",
            "lost",
            "interrupted",
            "busy",
            "gave-up",
        ] {
            let want = if o == outcome { 1.0 } else { 0.0 };
            let labels = format!("{key},outcome={o}");
            assert_eq!(
                sample(&s, "last_run_outcome", &labels),
                Some(want),
                "{labels}"
            );
        }
    }

    // A's next run fails: its last success stays, b's and the odd key's lines stay as they were.
    let before = s;
    let out = exec(&server, "a", &["--metrics-file", m, "--", "false"]);
    assert_eq!(out.code, 1, "{out}");
    let s = parse(&file);
    assert_eq!(sample(&s, "last_run_exit_code", a), Some(1.0));
    assert_eq!(sample(&s, "last_success_timestamp_seconds", a), success_a);
    let others = |s: &BTreeMap<(String, String), f64>| -> Vec<((String, String), f64)> {
        s.iter()
            .filter(|((_, l), _)| !l.starts_with("key=a"))
            .map(|(k, v)| (k.clone(), *v))
            .collect()
    };
    assert_eq!(others(&s), others(&before));
    // A busy run is an outcome too.
    let token = crate::common::basic::acquire(&server, "b", &[]);
    let out = exec(&server, "b", &["--metrics-file", m, "-n", "--", "true"]);
    assert_eq!(out.code, 75, "{out}");
    crate::common::basic::release(&server, "b", &token);
    let s = parse(&file);
    assert_eq!(
        sample(&s, "last_run_outcome", "key=b,outcome=busy"),
        Some(1.0)
    );
    assert_eq!(sample(&s, "last_run_duration_seconds", b), Some(0.0));
    // Nothing but the file and its lock file is left in the directory.
    let mut left: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["rlock.prom", "rlock.prom.lock"]);
}

#[test]
fn the_metrics_file_is_never_seen_half_written_and_no_runs_lines_are_lost() {
    let server = RedisServer::start();
    let dir = tempdir();
    let file = dir.path().join("jobs.prom");
    // Four jobs at once, each ending ten runs that rewrite the shared file.
    let script = r#"for i in $(seq 10); do "$RL" --url "$URL" exec -k "$JOB" --metrics-file "$M" -- true || exit 9; done"#;
    let mut jobs: Vec<Background> = (0..4)
        .map(|j| {
            let mut cmd = crate::common::basic::sh(script);
            cmd.env("URL", server.url())
                .env("JOB", format!("job{j}"))
                .env("M", &file);
            Background::spawn(&format!("job{j}"), dir.path(), &mut cmd)
        })
        .collect();
    let mut reads = 0;
    let mut seen_keys = 0;
    while jobs.iter_mut().any(|j| j.running()) {
        // Not a wait for anything: a pause that leaves the jobs the CPU.
        std::thread::sleep(std::time::Duration::from_millis(1));
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        reads += 1;
        assert!(text.ends_with('\n'), "a half-written file:\n{text}");
        // Every key in the file has all its lines: 5 gauges, 12 outcomes, its last success.
        let mut per_key: BTreeMap<&str, usize> = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let key = line.split('"').nth(1).expect("a key label");
            *per_key.entry(key).or_default() += 1;
        }
        assert!(per_key.values().all(|n| *n == 18), "{per_key:?}\n{text}");
        seen_keys = seen_keys.max(per_key.len());
    }
    for (j, job) in jobs.iter_mut().enumerate() {
        let (out, _) = job.finish(SOON);
        assert_eq!(out.code, 0, "job{j}: {out}");
    }
    assert!(reads > 10, "the file was read {reads} times only");
    let s = parse(&file);
    for j in 0..4 {
        let key = format!("key=job{j}");
        assert_eq!(
            sample(&s, "last_run_exit_code", &key),
            Some(0.0),
            "{key}: {s:?}"
        );
    }
    assert!(seen_keys >= 1);
}

#[test]
fn a_metrics_file_that_cannot_be_written_changes_nothing_else() {
    let server = RedisServer::start();
    let dir = tempdir();
    let file = dir.path().join("missing-dir/rlock.prom");
    let m = file.to_str().unwrap();
    let out = exec(
        &server,
        "k",
        &["--metrics-file", m, "--", "sh", "-c", "exit 5"],
    );
    assert_eq!((out.code, out.stderr.as_str()), (5, ""), "{out}");
    let out =
        run(rlock_at(&server).args(["-v", "exec", "-k", "k", "--metrics-file", m, "--", "true"]));
    assert_eq!(out.code, 0, "{out}");
    assert!(
        out.stderr.contains("metrics file") && out.stderr.contains("missing-dir"),
        "{out}"
    );
    // The history still has both runs.
    assert_eq!(
        outcomes(&history_of(rlock_at(&server), "k", 10)),
        ["ok", "failed"]
    );
}

#[test]
fn a_metrics_path_that_is_no_regular_file_is_78_before_the_command_starts() {
    let server = RedisServer::start();
    let dir = tempdir();
    let fifo = dir.path().join("fifo.prom");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("mkfifo");
    let dangling = dir.path().join("dangling.prom");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).expect("symlink");
    let ran = dir.path().join("ran");
    for path in [
        Path::new("/dev/zero"),
        Path::new("/dev/full"),
        &fifo,
        dir.path(),
        &dangling,
    ] {
        let m = path.to_str().unwrap();
        let started = Instant::now();
        let out = exec(
            &server,
            "k",
            &["--metrics-file", m, "--", "touch", ran.to_str().unwrap()],
        );
        assert_eq!(out.code, 78, "{m}: {out}");
        assert!(out.stderr.contains(m), "the path is named: {out}");
        assert_eq!(out.stderr.lines().count(), 1, "{out}");
        assert!(!ran.exists(), "{m}: the command ran");
        assert!(started.elapsed() < Duration::from_secs(10), "{m}");
        assert!(!server.exists("rlock:k"), "{m}");
    }
    assert!(
        !dir.path().join("nowhere").exists(),
        "the link was followed"
    );
    assert!(!Path::new("/dev/full.lock").exists() && !Path::new("/dev/zero.lock").exists());
}

#[test]
fn planted_links_beside_the_metrics_file_are_never_written_through() {
    let server = RedisServer::start();
    let dir = tempdir();
    let file = dir.path().join("rlock.prom");
    let m = file.to_str().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    // A link where an older rlock put its temporary file, and links to where the lock file goes.
    for name in ["rlock.prom.tmp", "rlock.prom.1.tmp", "rlock.prom.lock.tmp"] {
        std::os::unix::fs::symlink(&victim, dir.path().join(name)).unwrap();
    }
    let out = exec(
        &server,
        "k",
        &["--metrics-file", m, "--", "sh", "-c", "exit 4"],
    );
    assert_eq!(out.code, 4, "{out}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert_eq!(
        sample(&parse(&file), "last_run_exit_code", "key=k"),
        Some(4.0)
    );
    // A planted lock file: a link (dangling, or to the victim) is never followed, and the
    // command's status stands; -v says why the metrics were not written.
    std::fs::remove_file(&file).unwrap();
    std::fs::remove_file(dir.path().join("rlock.prom.lock")).unwrap();
    let created = dir.path().join("created-by-the-link");
    std::os::unix::fs::symlink(&created, dir.path().join("rlock.prom.lock")).unwrap();
    let out = run(rlock_at(&server).args([
        "-v",
        "exec",
        "-k",
        "k",
        "--metrics-file",
        m,
        "--",
        "sh",
        "-c",
        "exit 5",
    ]));
    assert_eq!(out.code, 5, "{out}");
    assert!(out.stderr.contains("was not written"), "{out}");
    assert!(
        !created.exists(),
        "the dangling lock link created its target"
    );
    assert!(!file.exists());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
}

#[test]
fn other_tools_samples_survive_and_an_unreadable_file_is_replaced_whole() {
    let server = RedisServer::start();
    let dir = tempdir();
    let file = dir.path().join("shared.prom");
    let m = file.to_str().unwrap();
    let foreign = "# HELP backup_size_bytes The backup's size.\n# TYPE backup_size_bytes gauge\nbackup_size_bytes{key=\"nightly\"} 1234\n";
    std::fs::write(&file, foreign).unwrap();
    assert_eq!(
        exec(&server, "nightly", &["--metrics-file", m, "--", "true"]).code,
        0
    );
    assert_eq!(
        exec(&server, "nightly", &["--metrics-file", m, "--", "true"]).code,
        0
    );
    let s = parse(&file);
    assert_eq!(
        s.get(&("backup_size_bytes".to_string(), "key=nightly".to_string())),
        Some(&1234.0),
        "{s:?}"
    );
    assert_eq!(sample(&s, "last_run_exit_code", "key=nightly"), Some(0.0));
    // Bytes that are no UTF-8 text: replaced whole, and -v says so.
    std::fs::write(&file, b"\xff\xfe garbage\n").unwrap();
    let out = run(rlock_at(&server).args([
        "-v",
        "exec",
        "-k",
        "nightly",
        "--metrics-file",
        m,
        "--",
        "sh",
        "-c",
        "exit 3",
    ]));
    assert_eq!(out.code, 3, "{out}");
    assert!(out.stderr.contains("replaced whole"), "{out}");
    let s = parse(&file);
    assert_eq!(sample(&s, "last_run_exit_code", "key=nightly"), Some(3.0));
}
