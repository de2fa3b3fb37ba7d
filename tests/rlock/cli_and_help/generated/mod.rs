//! The shell completions in `completions/` and the man pages in `man/` are generated from the
//! clap definition in `src/cli.rs` (plus the prose sections: those of docs/ pages, word for word,
//! and the few in `man.rs`) and committed. These tests
//! fail when the committed files are stale, and check that each completion file loads in its shell.
//!
//! Regenerate with `RLOCK_REGENERATE=1 cargo test --test rlock generated`.
//!
//! The shell tests need bash, bash-completion, zsh and fish (`apt-get install -y bash
//! bash-completion zsh fish`); a missing shell fails the test with that hint, it never skips.

mod completions;
mod man;

use clap::CommandFactory;
use clap_complete::Shell;
use clap_mangen::Man;
use clap_mangen::roff::{Inline, Roff, bold, italic, roman};
use completions::*;
use man::*;
use rlock::cli::Cli;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

const STALE: &str =
    "completions/man are stale: run `RLOCK_REGENERATE=1 cargo test --test rlock generated`";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The whole interface, built (globals propagated, display names `rlock-acquire` etc. set).
fn command() -> clap::Command {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// `cmd` with every option's text ending in a full stop, as the man pages want it: clap drops
/// the stop of a one-sentence doc comment, and clap_mangen writes "May also be specified with
/// …" right after the text.
fn full_stops(cmd: clap::Command) -> clap::Command {
    fn stop(text: String) -> String {
        match text.trim_end() {
            t if t.ends_with('.') || t.is_empty() => t.to_string(),
            t => format!("{t}."),
        }
    }
    cmd.mut_args(|a| {
        let help = a.get_help().map(|h| stop(h.to_string()));
        let long = a.get_long_help().map(|h| stop(h.to_string()));
        let a = match help {
            Some(h) => a.help(h),
            None => a,
        };
        match long {
            Some(h) => a.long_help(h),
            None => a,
        }
    })
    .mut_subcommands(full_stops)
}

// ---------------------------------------------------------------------------------------------
// What the files should hold
// ---------------------------------------------------------------------------------------------

/// Every generated file: path relative to the crate root, and its contents.
fn expected() -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    for (shell, name) in [
        (Shell::Bash, "rlock.bash"),
        (Shell::Zsh, "_rlock"),
        (Shell::Fish, "rlock.fish"),
    ] {
        let mut buf = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "rlock", &mut buf);
        let buf = match shell {
            Shell::Bash => bash_command_lines(String::from_utf8(buf).unwrap()).into_bytes(),
            Shell::Fish => {
                let script = fish_global_values(String::from_utf8(buf).unwrap());
                fish_command_lines(script).into_bytes()
            }
            _ => buf,
        };
        files.push((Path::new("completions").join(name), buf));
    }
    let cmd = full_stops(command());
    files.push((PathBuf::from("man/rlock.1"), main_page(&cmd)));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("rlock-{}.1", sub.get_name());
        files.push((Path::new("man").join(name), sub_page(&cmd, sub)));
    }
    files
}

// ---------------------------------------------------------------------------------------------

// The tests
// ---------------------------------------------------------------------------------------------

/// Compares the committed files with what they should hold (or, with RLOCK_REGENERATE=1, writes
/// them), once per test run; returns the stale ones. The shell tests call it first, so that they
/// load freshly regenerated files.
fn sync_generated_files() -> &'static [String] {
    static STALE_FILES: OnceLock<Vec<String>> = OnceLock::new();
    STALE_FILES.get_or_init(|| {
        let regenerate = std::env::var_os("RLOCK_REGENERATE").is_some_and(|v| v == "1");
        let files = expected();
        let mut stale = Vec::new();
        for (rel, bytes) in &files {
            let path = root().join(rel);
            if fs::read(&path).ok().as_deref() == Some(bytes.as_slice()) {
                continue;
            }
            if regenerate {
                write_atomically(&path, bytes);
            } else {
                stale.push(rel.display().to_string());
            }
        }
        // A page whose subcommand is gone is stale too.
        let known: Vec<&Path> = files.iter().map(|(p, _)| p.as_path()).collect();
        for entry in fs::read_dir(root().join("man"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let rel = Path::new("man").join(entry.file_name());
            if rel.extension() == Some(OsStr::new("1")) && !known.contains(&rel.as_path()) {
                if regenerate {
                    fs::remove_file(entry.path()).unwrap();
                } else {
                    stale.push(format!("{} (no longer generated)", rel.display()));
                }
            }
        }
        stale
    })
}

