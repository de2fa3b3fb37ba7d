//! Completing the command line of `rlock exec`, in bash and fish: what the generated completions
//! add to clap_complete's.

use super::*;

// Completing the command line of `rlock exec`
// ---------------------------------------------------------------------------------------------
//
// clap_complete's zsh script hands a `ValueHint::CommandWithArguments` positional to zsh's own
// command-line completion, but its bash script offers rlock's options there and its fish script
// ignores positionals. The two functions below add what is missing, from the same clap
// definition, so the files stay generated.

/// The subcommands whose trailing positional is a command line (`exec`), each with the flags of
/// its options that take a value (its own and the global ones).
pub(super) fn command_line_subcommands() -> Vec<(String, Vec<String>)> {
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
pub(super) fn value_flags(cmd: &clap::Command) -> Vec<String> {
    cmd.get_opts().flat_map(value_flags_of).collect()
}

/// `-k`, `--key`: the flags of one option.
pub(super) fn value_flags_of(arg: &clap::Arg) -> Vec<String> {
    let shorts = arg.get_short_and_visible_aliases().into_iter().flatten();
    let longs = arg.get_long_and_visible_aliases().into_iter().flatten();
    shorts
        .map(|s| format!("-{s}"))
        .chain(longs.map(|l| format!("--{l}")))
        .collect()
}

/// argparse option specs (`k/key=`, `ttl=`, `n/no-wait`) for every option of `cmd`.
pub(super) fn fish_optspecs(cmd: &clap::Command) -> Vec<String> {
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
pub(super) fn replace_once(script: &str, from: &str, to: &str) -> String {
    assert_eq!(
        script.matches(from).count(),
        1,
        "clap_complete's output changed: {from:?} is not there exactly once"
    );
    script.replacen(from, to, 1)
}

/// The one-letter flags among `flags`, as one word: `kwEu`.
pub(super) fn shorts(flags: &[String]) -> String {
    let letters: String = flags
        .iter()
        .filter_map(|f| f.strip_prefix('-').filter(|l| l.len() == 1))
        .collect();
    assert!(!letters.is_empty(), "no short value flags in {flags:?}");
    letters
}

/// Renames clap's `_rlock` to `_rlock__options` and puts a `_rlock` in front of it that, in a
/// command line of `exec`, completes a command and then that command's own arguments.
pub(super) fn bash_command_lines(script: String) -> String {
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
# completion does), else file names. (Added to clap_complete's script by tests/rlock/cli_and_help/generated/completions.rs.)
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
pub(super) fn fish_global_values(mut script: String) -> String {
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
# (Added to clap_complete's script by tests/rlock/cli_and_help/generated/completions.rs.)
complete -c rlock -n "not __fish_seen_subcommand_from {subs}; and contains -- (commandline -opc)[-1] {flags}" -f
"#,
        subs = subs.join(" "),
        flags = flags.join(" ")
    ));
    script
}

/// Adds, for `exec`, a condition that is true in its command line, completions of that command
/// line through fish's `__fish_complete_subcommand`, and keeps rlock's options out of it.
pub(super) fn fish_command_lines(mut script: String) -> String {
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
# command's words would. (Added to clap_complete's script by tests/rlock/cli_and_help/generated/completions.rs.)
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
pub(super) fn main_page(cmd: &clap::Command) -> Vec<u8> {
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
        from_docs("SIGNALS", "exec.md", "Signals"),
        from_docs(
            "EVERYTHING THE COMMAND STARTED",
            "exec.md",
            "Everything the command started",
        ),
        from_docs("LOCK LOSS", "exec.md", "Losing the lock"),
        from_docs("REENTRANCY", "exec.md", "Nested rlock (reentrancy)"),
        from_docs("FENCING", "safety.md", "Fencing"),
        REDIS_KEYS,
        safety(),
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
pub(super) fn sub_page(cmd: &clap::Command, sub: &clap::Command) -> Vec<u8> {
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
pub(super) fn synopsis(cmd: &clap::Command, name: &str, global_apart: bool) -> Roff {
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

pub(super) fn value_name(arg: &clap::Arg) -> String {
    arg.get_value_names().and_then(|v| v.first()).map_or_else(
        || arg.get_id().to_string().to_uppercase(),
        |v| v.to_string(),
    )
}

/// A man page assembled from clap_mangen's sections and our own roff.
#[derive(Default)]
pub(super) struct Page {
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
pub(super) fn inlines(text: &str) -> Vec<Inline> {
    text.split('`')
        .enumerate()
        .filter(|(_, s)| !s.is_empty())
        .map(|(i, s)| if i % 2 == 1 { bold(s) } else { roman(s) })
        .collect()
}

/// An indented, unfilled block (examples, key layouts).
pub(super) fn preformatted(r: &mut Roff, text: &str) {
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

pub(super) fn dedent(text: &str) -> String {
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
