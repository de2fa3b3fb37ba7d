//! The prose sections of rlock(1), and the pages built from the clap definition.

// The prose sections of rlock(1)
// ---------------------------------------------------------------------------------------------

pub(super) struct Section {
    pub(super) title: &'static str,
    pub(super) blocks: &'static [Block],
}

pub(super) enum Block {
    /// A paragraph; `code` spans are set in bold.
    P(&'static str),
    /// A tagged paragraph: term, text.
    Item(&'static str, &'static str),
    /// Unfilled, indented text.
    Pre(&'static str),
}

use Block::{Item, P, Pre};

pub(super) const DURATIONS: Section = Section {
    title: "DURATIONS",
    blocks: &[P(
        "Every duration is a humantime string: `250ms`, `30s`, `5m`, `1h 30m`. A bare number is an \
         error (rlock says which unit is missing), and so is a zero or negative `--ttl`.",
    )],
};

pub(super) const EXIT_STATUS: Section = Section {
    title: "EXIT STATUS",
    blocks: &[
        P(
            "Every non-zero status that rlock chooses itself comes with a message on standard \
             error that says what happened and what to do.",
        ),
        Item(
            "`0`",
            "Success. For `exec`: the command's own status, passed through.",
        ),
        Item("`1`", "`inspect`: a named key is not held."),
        Item(
            "`2`",
            "Usage error: unknown flag, bad duration, missing or empty key, missing token (no \
             `--token` and no `$RLOCK_TOKEN`), missing command.",
        ),
        Item(
            "`65`",
            "The key holds something rlock cannot treat as a lock (e.g. a list); nothing was \
             changed.",
        ),
        Item(
            "`69`",
            "Redis unavailable: cannot connect, timed out, no quorum. A wait (no `-n`) rides \
             out an outage, trying again at most 1 s apart and saying on stderr when it began \
             and ended, and exits 69 only if the wait ends during it. A run that has never \
             reached Redis tries for `--connect-timeout` (30 s by default), then exits 69 naming \
             the address: a typo in a port never hangs a cron job.",
        ),
        Item(
            "`70`",
            "Internal error; also an `exec` whose guardian could not be started (no process \
             left under `ulimit -u`): the command is not started and the lock is given back.",
        ),
        Item(
            "`75`",
            "Lock busy: not acquired within `--wait` (or at once with `-n`). `-E` sets another \
             code.",
        ),
        Item(
            "`76`",
            "`exec`: the lock was lost while the command ran; the command was signalled.",
        ),
        Item(
            "`77`",
            "Not permitted: the token does not own the lock (`release`, `renew`), or Redis refused \
             the password or the user's ACL.",
        ),
        Item(
            "`78`",
            "Configuration error: malformed URL, unreadable TLS or password file (or one that \
             is not a regular file, or too large), a TLS certificate that is not trusted or not \
             for the host, a client certificate refused or missing; `inspect` without `-k` on \
             one node of a Redis Cluster without `--cluster`; `--contain cgroup` where no cgroup \
             can be made.",
        ),
        Item("`126`", "`exec`: the command is not executable."),
        Item("`127`", "`exec`: the command was not found."),
        Item(
            "`128+`N",
            "`exec`: the command died of signal N. Also: rlock was interrupted by signal N while \
             it waited for the lock.",
        ),
    ],
};

pub(super) const ENVIRONMENT: Section = Section {
    title: "ENVIRONMENT",
    blocks: &[
        P("An option given on the command line wins over its environment variable."),
        Item(
            "`RLOCK_URL`",
            "Redis endpoints, comma-separated, as `--url`. Default `redis://127.0.0.1:6379`.",
        ),
        Item("`RLOCK_CLUSTER`", "As `--cluster`."),
        Item("`RLOCK_SENTINEL`", "As `--sentinel`."),
        Item(
            "`RLOCK_PASSWORD`, `REDISCLI_AUTH`",
            "The Redis password, in this order, when neither the URL's userinfo \
             (`redis://:PASSWORD@host`) nor `--password-file` gives one. Passwords never appear \
             in a message: URLs are printed with the password replaced by `***`.",
        ),
        Item(
            "`RLOCK_TLS_CA`, `RLOCK_TLS_CERT`, `RLOCK_TLS_KEY`",
            "As `--tls-ca`, `--tls-cert`, `--tls-key`, for `rediss://` URLs.",
        ),
        Item(
            "`RLOCK_PREFIX`",
            "As `--prefix`: the Redis key of lock KEY is PREFIX+KEY. Default `rlock:`.",
        ),
        Item(
            "`RLOCK_OP_TIMEOUT`",
            "As `--op-timeout`: connect and per-command timeout. Default `2s`.",
        ),
        Item(
            "`RLOCK_CONNECT_TIMEOUT`",
            "As `--connect-timeout`: how long a run that has not reached Redis yet keeps trying \
             to. Default `30s`.",
        ),
        Item(
            "`RLOCK_TOKEN`",
            "The owner token `release` and `renew` use when `--token` is not given.",
        ),
        Item(
            "`RLOCK_KEY`, `RLOCK_TOKEN`, `RLOCK_FENCE`",
            "Set by `exec` in the command's environment, and by `eval \"$(rlock acquire --export \
             ...)\"` in the shell's: the lock's name, its owner token and its fencing token. An \
             `rlock acquire` or `rlock exec` of the same KEY that finds them is reentrant (see \
             REENTRANCY).",
        ),
        Item(
            "`USER`, `LOGNAME`",
            "The user name recorded with a lock for `inspect`, in this order; without either, \
             the user database's name for rlock's uid.",
        ),
    ],
};

pub(super) const SIGNALS: Section = Section {
    title: "SIGNALS",
    blocks: &[
        P(
            "`rlock exec` runs the command as a job: in a process group of its own, given the \
             terminal's foreground when rlock had it (as a shell does), and the terminal taken \
             back when the command ends. So Ctrl-C at a terminal reaches the command's group \
             once, and not rlock.",
        ),
        P(
            "SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to rlock are passed on, \
             once, to the command's process group. rlock keeps renewing the lock until the command \
             exits, then releases it and exits with the command's status (128+N if the command \
             died of signal N).",
        ),
        P(
            "While rlock is still waiting for the lock, the same signals end the wait: rlock \
             leaves the queue, takes nothing, and exits 128+N; for SIGINT (Ctrl-C) it dies of \
             SIGINT instead, so that a script waiting in rlock stops there.",
        ),
        P(
            "Ctrl-Z (SIGTSTP, also when sent to rlock) stops the command; rlock then takes the \
             terminal back and stops too (by SIGTSTP, so that an enclosing `rlock exec` stops \
             with it), and the shell shows the job stopped. `fg` gives the \
             command the terminal again and continues it. rlock cannot renew while it is \
             stopped: on resume it checks the deadline before continuing the command, which \
             gets `--lost-signal` if the lease ran out meanwhile (exit 76). A SIGSTOP of the \
             command alone only pauses it, and rlock keeps renewing. A signal passed on to a \
             stopped command is followed by SIGCONT, so that it takes effect.",
        ),
        P(
            "The command is started by rlock's guardian (named rl-guardian), a small process that \
             is its parent and its subreaper: everything the command starts stays below it, \
             whatever it does to its process group or session, and, where rlock may make one, in \
             a cgroup v2 of its own (`--contain`). When the lock is lost, and when the command \
             ends leaving processes behind, `--lost-signal` and SIGKILL reach all of them before \
             rlock exits 76 or releases. If rlock itself is killed (SIGKILL, also `killall -9 \
             rlock`, which does not match the guardian's name), the guardian SIGKILLs all of \
             them at once, and the lock expires within `--ttl`. If the guardian cannot be \
             started, the command is not started either (exit 70). SIGSTOP sent to rlock alone \
             cannot be caught: the command runs on while rlock cannot renew, so do not stop \
             rlock without its command.",
        ),
        P(
            "A command killed by SIGINT (Ctrl-C) makes rlock die of SIGINT too, after the lock \
             is released, so that the calling shell stops as it does for its own commands. A \
             signal ignored when rlock started (nohup) stays ignored, by rlock and the command; \
             SIGCHLD is put back to its default, as an ignored one would lose the command's exit \
             status.",
        ),
    ],
};

pub(super) const LOCK_LOSS: Section = Section {
    title: "LOCK LOSS",
    blocks: &[
        P(
            "While the command runs, a background thread renews the lock every `--renew-every` \
             (default TTL/3), each renewal waiting at most the smaller of `--op-timeout` and \
             `--renew-every`; a failed renewal is retried sooner (every quarter of \
             `--renew-every`, between 10ms and 1s).",
        ),
        P(
            "rlock keeps the lease's deadline on its own monotonic clock: the moment the last \
             successful renewal was sent (at first, the acquire), plus TTL, minus a drift \
             allowance of 1% of TTL plus 2ms. If renewals keep failing, everything the command \
             started gets `--lost-signal` (default TERM) at the deadline minus `--grace` (default \
             TTL/4), and SIGKILL at the deadline. If Redis answers that the token no longer owns \
             the lock (it expired, was deleted, was broken with `release --force`), everything \
             the command started gets `--lost-signal` at once and SIGKILL `--grace` later.",
        ),
        P(
            "The lost-lock signals reach every process the command started, wherever it moved \
             (another process group, a session of its own, a daemon), also once the command \
             itself has exited; what a command that ended normally left running gets \
             `--lost-signal`, and SIGKILL `--grace` later, before the lock is released. They are \
             found below rlock's guardian, the command's parent and subreaper, or in the \
             command's own cgroup (`--contain`). Beyond reach: a process started through another \
             service (systemd-run, at), which is not the command's descendant.",
        ),
        P(
            "Either way rlock stops renewing, waits until nothing the command started runs, \
             makes a best-effort owner-checked release (which \
             can take up to `--op-timeout` when Redis does not answer), and exits 76, whatever \
             the command's own status. A lost lock is never taken again behind the command's \
             back. A loss between two renewals that the command outlives is found by the \
             release at the end, and also exits 76.",
        ),
        P("With the defaults (`--ttl 30s`):"),
        Pre("renewal every      10s
retry every        1s
deadline           last renewal sent + 29.698s
--lost-signal at   deadline - 7.5s
SIGKILL at         deadline"),
        P(
            "`--grace` must be shorter than the TTL minus the drift allowance, and \
             `--renew-every` shorter than that minus `--grace`; rlock refuses other combinations \
             with exit 2.",
        ),
    ],
};

pub(super) const REENTRANCY: Section = Section {
    title: "REENTRANCY",
    blocks: &[
        P(
            "An `rlock exec` or `rlock acquire` of the same KEY (same Redis, same prefix) run \
             where `RLOCK_KEY` and `RLOCK_TOKEN` name that lock (inside the command of an \
             `rlock exec`, say) does not deadlock: it checks with Redis that the token still \
                          owns the key, and then runs without taking the lock again or giving it back. A \
             nested `exec` runs its command at once; a nested `acquire` prints the same token \
             and fence. If the token no longer owns the key, the lock is taken as usual.",
        ),
        P(
            "`rlock exec` puts `RLOCK_EXEC_PID` (its own pid) and `RLOCK_EXEC_TOKEN` (its lock's \
             token) in the command's environment. Under it, the outer rlock renews that lock, \
             and an `rlock release` of that token does nothing and says so: the outer rlock \
             releases the lock when its command ends. So the usual `acquire --export` ... \
             `release` script can run under `rlock exec` of the same KEY.",
        ),
        P(
            "An `rlock exec` whose lock came from a shell (after `eval` of `rlock acquire \
             --export`, with no `rlock exec` around it) renews the lock while its command runs, \
             with the lease the lock was taken with, and leaves the release to the shell.",
        ),
    ],
};

pub(super) const FENCING: Section = Section {
    title: "FENCING",
    blocks: &[P(
        "Each grant of a lock gets a fencing token, `RLOCK_FENCE` (and `fence` in `--json`): an \
         integer that strictly increases with every grant of that key, minted by the same Redis \
         script that grants the lock. Hand it to the resource the lock protects and have the \
         resource refuse a write whose fence is lower than the highest it has seen (a version \
         column, a conditional put). That is what makes a holder that was paused past its lease, \
         and wakes up thinking it still holds the lock, harmless.",
    )],
};

pub(super) const REDIS_KEYS: Section = Section {
    title: "REDIS KEYS",
    blocks: &[
        P("A lock named KEY, with prefix P (`--prefix`, default `rlock:`), uses:"),
        Pre(
            "P+KEY            string: the owner token, the lease as its expiry
{P+KEY}:state    hash: fence, holder (host, pid, user, command,
                 since), TTL, the waiter a free lock is reserved for
{P+KEY}:q        sorted set: waiting tokens, oldest first
{P+KEY}:wake:T   pub/sub channel of waiter T: a release hands it the lock
{P+KEY}:wake     pub/sub channel: wakes waiters that do not queue (Redlock)",
        ),
        P(
            "The lock itself is a plain `SET P+KEY token NX PX ttl`, so other clients that lock \
             the same Redis key the same way exclude rlock and are excluded by it: `--prefix ''` \
             makes the key KEY itself, to share a lock with redis-py's `Lock`, redsync or \
             node-redlock. The {...} hash tag keeps the helper keys in the lock key's Redis \
             Cluster slot. Every key expires: the state lives as long as the lease and 60 \
             seconds more, the queue as long as someone waits in it, so a lock with no holder \
             and no waiter leaves nothing behind after its TTL + 60 s. The fence is at least the \
             server's clock in microseconds (and above the last fence), so it keeps rising after \
             the state expired or was lost, as long as the server's clock does not step back. \
             Waiters sleep, each on a channel of its own and sending nothing, until a release \
             hands them the lock or the holder's lease would end; a release reserves the lock \
             for the first waiter for 1 s, after which the next in line may go. A lost \
             notification costs latency, never liveness.",
        ),
    ],
};

/// SAFETY is docs/safety.md's opening and its list of what rlock promises, so that the man page
/// and the docs say the same (markdown links become their text).
pub(super) fn safety() -> Section {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/safety.md");
    let text = std::fs::read_to_string(&path).expect("docs/safety.md");
    let (intro, rest) = text
        .split_once("\n## What rlock promises\n")
        .expect("docs/safety.md: a section '## What rlock promises'");
    let intro = intro
        .lines()
        .skip_while(|l| !l.starts_with("# "))
        .skip(1)
        .collect::<Vec<_>>()
        .join(" ");
    let list = rest.split("\n## ").next().unwrap_or("");
    let mut blocks = vec![P(leak(unlink(intro.trim())))];
    let mut item = String::new();
    for line in list.lines().chain(std::iter::once("- ")) {
        if line.starts_with("- ") && !item.is_empty() {
            let (title, body) = item
                .trim_start_matches("- **")
                .split_once("**")
                .expect("each promise starts with its **title.**");
            blocks.push(Item(
                leak(title.trim_end_matches('.')),
                leak(unlink(body.trim())),
            ));
            item.clear();
        }
        if !line.trim().is_empty() {
            item.push_str(line.trim());
            item.push(' ');
        }
    }
    item.clear();
    Section {
        title: "SAFETY",
        blocks: Box::leak(blocks.into_boxed_slice()),
    }
}

fn leak(s: impl Into<String>) -> &'static str {
    Box::leak(s.into().into_boxed_str())
}

/// Markdown links as their text: `[fencing](#fencing)` is `fencing`.
fn unlink(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else {
            break;
        };
        let Some(close) = rest[open + mid..].find(')') else {
            break;
        };
        out.push_str(&rest[..open]);
        out.push_str(&rest[open + 1..open + mid]);
        rest = &rest[open + mid + close + 1..];
    }
    out.push_str(rest);
    out
}

pub(super) const EXAMPLES: Section = Section {
    title: "EXAMPLES",
    blocks: &[Pre("# cron: skip this run if the last one is still going
*/5 * * * * rlock exec -k sync -n -- /usr/local/bin/sync.sh

# CI: one deploy at a time, waiting up to 15 minutes for the lock
rlock exec -k deploy-prod -w 15m -- ./deploy.sh production

# hold a lock across part of a shell script (not eval \"$(...)\" alone:
# eval of nothing succeeds, so a failed acquire would go unnoticed)
lock=$(rlock acquire --export -k jobs --ttl 5m) || exit
eval \"$lock\"
do_the_work
rlock release -k jobs

# is it locked?
rlock inspect -q -k jobs && echo locked

# who holds what
rlock inspect")],
};

// ---------------------------------------------------------------------------------------------
