//! `rlock inspect --watch`: the locks again every interval, until a signal ends it.
//!
//! On a terminal the table is redrawn in place at every look, like `watch rlock inspect` but
//! without the flicker: the cursor goes home and each line overwrites the last frame's (the
//! rest of a line, and of the screen, cleared after it), never a blank screen in between.
//! Elsewhere (a pipe, a file) and with `--json`, the locks are printed again only when they
//! changed (`super::change_key`): a log of changes, not of ticks.

use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Result;
use nix::poll::{PollFd, PollFlags};
use nix::sys::time::TimeSpec;

use super::{change_key, json_doc, nothing_held, read, table};
use crate::cli::InspectArgs;
use crate::cmd::Context;
use crate::exit::{Exit, Failure};
use crate::signals::Signals;

pub(super) fn run(ctx: &Context, args: &InspectArgs, every: Duration) -> Result<Exit> {
    if ctx.global.quiet {
        return Err(Failure::Usage(
            "--watch shows the locks as they change, and -q would show nothing: drop -q (to ask \"is it locked?\", use 'rlock inspect -q -k KEY' without --watch)".into(),
        )
        .into());
    }
    // From here on a signal ends the watch between two looks, never halfway through a frame.
    let signals = Signals::for_wait()?;
    let locker = ctx.locker()?;
    let screen = !args.json && std::io::stdout().is_terminal();
    let mut shown: Option<String> = None;
    let mut failing: Option<String> = None;
    loop {
        let started = Instant::now();
        match read(ctx, &locker, args) {
            Ok((locks, _)) => {
                let key = change_key(&locks);
                if screen {
                    let mut body = Vec::new();
                    if locks.is_empty() {
                        writeln!(body, "{}", nothing_held(ctx))?;
                    } else {
                        // The screen is the watch's own, notes and all: a note written to
                        // stderr on the same terminal would be overwritten at the next frame.
                        table::write(&mut body, &locks, !args.keys.is_empty(), true)?;
                        let notes = table::notes(&locks, &ctx.rlock_line());
                        if !notes.is_empty() {
                            writeln!(body)?;
                            for note in notes {
                                writeln!(body, "{note}")?;
                            }
                        }
                    }
                    draw(&header(every), &String::from_utf8_lossy(&body))?;
                } else {
                    if failing.is_some() {
                        ctx.note(format_args!("Redis answers again; still watching"));
                    }
                    if shown.as_ref() != Some(&key) {
                        print(ctx, args, &locks, shown.is_some())?;
                    }
                }
                shown = Some(key);
                failing = None;
            }
            // The first look fails as `inspect` does (a wrong URL, a refused password).
            Err(e) if shown.is_none() && failing.is_none() => return Err(e),
            Err(e) => {
                // Later ones (an outage) are shown, and the watch goes on.
                let msg = format!("{e:#}");
                if screen {
                    draw(&header(every), &format!("rlock: {msg}\n"))?;
                } else if failing.as_ref() != Some(&msg) {
                    ctx.note(format_args!("{msg}; still watching"));
                }
                failing = Some(msg);
            }
        }
        if let Some(end) = pause(&signals, started + every) {
            return Ok(end);
        }
    }
}

/// Prints the locks once more, where stdout is not a terminal: a compact JSON line, or the
/// table after a blank line. Stdout carries only the tables (with nothing held, a table of no
/// rows: its header); what that means and the stale holders' notes go to stderr.
fn print(
    ctx: &Context,
    args: &InspectArgs,
    locks: &[crate::lock::LockInfo],
    again: bool,
) -> Result<()> {
    if args.json {
        crate::output::json(&json_doc(args, locks))?;
    } else {
        let mut out = crate::output::stdout()?;
        if again {
            writeln!(out)?;
        }
        let terminal = std::io::stdout().is_terminal();
        table::write(&mut out, locks, !args.keys.is_empty(), terminal)?;
        out.flush()?;
    }
    if !args.json {
        if locks.is_empty() {
            ctx.note(format_args!("{}", nothing_held(ctx)));
        }
        for note in table::notes(locks, &ctx.rlock_line()) {
            ctx.note(format_args!("{note}"));
        }
    }
    Ok(())
}

/// The line above the table on a terminal: what is shown, how often, and when it was read.
fn header(every: Duration) -> String {
    format!(
        "rlock inspect, every {}: {}",
        crate::lock::human_duration(every),
        humantime::format_rfc3339_seconds(SystemTime::now())
    )
}

/// Draws one frame over the last one: from the top left, each line followed by "clear to the
/// end of the line", then "clear to the end of the screen". Lines are cut to the terminal's
/// width and the frame to its height, so that nothing wraps or scrolls and home stays the top
/// of the frame.
fn draw(header: &str, body: &str) -> std::io::Result<()> {
    let (rows, cols) = terminal_size().unwrap_or((24, 80));
    let mut frame = String::from("\x1b[H");
    let lines = std::iter::once(header)
        .chain(std::iter::once(""))
        .chain(body.lines());
    for line in lines.take(rows.saturating_sub(1).max(1)) {
        frame.extend(line.chars().take(cols.saturating_sub(1).max(1)));
        frame.push_str("\x1b[K\n");
    }
    frame.push_str("\x1b[J");
    let mut out = std::io::stdout().lock();
    out.write_all(frame.as_bytes())?;
    out.flush()
}

/// The terminal's rows and columns, as stdout's terminal says.
fn terminal_size() -> Option<(usize, usize)> {
    let (terminal_size::Width(cols), terminal_size::Height(rows)) =
        terminal_size::terminal_size_of(std::io::stdout())?;
    (rows > 0 && cols > 0).then(|| (usize::from(rows), usize::from(cols)))
}

/// Sleeps until `until`, or until the watch should end: a signal came (rlock dies of it), or
/// stdout's reader went. The signalfd is polled, so Ctrl-C ends the watch at once, not at the
/// next look. So is stdout: when the reader of a pipe goes (`rlock inspect --watch | head -3`),
/// the watch ends then, not at the next change it would have written, and exits 0, as a write
/// into the closed pipe would (`crate::exit::is_broken_pipe`).
fn pause(signals: &Signals, until: Instant) -> Option<Exit> {
    let stdout = std::io::stdout();
    loop {
        if let Some(sig) = signals.try_next() {
            return Some(Exit::Signal(sig));
        }
        let now = Instant::now();
        if now >= until {
            return None;
        }
        // No events asked of stdout: poll still reports POLLERR (a pipe with no reader left)
        // and POLLHUP (a socket shut down), and nothing for a file or a terminal at work.
        let mut fds = [
            PollFd::new(signals.as_fd(), PollFlags::POLLIN),
            PollFd::new(stdout.as_fd(), PollFlags::empty()),
        ];
        let left = TimeSpec::from_duration(until - now);
        let _ = nix::poll::ppoll(&mut fds, Some(left), None);
        let gone = PollFlags::POLLERR | PollFlags::POLLHUP;
        if fds[1].revents().is_some_and(|r| r.intersects(gone)) {
            return Some(Exit::Code(0));
        }
    }
}
