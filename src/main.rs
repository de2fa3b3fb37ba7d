use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match rlock::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            // One line, as for every other failure: clap's first line, without its "error: ".
            // Clap's message runs to its first blank line (a list of missing arguments, or a
            // value with a newline in it, continues on further lines): fold it into one.
            let text = e.render().to_string();
            let line = text
                .lines()
                .take_while(|l| !l.trim().is_empty())
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(" ");
            let line = line.strip_prefix("error: ").unwrap_or(&line);
            eprintln!("rlock: {line} (see 'rlock --help')");
            return ExitCode::from(rlock::exit::Code::Usage as u8);
        }
    };
    match rlock::run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            let code = rlock::exit::code_of(&err);
            // A failure that exits 0 (a closed pipe, a busy lock with -E 0) says nothing.
            if code != 0 {
                // One line: what happened and, where it helps, what to do.
                let msg = format!("{err:#}").replace('\n', " ");
                eprintln!("rlock: {msg}");
            }
            ExitCode::from(code)
        }
    }
}
