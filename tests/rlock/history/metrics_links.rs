//! `--metrics-file` in a directory others may write: a link at the path is refused before the
//! command starts, a link or a hard link swapped in while it runs never has a line copied, a
//! non-root user racing root's writers with links never gets a line of a root-only file copied,
//! and a lock file another user holds costs no wait.

use super::metrics::{parse, sample};
use super::*;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Instant;

/// A line no metrics file may ever hold: it is only in the protected file.
const STOLEN: &str = "stolen_secret_line 7";

/// A root-only directory holding a root-only (0600) file of `STOLEN`.
fn protected() -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let secret = dir.path().join("secret.prom");
    std::fs::write(
        &secret,
        format!("# TYPE stolen_secret_line gauge\n{STOLEN}\n"),
    )
    .unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    (dir, secret)
}

/// Every regular file under `dir` that holds `STOLEN` (links are not followed).
fn copies_of_the_secret(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
        .filter(|p| std::fs::read_to_string(p).is_ok_and(|t| t.contains(STOLEN)))
        .map(|p| p.display().to_string())
        .collect()
}

/// `cmd` run as nobody (uid and gid 65534, no groups).
fn as_nobody(program: &str) -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args(["--reuid=65534", "--regid=65534", "--clear-groups", program]);
    cmd
}

#[test]
fn a_link_at_the_metrics_path_is_78_before_the_command_starts_and_its_target_never_read() {
    let server = RedisServer::start();
    let dir = tempdir();
    let (_protected, secret) = protected();
    let link = dir.path().join("rlock.prom");
    std::os::unix::fs::symlink(&secret, &link).unwrap();
    let ran = dir.path().join("ran");
    let m = link.to_str().unwrap();
    let out = exec(
        &server,
        "k",
        &["--metrics-file", m, "--", "touch", ran.to_str().unwrap()],
    );
    assert_eq!(out.code, 78, "{out}");
    assert_eq!(out.stderr.lines().count(), 1, "{out}");
    assert!(
        out.stderr.contains(m) && out.stderr.contains("symbolic link"),
        "{out}"
    );
    assert!(!ran.exists(), "the command ran");
    assert!(!server.exists("rlock:k"));
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    assert!(copies_of_the_secret(dir.path()).is_empty());
}

