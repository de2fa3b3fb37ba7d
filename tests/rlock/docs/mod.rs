//! Docs that cannot drift: every `console` example of README.md and docs/*.md is run, against a
//! real Redis, and what it prints must be what the page shows.
//!
//! A `console` block is a session: `$ command` lines, each followed by what it prints (stdout
//! and stderr together, as a terminal shows them). Each block runs in a bash of its own, in a
//! fresh directory holding the stand-in scripts the pages name (`./deploy.sh`, …), with
//! `RLOCK_URL` naming a Redis that was flushed before the block and the `rlock` under test first
//! on PATH. Before they are compared, both sides are redacted (`redact.rs`: tokens, fences,
//! durations, pids, `user@host`, ports) and their blanks collapsed; `[..]` in a page stands for
//! any text within a line, and a line `...` for any number of lines.
//!
//! Blocks of another language (`sh`, `text`, `yaml`, …) are not run: they show no output.

mod cron;
mod exit_codes;
mod recipes;
mod redact;
mod shell_recipe;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::{RedisServer, run};
use redact::{lines_match, redact};

/// The pages whose examples are checked: every Markdown file of the README and docs/.
fn pages() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md")];
    let mut docs: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .expect("docs/")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    pages.extend(docs);
    pages
}

/// One `console` block: where it is, and its commands with the output each should print.
struct Block {
    page: String,
    line: usize,
    steps: Vec<(String, Vec<String>)>,
}

/// The `console` blocks of `text`.
fn blocks(page: &str, text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut current: Option<Block> = None;
    for (n, line) in text.lines().enumerate() {
        match &mut current {
            None if line.trim_start() == "```console" => {
                current = Some(Block {
                    page: page.to_string(),
                    line: n + 1,
                    steps: Vec::new(),
                });
            }
            None => {}
            Some(_) if line.trim_start() == "```" => blocks.extend(current.take()),
            Some(block) => match line.strip_prefix("$ ") {
                Some(command) => block.steps.push((command.to_string(), Vec::new())),
                None => match block.steps.last_mut() {
                    Some((_, output)) => output.push(line.to_string()),
                    None => panic!("{page}:{}: output before the first `$ ` command", n + 1),
                },
            },
        }
    }
    assert!(current.is_none(), "{page}: a console block is not closed");
    blocks
}

/// The scripts the pages run under the lock, as stand-ins for the reader's own.
const STAND_INS: &[(&str, &str)] = &[
    (
        "deploy.sh",
        "echo \"deploying $1 under fence $RLOCK_FENCE\"",
    ),
    ("cron.sh", "echo \"cron job under fence $RLOCK_FENCE\""),
    ("build.sh", "sleep \"${BUILD_SECS:-30}\""),
    ("report.sh", "echo report"),
    ("migrate.sh", "echo migrated"),
    (
        "nightly.sh",
        "lock=$(rlock acquire --export -k nightly) || exit\neval \"$lock\"\nsleep 1.2\nrlock release -k nightly",
    ),
];

/// Marks the start of each command's output in the session's combined output.
const MARK: &str = "\u{1}rlock-doc-step";

/// A `redis-cli` that goes to the test's server, as the reader's goes to their 6379, unless the
/// page names a port or host itself.
fn redis_cli_shim(dir: &Path, server: &RedisServer) {
    fs::create_dir_all(dir).expect("shim dir");
    let real = crate::common::redis_cli_bin();
    let shim = format!(
        "#!/bin/sh\ncase \" $* \" in *\" -p \"*|*\" -h \"*|*\" -u \"*) exec '{0}' \"$@\";; esac\nexec '{0}' -p {1} \"$@\"\n",
        real.display(),
        server.port()
    );
    let path = dir.join("redis-cli");
    fs::write(&path, shim).expect("redis-cli shim");
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
}

