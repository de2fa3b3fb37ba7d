//! The command-line interface: every option rlock has (the README and docs/ describe them), and
//! nothing else.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueHint};
use nix::sys::signal::Signal;

mod global;
mod help;
mod parse;
pub mod usage;
mod values;
pub use global::{DEFAULT_PREFIX, DEFAULT_URL, Global};
pub use parse::{SUBCOMMANDS, empty_variables, parse, subcommand_names};
use values::{
    SignalParser, duration, non_empty, once_window, once_without_command, positive_duration,
    ttl_duration, watch_interval,
};

/// A Redis-backed distributed lock for shell scripts, cron jobs and CI pipelines.
///
/// rlock takes a lock in Redis with SET key token NX PX ttl, and releases and renews it only
/// while its owner token still holds it. `rlock exec` runs a command under the lock, renews the
/// lock in the background, and stops the command before the lock can expire if Redis stops
/// answering.
#[derive(Debug, Parser)]
#[command(name = "rlock", version, after_help = help::MAIN, max_term_width = 100)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Take the lock and return; it lives for --ttl unless renewed or released.
    #[command(after_help = help::ACQUIRE)]
    Acquire(AcquireArgs),

    /// Give the lock back, if the token still owns it (or break it with --force).
    #[command(after_help = help::RELEASE)]
    Release(ReleaseArgs),

    /// Extend the lock, if the token still owns it.
    #[command(after_help = help::RENEW)]
    Renew(RenewArgs),

    /// Show who holds locks: the named KEYs, or every lock under the prefix.
    #[command(after_help = help::INSPECT)]
    Inspect(InspectArgs),

    /// Run a command under the lock, renewing it while the command runs.
    #[command(after_help = help::EXEC)]
    Exec(ExecArgs),
}

#[derive(Debug, Args, Clone)]
pub struct KeyArg {
    /// Name of the lock (the Redis key is PREFIX+KEY).
    #[arg(short, long, value_name = "KEY", value_parser = non_empty("key"), value_hint = ValueHint::Other)]
    pub key: String,
}

/// How long to wait for a lock someone else holds.
#[derive(Debug, Args, Clone)]
pub struct WaitArgs {
    /// Give up after waiting this long [default: wait as long as it takes].
    #[arg(short, long, value_name = "DUR", value_parser = duration, allow_hyphen_values = true, value_hint = ValueHint::Other)]
    pub wait: Option<Duration>,

    /// Try once and do not wait.
    #[arg(short = 'n', long, conflicts_with = "wait")]
    pub no_wait: bool,

    /// Exit code when the lock is busy [default: 75]; with `exec --once-per`, also when the
    /// window's run is already done [default there: 0].
    #[arg(
        short = 'E',
        long,
        value_name = "CODE",
        value_hint = ValueHint::Other,
        value_parser = clap::value_parser!(u8),
        // `-E -1` is a value out of range, not a stray flag.
        allow_negative_numbers = true
    )]
    pub conflict_exit_code: Option<u8>,
}

impl WaitArgs {
    /// The exit code of a busy lock: -E, or 75.
    pub fn busy_code(&self) -> u8 {
        self.conflict_exit_code.unwrap_or(75)
    }
}

#[derive(Debug, Args)]
pub struct AcquireArgs {
    #[command(flatten)]
    pub key: KeyArg,

    /// How long the lock lives unless renewed or released.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = ttl_duration, allow_hyphen_values = true, value_hint = ValueHint::Other)]
    pub ttl: Duration,

    #[command(flatten)]
    pub wait: WaitArgs,

    #[command(flatten)]
    pub sharing: SharingArgs,

    #[command(flatten)]
    pub label: LabelArg,

    #[command(flatten)]
    pub hold: HoldArg,

    /// Refused: a window is done when its command succeeds (`rlock exec --once-per`).
    #[arg(long, value_name = "DUR", hide = true, value_parser = once_without_command, allow_hyphen_values = true, value_hint = ValueHint::Other)]
    pub once_per: Option<Duration>,

    /// Print shell assignments (RLOCK_KEY, RLOCK_TOKEN, RLOCK_FENCE) for `eval`.
    #[arg(long, conflicts_with = "json")]
    pub export: bool,

    /// Print one JSON object: key, token, fence, ttl_ms.
    #[arg(long)]
    pub json: bool,
}

/// A lock for several holders at once.
#[derive(Debug, Args, Clone)]
pub struct SharingArgs {
    /// Up to N holders at once, like `consul lock -n N` (a counting semaphore); every holder of
    /// the key must ask the same N. --limit 1 is an ordinary lock.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), value_hint = ValueHint::Other)]
    pub limit: Option<u32>,

    /// A shared (read) lock, like `flock -s`: any number of shared holders, none while an
    /// exclusive holder has the key; shared requests queue behind a waiting exclusive one.
    #[arg(long, conflicts_with = "limit")]
    pub shared: bool,
}

