//! The recipes in `examples/` run what they say: the command line of each (the workflow's `run:`,
//! GitLab's `script:`, the service's `ExecStart=`, the CronJob's `command:`, the crontab line) is
//! taken from the file as it is and run against a real Redis, with the reader's script replaced
//! by a stand-in that shows the lock's record. Free, it runs the script; busy, a CI recipe says
//! whom it waits for (-v) and runs once the lock is free, the crontab (once per window) waits in
//! silence and runs, then skips its window's other firings in silence, and the other cron-like
//! recipes end at once, in silence, with 0.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::{Background, RedisServer, rlock_at, run, wait_until};

fn example(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The one line of `text` that runs rlock, after `prefix`: the line whose first word is rlock
/// (not a line that installs it).
fn line_after(text: &str, prefix: &str) -> String {
    let runs_rlock = |line: &str| {
        line.split_whitespace()
            .next()
            .map(|w| w.trim_matches(|c| matches!(c, '[' | '"' | ',')))
            .is_some_and(|w| w == "rlock" || w.ends_with("/rlock"))
    };
    let lines: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix(prefix))
        .filter(|l| runs_rlock(l))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "one line after {prefix:?} runs rlock: {lines:?}"
    );
    lines[0].to_string()
}

/// A recipe's command, as the shell line it runs.
struct Recipe {
    name: &'static str,
    key: &'static str,
    /// The shell line, with the reader's script replaced by the stand-in.
    line: String,
    /// A CI job (waits, -v) rather than a cron-like one (-n -E 0, silent).
    ci: bool,
    /// A cron job once per window (--once-per): waits its turn in silence, then runs, or exits 0
    /// in silence when its window is done.
    once: bool,
}

fn recipes() -> Vec<Recipe> {
    let bin = env!("CARGO_BIN_EXE_rlock");
    let stand_in = |line: String| {
        line.replace("/usr/local/bin/report.sh", "./report.sh")
            .replace("/usr/local/bin/rlock", bin)
    };
    let crontab = example("crontab");
    let cron_line = crontab
        .lines()
        .find(|l| l.starts_with("*/5"))
        .expect("the crontab line");
    let cron_command: Vec<&str> = cron_line.splitn(6, ' ').collect();
    let k8s = line_after(&example("kubernetes-cronjob.yaml"), "command: ");
    let words: Vec<String> = serde_json::from_str(&k8s).expect("command: is a JSON array");
    let k8s_line = words
        .iter()
        .map(|w| format!("'{}'", w.replace("$(POD_NAME)", "report-29170215-x7k2q")))
        .collect::<Vec<_>>()
        .join(" ");
    vec![
        Recipe {
            name: "github-actions.yml",
            key: "deploy-production",
            line: line_after(&example("github-actions.yml"), "run: "),
            ci: true,
            once: false,
        },
        Recipe {
            name: "gitlab-ci.yml",
            key: "deploy-production",
            line: line_after(&example("gitlab-ci.yml"), "- "),
            ci: true,
            once: false,
        },
        Recipe {
            name: "crontab",
            key: "report",
            line: stand_in(cron_command[5].to_string()),
            ci: false,
            once: true,
        },
        Recipe {
            name: "rlock-report.service",
            key: "nightly-report",
            line: stand_in(line_after(&example("rlock-report.service"), "ExecStart=")),
            ci: false,
            once: false,
        },
        Recipe {
            name: "kubernetes-cronjob.yaml",
            key: "report",
            line: stand_in(k8s_line),
            ci: false,
            once: false,
        },
    ]
}

