//! A usage error of clap's as one line, as for every other failure: its message, its tips
//! ("a similar argument exists: '--ttl'"), and the help page where the option it is about is
//! described ("(see 'rlock acquire --help')").

use std::ffi::OsString;

use clap::error::{ContextKind, ContextValue};

/// `err`, raised by `command` parsing `args` (the whole command line, program name first), in
/// one line without "error: ".
pub fn one_line(err: &clap::Error, command: &clap::Command, args: &[OsString]) -> String {
    let mut line = message(err);
    for tip in tips(err) {
        line.push_str("; ");
        line.push_str(&tip);
    }
    // Clap quotes the argument it could not place, which may be a URL with a password.
    let line = crate::redact::redact_text(&line);
    match subcommand(command, args) {
        Some(sub) => format!("{line} (see 'rlock {sub} --help')"),
        None => format!("{line} (see 'rlock --help')"),
    }
}

/// What went wrong, from the rendered error: the one part clap gives only as text. (Its words
/// come from some twenty templates inside clap, one per kind of error, fed by the error's
/// context; `Error::kind().as_str()` is a generic sentence, not the same.) The message runs to
/// the first blank line (a list of missing arguments, or a value with a newline in it,
/// continues on further lines), and is folded into one.
fn message(err: &clap::Error) -> String {
    let text = err.render().to_string();
    let line = text
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ");
    match line.strip_prefix("error: ") {
        Some(rest) => rest.to_string(),
        None => line,
    }
}

/// Clap's tips, from the error's context, in the order and words of its own rendering: similar
/// subcommands, arguments and values, then its other suggestions.
fn tips(err: &clap::Error) -> Vec<String> {
    let mut tips = Vec::new();
    for (kind, noun) in [
        (ContextKind::SuggestedSubcommand, "subcommand"),
        (ContextKind::SuggestedArg, "argument"),
        (ContextKind::SuggestedValue, "value"),
    ] {
        let similar: Vec<String> = match err.get(kind) {
            Some(ContextValue::String(one)) => vec![format!("'{one}'")],
            Some(ContextValue::Strings(some)) => some.iter().map(|s| format!("'{s}'")).collect(),
            _ => continue,
        };
        tips.push(match similar.len() {
            1 => format!("a similar {noun} exists: {}", similar[0]),
            _ => format!("some similar {noun}s exist: {}", similar.join(", ")),
        });
    }
    // `--timeout` is most often a wait for a busy lock, which clap's likeness to --op-timeout
    // (a bound on each request to Redis) does not guess.
    if let Some(ContextValue::String(arg)) = err.get(ContextKind::InvalidArg)
        && matches!(
            arg.split('=').next(),
            Some("--timeout" | "--wait-timeout" | "-t")
        )
    {
        tips.push("to give up waiting for a busy lock after DUR, use '-w DUR' ('--wait DUR'); --op-timeout bounds each request to Redis".into());
    }
    // flock's habits: its -c runs a shell command line and its -s takes a shared lock, which
    // clap's "to pass '-c' as a value, use '-- -c'" would send the wrong way.
    let flock = match err.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => match arg.split('=').next() {
            Some("-c" | "--command") => {
                Some("rlock runs a command without a shell, so flock's -c is: -- sh -c '…'")
            }
            Some("-s") => Some("for a shared lock (flock's -s), use --shared"),
            _ => None,
        },
        _ => None,
    };
    if let Some(flock) = flock {
        tips.push(flock.into());
    } else if let Some(ContextValue::StyledStrs(more)) = err.get(ContextKind::Suggested) {
        tips.extend(more.iter().map(ToString::to_string));
    }
    tips
}

/// The subcommand whose help page describes what the error is about: the one clap reached on
/// the command line (parsed again, errors ignored), or else the first word before `--` that
/// names one.
fn subcommand(command: &clap::Command, args: &[OsString]) -> Option<String> {
    let reached = command
        .clone()
        .ignore_errors(true)
        .try_get_matches_from(args)
        .ok()
        .and_then(|m| m.subcommand_name().map(str::to_string));
    reached.or_else(|| {
        args.iter()
            .skip(1)
            .take_while(|a| *a != "--")
            // An argument that is not UTF-8 names no subcommand (and must not panic here).
            .filter_map(|a| a.to_str())
            .find(|a| command.find_subcommand(a).is_some())
            .map(str::to_string)
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    /// The line for `rlock ARGS`, which must be a usage error.
    fn line(args: &[&str]) -> String {
        let args: Vec<OsString> = std::iter::once("rlock")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        let command = crate::cli::Cli::command();
        let err = command.clone().try_get_matches_from(&args).unwrap_err();
        one_line(&err, &command, &args)
    }

    #[test]
    fn tips_as_clap_words_them() {
        assert_eq!(
            line(&["acquire", "--tll", "30s", "-k", "x"]),
            "unexpected argument '--tll' found; a similar argument exists: '--ttl' (see 'rlock acquire --help')"
        );
        assert_eq!(
            line(&["releas"]),
            "unrecognized subcommand 'releas'; some similar subcommands exist: 'renew', 'release' (see 'rlock --help')"
        );
        assert_eq!(
            line(&["acquire", "--timeout", "5s", "-k", "x"]),
            "unexpected argument '--timeout' found; a similar argument exists: '--op-timeout'; to give up waiting for a busy lock after DUR, use '-w DUR' ('--wait DUR'); --op-timeout bounds each request to Redis (see 'rlock acquire --help')"
        );
        assert_eq!(
            line(&["exec", "-k", "x", "-c", "make all"]),
            "unexpected argument '-c' found; rlock runs a command without a shell, so flock's -c is: -- sh -c '…' (see 'rlock exec --help')"
        );
        assert_eq!(
            line(&["acquire", "-s", "-k", "x"]),
            "unexpected argument '-s' found; for a shared lock (flock's -s), use --shared (see 'rlock acquire --help')"
        );
        assert_eq!(
            line(&["exec", "-k", "x", "-1", "--", "true"]),
            "unexpected argument '-1' found; to pass '-1' as a value, use '-- -1' (see 'rlock exec --help')"
        );
    }

    #[test]
    fn the_help_page_is_the_subcommand_clap_reached() {
        // An option's value that names a subcommand is a value, not the subcommand.
        assert!(
            line(&["--prefix", "acquire", "inspect", "--bogus"])
                .ends_with("(see 'rlock inspect --help')")
        );
        // An error before the subcommand: its page all the same.
        assert!(
            line(&["--op-timeout", "2h", "acquire", "-k", "x"])
                .ends_with("(see 'rlock acquire --help')")
        );
        assert!(line(&["--bogus"]).ends_with("(see 'rlock --help')"));
    }

    #[test]
    fn a_message_of_several_lines_is_one_and_a_password_is_hidden() {
        let l = line(&["acquire", "-k", "x", "redis://:hunter2@db"]);
        assert!(!l.contains("hunter2") && !l.contains('\n'), "{l}");
        assert!(line(&["acquire", "-k", "a\nb"]).lines().count() == 1);
    }
}
