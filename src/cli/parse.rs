//! Parsing a command line without building clap's description of every subcommand.
//!
//! Clap's derive builds the whole tree (five subcommands, each given a copy of the thirteen
//! global options) before it reads a word; that was a twentieth of an uncontended
//! `exec -- true`. Most command lines name their subcommand plainly, so the tree is first built
//! with that subcommand alone. Whatever that smaller tree does not accept as it is (`--help`,
//! `--version`, a mistake, a word that is not a subcommand) is parsed again with the whole tree,
//! so that help, version and every error come out as they always did.
//!
//! A line whose first word is its subcommand (`rlock exec …`, as scripts and crontabs write it)
//! is parsed flatter still: by that subcommand alone, the global options among its own. A
//! global option in a tree has its value copied between the levels after the parse, one
//! allocation at a time, and that copying cost more than the rest of the parse (callgrind).

use std::ffi::OsString;

use clap::{Args, Command, CommandFactory, FromArgMatches};

use super::{AcquireArgs, Cli, ExecArgs, Global, InspectArgs, ReleaseArgs, RenewArgs};

/// Every `RLOCK_*` variable that is set but empty, which `main` removes from the process's
/// environment before anything reads it: an empty variable means "not set", as in most tools,
/// and must not be read as a value (clap would read `RLOCK_CONNECT_TIMEOUT=` as an empty
/// duration, even beside an explicit `--connect-timeout 3s`). The command `exec` runs inherits
/// the environment without them.
pub fn empty_variables() -> Vec<OsString> {
    std::env::vars_os()
        .filter(|(name, value)| value.is_empty() && name.as_encoded_bytes().starts_with(b"RLOCK_"))
        .map(|(name, _)| name)
        .collect()
}

/// `args` (the program's name first) parsed, or clap's error with the whole tree that raised it.
pub fn parse(args: &[OsString]) -> Result<Cli, (clap::Error, Box<Command>)> {
    if let Some(cli) = parse_flat(args) {
        return Ok(cli);
    }
    let global = Global::augment_args(Command::new("rlock"));
    if let Some(sub) = subcommand_named(&global, args)
        && let Ok(cli) = parse_with(with_one_subcommand(global, sub), args)
    {
        return Ok(cli);
    }
    let mut whole = Cli::command();
    match parse_with_mut(&mut whole, args) {
        Ok(cli) => Ok(cli),
        Err(e) => Err((e, Box::new(whole))),
    }
}

/// `args` parsed by the subcommand its first word names, with the global options as its own;
/// None when the first word names none, or when that parse refused the line (the tree says
/// why).
fn parse_flat(args: &[OsString]) -> Option<Cli> {
    let sub = SUBCOMMANDS
        .iter()
        .find(|s| args.get(1).is_some_and(|word| word == s.name))?;
    // Global for the tree; here they have no level to be copied to.
    let global = Global::augment_args(Command::new(sub.name)).mut_args(|arg| arg.global(false));
    let mut command = (sub.options)(global);
    let parsed = command
        .try_get_matches_from_mut(&args[1..])
        .and_then(|mut matches| {
            Ok(Cli {
                global: Global::from_arg_matches_mut(&mut matches)?,
                command: (sub.parsed)(&mut matches)?,
            })
        });
    std::mem::forget(command);
    parsed.ok()
}

fn parse_with(mut command: Command, args: &[OsString]) -> Result<Cli, clap::Error> {
    let parsed = parse_with_mut(&mut command, args);
    // Freeing clap's description of every option, one allocation at a time, costs more than
    // connecting to Redis (callgrind); the process ends soon and takes it all back at once.
    std::mem::forget(command);
    parsed
}

fn parse_with_mut(command: &mut Command, args: &[OsString]) -> Result<Cli, clap::Error> {
    command
        .try_get_matches_from_mut(args)
        .and_then(|mut matches| Cli::from_arg_matches_mut(&mut matches))
}

/// `global` (rlock's global options) with the one subcommand `sub`, as `Cli::command()`
/// describes them (the help texts aside, which only the whole tree prints).
fn with_one_subcommand(global: Command, sub: &Subcommand) -> Command {
    let one = (sub.options)(Command::new(sub.name));
    global.subcommand_required(true).subcommand(one)
}

/// A subcommand: its name, its options as the derive describes them, and what its matches
/// make.
pub struct Subcommand {
    pub name: &'static str,
    options: fn(Command) -> Command,
    parsed: fn(&mut clap::ArgMatches) -> Result<super::Command, clap::Error>,
}

/// Every subcommand, in the order `--help` lists them: the one table a new subcommand joins
/// (beside its variant of `cli::Command`, which the compiler holds to `lib.rs`'s dispatch; a
/// unit test holds this table to that enum).
pub const SUBCOMMANDS: [Subcommand; 5] = [
    Subcommand {
        name: "acquire",
        options: AcquireArgs::augment_args,
        parsed: |m| AcquireArgs::from_arg_matches_mut(m).map(super::Command::Acquire),
    },
    Subcommand {
        name: "release",
        options: ReleaseArgs::augment_args,
        parsed: |m| ReleaseArgs::from_arg_matches_mut(m).map(super::Command::Release),
    },
    Subcommand {
        name: "renew",
        options: RenewArgs::augment_args,
        parsed: |m| RenewArgs::from_arg_matches_mut(m).map(super::Command::Renew),
    },
    Subcommand {
        name: "inspect",
        options: InspectArgs::augment_args,
        parsed: |m| InspectArgs::from_arg_matches_mut(m).map(super::Command::Inspect),
    },
    Subcommand {
        name: "exec",
        options: ExecArgs::augment_args,
        parsed: |m| ExecArgs::from_arg_matches_mut(m).map(super::Command::Exec),
    },
];

/// The subcommands' names, as a sentence: "acquire, release, renew, inspect or exec".
pub fn subcommand_names() -> String {
    let names: Vec<&str> = SUBCOMMANDS.iter().map(|s| s.name).collect();
    match names.split_last() {
        Some((last, [])) => last.to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// The subcommand `args` names: the first word that is neither a global option nor the value
/// of one. None when there is none, or when it is not a subcommand's name.
fn subcommand_named(global: &Command, args: &[OsString]) -> Option<&'static Subcommand> {
    let takes_value = |arg: &clap::Arg| arg.get_action().takes_values();
    let long_with_value = |name: &str| {
        global
            .get_arguments()
            .any(|a| takes_value(a) && a.get_long() == Some(name))
    };
    let short_with_value = |c: char| {
        global
            .get_arguments()
            .any(|a| takes_value(a) && a.get_short() == Some(c))
    };
    let mut words = args.iter().skip(1);
    while let Some(word) = words.next() {
        let word = word.to_str()?;
        if word == "--" || word == "-" {
            return None;
        }
        if let Some(long) = word.strip_prefix("--") {
            if !long.contains('=') && long_with_value(long) {
                words.next();
            }
        } else if let Some(shorts) = word.strip_prefix('-') {
            // A cluster (`-qv`), or a short option with its value attached (`-uURL`) or next.
            for (i, c) in shorts.char_indices() {
                if short_with_value(c) {
                    if i + c.len_utf8() == shorts.len() {
                        words.next();
                    }
                    break;
                }
            }
        } else {
            return SUBCOMMANDS.iter().find(|s| s.name == word);
        }
    }
    None
}

#[cfg(test)]
mod tests;