/// A directory with the stand-ins: each prints the holder's record of its lock.
fn stand_ins(key: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let body = format!(
        "#!/bin/sh\necho \"ran $0 $* under fence $RLOCK_FENCE\"\nrlock inspect -k {key} --json\n"
    );
    for name in ["deploy.sh", "report.sh"] {
        let path = dir.path().join(name);
        fs::write(&path, &body).expect("stand-in");
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    dir
}

fn shell(server: &RedisServer, dir: &Path, line: &str) -> Command {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_rlock"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(line)
        .current_dir(dir)
        .env_clear()
        .env("PATH", path)
        .env("RLOCK_URL", server.url())
        .env("GITHUB_SERVER_URL", "https://github.com")
        .env("GITHUB_REPOSITORY", "acme/shop")
        .env("GITHUB_RUN_ID", "4242")
        .env(
            "CI_JOB_URL",
            "https://gitlab.example.com/acme/shop/-/jobs/4242",
        );
    cmd
}

/// What the recipe's holder is called in `inspect`: the CI job's URL, or who runs the cron job.
fn label_of(recipe: &Recipe) -> &'static str {
    match recipe.name {
        "github-actions.yml" => "https://github.com/acme/shop/actions/runs/4242",
        "gitlab-ci.yml" => "https://gitlab.example.com/acme/shop/-/jobs/4242",
        "kubernetes-cronjob.yaml" => "cronjob/report report-29170215-x7k2q",
        "rlock-report.service" => "rlock-report.timer",
        _ => "cron report on ",
    }
}

#[test]
fn each_recipe_runs_its_job_under_the_lock_with_its_label() {
    for recipe in recipes() {
        // A server each: a cron recipe's --hold-at-least keeps its lock after the run.
        let server = RedisServer::start();
        let dir = stand_ins(recipe.key);
        let out = run(&mut shell(&server, dir.path(), &recipe.line));
        assert_eq!(out.code, 0, "{}: {}\n{out}", recipe.name, recipe.line);
        assert!(
            out.stdout.contains("under fence") && out.stdout.contains(label_of(&recipe)),
            "{}: the job ran under the lock, labelled: {out}",
            recipe.name
        );
        if recipe.ci {
            assert!(
                out.stderr.contains("acquired lock"),
                "{}: -v: {out}",
                recipe.name
            );
        } else {
            assert_eq!(
                out.stderr, "",
                "{}: cron mails what is printed: {out}",
                recipe.name
            );
        }
    }
}

#[test]
fn a_busy_lock_is_waited_for_in_ci_and_skipped_in_silence_by_cron() {
    let server = RedisServer::start();
    for recipe in recipes() {
        let dir = stand_ins(recipe.key);
        let held = run(rlock_at(&server).args([
            "acquire",
            "-k",
            recipe.key,
            "--ttl",
            "60s",
            "--label",
            "the running one",
        ]));
        assert_eq!(held.code, 0, "{held}");
        let token = held.stdout.trim().to_string();
        if recipe.ci {
            let mut job = Background::spawn(
                recipe.name,
                dir.path(),
                &mut shell(&server, dir.path(), &recipe.line),
            );
            let log = dir.path().join(format!("{}.stderr", recipe.name));
            wait_until(
                &format!("{}: a line naming whom it waits for", recipe.name),
                Duration::from_secs(5),
                || {
                    fs::read_to_string(&log)
                        .unwrap_or_default()
                        .contains(&format!("waiting for lock '{}': held by", recipe.key))
                },
            );
            let log_text = fs::read_to_string(&log).unwrap_or_default();
            assert!(log_text.contains("the running one"), "{log_text}");
            let out = run(rlock_at(&server).args(["release", "-k", recipe.key, "--token", &token]));
            assert_eq!(out.code, 0, "{out}");
            let (out, _) = job.finish(Duration::from_secs(10));
            assert_eq!(out.code, 0, "{}: {out}", recipe.name);
            assert!(out.stdout.contains("under fence"), "{out}");
        } else if recipe.once {
            let mut job = Background::spawn(
                recipe.name,
                dir.path(),
                &mut shell(&server, dir.path(), &recipe.line),
            );
            let queue = crate::common::basic::queue_key(recipe.key);
            job.wait_for(
                "the firing to wait its turn",
                Duration::from_secs(5),
                || server.exists(&queue),
            );
            let out = run(rlock_at(&server).args(["release", "-k", recipe.key, "--token", &token]));
            assert_eq!(out.code, 0, "{out}");
            let (out, _) = job.finish(Duration::from_secs(10));
            assert_eq!(
                (out.code, out.stderr.as_str()),
                (0, ""),
                "{}: silent: {out}",
                recipe.name
            );
            assert!(out.stdout.contains("under fence"), "{out}");
            // Another host's firing in the same window: its work is done.
            let out = run(&mut shell(&server, dir.path(), &recipe.line));
            assert_eq!(
                (out.code, out.stdout.as_str(), out.stderr.as_str()),
                (0, "", ""),
                "{}: a window already done is a silent success: {out}",
                recipe.name
            );
        } else {
            let out = run(&mut shell(&server, dir.path(), &recipe.line));
            assert_eq!(
                (out.code, out.stdout.as_str(), out.stderr.as_str()),
                (0, "", ""),
                "{}: a skipped run is a silent success: {out}",
                recipe.name
            );
            let out = run(rlock_at(&server).args(["release", "-k", recipe.key, "--token", &token]));
            assert_eq!(out.code, 0, "{out}");
        }
    }
}

