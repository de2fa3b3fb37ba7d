//! rlock: a Redis-backed distributed lock for shell scripts, cron jobs and CI pipelines.
//!
//! The binary is a thin shell over this library; the library is public so that the man page and
//! completions can be generated from the same clap definition.
//!
//! The deterministic simulation of the protocol (tests/sim, a crate of the workspace) uses the
//! public API, and `lock::seams` for the rest: built with the feature `sim-seams` only.

pub mod backend;
pub mod cli;
pub mod clock;
pub mod cmd;
pub mod exit;
pub mod identity;
pub mod lock;
pub mod metrics;
pub mod names;
pub mod output;
pub mod redact;
pub mod signals;
pub mod supervise;
pub mod watchdog;

use anyhow::Result;

use cli::{Cli, Command};
use exit::Exit;

/// The code a busy lock exits with on this command line: `-E`'s, else 75. It is applied where
/// the exit code is chosen (`exit::code_of`), never carried down into the wait.
pub fn busy_code(cli: &Cli) -> u8 {
    match &cli.command {
        Command::Acquire(args) => args.wait.busy_code(),
        Command::Exec(args) => args.wait.busy_code(),
        _ => exit::Code::Busy as u8,
    }
}

/// Runs one parsed command line; Ok is how rlock ends, carried out by `main` alone.
pub fn run(cli: Cli) -> Result<Exit> {
    let ctx = cmd::Context::new(cli.global)?;
    // `--record-args` holds for every command line this run records (the calling shell's for
    // acquire, the command's for exec); without it only the program's name is recorded.
    let label = match &cli.command {
        Command::Acquire(args) => Some(&args.label),
        Command::Exec(args) => Some(&args.label),
        _ => None,
    };
    if label.is_some_and(|l| l.record_args) {
        redact::record_args();
    }
    match &cli.command {
        Command::Acquire(args) => cmd::acquire::run(&ctx, args).map(Exit::Code),
        Command::Release(args) => cmd::release::run(&ctx, args).map(Exit::Code),
        Command::Renew(args) => cmd::renew::run(&ctx, args).map(Exit::Code),
        Command::Inspect(args) => cmd::inspect::run(&ctx, args),
        Command::Exec(args) => cmd::exec::run(&ctx, args),
    }
}