#[test]
fn a_link_or_a_hard_link_swapped_in_during_the_run_never_has_a_line_copied() {
    let server = RedisServer::start();
    let dir = tempdir();
    let (_protected, secret) = protected();
    let file = dir.path().join("rlock.prom");
    let m = file.to_str().unwrap();
    assert_eq!(
        exec(&server, "k", &["--metrics-file", m, "--", "true"]).code,
        0
    );
    // The command puts a link to the protected file where the metrics file was: the run's
    // status stands, -v says why nothing was written, and the link and its target are as they were.
    let out = run(rlock_at(&server)
        .env("SECRET", &secret)
        .env("M", m)
        .args(["-v", "exec", "-k", "k", "--metrics-file", m, "--"])
        .args(["sh", "-c", r#"ln -sfn "$SECRET" "$M"; exit 3"#]));
    assert_eq!(out.code, 3, "{out}");
    assert!(
        out.stderr.contains("was not written") && out.stderr.contains("symbolic link"),
        "{out}"
    );
    assert_eq!(std::fs::read_link(&file).unwrap(), secret);
    assert!(
        std::fs::read_to_string(&secret).unwrap().contains(STOLEN),
        "the target was changed"
    );
    assert!(copies_of_the_secret(dir.path()).is_empty());
    // A second name of the protected file (a hard link, as root may make): replaced whole, its
    // lines not copied, the protected file untouched.
    std::fs::remove_file(&file).unwrap();
    let out = run(rlock_at(&server)
        .env("SECRET", &secret)
        .env("M", m)
        .args(["-v", "exec", "-k", "k", "--metrics-file", m, "--"])
        .args(["sh", "-c", r#"ln -f "$SECRET" "$M"; exit 4"#]));
    assert_eq!(out.code, 4, "{out}");
    assert!(
        out.stderr.contains("replaced whole") && out.stderr.contains("hard links"),
        "{out}"
    );
    assert_eq!(
        sample(&parse(&file), "last_run_exit_code", "key=k"),
        Some(4.0)
    );
    assert!(copies_of_the_secret(dir.path()).is_empty());
    let kept = std::fs::metadata(&secret).unwrap();
    assert_eq!(
        (kept.permissions().mode() & 0o777, kept.len() > 0),
        (0o600, true)
    );
    assert!(std::fs::read_to_string(&secret).unwrap().contains(STOLEN));
    let new = std::fs::metadata(&file).unwrap();
    assert_eq!(new.permissions().mode() & 0o777, 0o644, "a new file's mode");
}

#[test]
fn a_lock_file_another_user_holds_costs_no_wait() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: another user's lock file needs root to make");
        return;
    }
    let server = RedisServer::start();
    let dir = tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let file = dir.path().join("rlock.prom");
    let m = file.to_str().unwrap();
    let lock = dir.path().join("rlock.prom.lock");
    let held = dir.path().join("held");
    // nobody makes the lock file and holds it for good.
    let mut holder = as_nobody("flock");
    holder
        .arg(&lock)
        .args(["-c", &format!("touch {}; exec sleep 600", held.display())]);
    let mut holder = Background::spawn_group("holder", dir.path(), &mut holder);
    holder.wait_for("nobody to hold the lock file", SOON, || held.exists());
    let started = Instant::now();
    let out = run(rlock_at(&server)
        .args(["-v", "exec", "-k", "k", "--metrics-file", m, "--"])
        .args(["sh", "-c", "exit 6"]));
    let took = started.elapsed();
    assert_eq!(out.code, 6, "{out}");
    assert!(
        out.stderr.contains("was not written") && out.stderr.contains("uid 65534"),
        "{out}"
    );
    // A wait for the lock would be 5 s; the run itself takes a fraction of a second.
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert!(!file.exists());
    let group = nix::unistd::Pid::from_raw(holder.pid());
    nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL).expect("killpg");
    holder.finish(SOON);
    // Free again, the lock file is used though it is nobody's.
    let out = exec(&server, "k", &["--metrics-file", m, "--", "true"]);
    assert_eq!((out.code, out.stderr.as_str()), (0, ""), "{out}");
    assert_eq!(
        sample(&parse(&file), "last_run_exit_code", "key=k"),
        Some(0.0)
    );
}

/// A non-root user swaps the metrics path between a link to a root-only file, a file of its own
/// and nothing, keeping every file root writes there, while root's runs write it: no line of the
/// protected file is ever copied. `RLOCK_TEST_METRICS_RACE_RUNS` sets the number of root runs
/// (the long run: 3000).
#[test]
fn a_user_racing_links_against_roots_writers_never_gets_a_protected_line() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: the race is a non-root user's against root's writers");
        return;
    }
    let _heavy = crate::common::heavy();
    let runs: usize = std::env::var("RLOCK_TEST_METRICS_RACE_RUNS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(100);
    let server = RedisServer::start();
    let dir = tempdir();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let (_protected, secret) = protected();
    let file = dir.path().join("rlock.prom");
    let stop = dir.path().join("stop");
    let attack = r#"cd "$D"; i=0
        while [ ! -e stop ]; do
            i=$((i+1))
            mv -f rlock.prom "kept.$i.a" 2>/dev/null; ln -s "$SECRET" rlock.prom
            printf 'mine 1\n' > "own.$i"; chmod 644 "own.$i"
            mv -f rlock.prom "kept.$i.b" 2>/dev/null; mv -f "own.$i" rlock.prom
            mv -f rlock.prom "kept.$i.c" 2>/dev/null
        done"#;
    let mut attacker = as_nobody("sh");
    attacker
        .args(["-c", attack])
        .env("D", dir.path())
        .env("SECRET", &secret);
    let mut attacker = Background::spawn("attacker", dir.path(), &mut attacker);
    let writers = format!(
        r#"for i in $(seq {runs}); do "$RL" --url "$URL" exec -k race --history-limit 0 \
               --metrics-file "$M" -- true; echo $?; done"#
    );
    let mut writers = crate::common::basic::sh(&writers);
    writers.env("URL", server.url()).env("M", &file);
    let (out, _) =
        crate::common::basic::run_within(&mut writers, Duration::from_secs(60 + runs as u64 / 2));
    std::fs::write(&stop, "").unwrap();
    let (attacked, _) = attacker.finish(SOON);
    let codes: Vec<&str> = out.stdout.lines().collect();
    let written = codes.iter().filter(|c| **c == "0").count();
    assert_eq!(codes.len(), runs, "{out}");
    assert!(
        codes.iter().all(|c| *c == "0" || *c == "78"),
        "{out}\n{attacked}"
    );
    assert!(written > 0, "no run got past the check: {out}");
    let kept = std::fs::read_dir(dir.path()).unwrap().count();
    assert!(kept > runs, "the attacker kept {kept} files: {attacked}");
    let copies = copies_of_the_secret(dir.path());
    assert!(copies.is_empty(), "{} copies: {copies:?}", copies.len());
    eprintln!("{written} of {runs} root runs wrote; {kept} files kept; 0 copies");
}