#[test]
fn generated_files_are_up_to_date() {
    let stale = sync_generated_files();
    assert!(stale.is_empty(), "{STALE} (differ: {})", stale.join(", "));
}

/// Readers (the shell tests) never see a half-written file.
fn write_atomically(path: &Path, bytes: &[u8]) {
    let dir = path.parent().unwrap();
    fs::create_dir_all(dir).unwrap();
    let tmp = dir.join(format!(
        ".{}.tmp",
        path.file_name().unwrap().to_string_lossy()
    ));
    fs::write(&tmp, bytes).unwrap();
    fs::rename(&tmp, path).unwrap();
}

#[test]
fn every_subcommand_help_ends_with_an_example() {
    for sub in command().get_subcommands() {
        let after = sub
            .get_after_help()
            .map(|s| s.to_string())
            .unwrap_or_default();
        let examples = after.split_once("Examples:").map(|(_, e)| e.trim());
        assert!(
            examples.is_some_and(|e| e.contains("rlock ")),
            "`rlock {} --help` must end with \"Examples:\" and at least one example",
            sub.get_name()
        );
    }
}

/// Runs `script` in `shell` (with `args` before `-c`) from the crate root, with a scratch HOME,
/// and returns its stdout; panics on failure, or with what to install when the shell is missing.
fn run_shell(shell: &str, args: &[&str], script: &str) -> String {
    sync_generated_files();
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(shell)
        .args(args)
        .arg("-c")
        .arg(script)
        .current_dir(root())
        .env("HOME", home.path())
        .env("XDG_CONFIG_HOME", home.path().join("config"))
        .env("XDG_DATA_HOME", home.path().join("data"))
        .env("XDG_CACHE_HOME", home.path().join("cache"))
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                panic!("{shell} not found: install it with `apt-get install -y {shell}`")
            }
            panic!("cannot run {shell}: {e}")
        });
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "{shell} failed ({}) on:\n{script}\n--- stdout\n{stdout}--- stderr\n{stderr}",
        out.status
    );
    stdout
}