/// Runs `block` against `server` and returns, per command, what it printed.
fn play(block: &Block, server: &RedisServer) -> Vec<Vec<String>> {
    server.cmd(&["FLUSHALL"]);
    let dir = tempfile::Builder::new()
        .prefix("rlock-docs-")
        .tempdir()
        .expect("temp dir");
    for (name, body) in STAND_INS {
        let path = dir.path().join(name);
        fs::write(&path, format!("#!/bin/sh\n{body}\n")).expect("stand-in script");
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    // (Unset at once: the shell scripts the session runs, `ldd` say, must not run it again.)
    let mut script = String::from("unset BASH_ENV\nexec 2>&1\n");
    for (n, (command, _)) in block.steps.iter().enumerate() {
        // The mark keeps `$?` for the next command (`echo $?`).
        script.push_str(&format!(
            "__s=$?; printf '\\n{MARK} {n}\\n'; (exit $__s)\n{command}\n"
        ));
    }
    // What the block left in the background goes with it, and what it says then belongs to no
    // step.
    script.push_str(&format!(
        "__s=$?; printf '\\n{MARK} end\\n'; kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; exit $__s\n"
    ));
    let session = dir.path().join(".session.sh");
    fs::write(&session, &script).expect("session script");
    let bin = Path::new(env!("CARGO_BIN_EXE_rlock"))
        .parent()
        .expect("bin dir");
    let shims = dir.path().join(".bin");
    redis_cli_shim(&shims, server);
    let path = format!(
        "{}:{}:{}",
        bin.display(),
        shims.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The session is bash's start-up file, and bash reads no command of its own: so the shell
    // that `rlock acquire` records as the holder's command is `bash`, as at a prompt.
    let mut cmd = Command::new("bash");
    cmd.current_dir(dir.path())
        .env_clear()
        .env("BASH_ENV", &session)
        .env("PATH", path)
        .env("HOME", dir.path())
        .env("USER", "root")
        .env("LANG", "C")
        .env("TERM", "dumb")
        .env("RLOCK_URL", server.url());
    let out = run(&mut cmd);
    let mut steps: Vec<Vec<String>> = vec![Vec::new(); block.steps.len()];
    let mut at: Option<usize> = None;
    // The pages were written on a host called `vm`, as root.
    let host = hostname();
    for line in out.stdout.lines() {
        let line = &with_host_as_vm(line, &host);
        if let Some(n) = line.strip_prefix(MARK) {
            at = n.trim().parse().ok();
            continue;
        }
        if let Some(n) = at {
            steps[n].push(line.to_string());
        }
    }
    // Each mark starts with a newline, so the output before it ends with an empty line.
    for lines in &mut steps {
        if lines.last().is_some_and(|l| l.is_empty()) {
            lines.pop();
        }
    }
    steps
}

/// This host's name.
fn hostname() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

/// `line` with this host's name, as a whole word, written `vm`.
fn with_host_as_vm(line: &str, host: &str) -> String {
    if host.is_empty() || host == "vm" {
        return line.to_string();
    }
    let boundary = |c: Option<char>| c.is_none_or(|c| !(c.is_alphanumeric() || c == '-'));
    let mut out = String::new();
    let mut rest = line;
    while let Some(at) = rest.find(host) {
        let before = rest[..at].chars().next_back();
        let after = rest[at + host.len()..].chars().next();
        out.push_str(&rest[..at]);
        out.push_str(if boundary(before) && boundary(after) {
            "vm"
        } else {
            host
        });
        rest = &rest[at + host.len()..];
    }
    out.push_str(rest);
    out
}

/// Checks every `console` block of `page`; returns what differs, block by block.
fn check_page(page: &Path) -> Vec<String> {
    let name = page
        .strip_prefix(env!("CARGO_MANIFEST_DIR"))
        .unwrap_or(page)
        .display()
        .to_string();
    let text = fs::read_to_string(page).unwrap_or_else(|e| panic!("{name}: {e}"));
    let blocks = blocks(&name, &text);
    if blocks.is_empty() {
        return Vec::new();
    }
    let server = RedisServer::start();
    let mut failures = Vec::new();
    for block in &blocks {
        let got = play(block, &server);
        for ((command, want), got) in block.steps.iter().zip(&got) {
            let want: Vec<String> = want.iter().map(|l| redact(l)).collect();
            let got_redacted: Vec<String> = got.iter().map(|l| redact(l)).collect();
            if !lines_match(&want, &got_redacted) {
                failures.push(format!(
                    "{}:{}: `$ {command}`\n--- the page shows ---\n{}\n--- it printed ---\n{}\n--- (redacted: want / got) ---\n{}\n---\n{}",
                    block.page,
                    block.line,
                    want.join("\n"),
                    got.join("\n"),
                    want.join("\n"),
                    got_redacted.join("\n"),
                ));
            }
        }
    }
    failures
}

fn assert_page(file: &str) {
    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let failures = check_page(&page);
    assert!(
        failures.is_empty(),
        "{} example(s) of {file} no longer print what the page shows:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// Every page is checked by one of the tests below: a page added without its test fails here.
#[test]
fn every_page_has_its_test() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for page in pages() {
        let rel = page.strip_prefix(root).unwrap().display().to_string();
        assert!(
            PAGES.contains(&rel.as_str()),
            "{rel} has console examples nobody checks: add it to PAGES in tests/rlock/docs/mod.rs"
        );
    }
}

/// The pages, one test each (so that they run side by side).
const PAGES: &[&str] = &[
    "README.md",
    "docs/README.md",
    "docs/benchmarks.md",
    "docs/compatibility.md",
    "docs/connecting.md",
    "docs/design.md",
    "docs/exec.md",
    "docs/inspect.md",
    "docs/install.md",
    "docs/safety.md",
    "docs/sharing.md",
    "docs/tests.md",
    "docs/waiting.md",
];

macro_rules! page_tests {
    ($($name:ident => $file:expr),* $(,)?) => {
        $(#[test] fn $name() { assert_page($file); })*
    };
}

page_tests! {
    readme => "README.md",
    docs_index => "docs/README.md",
    docs_benchmarks => "docs/benchmarks.md",
    docs_compatibility => "docs/compatibility.md",
    docs_connecting => "docs/connecting.md",
    docs_design => "docs/design.md",
    docs_exec => "docs/exec.md",
    docs_inspect => "docs/inspect.md",
    docs_install => "docs/install.md",
    docs_safety => "docs/safety.md",
    docs_sharing => "docs/sharing.md",
    docs_tests => "docs/tests.md",
    docs_waiting => "docs/waiting.md",
}

/// The checker itself: a changed output fails, a redacted one does not.
#[test]
fn a_changed_example_fails_and_a_varying_one_does_not() {
    let server = RedisServer::start();
    let page = "```console\n$ rlock acquire -k demo --ttl 5m\n65edee2b-a9cd-4bc8-8511-774a2470fff1\n$ rlock exec -k demo -n -- true\nrlock: lock 'demo' is busy (held by root@vm pid 1 for 9ms (bash), expires in 4m59s); not waiting (-n)\n$ echo $?\n75\n```\n";
    let block = &blocks("test", page)[0];
    let got = play(block, &server);
    for ((_, want), got) in block.steps.iter().zip(&got) {
        let want: Vec<String> = want.iter().map(|l| redact(l)).collect();
        let got: Vec<String> = got.iter().map(|l| redact(l)).collect();
        assert!(lines_match(&want, &got), "{want:?} / {got:?}");
    }
    let changed = page.replace("\n75\n", "\n76\n");
    let block = &blocks("test", &changed)[0];
    let got = play(block, &server);
    let (_, want) = &block.steps[2];
    assert!(
        !lines_match(
            &want.iter().map(|l| redact(l)).collect::<Vec<_>>(),
            &got[2].iter().map(|l| redact(l)).collect::<Vec<_>>()
        ),
        "a changed exit code was not noticed"
    );
}
