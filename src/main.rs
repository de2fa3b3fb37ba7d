// Rust's start-up is skipped: `rlock::runtime` does the part of it rlock needs, for less.
#![no_main]

use std::ffi::{CStr, OsStr, OsString, c_char, c_int};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;

use rlock::exit::Exit;

/// rlock's memory comes from a fixed arena first, the system's allocator after it (`rlock::arena`).
#[global_allocator]
static ALLOCATOR: rlock::arena::Arena = rlock::arena::Arena::new();

/// The C entry point: `argv` holds `argc` NUL-terminated arguments, the program's name first.
#[unsafe(no_mangle)]
extern "C" fn main(argc: c_int, argv: *const *const c_char) -> c_int {
    rlock::runtime::start();
    let args: Vec<OsString> = (0..usize::try_from(argc).unwrap_or(0))
        .map(|i| {
            // SAFETY: the C start-up passes `argc` valid pointers to NUL-terminated strings,
            // which live as long as the process.
            let arg = unsafe { CStr::from_ptr(*argv.add(i)) };
            OsStr::from_bytes(arg.to_bytes()).to_owned()
        })
        .collect();
    // A panic is reported by the panic hook, and exits 101 as it would with Rust's start-up.
    let code = std::panic::catch_unwind(|| run(&args)).unwrap_or(101);
    rlock::runtime::finish();
    c_int::from(code)
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
    rlock::runtime::finish();
    rlock::signals::die_by(sig);
    128u8.saturating_add(sig as u8)
}