#[test]
fn bash_completion_loads_and_completes() {
    let out = run_shell(
        "bash",
        &["--norc", "--noprofile"],
        "source completions/rlock.bash && complete -p rlock",
    );
    assert!(out.contains("rlock"), "no completion registered: {out}");

    // What bash would do for `rlock acquire --<TAB>`.
    let out = run_shell(
        "bash",
        &["--norc", "--noprofile"],
        r#"source completions/rlock.bash
COMP_WORDS=(rlock acquire --); COMP_CWORD=2
COMP_LINE="rlock acquire --"; COMP_POINT=${#COMP_LINE}
_rlock rlock -- acquire
printf '%s\n' "${COMPREPLY[@]}""#,
    );
    let offered: Vec<&str> = out.lines().map(str::trim).collect();
    for want in ["--key", "--ttl", "--wait", "--export", "--url"] {
        assert!(
            offered.contains(&want),
            "`rlock acquire --<TAB>` does not offer {want}: {offered:?}"
        );
    }
    let out = run_shell(
        "bash",
        &["--norc", "--noprofile"],
        r#"source completions/rlock.bash
COMP_WORDS=(rlock ex); COMP_CWORD=1; COMP_LINE="rlock ex"; COMP_POINT=${#COMP_LINE}
_rlock rlock ex rlock
printf '%s\n' "${COMPREPLY[@]}""#,
    );
    assert_eq!(
        out.trim(),
        "exec",
        "`rlock ex<TAB>` should complete to exec"
    );
}

#[test]
fn zsh_completion_loads() {
    let out = run_shell(
        "zsh",
        &["-f"],
        "fpath=($PWD/completions $fpath)
autoload -Uz compinit && compinit -u -D
autoload -Uz +X _rlock
print -r -- $_comps[rlock]
(( $+functions[_rlock] )) && print loaded",
    );
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        ["_rlock", "loaded"],
        "compinit did not pick up completions/_rlock for rlock"
    );
    // The file parses as zsh.
    run_shell("zsh", &["-f"], "zsh -n completions/_rlock");
}

#[test]
fn fish_completion_loads_and_completes() {
    let out = run_shell(
        "fish",
        &["--no-config"],
        r#"source completions/rlock.fish; complete -C "rlock ex""#,
    );
    assert!(
        out.lines().any(|l| l.split('\t').next() == Some("exec")),
        "`rlock ex<TAB>` in fish does not offer exec: {out}"
    );
    let out = run_shell(
        "fish",
        &["--no-config"],
        r#"source completions/rlock.fish; complete -C "rlock acquire --""#,
    );
    assert!(
        out.lines().any(|l| l.split('\t').next() == Some("--key")),
        "`rlock acquire --<TAB>` in fish does not offer --key: {out}"
    );
}

// ---------------------------------------------------------------------------------------------
// What the completions offer, in each shell
// ---------------------------------------------------------------------------------------------

/// The name of the file in the working directory of the completion checks: offered where file
/// names are, and nowhere else.
const FILE: &str = "rlock-test-file";

/// Options whose values are not file names.
const NOT_FILES: &[&str] = &[
    "rlock exec -k ",
    "rlock exec --ttl ",
    "rlock exec -w ",
    "rlock exec --renew-every ",
    "rlock exec --grace ",
    "rlock exec --label ",
    "rlock exec --limit ",
    "rlock exec -E ",
    "rlock acquire --key ",
    "rlock release --token ",
    "rlock inspect -k ",
    "rlock --prefix ",
    "rlock --op-timeout ",
    "rlock --url ",
    "rlock --sentinel ",
];

/// Completes each line (the word under the cursor is its last, empty after a trailing blank) with
/// `script`, which defines `complete_line LINE` to print the candidates one per line, in a scratch
/// directory holding FILE; returns the candidates of each line.
fn candidates(
    shell: &str,
    args: &[&str],
    script: &str,
    lines: &[&str],
) -> HashMap<String, Vec<String>> {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join(FILE), "").unwrap();
    let mut full = format!("{script}\ncd '{}' || exit 1\n", dir.path().display());
    for line in lines {
        assert!(!line.contains('\''), "{line}");
        full.push_str(&format!("echo '=== {line}'\ncomplete_line '{line}'\n"));
    }
    let out = run_shell(shell, args, &full);
    let mut found: HashMap<String, Vec<String>> = HashMap::new();
    let mut current = None;
    for l in out.lines() {
        if let Some(line) = l.strip_prefix("=== ") {
            current = Some(line.to_string());
            found.entry(line.to_string()).or_default();
        } else if let Some(line) = &current {
            // fish: candidate, tab, description.
            let word = l.split('\t').next().unwrap().trim();
            if !word.is_empty() {
                found.get_mut(line).unwrap().push(word.to_string());
            }
        }
    }
    for line in lines {
        assert!(
            found.contains_key(*line),
            "{shell} printed nothing for {line:?}:\n{out}"
        );
    }
    found
}