#[derive(Debug, Args, Clone)]
pub struct LabelArg {
    /// What `inspect` and the history show as the holder's description instead of its
    /// program's name (a CI job's URL, say).
    #[arg(long, value_name = "TEXT", env = "RLOCK_LABEL", hide_env_values = true, value_hint = ValueHint::Other)]
    pub label: Option<String>,

    /// Record the holder's whole command line, its secrets masked, rather than only its
    /// program's name (`mysql`), the default: any user of the same Redis can read what is
    /// recorded with `rlock inspect`. --label still wins.
    #[arg(
        long,
        env = "RLOCK_RECORD_ARGS",
        hide_env_values = true,
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub record_args: bool,
}

/// How long the lock stays taken after its grant, whatever the holder does.
#[derive(Debug, Args, Clone)]
pub struct HoldArg {
    /// Nobody else gets the lock until DUR after the grant, by Redis's clock, even if the holder
    /// releases it sooner. Keep DUR below the schedule's period less the hosts' largest firing
    /// skew: a hold as long as the period makes the next firing find it held, and skip. To run
    /// the same cron line on several hosts once per period, --once-per counts windows and drops
    /// none. `release --force` still frees it. The hold is kept in Redis: a single Redis that
    /// restarts empty forgets it, and the next firing runs the job again.
    #[arg(
        long,
        value_name = "DUR",
        env = "RLOCK_HOLD_AT_LEAST",
        hide_env_values = true,
        conflicts_with_all = ["limit", "shared"],
        value_parser = ttl_duration,
        allow_hyphen_values = true,
        value_hint = ValueHint::Other
    )]
    pub hold_at_least: Option<Duration>,
}

#[derive(Debug, Args, Clone)]
pub struct TokenArg {
    /// The owner token `acquire` printed (a UUID; not the fencing token RLOCK_FENCE).
    #[arg(long, value_name = "T", env = "RLOCK_TOKEN", hide_env_values = true, value_hint = ValueHint::Other)]
    pub token: Option<String>,
}

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    #[command(flatten)]
    pub key: KeyArg,

    #[command(flatten)]
    pub token: TokenArg,

    /// Break the lock whoever holds it, and say who did.
    #[arg(long)]
    pub force: bool,

    /// The history: the hold that ends is recorded there (see `inspect --history`).
    #[command(flatten, next_help_heading = "History")]
    pub history: HistoryArgs,
}

#[derive(Debug, Args)]
pub struct RenewArgs {
    #[command(flatten)]
    pub key: KeyArg,

    #[command(flatten)]
    pub token: TokenArg,

    /// New time to live; a renewal never shortens the lease [default: the TTL the lock was last
    /// given].
    #[arg(long, value_name = "DUR", value_parser = ttl_duration, allow_hyphen_values = true, value_hint = ValueHint::Other)]
    pub ttl: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// Locks to show (repeatable); without any, list every lock under the prefix.
    #[arg(short, long = "key", value_name = "KEY", value_parser = non_empty("key"), value_hint = ValueHint::Other)]
    pub keys: Vec<String>,

    /// Print JSON: one object for a single -k, an array of objects otherwise.
    #[arg(long)]
    pub json: bool,

    /// Show the locks again every DUR until interrupted; elsewhere than on a terminal, and with
    /// --json, only when they changed [default: 2s; at least 100ms].
    #[arg(
        long,
        value_name = "DUR",
        num_args = 0..=1,
        default_missing_value = "2s",
        value_hint = ValueHint::Other,
        value_parser = watch_interval
    )]
    pub watch: Option<Duration>,

    /// Show the runs on record instead, newest first: the KEYs' last runs (-n of them), or,
    /// without -k, the last run of every lock under the prefix.
    #[arg(long, conflicts_with = "watch")]
    pub history: bool,

    /// With --history: draw the runs along time, one row per host, in 80 columns (runs, waits,
    /// skipped windows, busy and failed runs), so a gap or a pile-up shows at a glance.
    #[arg(long, requires = "history", conflicts_with = "json")]
    pub timeline: bool,

    /// How many runs of each KEY --history shows.
    #[arg(
        short = 'n',
        long,
        value_name = "COUNT",
        requires = "history",
        value_hint = ValueHint::Other,
        default_value_t = 10,
        value_parser = clap::value_parser!(u32).range(1..=100_000)
    )]
    pub count: u32,
}

/// What `exec` keeps of each run: the history in Redis beside the lock, and a metrics file.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "History and metrics")]
pub struct RecordArgs {
    #[command(flatten)]
    pub history: HistoryArgs,

    /// At the end of the run, write this key's last run as Prometheus text (node_exporter's
    /// textfile collector), keeping the other keys' lines in the file. PATH must be a regular
    /// file or none: a link is never followed.
    #[arg(
        long,
        value_name = "PATH",
        env = "RLOCK_METRICS_FILE",
        hide_env_values = true,
        value_hint = ValueHint::FilePath
    )]
    pub metrics_file: Option<PathBuf>,
}

