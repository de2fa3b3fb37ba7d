use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = match rlock::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            // One line, as for every other failure: clap's first line, without its "error: ".
            // Clap lists missing arguments on indented lines after the first: fold them in.
            let text = e.render().to_string();
            let mut lines = text.lines();
            let mut line = lines.next().unwrap_or("invalid usage").to_string();
            for more in lines.take_while(|l| l.starts_with(' ')) {
                line.push(' ');
                line.push_str(more.trim());
            }
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
