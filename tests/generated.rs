//! The shell completions in `completions/` and the man pages in `man/` are generated from the
//! clap definition in `src/cli.rs` (plus the prose sections below) and committed. These tests fail
//! when the committed files are stale, and check that each completion file loads in its shell.
//!
//! Regenerate with `RLOCK_REGENERATE=1 cargo test --test generated`.
//!
//! The shell tests need bash, bash-completion, zsh and fish (`apt-get install -y bash
//! bash-completion zsh fish`); a missing shell fails the test with that hint, it never skips.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use clap::CommandFactory;
use clap_complete::Shell;
use clap_mangen::Man;
use clap_mangen::roff::{Inline, Roff, bold, italic, roman};
use rlock::cli::Cli;

const STALE: &str =
    "completions/man are stale: run `RLOCK_REGENERATE=1 cargo test --test generated`";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The whole interface, built (globals propagated, display names `rlock-acquire` etc. set).
fn command() -> clap::Command {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    cmd
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
    let cmd = command();
    files.push((PathBuf::from("man/rlock.1"), main_page(&cmd)));
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("rlock-{}.1", sub.get_name());
        files.push((Path::new("man").join(name), sub_page(&cmd, sub)));
    }
    files
}

// ---------------------------------------------------------------------------------------------
// Completing the command line of `rlock exec`
// ---------------------------------------------------------------------------------------------
//
// clap_complete's zsh script hands a `ValueHint::CommandWithArguments` positional to zsh's own
// command-line completion, but its bash script offers rlock's options there and its fish script
// ignores positionals. The two functions below add what is missing, from the same clap
// definition, so the files stay generated.

/// The subcommands whose trailing positional is a command line (`exec`), each with the flags of
/// its options that take a value (its own and the global ones).
fn command_line_subcommands() -> Vec<(String, Vec<String>)> {
    command()
        .get_subcommands()
        .filter(|sub| {
            sub.get_positionals()
                .any(|p| p.get_value_hint() == clap::ValueHint::CommandWithArguments)
        })
        .map(|sub| (sub.get_name().to_string(), value_flags(sub)))
        .collect()
}

/// `-k`, `--key`, ...: the flags of `cmd`'s options that take a value.
fn value_flags(cmd: &clap::Command) -> Vec<String> {
    cmd.get_opts().flat_map(value_flags_of).collect()
}

/// `-k`, `--key`: the flags of one option.
fn value_flags_of(arg: &clap::Arg) -> Vec<String> {
    let shorts = arg.get_short_and_visible_aliases().into_iter().flatten();
    let longs = arg.get_long_and_visible_aliases().into_iter().flatten();
    shorts
        .map(|s| format!("-{s}"))
        .chain(longs.map(|l| format!("--{l}")))
        .collect()
}

/// argparse option specs (`k/key=`, `ttl=`, `n/no-wait`) for every option of `cmd`.
fn fish_optspecs(cmd: &clap::Command) -> Vec<String> {
    cmd.get_arguments()
        .filter(|a| !a.is_positional())
        .map(|a| {
            let takes = a.get_num_args().is_some_and(|n| n.takes_values());
            let name = match (a.get_short(), a.get_long()) {
                (Some(s), Some(l)) => format!("{s}/{l}"),
                (Some(s), None) => s.to_string(),
                (None, Some(l)) => l.to_string(),
                (None, None) => unreachable!("an option without a flag"),
            };
            if takes { format!("{name}=") } else { name }
        })
        .collect()
}

/// Replaces the one occurrence of `from` in `script`: clap_complete changed its output if that
/// fails, and the post-processing must be looked at again.
fn replace_once(script: &str, from: &str, to: &str) -> String {
    assert_eq!(
        script.matches(from).count(),
        1,
        "clap_complete's output changed: {from:?} is not there exactly once"
    );
    script.replacen(from, to, 1)
}

/// The one-letter flags among `flags`, as one word: `kwEu`.
fn shorts(flags: &[String]) -> String {
    let letters: String = flags
        .iter()
        .filter_map(|f| f.strip_prefix('-').filter(|l| l.len() == 1))
        .collect();
    assert!(!letters.is_empty(), "no short value flags in {flags:?}");
    letters
}