/// The lock's history in Redis: how much of it a run (`exec`) or a hold (`acquire` ... `release`)
/// that ends keeps.
#[derive(Debug, Args, Clone)]
pub struct HistoryArgs {
    /// How many runs the lock's history in Redis keeps (see `inspect --history`); 0 records
    /// nothing.
    #[arg(
        long,
        value_name = "N",
        env = "RLOCK_HISTORY_LIMIT",
        hide_env_values = true,
        value_hint = ValueHint::Other,
        default_value_t = 100,
        value_parser = clap::value_parser!(u32).range(0..=100_000)
    )]
    pub history_limit: u32,

    /// How long the history lives after its last run.
    #[arg(
        long,
        value_name = "DUR",
        env = "RLOCK_HISTORY_TTL",
        hide_env_values = true,
        value_hint = ValueHint::Other,
        default_value = "30d",
        value_parser = ttl_duration,
        allow_hyphen_values = true
    )]
    pub history_ttl: Duration,
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    #[command(flatten)]
    pub key: KeyArg,

    /// Lease time: how long the lock outlives a renewal that never comes.
    #[arg(long, value_name = "DUR", default_value = "30s", value_parser = ttl_duration, allow_hyphen_values = true, value_hint = ValueHint::Other)]
    pub ttl: Duration,

    #[command(flatten)]
    pub wait: WaitArgs,

    #[command(flatten)]
    pub sharing: SharingArgs,

    /// How often to renew the lock [default: TTL/3].
    #[arg(long, value_name = "DUR", value_parser = ttl_duration, allow_hyphen_values = true, value_hint = ValueHint::Other)]
    pub renew_every: Option<Duration>,

    /// Signal the command's process group gets when the lock is lost (name or number).
    #[arg(long, value_name = "SIG", default_value = "TERM", value_parser = SignalParser, hide_possible_values = true)]
    pub lost_signal: Signal,

    /// Time between --lost-signal and SIGKILL when renewals keep failing [default: TTL/4].
    #[arg(long, value_name = "DUR", value_parser = duration, allow_hyphen_values = true, value_hint = ValueHint::Other)]
    pub grace: Option<Duration>,

    /// Stop the command after DUR, as timeout(1) does: --lost-signal to everything it started,
    /// SIGKILL --grace later; the lock is given back and rlock exits 124.
    #[arg(
        long,
        value_name = "DUR",
        env = "RLOCK_TIMEOUT",
        hide_env_values = true,
        value_parser = positive_duration,
        allow_hyphen_values = true,
        value_hint = ValueHint::Other
    )]
    pub timeout: Option<Duration>,

    #[command(flatten)]
    pub hold: HoldArg,

    /// At most one successful run per window of DUR, and a run in every window in which any
    /// host fired: windows are counted by Redis's clock from the Unix epoch (every host agrees
    /// which window "now" is), and a run that finds its window's work done exits 0 at once
    /// (-E chooses another code) without running CMD. A failed run leaves its window to the
    /// next firing. For the same crontab line on several hosts: see `--hold-at-least` for why
    /// not that.
    #[arg(
        long,
        value_name = "DUR",
        env = "RLOCK_ONCE_PER",
        hide_env_values = true,
        conflicts_with_all = ["limit", "shared"],
        value_parser = once_window,
        allow_hyphen_values = true,
        value_hint = ValueHint::Other
    )]
    pub once_per: Option<Duration>,

    /// Newest wins: this run, joining the line, displaces every older waiter of the key that
    /// asked for --newest too; each exits 79 at once, naming this run. Exclusive locks on one
    /// Redis, Sentinel or Cluster (refused with several --url).
    #[arg(
        long,
        env = "RLOCK_NEWEST",
        hide_env_values = true,
        conflicts_with_all = ["limit", "shared"],
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub newest: bool,

    /// As --newest, and a holder that ran with --cancel-running is stopped too: its command
    /// gets --lost-signal (SIGKILL --grace later), its rlock gives the lock back and exits 79,
    /// and the lock goes to the newest waiter. A holder that did not ask for it runs on.
    #[arg(
        long,
        env = "RLOCK_CANCEL_RUNNING",
        hide_env_values = true,
        conflicts_with_all = ["limit", "shared"],
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub cancel_running: bool,

    #[command(flatten)]
    pub label: LabelArg,

    /// How everything the command starts is kept under the lock: `auto` runs it in a cgroup v2
    /// of its own where rlock may make one (root, or a delegated systemd slice), else in the
    /// process tree below rlock's guardian; `tree` never makes a cgroup; `cgroup` makes one or
    /// fails (78). `-v` says which is in use.
    #[arg(
        long,
        value_name = "HOW",
        env = "RLOCK_CONTAIN",
        hide_env_values = true,
        default_value = "auto",
        value_enum
    )]
    pub contain: crate::supervise::Containment,

    #[command(flatten)]
    pub record: RecordArgs,

    /// The command and its arguments, run directly (no shell).
    #[arg(
        value_name = "CMD",
        value_hint = ValueHint::CommandWithArguments,
        required = true,
        num_args = 1..,
        trailing_var_arg = true
    )]
    pub command: Vec<std::ffi::OsString>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
