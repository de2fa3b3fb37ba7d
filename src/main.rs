use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use rlock::exit::Exit;

/// Runs before Rust's start-up, which opens /dev/null on a standard descriptor that was closed
/// (so that rlock's first socket cannot take its number): notes which ones were, so that
/// `acquire >&-` can tell that its token would go nowhere. The C library runs `.init_array`'s
/// functions before `main`, as Rust's own start-up relies on.
#[used]
#[unsafe(link_section = ".init_array")]
static NOTE_CLOSED_DESCRIPTORS: extern "C" fn() = note_closed_descriptors;

extern "C" fn note_closed_descriptors() {
    rlock::output::note_closed_descriptors();
}

fn main() -> ExitCode {
    for name in rlock::cli::empty_variables() {
        // SAFETY: the first thing rlock does; no other thread exists yet, so none reads the
        // environment meanwhile.
        unsafe { std::env::remove_var(name) };
    }
    let args: Vec<OsString> = std::env::args_os().collect();
    ExitCode::from(run(&args))
}

/// rlock's exit code for the command line `args`.
fn run(args: &[OsString]) -> u8 {
    let cli = match rlock::cli::parse(args) {
        Ok(cli) => cli,
        // --help, --version: a write that fails (`--help >/dev/full`, `>&-`) is an error; a
        // reader that went (`--help | head`) is not.
        Err((e, _)) if !e.use_stderr() => {
            let printed = rlock::output::stdout()
                .map(drop)
                .and_then(|()| e.print())
                .and_then(|()| std::io::stdout().flush());
            return match printed {
                Err(err) if err.kind() != std::io::ErrorKind::BrokenPipe => {
                    rlock::output::message(&format!("cannot write to stdout: {err}"));
                    rlock::exit::Code::Internal as u8
                }
                _ => rlock::exit::Code::Ok as u8,
            };
        }
        // `rlock` alone.
        Err((e, _))
            if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand =>
        {
            rlock::output::message(&format!(
                "a subcommand is needed: {} (see 'rlock --help')",
                rlock::cli::subcommand_names()
            ));
            return rlock::exit::Code::Usage as u8;
        }
        Err((e, command)) => {
            let line = rlock::cli::usage::one_line(&e, &command, args);
            rlock::output::message(&line);
            return rlock::exit::Code::Usage as u8;
        }
    };
    let verbose = cli.global.verbose;
    let busy = rlock::busy_code(&cli);
    // The one place rlock ends: with a code, or by the signal its command (or its wait) died of.
    match rlock::run(cli) {
        Ok(Exit::Code(code)) => code,
        Ok(Exit::Signal(sig)) => die_by(sig),
        Err(err) => {
            let code = rlock::exit::code_of(&err, busy);
            // A failure that exits 0 (a busy lock with -E 0) says why only with -v; a closed
            // pipe never does.
            if code != 0 || (verbose && !rlock::exit::is_broken_pipe(&err)) {
                // One line: what happened and, where it helps, what to do.
                let msg = format!("{err:#}").replace('\n', " ");
                rlock::output::message(&msg);
            }
            match rlock::exit::dies_of(&err) {
                Some(sig) => die_by(sig),
                None => code,
            }
        }
    }
}

/// Dies of `sig`; should it not be fatal after all, exits 128+N as a shell would report it.
fn die_by(sig: nix::sys::signal::Signal) -> u8 {
    let _ = std::io::Write::flush(&mut std::io::stdout());
    rlock::signals::die_by(sig);
    128u8.saturating_add(sig as u8)
}
