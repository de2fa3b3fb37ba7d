use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use rlock::exit::Exit;

fn main() -> ExitCode {
    let mut command = rlock::cli::Cli::command();
    let parsed = command
        .try_get_matches_from_mut(std::env::args_os())
        .and_then(|mut matches| rlock::cli::Cli::from_arg_matches_mut(&mut matches));
    // Freeing clap's description of every subcommand and option, one allocation at a time,
    // costs more instructions than connecting to Redis (callgrind); the process ends soon and
    // takes it all back at once.
    std::mem::forget(command);
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        // `rlock` alone.
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            eprintln!(
                "rlock: a subcommand is needed: acquire, release, renew, inspect or exec (see 'rlock --help')"
            );
            return ExitCode::from(rlock::exit::Code::Usage as u8);
        }
        Err(e) => {
            eprintln!(
                "rlock: {}",
                usage_error(&e.render().to_string(), &rlock::cli::Cli::command())
            );
            return ExitCode::from(rlock::exit::Code::Usage as u8);
        }
    };
    let verbose = cli.global.verbose;
    // The one place rlock ends: with a code, or by the signal its command (or its wait) died of.
    match rlock::run(cli) {
        Ok(Exit::Code(code)) => ExitCode::from(code),
        Ok(Exit::Signal(sig)) => die_by(sig),
        Err(err) => {
            let code = rlock::exit::code_of(&err);
            // A failure that exits 0 (a busy lock with -E 0) says why only with -v; a closed
            // pipe never does.
            if code != 0 || (verbose && !rlock::exit::is_broken_pipe(&err)) {
                // One line: what happened and, where it helps, what to do.
                let msg = format!("{err:#}").replace('\n', " ");
                eprintln!("rlock: {msg}");
            }
            match rlock::exit::dies_of(&err) {
                Some(sig) => die_by(sig),
                None => ExitCode::from(code),
            }
        }
    }
}

/// Clap's error as one line, as for every other failure: its message without "error: ", its
/// tip ("a similar argument exists: '--ttl'"), and the help page of the subcommand its usage
/// line names, or else the first of `command`'s subcommands on the command line. The message
/// runs to its first blank line (a list of missing arguments, or a value with a newline in it,
/// continues on further lines): it is folded into one.
fn usage_error(text: &str, command: &clap::Command) -> String {
    let mut line = text
        .lines()
        .take_while(|l| !l.trim().is_empty())
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(" ");
    if let Some(rest) = line.strip_prefix("error: ") {
        line = rest.to_string();
    }
    for tip in text.lines().filter_map(|l| l.trim().strip_prefix("tip: ")) {
        line.push_str("; ");
        line.push_str(tip);
    }
    let sub = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Usage: rlock "))
        .and_then(|rest| rest.split_whitespace().next())
        .filter(|w| w.chars().all(|c| c.is_ascii_lowercase()))
        .map(str::to_string)
        .or_else(|| {
            // args_os: an argument that is not UTF-8 must not panic here.
            std::env::args_os()
                .skip(1)
                .take_while(|a| a != "--")
                .filter_map(|a| a.into_string().ok())
                .find(|a| command.find_subcommand(a).is_some())
        });
    // Clap quotes the argument it could not place, which may be a URL with a password.
    let line = rlock::redact::redact_text(&line);
    match sub {
        Some(sub) => format!("{line} (see 'rlock {sub} --help')"),
        None => format!("{line} (see 'rlock --help')"),
    }
}

/// Dies of `sig`; should it not be fatal after all, exits 128+N as a shell would report it.
fn die_by(sig: nix::sys::signal::Signal) -> ExitCode {
    rlock::signals::die_by(sig);
    ExitCode::from(128u8.saturating_add(sig as u8))
}