/// The CI recipes are newest-wins deploys: behind a running deploy, a waiting one that a newer
/// one displaces ends at once (79, which the GitHub line counts as done and GitLab's
/// `allow_failure: exit_codes` as a warning), its log naming the newer job, and never runs;
/// the newest runs once the lock is free.
#[test]
fn the_ci_recipes_deploy_the_newest_waiting_run_only() {
    let server = RedisServer::start();
    for recipe in recipes().into_iter().filter(|r| r.ci) {
        let example = example(recipe.name);
        let displaced_code = match recipe.name {
            "gitlab-ci.yml" => {
                assert!(example.contains("exit_codes: [79]"), "{example}");
                79
            }
            _ => 0,
        };
        let dir = stand_ins(recipe.key);
        let held = run(rlock_at(&server).args(["acquire", "-k", recipe.key, "--ttl", "60s"]));
        assert_eq!(held.code, 0, "{held}");
        let token = held.stdout.trim().to_string();
        let job = |n: &str| {
            let mut cmd = shell(&server, dir.path(), &recipe.line);
            cmd.env("GITHUB_RUN_ID", n).env(
                "CI_JOB_URL",
                format!("https://gitlab.example.com/acme/shop/-/jobs/{n}"),
            );
            Background::spawn(&format!("{}-{n}", recipe.name), dir.path(), &mut cmd)
        };
        let queue = crate::common::basic::queue_key(recipe.key);
        let in_line = || -> usize {
            redis::cmd("ZCARD")
                .arg(&queue)
                .query(&mut server.conn())
                .expect("ZCARD")
        };
        let mut older = job("4242");
        older.wait_for("the older deploy to wait", Duration::from_secs(5), || {
            in_line() == 1
        });
        let mut newer = job("4243");
        let (out, _) = older.finish(Duration::from_secs(5));
        assert_eq!(out.code, displaced_code, "{}: {out}", recipe.name);
        assert!(
            out.stderr.contains("was superseded by a newer run") && out.stderr.contains("4243"),
            "{}: the log names the newer job: {out}",
            recipe.name
        );
        assert!(
            !out.stdout.contains("under fence"),
            "{}: {out}",
            recipe.name
        );
        let out = run(rlock_at(&server).args(["release", "-k", recipe.key, "--token", &token]));
        assert_eq!(out.code, 0, "{out}");
        let (out, _) = newer.finish(Duration::from_secs(10));
        assert_eq!(out.code, 0, "{}: {out}", recipe.name);
        assert!(out.stdout.contains("under fence"), "{}: {out}", recipe.name);
    }
}