/// Renames clap's `_rlock` to `_rlock__options` and puts a `_rlock` in front of it that, in a
/// command line of `exec`, completes a command and then that command's own arguments.
fn bash_command_lines(script: String) -> String {
    let subs = command_line_subcommands();
    if subs.is_empty() {
        return script;
    }
    let script = replace_once(&script, "_rlock() {\n", "_rlock__options() {\n");
    let names: Vec<&str> = subs.iter().map(|(name, _)| name.as_str()).collect();
    let mut sub_flags: Vec<String> = subs.iter().flat_map(|(_, f)| f.clone()).collect();
    sub_flags.sort();
    sub_flags.dedup();
    let global_flags = value_flags(&command());
    let wrapper = format!(
        r#"
# `rlock {first}` runs a command line of its own: from its first word that is neither an option
# nor an option's value, or after `--`, complete a command name, then that command's arguments,
# through bash-completion's _comp_command_offset or _command_offset when it is loaded (as sudo's
# completion does), else file names. (Added to clap_complete's script by tests/generated.rs.)
_rlock() {{
    local i=1 w word eq skip=0 sub="" start=0
    # Up to the word being completed, which may be the command's first.
    while (( i <= COMP_CWORD )); do
        w=$i word=${{COMP_WORDS[i]}} eq=0
        (( i++ ))
        # bash splits `--opt=value` and `host:port` into words at = and : (COMP_WORDBREAKS)
        while (( i <= COMP_CWORD )) && [[ ${{COMP_WORDS[i]}} == [=:] ]]; do
            [[ ${{COMP_WORDS[i]}} == = ]] && eq=1
            (( i += 2 ))
        done
        if (( skip )); then
            skip=0
            continue
        fi
        if [[ -z $sub ]]; then
            case $word in
                {global}) (( eq )) || skip=1 ;;
                -[!-]?*) _rlock__cluster "$word" {global_shorts} || skip=1 ;;
                -*) ;;
                {names}) sub=$word ;;
                *) break ;;
            esac
        else
            case $word in
                --) (( w < COMP_CWORD )) && start=$i; break ;;
                {sub_flags}) (( eq )) || skip=1 ;;
                -[!-]?*) _rlock__cluster "$word" {sub_shorts} || skip=1 ;;
                -*) ;;
                *) start=$w; break ;;
            esac
        fi
    done
    if (( start == 0 )); then
        _rlock__options "$@"
        return
    fi
    if declare -F _comp_command_offset >/dev/null; then
        _comp_command_offset "$start"
    elif declare -F _command_offset >/dev/null; then
        _command_offset "$start"
    else
        local IFS=$'\n'
        if (( COMP_CWORD == start )); then
            COMPREPLY=($(compgen -c -- "$2" | sort -u))
        else
            COMPREPLY=($(compgen -f -- "$2"))
            compopt -o filenames 2>/dev/null
        fi
    fi
    return 0
}}

