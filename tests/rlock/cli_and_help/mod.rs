//! The command line: global options, usage errors and bad input (exit 2, one line, a hint),
//! and the generated completions and man pages.

mod bad_input;
mod generated;
mod options;