/// The checks every shell must pass; `delegates` when the shell hands a command's arguments to
/// that command's own completion.
fn check_candidates(shell: &str, found: &HashMap<String, Vec<String>>, delegates: bool) {
    let has = |line: &str, word: &str| found[line].iter().any(|w| w == word);
    let show = |line: &str| format!("{shell}: `{line}<TAB>` offers {:?}", found[line]);
    for line in [
        "rlock exec -k x -- ech",
        "rlock exec -k x ech",
        "rlock exec -k x -- ",
    ] {
        assert!(has(line, "echo"), "{}: no command names", show(line));
        for flag in ["-k", "--key", "--ttl", "--url"] {
            assert!(
                !has(line, flag),
                "{}: rlock's own {flag} in a command line",
                show(line)
            );
        }
    }
    let line = "rlock exec -k x -- echo ";
    assert!(
        has(line, FILE),
        "{}: the command's arguments should be files",
        show(line)
    );
    if delegates {
        let line = "rlock exec -k x -- rlock ac";
        assert!(
            has(line, "acquire"),
            "{}: not the command's own completion",
            show(line)
        );
    }
    let line = "rlock exec -nk x ech";
    assert!(
        has(line, "echo"),
        "{}: -nk takes the next word as its value",
        show(line)
    );
    for line in ["rlock exec -k x -", "rlock exec -k x --"] {
        assert!(
            has(line, "--ttl"),
            "{}: the options before the command",
            show(line)
        );
    }
    let line = "rlock exec --lost-signal ";
    for sig in ["TERM", "INT", "HUP", "KILL", "USR1"] {
        assert!(has(line, sig), "{}: no {sig}", show(line));
    }
    let line = "rlock --password-file ";
    assert!(
        has(line, FILE),
        "{}: a path option must offer files",
        show(line)
    );
    for line in NOT_FILES {
        assert!(!has(line, FILE), "{}: not a file name", show(line));
    }
}

fn completion_lines() -> Vec<&'static str> {
    let mut lines = vec![
        "rlock exec -k x -- ech",
        "rlock exec -nk x ech",
        "rlock exec -k x --",
        "rlock exec -k x ech",
        "rlock exec -k x -- ",
        "rlock exec -k x -- echo ",
        "rlock exec -k x -- rlock ac",
        "rlock exec -k x -",
        "rlock exec --lost-signal ",
        "rlock --password-file ",
    ];
    lines.extend(NOT_FILES);
    lines
}

/// Calls `_rlock` as bash's programmable completion would, with `compopt` (which only works
/// inside a real completion) stubbed out.
const BASH_COMPLETE_LINE: &str = r#"compopt() { :; }
complete_line() {
    local line=$1
    read -ra COMP_WORDS <<< "$line"
    [[ $line == *' ' ]] && COMP_WORDS+=('')
    COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); COMP_LINE=$line; COMP_POINT=${#line}
    COMPREPLY=()
    _rlock rlock "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
    printf '%s\n' "${COMPREPLY[@]}"
}"#;

#[test]
fn bash_completes_values_and_command_lines() {
    let lines = completion_lines();
    // Alone, as with --norc: commands with compgen -c, then file names.
    let script = format!("source completions/rlock.bash\n{BASH_COMPLETE_LINE}");
    let alone = candidates("bash", &["--norc", "--noprofile"], &script, &lines);
    check_candidates("bash", &alone, false);

    // With bash-completion loaded, as in a usual interactive shell: the command's own completion.
    let loader = "/usr/share/bash-completion/bash_completion";
    assert!(
        Path::new(loader).exists(),
        "{loader} missing: install it with `apt-get install -y bash-completion`"
    );
    let script = format!("source {loader}\nsource completions/rlock.bash\n{BASH_COMPLETE_LINE}");
    let loaded = candidates("bash", &["--norc", "--noprofile"], &script, &lines);
    check_candidates("bash with bash-completion", &loaded, true);
}

#[test]
fn fish_completes_values_and_command_lines() {
    let script = format!(
        "source {}/completions/rlock.fish\nfunction complete_line; complete -C $argv[1]; end",
        root().display()
    );
    let found = candidates("fish", &["--no-config"], &script, &completion_lines());
    check_candidates("fish", &found, true);
}