# Whether the cluster of short flags $1 (-nk) leaves its last flag wanting the next word as its
# value: fails if so. A flag in $2 that takes a value takes the rest of the cluster (-kname).
_rlock__cluster() {{
    local rest=${{1#-}}
    while [[ -n $rest ]]; do
        if [[ $2 == *"${{rest:0:1}}"* ]]; then
            (( ${{#rest}} > 1 ))
            return
        fi
        rest=${{rest:1}}
    done
}}
"#,
        first = names[0],
        global = global_flags.join("|"),
        names = names.join("|"),
        sub_flags = sub_flags.join("|"),
        global_shorts = shorts(&global_flags),
        sub_shorts = shorts(&sub_flags),
    );
    let register = "\nif [[ \"${BASH_VERSINFO[0]}\" -eq 4 &&";
    replace_once(&script, register, &format!("{wrapper}{register}"))
}

/// clap_complete's fish script completes the global options before the subcommand only while
/// the words so far parse, which they do not right after an option that wants a value: fish then
/// falls back to file names. Turn those off after the global options whose values are not paths.
fn fish_global_values(mut script: String) -> String {
    let cmd = command();
    let flags: Vec<String> = cmd
        .get_opts()
        .filter(|a| {
            !matches!(
                a.get_value_hint(),
                clap::ValueHint::AnyPath | clap::ValueHint::FilePath | clap::ValueHint::DirPath
            )
        })
        .flat_map(value_flags_of)
        .collect();
    let subs: Vec<&str> = cmd.get_subcommands().map(|s| s.get_name()).collect();
    script.push_str(&format!(
        r#"
# No file names for the value of a global option that is not a path, before the subcommand too.
# (Added to clap_complete's script by tests/generated.rs.)
complete -c rlock -n "not __fish_seen_subcommand_from {subs}; and contains -- (commandline -opc)[-1] {flags}" -f
"#,
        subs = subs.join(" "),
        flags = flags.join(" ")
    ));
    script
}

/// Adds, for `exec`, a condition that is true in its command line, completions of that command
/// line through fish's `__fish_complete_subcommand`, and keeps rlock's options out of it.
fn fish_command_lines(mut script: String) -> String {
    let cmd = command();
    for (name, _) in command_line_subcommands() {
        let sub = cmd.find_subcommand(&name).unwrap();
        let f = name.replace('-', "_");
        let using = format!("-n \"__fish_rlock_using_subcommand {name}\"");
        assert!(
            script.contains(&using),
            "clap_complete's output changed: no {using:?} conditions"
        );
        script = script.replace(
            &using,
            &format!(
                "-n \"__fish_rlock_using_subcommand {name}; and not __fish_rlock_{f}_command_line >/dev/null\""
            ),
        );
        script.push_str(&format!(
            r#"
# `rlock {name}` runs a command line of its own: from its first word that is not an option (or
# an option's value), or after `--`, complete it as that command's, as `complete -C` of the
# command's words would. (Added to clap_complete's script by tests/generated.rs.)
function __fish_rlock_{f}_optspecs
    string join \n {optspecs}
end

# Prints the command's words before the one being completed; fails outside the command.
function __fish_rlock_{f}_command_line
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_rlock_global_optspecs) -- $cmd 2>/dev/null
    or return 1
    test "$argv[1]" = {name}
    or return 1
    set -e argv[1]
    set -l rest $argv
    argparse -s (__fish_rlock_{f}_optspecs) -- $rest 2>/dev/null
    or return 1
    string escape -- $argv
    # The command has started, or comes right after `--`, or is the word being completed.
    set -q argv[1]
    or contains -- -- $rest
    or not string match -q -- '-*' (commandline -ct)
end

function __fish_rlock_{f}_complete
    set -l words (__fish_rlock_{f}_command_line)
    set -l current (commandline -ct)
    set -q current[1]
    or set current ''
    complete -C (string join ' ' -- $words $current)
end

complete -c rlock -n "__fish_rlock_{f}_command_line >/dev/null" -f -a "(__fish_rlock_{f}_complete)"
"#,
            optspecs = fish_optspecs(sub).join(" "),
        ));
    }
    script
}

/// `rlock.1`: the global options and the subcommands from clap, then what a user of a lock must
/// know and `--help` has no room for.
fn main_page(cmd: &clap::Command) -> Vec<u8> {
    let man = Man::new(cmd.clone());
    let mut page = Page::default();
    page.title(cmd, "RLOCK");
    page.man(|w| man.render_name_section(w));
    page.roff(synopsis(cmd, "rlock", false));
    page.man(|w| man.render_description_section(w));
    page.prose(DURATIONS);
    page.man(|w| man.render_options_section(w));
    page.man(|w| man.render_subcommands_section(w));
    for section in [
        EXIT_STATUS,
        ENVIRONMENT,
        SIGNALS,
        LOCK_LOSS,
        REENTRANCY,
        FENCING,
        REDIS_KEYS,
        SAFETY,
        EXAMPLES,
    ] {
        page.prose(section);
    }
    let subs: Vec<String> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .map(|s| format!("rlock-{}(1)", s.get_name()))
        .collect();
    page.see_also(&subs);
    page.man(|w| man.render_version_section(w));
    page.bytes
}

/// `rlock-SUB.1`: the subcommand's own options, its global options apart, and the notes and
/// examples of its `--help`.
fn sub_page(cmd: &clap::Command, sub: &clap::Command) -> Vec<u8> {
    let name = format!("rlock-{}", sub.get_name());
    // The global options under a heading of their own, so the subcommand's own stay together.
    let sub = sub.clone().mut_args(|a| {
        if a.is_global_set() && a.get_help_heading().is_none() {
            a.help_heading("GLOBAL OPTIONS")
        } else {
            a
        }
    });
    let man = Man::new(sub.clone());
    let after = sub
        .get_after_help()
        .map(|s| s.to_string())
        .unwrap_or_default();
    let (notes, examples) = after.split_once("Examples:").unwrap_or((&after, ""));

    let mut page = Page::default();
    page.title(cmd, &name.to_uppercase());
    page.man(|w| man.render_name_section(w));
    page.roff(synopsis(&sub, &format!("rlock {}", sub.get_name()), true));
    page.man(|w| man.render_description_section(w));
    for para in notes.split("\n\n").map(str::trim).filter(|p| !p.is_empty()) {
        let mut r = Roff::new();
        r.control("PP", []);
        r.text(inlines(&para.replace('\n', " ")));
        page.roff(r);
    }
    page.man(|w| man.render_options_section(w));
    if !examples.trim().is_empty() {
        let mut r = Roff::new();
        r.control("SH", ["EXAMPLES"]);
        preformatted(&mut r, &dedent(examples));
        page.roff(r);
    }
    let mut see: Vec<String> = vec!["rlock(1)".into()];
    see.extend(
        cmd.get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name() != sub.get_name())
            .map(|s| format!("rlock-{}(1)", s.get_name())),
    );
    page.see_also(&see);
    page.bytes
}

/// A synopsis in the usual shape: `rlock acquire [global options] -k KEY [--ttl DUR] ...`.
/// (clap_mangen's own lists every global option on every page, without value names.)
fn synopsis(cmd: &clap::Command, name: &str, global_apart: bool) -> Roff {
    let mut line: Vec<Inline> = vec![bold(name)];
    if global_apart {
        line.push(roman(" ["));
        line.push(italic("global options"));
        line.push(roman("]"));
    }
    let mut args: Vec<&clap::Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !a.is_positional())
        .filter(|a| !(global_apart && a.is_global_set()))
        .filter(|a| a.get_id() != "help" && a.get_id() != "version")
        .collect();
    args.sort_by_key(|a| a.get_display_order());
    for arg in args {
        let required = arg.is_required_set();
        line.push(roman(if required { " " } else { " [" }));
        let flag = match (arg.get_short(), arg.get_long()) {
            (Some(s), Some(l)) => format!("-{s}|--{l}"),
            (Some(s), None) => format!("-{s}"),
            (None, Some(l)) => format!("--{l}"),
            (None, None) => continue,
        };
        line.push(bold(flag));
        if arg.get_num_args().is_some_and(|n| n.takes_values()) {
            line.push(roman(" "));
            line.push(italic(value_name(arg)));
        }
        if matches!(arg.get_action(), clap::ArgAction::Append) {
            line.push(roman("]..."));
        } else if !required {
            line.push(roman("]"));
        }
    }
    for pos in cmd.get_positionals().filter(|a| !a.is_hide_set()) {
        line.push(roman(" [--] "));
        line.push(italic(value_name(pos)));
        if pos.get_num_args().is_some_and(|n| n.max_values() > 1) {
            line.push(roman(" ["));
            line.push(italic("ARG"));
            line.push(roman("]..."));
        }
    }
    if cmd.has_subcommands() {
        line.push(roman(" "));
        line.push(italic("command"));
        line.push(roman(" ["));
        line.push(italic("options"));
        line.push(roman("]"));
    }
    let mut r = Roff::new();
    r.control("SH", ["SYNOPSIS"]);
    r.text(line);
    r
}

fn value_name(arg: &clap::Arg) -> String {
    arg.get_value_names().and_then(|v| v.first()).map_or_else(
        || arg.get_id().to_string().to_uppercase(),
        |v| v.to_string(),
    )
}

/// A man page assembled from clap_mangen's sections and our own roff.
#[derive(Default)]
struct Page {
    bytes: Vec<u8>,
}

impl Page {
    /// Appends roff, dropping the string-definition preamble every rendering starts with after
    /// the first one.
    fn push(&mut self, rendered: Vec<u8>) {
        let preamble = Roff::new().render().into_bytes();
        if self.bytes.is_empty() || !rendered.starts_with(&preamble) {
            self.bytes.extend(rendered);
        } else {
            self.bytes.extend(&rendered[preamble.len()..]);
        }
    }

    /// `.TH` with an empty date: clap_mangen drops an empty date argument, which shifts the
    /// source and manual into the wrong places, and a real date would make the page stale daily.
    fn title(&mut self, cmd: &clap::Command, title: &str) {
        self.push(Roff::new().render().into_bytes());
        let version = cmd.get_version().unwrap_or_default();
        let th = format!(".TH {title} 1 \"\" \"rlock {version}\" \"User Commands\"\n");
        self.bytes.extend(th.as_bytes());
    }

    fn man(&mut self, render: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>) {
        let mut buf = Vec::new();
        render(&mut buf).expect("rendering to memory cannot fail");
        self.push(buf);
    }

    fn roff(&mut self, r: Roff) {
        self.push(r.render().into_bytes());
    }

    fn prose(&mut self, section: Section) {
        let mut r = Roff::new();
        r.control("SH", [section.title]);
        for (i, block) in section.blocks.iter().enumerate() {
            match block {
                Block::P(text) => {
                    if i > 0 {
                        r.control("PP", []);
                    }
                    r.text(inlines(text));
                }
                Block::Item(term, text) => {
                    r.control("TP", []);
                    r.text(inlines(term));
                    r.text(inlines(text));
                }
                Block::Pre(text) => {
                    if i > 0 {
                        r.control("PP", []);
                    }
                    preformatted(&mut r, text);
                }
            }
        }
        self.roff(r);
    }

    fn see_also(&mut self, pages: &[String]) {
        let mut r = Roff::new();
        r.control("SH", ["SEE ALSO"]);
        let mut line = Vec::new();
        for (i, page) in pages
            .iter()
            .map(String::as_str)
            .chain(["flock(1)", "redis-cli(1)"])
            .enumerate()
        {
            if i > 0 {
                line.push(roman(", "));
            }
            let (name, section) = page.split_once('(').unwrap_or((page, ""));
            line.push(bold(name));
            line.push(roman(format!("({section}")));
        }
        r.text(line);
        self.roff(r);
    }
}

/// Text with `code` spans set in bold.
fn inlines(text: &str) -> Vec<Inline> {
    text.split('`')
        .enumerate()
        .filter(|(_, s)| !s.is_empty())
        .map(|(i, s)| if i % 2 == 1 { bold(s) } else { roman(s) })
        .collect()
}

/// An indented, unfilled block (examples, key layouts).
fn preformatted(r: &mut Roff, text: &str) {
    r.control("RS", ["4"]);
    r.control("nf", []);
    for line in text.trim_matches('\n').lines() {
        if line.trim().is_empty() {
            r.text([roman("")]);
        } else {
            r.text([roman(line)]);
        }
    }
    r.control("fi", []);
    r.control("RE", []);
}

fn dedent(text: &str) -> String {
    let indent = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start().len())
        .min()
        .unwrap_or(0);
    text.lines()
        .map(|l| l.get(indent..).unwrap_or("").trim_end())
        .collect::<Vec<_>>()
        .join("\n")
}

