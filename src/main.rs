use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = rlock::cli::Cli::parse();
    match rlock::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            let code = rlock::exit::code_of(&err);
            if !rlock::exit::is_broken_pipe(&err) {
                // One line: what happened and, where it helps, what to do.
                let msg = format!("{err:#}").replace('\n', " ");
                eprintln!("rlock: {msg}");
            }
            ExitCode::from(code)
        }
    }
}