/// Runs the real completion widget in an interactive zsh on a pseudo-terminal (zsh/zpty), with
/// compinit loading completions/_rlock; a `compadd` wrapper writes down every match the
/// completion functions add before adding it.
const ZSH_COMPLETE_LINE: &str = r#"zmodload zsh/zpty || exit 1
complete_line() {
    local tmp=$(mktemp -d) i out
    cat > $tmp/.zshrc <<RC
fpath=(${(q)ROOT}/completions \$fpath)
autoload -Uz compinit && compinit -u -D
unsetopt autolist
compadd() {
    if (( \${@[(I)-[OAD]*]} )); then builtin compadd "\$@"; return; fi
    local -a got
    builtin compadd -O got "\$@"
    (( \$#got )) && print -rl -- \$got >> ${(q)tmp}/matches
    builtin compadd "\$@"
}
test-complete() { zle complete-word; : >| ${(q)tmp}/done }
zle -N test-complete
bindkey '^I' test-complete
cd ${(q)PWD}
: >| ${(q)tmp}/ready
RC
    zpty z env ZDOTDIR=$tmp TERM=dumb zsh -i
    for i in {1..200}; do [[ -e $tmp/ready ]] && break; sleep 0.05; done
    [[ -e $tmp/ready ]] || { print -u2 "zsh did not start"; exit 1; }
    zpty -w -n z "$1"$'\t'
    for i in {1..200}; do [[ -e $tmp/done ]] && break; sleep 0.05; done
    if [[ ! -e $tmp/done ]]; then
        zpty -r -t z out
        print -u2 -r -- "completion of '$1' did not finish: $out"
        exit 1
    fi
    zpty -d z
    [[ -e $tmp/matches ]] && cat $tmp/matches
    rm -rf $tmp
}"#;

#[test]
fn zsh_completes_values_and_command_lines() {
    let script = format!("ROOT={}\n{ZSH_COMPLETE_LINE}", root().display());
    let found = candidates("zsh", &["-f"], &script, &completion_lines());
    check_candidates("zsh", &found, true);
}

#[test]
fn help_shows_env_names_without_values() {
    let rlock = env!("CARGO_BIN_EXE_rlock");
    let mut names = vec![None];
    names.extend(
        command()
            .get_subcommands()
            .map(|s| Some(s.get_name().to_string())),
    );
    for sub in names {
        let mut cmd = Command::new(rlock);
        cmd.args(sub.iter()).arg("--help");
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("RLOCK_") {
                cmd.env_remove(k);
            }
        }
        let out = cmd.output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        let what = format!("rlock {} --help", sub.as_deref().unwrap_or_default());
        assert!(out.status.success(), "{what} failed");
        assert!(
            help.contains("[env: RLOCK_"),
            "{what} names no variable:\n{help}"
        );
        assert!(
            !help.contains("=]"),
            "{what} shows an unset variable as `=`:\n{help}"
        );
    }
    // Set, its value stays out of the help too (RLOCK_TOKEN is a secret).
    let out = Command::new(rlock)
        .args(["release", "--help"])
        .env("RLOCK_TOKEN", "secret-token")
        .env("RLOCK_PREFIX", "some-prefix")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("[env: RLOCK_PREFIX]"), "{help}");
    assert!(
        !help.contains("secret-token") && !help.contains("some-prefix"),
        "{help}"
    );
}

/// Every option that takes a value says what completes it: a value hint, or possible values.
/// Without one, clap_complete offers file names (ValueHint::Unknown); `ValueHint::Other` offers
/// nothing, and paths get `AnyPath` from their PathBuf type.
#[test]
fn every_value_option_says_what_completes_it() {
    let cmd = command();
    let mut missing = Vec::new();
    for c in std::iter::once(&cmd).chain(cmd.get_subcommands()) {
        for arg in c.get_opts() {
            let listed = arg.get_value_parser().possible_values().is_some();
            if arg.get_value_hint() == clap::ValueHint::Unknown && !listed {
                missing.push(format!("{} --{}", c.get_name(), arg.get_id()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "give these options a `value_hint` in src/cli.rs (ValueHint::Other when no file name \
         fits), or completions offer file names for them: {missing:?}"
    );
}

/// The signal names --lost-signal completes are hints only: numbers, `SIG` prefixes and lower
/// case still parse, and anything else is refused as before.
#[test]
fn lost_signal_parses_more_than_it_completes() {
    use clap::Parser;
    let parse = |sig: &str| {
        Cli::try_parse_from([
            "rlock",
            "exec",
            "-k",
            "x",
            "--lost-signal",
            sig,
            "--",
            "true",
        ])
    };
    for sig in ["TERM", "15", "sigusr1", "kill", "SIGWINCH"] {
        if let Err(e) = parse(sig) {
            panic!("--lost-signal {sig} refused: {e}");
        }
    }
    let err = parse("bogus").unwrap_err().to_string();
    assert!(err.contains("'bogus' is not a signal"), "{err}");
    assert!(!err.contains("possible values"), "{err}");
}
