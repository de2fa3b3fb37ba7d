//! The options every subcommand accepts: where Redis is and how to reach it, the lock's key
//! prefix, and how much rlock says.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueHint};

use super::values::{duration, op_timeout};

/// The Redis rlock uses when no URL is given.
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

/// What rlock puts before a lock's name to make its Redis key.
pub const DEFAULT_PREFIX: &str = "rlock:";

/// Options every subcommand accepts, before or after the subcommand's name.
#[derive(Debug, Args, Clone)]
#[command(next_help_heading = "Global options")]
pub struct Global {
    /// Redis endpoint: redis://, rediss:// (TLS) or unix://. Repeat it (3, 5, ...) for a Redlock
    /// quorum over independent masters; RLOCK_URL takes them comma-separated.
    #[arg(
        short,
        long = "url",
        value_name = "URL",
        env = "RLOCK_URL",
        hide_env_values = true,
        value_hint = ValueHint::Other,
        default_value = DEFAULT_URL,
        global = true
    )]
    pub urls: Vec<String>,

    /// The URLs are Redis Cluster seed nodes.
    #[arg(
        long,
        env = "RLOCK_CLUSTER",
        hide_env_values = true,
        global = true,
        action = clap::ArgAction::SetTrue,
        value_parser = clap::builder::BoolishValueParser::new()
    )]
    pub cluster: bool,

    /// The URLs are Sentinels; lock on the master they call NAME.
    #[arg(
        long,
        value_name = "NAME",
        env = "RLOCK_SENTINEL",
        hide_env_values = true,
        value_hint = ValueHint::Other,
        global = true
    )]
    pub sentinel: Option<String>,

    /// Read the Redis password from this file (first line), again for every new connection: a
    /// password rotated in the file is used from the next connection on. Without it,
    /// $RLOCK_PASSWORD, then $REDISCLI_AUTH; a password in the URL itself wins over all of them.
    #[arg(
        long,
        value_name = "PATH",
        env = "RLOCK_PASSWORD_FILE",
        hide_env_values = true,
        global = true
    )]
    pub password_file: Option<PathBuf>,

    /// Run CMD with `sh -c` for every new connection and log in with what it prints (one line):
    /// a short-lived token (a managed service's IAM token) is fresh at each connection. It must
    /// exit 0 within --connect-timeout (else it is killed, exit 77); its output is never shown
    /// or stored. Not with --password-file, $RLOCK_PASSWORD or $REDISCLI_AUTH.
    #[arg(
        long,
        value_name = "CMD",
        env = "RLOCK_PASSWORD_COMMAND",
        hide_env_values = true,
        value_hint = ValueHint::CommandString,
        conflicts_with = "password_file",
        global = true
    )]
    pub password_command: Option<String>,

    /// ACL user to log in as, with the password from --password-file, $RLOCK_PASSWORD or
    /// $REDISCLI_AUTH (like redis-cli --user). It applies to every server whose URL names no
    /// user, and so to the master the Sentinels name (the Sentinels themselves take only their
    /// URL's own credentials).
    #[arg(
        long,
        value_name = "USER",
        env = "RLOCK_USER",
        hide_env_values = true,
        value_hint = ValueHint::Other,
        global = true
    )]
    pub user: Option<String>,

    /// CA certificate (PEM) to verify rediss:// servers with, instead of the system roots.
    #[arg(
        long,
        value_name = "PEM",
        env = "RLOCK_TLS_CA",
        hide_env_values = true,
        global = true
    )]
    pub tls_ca: Option<PathBuf>,

    /// Client certificate (PEM) for rediss:// servers that ask for one.
    #[arg(
        long,
        value_name = "PEM",
        env = "RLOCK_TLS_CERT",
        hide_env_values = true,
        global = true
    )]
    pub tls_cert: Option<PathBuf>,

    /// Private key (PEM) of --tls-cert.
    #[arg(
        long,
        value_name = "PEM",
        env = "RLOCK_TLS_KEY",
        hide_env_values = true,
        global = true
    )]
    pub tls_key: Option<PathBuf>,

    /// Prefix of every Redis key: the lock KEY lives at PREFIX+KEY. Use --prefix '' to share a
    /// lock with another Redis client (redis-py Lock, redsync, node-redlock).
    #[arg(
        long,
        value_name = "P",
        env = "RLOCK_PREFIX",
        hide_env_values = true,
        value_hint = ValueHint::Other,
        default_value = DEFAULT_PREFIX,
        global = true
    )]
    pub prefix: String,

    /// Connect and per-command timeout, each reply bounded as a whole (its first byte to its
    /// last): a dead or trickling server costs at most this per attempt.
    #[arg(
        long,
        value_name = "DUR",
        env = "RLOCK_OP_TIMEOUT",
        hide_env_values = true,
        value_hint = ValueHint::Other,
        default_value = "2s",
        value_parser = op_timeout,
        allow_hyphen_values = true,
        global = true
    )]
    pub op_timeout: Duration,

    /// How long a run that has not reached Redis yet keeps trying to, before it exits 69: a
    /// mistake in a URL never hangs a cron job. Once Redis has answered, a wait rides out
    /// outages for as long as the wait lasts.
    #[arg(
        long,
        value_name = "DUR",
        env = "RLOCK_CONNECT_TIMEOUT",
        hide_env_values = true,
        value_hint = ValueHint::Other,
        default_value = "30s",
        value_parser = duration,
        allow_hyphen_values = true,
        global = true
    )]
    pub connect_timeout: Duration,

    /// After a grant and after each renewal, wait (Redis WAIT, within --op-timeout) until N
    /// replicas have the write. A grant fewer replicas acknowledged is given back: a wait tries
    /// again (a failover's new master gets its replicas back), -n exits 69; a renewal fewer
    /// acknowledged counts as failed, and the lease deadline rules.
    #[arg(
        long,
        value_name = "N",
        env = "RLOCK_REPLICAS",
        hide_env_values = true,
        value_hint = ValueHint::Other,
        default_value_t = 0,
        value_parser = clap::value_parser!(u32).range(0..=1000),
        global = true
    )]
    pub replicas: u32,

    /// Say what rlock does, on stderr: the servers, a wait (who holds the lock, your place in
    /// line, then at least once a minute), the grant, renewals that failed.
    #[arg(short, long, global = true, conflicts_with = "quiet")]
    pub verbose: bool,

    /// Say nothing but errors (inspect: print nothing, answer with the exit code).
    #[arg(short, long, global = true)]
    pub quiet: bool,

    /// Also write each step of a lock as one JSON object a line, for a log pipeline: waiting,
    /// acquired, renewal failed, and how the run ended (docs/inspect.md, "Events"). To stderr,
    /// beside the usual lines, or to --events-to.
    #[arg(
        long,
        value_name = "FORMAT",
        env = "RLOCK_EVENTS",
        hide_env_values = true,
        global = true,
        value_parser = ["json"]
    )]
    pub events: Option<String>,

    /// Where --events go instead of stderr: a file, appended to (created if missing; never
    /// through a symbolic link), or /dev/fd/N for a descriptor the caller opened.
    #[arg(
        long,
        value_name = "PATH",
        env = "RLOCK_EVENTS_TO",
        hide_env_values = true,
        value_hint = ValueHint::FilePath,
        requires = "events",
        global = true
    )]
    pub events_to: Option<PathBuf>,
}
