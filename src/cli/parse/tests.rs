//! The smaller tree must parse every command line it accepts exactly as the whole tree does.

use std::ffi::OsString;

use clap::{CommandFactory, FromArgMatches};

use super::*;

fn whole(args: &[OsString]) -> Result<Cli, clap::Error> {
    let mut command = Cli::command();
    command
        .try_get_matches_from_mut(args)
        .and_then(|mut m| Cli::from_arg_matches_mut(&mut m))
}

fn argv(line: &str) -> Vec<OsString> {
    std::iter::once("rlock")
        .chain(line.split(' ').filter(|w| !w.is_empty()))
        .map(OsString::from)
        .collect()
}

/// Command lines of every subcommand, with global options before and after it, values
/// attached and apart, clusters, and words that look like subcommands where they are values.
const LINES: &[&str] = &[
    "exec -k jobs -- true",
    "-u redis://h:1 exec -k jobs -w 5s --ttl 1m -- sh -c x",
    "--url=redis://h:1 -q exec -k jobs -n -- true",
    "-qv exec -k jobs -- true",
    "-uredis://h:1 exec -k jobs -- exec acquire",
    "--prefix acquire exec -k inspect -- release",
    "--prefix exec acquire -k jobs --ttl 5m",
    "acquire -k jobs --export",
    "acquire -k jobs --json -w 10s -E 0",
    "release -k jobs --token t",
    "release -k jobs --force -u redis://h:2",
    "renew -k jobs --ttl 2m --token t",
    "inspect",
    "inspect -k a -k b --json",
    "inspect --watch 1s",
    "--op-timeout 3s inspect -k a",
    "exec -k jobs --limit 3 -- true",
    "exec -k jobs --shared --lost-signal KILL --grace 2s --renew-every 1s -- true",
    "exec -k jobs --label ci -- true",
    "exec -u redis://h:1 -q -k jobs --op-timeout 3s -- true",
    "exec -k jobs -v --prefix p: -- sh -c 'exit 3'",
    "acquire -k jobs --url=redis://h:2 -E 0",
    "inspect -q --json",
    "release -k jobs --token t -v",
    "renew -v -k jobs --token t",
];

#[test]
fn the_smaller_tree_parses_as_the_whole_one() {
    for line in LINES {
        let args = argv(line);
        let whole = format!("{:?}", whole(&args).map_err(|e| e.kind()));
        let global = Global::augment_args(Command::new("rlock"));
        let sub = subcommand_named(&global, &args)
            .unwrap_or_else(|| panic!("no subcommand found in {line:?}"));
        let small = parse_with(with_one_subcommand(global, sub), &args);
        assert_eq!(
            format!("{:?}", small.map_err(|e| e.kind())),
            whole,
            "{line:?}"
        );
        assert_eq!(format!("{:?}", parse(&args).map_err(|e| e.0.kind())), whole);
    }
}

#[test]
fn the_subcommand_is_the_first_word_that_is_no_global_option_or_value() {
    for (line, want) in [
        ("exec -k x -- true", Some("exec")),
        ("-u redis://h:1 acquire -k x", Some("acquire")),
        ("--prefix exec inspect", Some("inspect")),
        ("--prefix=exec inspect", Some("inspect")),
        ("-qu exec release -k x", Some("release")),
        ("-uexec renew -k x", Some("renew")),
        ("--bogus inspect", Some("inspect")),
        ("bogus exec", None),
        ("-- exec", None),
        ("", None),
    ] {
        let global = Global::augment_args(Command::new("rlock"));
        let found = subcommand_named(&global, &argv(line)).map(|s| s.name);
        assert_eq!(found, want, "{line:?}");
    }
}

/// What the smaller tree does not accept is parsed with the whole one: help, the version and
/// errors come from it, as before.
#[test]
fn help_version_and_errors_come_from_the_whole_tree() {
    for (line, kind) in [
        ("exec --help", clap::error::ErrorKind::DisplayHelp),
        ("--version", clap::error::ErrorKind::DisplayVersion),
        ("exec --version", clap::error::ErrorKind::UnknownArgument),
        (
            "exec -k x --ttl nope -- true",
            clap::error::ErrorKind::ValueValidation,
        ),
        ("acquire", clap::error::ErrorKind::MissingRequiredArgument),
        ("aquire -k x", clap::error::ErrorKind::InvalidSubcommand),
    ] {
        let args = argv(line);
        match parse(&args) {
            Ok(cli) => panic!("{line:?} parsed: {cli:?}"),
            Err((e, command)) => {
                assert_eq!(e.kind(), kind, "{line:?}");
                assert!(
                    SUBCOMMANDS
                        .iter()
                        .all(|s| command.find_subcommand(s.name).is_some()),
                    "{line:?}: not the whole tree"
                );
                assert_eq!(
                    format!("{:?}", whole(&args).map_err(|e| e.kind())),
                    format!("{:?}", Err::<(), _>(kind))
                );
            }
        }
    }
}

/// A line that starts with its subcommand is parsed by that subcommand alone, as the whole tree
/// parses it, global options after the subcommand included.
#[test]
fn a_line_that_starts_with_its_subcommand_parses_flat_as_the_whole_tree_does() {
    let mut flat = 0;
    for line in LINES {
        let args = argv(line);
        let starts_with_one = SUBCOMMANDS.iter().any(|s| args[1] == s.name);
        let Some(cli) = parse_flat(&args) else {
            assert!(!starts_with_one, "{line:?}: not parsed flat");
            continue;
        };
        flat += 1;
        let whole = whole(&args).unwrap_or_else(|e| panic!("{line:?}: {e}"));
        assert_eq!(format!("{cli:?}"), format!("{whole:?}"), "{line:?}");
    }
    assert!(flat >= 15, "only {flat} lines parsed flat");
    for line in [
        "exec --help",
        "exec --version",
        "acquire",
        "exec -k x --ttl nope -- true",
    ] {
        assert!(parse_flat(&argv(line)).is_none(), "{line:?} parsed flat");
    }
}

#[test]
fn the_table_of_subcommands_is_the_derives_own() {
    let whole = Cli::command();
    let derived: Vec<&str> = whole
        .get_subcommands()
        .map(|s| s.get_name())
        .filter(|n| *n != "help")
        .collect();
    let table: Vec<&str> = SUBCOMMANDS.iter().map(|s| s.name).collect();
    assert_eq!(table, derived);
    assert_eq!(
        subcommand_names(),
        "acquire, release, renew, inspect or exec"
    );
}
