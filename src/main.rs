use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};
use rlock::exit::Exit;

fn main() -> ExitCode {
    rlock::names::pin_builtin_services();
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
            let args: Vec<_> = std::env::args_os().collect();
            let line = rlock::cli::usage::one_line(&e, &rlock::cli::Cli::command(), &args);
            eprintln!("rlock: {line}");
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

/// Dies of `sig`; should it not be fatal after all, exits 128+N as a shell would report it.
fn die_by(sig: nix::sys::signal::Signal) -> ExitCode {
    rlock::signals::die_by(sig);
    ExitCode::from(128u8.saturating_add(sig as u8))
}