// ---------------------------------------------------------------------------------------------
// The prose sections of rlock(1)
// ---------------------------------------------------------------------------------------------

struct Section {
    title: &'static str,
    blocks: &'static [Block],
}

enum Block {
    /// A paragraph; `code` spans are set in bold.
    P(&'static str),
    /// A tagged paragraph: term, text.
    Item(&'static str, &'static str),
    /// Unfilled, indented text.
    Pre(&'static str),
}

use Block::{Item, P, Pre};

const DURATIONS: Section = Section {
    title: "DURATIONS",
    blocks: &[P(
        "Every duration is a humantime string: `250ms`, `30s`, `5m`, `1h 30m`. A bare number is an \
         error (rlock says which unit is missing), and so is a zero or negative `--ttl`.",
    )],
};

const EXIT_STATUS: Section = Section {
    title: "EXIT STATUS",
    blocks: &[
        P(
            "Every non-zero status that rlock chooses itself comes with a message on standard \
             error that says what happened and what to do.",
        ),
        Item(
            "`0`",
            "Success. For `exec`: the command's own status, passed through.",
        ),
        Item("`1`", "`inspect`: a named key is not held."),
        Item(
            "`2`",
            "Usage error: unknown flag, bad duration, missing or empty key, missing token (no \
             `--token` and no `$RLOCK_TOKEN`), missing command.",
        ),
        Item(
            "`65`",
            "The key holds something rlock cannot treat as a lock (e.g. a list); nothing was \
             changed.",
        ),
        Item(
            "`69`",
            "Redis unavailable: cannot connect, timed out, no quorum. A wait (no `-n`) rides \
             out an outage, trying again at most 1 s apart and saying on stderr when it began \
             and ended, and exits 69 only if the wait ends during it.",
        ),
        Item("`70`", "Internal error."),
        Item(
            "`75`",
            "Lock busy: not acquired within `--wait` (or at once with `-n`). `-E` sets another \
             code.",
        ),
        Item(
            "`76`",
            "`exec`: the lock was lost while the command ran; the command was signalled.",
        ),
        Item(
            "`77`",
            "Not permitted: the token does not own the lock (`release`, `renew`), or Redis refused \
             the password or the user's ACL.",
        ),
        Item(
            "`78`",
            "Configuration error: malformed URL, unreadable TLS or password file.",
        ),
        Item("`126`", "`exec`: the command is not executable."),
        Item("`127`", "`exec`: the command was not found."),
        Item(
            "`128+`N",
            "`exec`: the command died of signal N. Also: rlock was interrupted by signal N while \
             it waited for the lock.",
        ),
    ],
};

const ENVIRONMENT: Section = Section {
    title: "ENVIRONMENT",
    blocks: &[
        P("An option given on the command line wins over its environment variable."),
        Item(
            "`RLOCK_URL`",
            "Redis endpoints, comma-separated, as `--url`. Default `redis://127.0.0.1:6379`.",
        ),
        Item("`RLOCK_CLUSTER`", "As `--cluster`."),
        Item("`RLOCK_SENTINEL`", "As `--sentinel`."),
        Item(
            "`RLOCK_PASSWORD`, `REDISCLI_AUTH`",
            "The Redis password, in this order, when neither the URL's userinfo \
             (`redis://:PASSWORD@host`) nor `--password-file` gives one. Passwords never appear \
             in a message: URLs are printed with the password replaced by `***`.",
        ),
        Item(
            "`RLOCK_TLS_CA`, `RLOCK_TLS_CERT`, `RLOCK_TLS_KEY`",
            "As `--tls-ca`, `--tls-cert`, `--tls-key`, for `rediss://` URLs.",
        ),
        Item(
            "`RLOCK_PREFIX`",
            "As `--prefix`: the Redis key of lock KEY is PREFIX+KEY. Default `rlock:`.",
        ),
        Item(
            "`RLOCK_OP_TIMEOUT`",
            "As `--op-timeout`: connect and per-command timeout. Default `2s`.",
        ),
        Item(
            "`RLOCK_TOKEN`",
            "The owner token `release` and `renew` use when `--token` is not given.",
        ),
        Item(
            "`RLOCK_KEY`, `RLOCK_TOKEN`, `RLOCK_FENCE`",
            "Set by `exec` in the command's environment, and by `eval \"$(rlock acquire --export \
             ...)\"` in the shell's: the lock's name, its owner token and its fencing token. An \
             `rlock acquire` or `rlock exec` of the same KEY that finds them is reentrant (see \
             REENTRANCY).",
        ),
        Item(
            "`USER`, `LOGNAME`",
            "The user name recorded with a lock for `inspect`, in this order; without either, \
             the user database's name for rlock's uid.",
        ),
    ],
};

const SIGNALS: Section = Section {
    title: "SIGNALS",
    blocks: &[
        P(
            "`rlock exec` runs the command as a job: in a process group of its own, given the \
             terminal's foreground when rlock had it (as a shell does), and the terminal taken \
             back when the command ends. So Ctrl-C at a terminal reaches the command's group \
             once, and not rlock.",
        ),
        P(
            "SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to rlock are passed on, \
             once, to the command's process group. rlock keeps renewing the lock until the command \
             exits, then releases it and exits with the command's status (128+N if the command \
             died of signal N).",
        ),
        P(
            "While rlock is still waiting for the lock, the same signals end the wait: rlock \
             leaves the queue, takes nothing, and exits 128+N; for SIGINT (Ctrl-C) it dies of \
             SIGINT instead, so that a script waiting in rlock stops there.",
        ),
        P(
            "Ctrl-Z (SIGTSTP, also when sent to rlock) stops the command; rlock then takes the \
             terminal back and stops too (by SIGTSTP, so that an enclosing `rlock exec` stops \
             with it), and the shell shows the job stopped. `fg` gives the \
             command the terminal again and continues it. rlock cannot renew while it is \
             stopped: on resume it checks the deadline before continuing the command, which \
             gets `--lost-signal` if the lease ran out meanwhile (exit 76). A SIGSTOP of the \
             command alone only pauses it, and rlock keeps renewing. A signal passed on to a \
             stopped command is followed by SIGCONT, so that it takes effect.",
        ),
        P(
            "If rlock itself is killed (SIGKILL), the command gets SIGKILL at once (the Linux \
             parent-death signal), and so does everything it started: a small guardian process \
             kills the command's whole process group when rlock dies without standing it down. \
             The lock then expires within `--ttl`. SIGSTOP sent to rlock alone cannot be caught: \
             the command runs on while rlock cannot renew, so do not stop rlock without its \
             command.",
        ),
        P(
            "A command killed by SIGINT (Ctrl-C) makes rlock die of SIGINT too, after the lock \
             is released, so that the calling shell stops as it does for its own commands. A \
             signal ignored when rlock started (nohup) stays ignored, by rlock and the command; \
             SIGCHLD is put back to its default, as an ignored one would lose the command's exit \
             status.",
        ),
    ],
};

const LOCK_LOSS: Section = Section {
    title: "LOCK LOSS",
    blocks: &[
        P(
            "While the command runs, a background thread renews the lock every `--renew-every` \
             (default TTL/3), each renewal waiting at most the smaller of `--op-timeout` and \
             `--renew-every`; a failed renewal is retried sooner (every quarter of \
             `--renew-every`, between 10ms and 1s).",
        ),
        P(
            "rlock keeps the lease's deadline on its own monotonic clock: the moment the last \
             successful renewal was sent (at first, the acquire), plus TTL, minus a drift \
             allowance of 1% of TTL plus 2ms. If renewals keep failing, the command's process \
             group gets `--lost-signal` (default TERM) at the deadline minus `--grace` (default \
             TTL/4), and SIGKILL at the deadline. If Redis answers that the token no longer owns \
             the lock (it expired, was deleted, was broken with `release --force`), the \
             command's group gets `--lost-signal` at once and SIGKILL `--grace` later.",
        ),
        P(
            "The lost-lock signals reach every process of the command's group, also once the \
             command itself has exited; what a command that ended normally left running in its \
             group gets `--lost-signal`, and SIGKILL `--grace` later, before the lock is \
             released. rlock is the child subreaper of its command. A process that left the \
             group (setsid, a daemon) is beyond the lock.",
        ),
        P(
            "Either way rlock stops renewing, waits for the group to be empty (or SIGKILLed), \
             makes a best-effort owner-checked release (which \
             can take up to `--op-timeout` when Redis does not answer), and exits 76, whatever \
             the command's own status. A lost lock is never taken again behind the command's \
             back. A loss between two renewals that the command outlives is found by the \
             release at the end, and also exits 76.",
        ),
        P("With the defaults (`--ttl 30s`):"),
        Pre("renewal every      10s
retry every        1s
deadline           last renewal sent + 29.698s
--lost-signal at   deadline - 7.5s
SIGKILL at         deadline"),
        P(
            "`--grace` must be shorter than the TTL minus the drift allowance, and \
             `--renew-every` shorter than that minus `--grace`; rlock refuses other combinations \
             with exit 2.",
        ),
    ],
};

const REENTRANCY: Section = Section {
    title: "REENTRANCY",
    blocks: &[
        P(
            "An `rlock exec` or `rlock acquire` of the same KEY (same Redis, same prefix) run \
             where `RLOCK_KEY` and `RLOCK_TOKEN` name that lock (inside the command of an \
             `rlock exec`, say) does not deadlock: it checks with Redis that the token still \
                          owns the key, and then runs without taking the lock again or giving it back. A \
             nested `exec` runs its command at once; a nested `acquire` prints the same token \
             and fence. If the token no longer owns the key, the lock is taken as usual.",
        ),
        P(
            "`rlock exec` puts `RLOCK_EXEC_PID` (its own pid) and `RLOCK_EXEC_TOKEN` (its lock's \
             token) in the command's environment. Under it, the outer rlock renews that lock, \
             and an `rlock release` of that token does nothing and says so: the outer rlock \
             releases the lock when its command ends. So the usual `acquire --export` ... \
             `release` script can run under `rlock exec` of the same KEY.",
        ),
        P(
            "An `rlock exec` whose lock came from a shell (after `eval` of `rlock acquire \
             --export`, with no `rlock exec` around it) renews the lock while its command runs, \
             with the lease the lock was taken with, and leaves the release to the shell.",
        ),
    ],
};

const FENCING: Section = Section {
    title: "FENCING",
    blocks: &[P(
        "Each grant of a lock gets a fencing token, `RLOCK_FENCE` (and `fence` in `--json`): an \
         integer that strictly increases with every grant of that key, minted by the same Redis \
         script that grants the lock. Hand it to the resource the lock protects and have the \
         resource refuse a write whose fence is lower than the highest it has seen (a version \
         column, a conditional put). That is what makes a holder that was paused past its lease, \
         and wakes up thinking it still holds the lock, harmless.",
    )],
};

const REDIS_KEYS: Section = Section {
    title: "REDIS KEYS",
    blocks: &[
        P("A lock named KEY, with prefix P (`--prefix`, default `rlock:`), uses:"),
        Pre(
            "P+KEY            string: the owner token, the lease as its expiry
{P+KEY}:state    hash: fence, holder (host, pid, user, command,
                 since), TTL, the waiter a free lock is reserved for
{P+KEY}:q        sorted set: waiting tokens, oldest first
{P+KEY}:wake:T   pub/sub channel of waiter T: a release hands it the lock
{P+KEY}:wake     pub/sub channel: wakes waiters that do not queue (Redlock)",
        ),
        P(
            "The lock itself is a plain `SET P+KEY token NX PX ttl`, so other clients that lock \
             the same Redis key the same way exclude rlock and are excluded by it: `--prefix ''` \
             makes the key KEY itself, to share a lock with redis-py's `Lock`, redsync or \
             node-redlock. The {...} hash tag keeps the helper keys in the lock key's Redis \
             Cluster slot. Every key expires: the state lives as long as the lease and 60 \
             seconds more, the queue as long as someone waits in it, so a lock with no holder \
             and no waiter leaves nothing behind after its TTL + 60 s. The fence is at least the \
             server's clock in microseconds (and above the last fence), so it keeps rising after \
             the state expired or was lost, as long as the server's clock does not step back. \
             Waiters sleep, each on a channel of its own and sending nothing, until a release \
             hands them the lock or the holder's lease would end; a release reserves the lock \
             for the first waiter for 1 s, after which the next in line may go. A lost \
             notification costs latency, never liveness.",
        ),
    ],
};

const SAFETY: Section = Section {
    title: "SAFETY",
    blocks: &[
        P(
            "What rlock promises, and what it cannot. Acquire is one atomic script, release and \
             renew are owner-checked scripts, and retries are idempotent for the same token.",
        ),
        Item(
            "TTL",
            "A lock is a lease. While Redis keeps its data, two holders never overlap, and a \
             holder that dies leaves the lock behind for at most `--ttl`. A holder that is only \
             slow (stopped, swapping, a suspended VM) can outlive its lease without knowing it: \
             `rlock exec` stops the command at its local deadline, but a process frozen across \
             that deadline wakes up after someone else may have taken the lock. rlock measures \
             time on the local monotonic clock and Redis expires keys by its own clock; the \
             drift allowance covers ordinary rate differences, not a jump of the server's clock.",
        ),
        Item(
            "Redis",
            "Redis replicates asynchronously. If a master fails over, or restarts without \
             persistence, before a grant reached a replica or the disk, the lock (and the fence \
             counter) can be lost and a second holder can take it. Use `appendonly yes` with \
             `appendfsync always` if that matters.",
        ),
        Item(
            "Fencing",
            "`RLOCK_FENCE` strictly increases with every grant on one Redis (Sentinel, Cluster: \
             as long as a failover kept the data). It is the only protection against a paused or \
             partitioned former holder, and only if the protected resource checks it.",
        ),
        Item(
            "Redlock",
            "With several `--url` (3, 5, ...), a lock needs a majority of independent masters \
             within its validity time (TTL minus the time acquiring took minus the drift \
             allowance), and partial grants are released. It survives the loss of a minority of \
                          masters, but it assumes bounded clock drift, network delay and process pauses. Its \
             fence is the highest counter of the granting majority, and the granting masters' \
             counters are raised to it, so it increases while the masters keep their data; a \
             master that restarts empty forgets its counter, so treat `RLOCK_FENCE` as advisory \
             there.",
        ),
    ],
};

const EXAMPLES: Section = Section {
    title: "EXAMPLES",
    blocks: &[Pre("# cron: skip this run if the last one is still going
*/5 * * * * rlock exec -k sync -n -- /usr/local/bin/sync.sh

# CI: one deploy at a time, waiting up to 15 minutes for the lock
rlock exec -k deploy-prod -w 15m -- ./deploy.sh production

# hold a lock across part of a shell script (not eval \"$(...)\" alone:
# eval of nothing succeeds, so a failed acquire would go unnoticed)
lock=$(rlock acquire --export -k jobs --ttl 5m) || exit
eval \"$lock\"
do_the_work
rlock release -k jobs

# is it locked?
rlock inspect -q -k jobs && echo locked

# who holds what
rlock inspect")],
};

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
