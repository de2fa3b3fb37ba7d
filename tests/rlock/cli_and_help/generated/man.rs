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
        "Every duration is a humantime string: `250ms`, `30s`, `5m`, `1h 30m`. A plain number is \
         seconds (`-w 10`, `--ttl 30`, `2.5`), as `flock` and `timeout` read it. A zero or \
         negative `--ttl` is an error.",
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
            "The key holds something rlock cannot treat as a lock (e.g. a list), or is held as \
             another kind of lock (`--limit` with another N, `--shared`, exclusive); nothing was \
             changed.",
        ),
        Item(
            "`69`",
            "Redis unavailable: cannot connect, timed out, no quorum. A wait (no `-n`) rides \
             out an outage, trying again at most 1 s apart and saying on stderr when it began \
             and ended, and exits 69 only if the wait ends during it. A run that has never \
             reached Redis tries for `--connect-timeout` (30 s by default), with `-n` too (which \
             concerns the lock, not the server), then exits 69 naming the address: a typo in a \
             port never hangs a cron job, and a restart of Redis does not fail it. Also a \
             reply rlock cannot believe (not in Redis's protocol, or a grant whose fence is not \
             a positive integer below 2^53 or whose lease is not positive): it is treated as a \
             reply that never came, the grant is given back and `exec`'s command never starts.",
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
        Item(
            "`79`",
            "`exec --newest`: a newer run that asked for `--newest` too displaced this one from \
             the line, or (`--cancel-running`, both runs) stopped its command with \
             `--lost-signal` and took the lock once it was given back. The line names the newer \
             run (host, pid, label).",
        ),
        Item(
            "`124`",
            "`exec`: the command ran for its `--timeout` and was stopped (`--lost-signal`, then \
             SIGKILL `--grace` later), as `timeout`(1) exits; the lock was given back.",
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
            "`RLOCK_PASSWORD_FILE`, `RLOCK_PASSWORD_COMMAND`",
            "As `--password-file`, `--password-command`: read or run again for every new \
             connection.",
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
            "`RLOCK_TIMEOUT`",
            "As `exec --timeout`: how long the command may run before it is stopped (exit 124).",
        ),
        Item(
            "`RLOCK_HOLD_AT_LEAST`",
            "As `--hold-at-least`: nobody else gets the lock until this long after its grant, by \
             Redis's clock, even once it is released.",
        ),
        Item(
            "`RLOCK_ONCE_PER`",
            "As `exec --once-per`: at most one successful run per window of this length, by \
             Redis's clock, and a run in every window in which any host fired.",
        ),
        Item(
            "`RLOCK_WINDOW`",
            "Set by `exec --once-per` in the command's environment: the start of the window the \
             run does, in seconds since the epoch by Redis's clock.",
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

pub(super) const REDIS_KEYS: Section = Section {
    title: "REDIS KEYS",
    blocks: &[
        P("A lock named KEY, with prefix P (`--prefix`, default `rlock:`), uses:"),
        Pre(
            "P+KEY            string: the owner token, the lease as its expiry
{P+KEY}:state    hash: fence, holder (host, pid, user, command,
                 since), TTL, the waiter a free lock is reserved for,
                 who each waiter is (w:T), hold_until (--hold-at-least)
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
/// and the docs say the same.
pub(super) fn safety() -> Section {
    let text = doc("safety.md");
    let intro = text
        .split("\n## ")
        .next()
        .unwrap_or("")
        .lines()
        .skip_while(|l| !l.starts_with("# "))
        .skip(1)
        .collect::<Vec<_>>()
        .join("\n");
    let mut blocks = blocks_of(&intro);
    blocks.extend(blocks_of(section_of(&text, "What rlock promises")));
    Section {
        title: "SAFETY",
        blocks: Box::leak(blocks.into_boxed_slice()),
    }
}

/// The man page's section `title`, made of the docs/ page's section `heading`, word for word.
pub(super) fn from_docs(title: &'static str, page: &str, heading: &str) -> Section {
    let text = doc(page);
    Section {
        title,
        blocks: Box::leak(blocks_of(section_of(&text, heading)).into_boxed_slice()),
    }
}

fn doc(page: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("docs")
        .join(page);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The text of the section `## heading` of a page, up to the next `## `.
fn section_of<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("no section '## {heading}'"));
    let body = &text[start + heading.len() + 5..];
    body.split("\n## ").next().unwrap_or(body)
}

/// Markdown as man page blocks: a paragraph is a P, a list item `- **Title.** text` an Item and
/// any other list item a P, a fenced block a Pre (its language dropped). Links become their
/// text and emphasis goes; `code` stays for `inlines` to set in bold.
fn blocks_of(markdown: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut para: Vec<&str> = Vec::new();
    let mut fence: Option<Vec<&str>> = None;
    // Emphasis goes (`*before*`, `**Title.**`); links become their text.
    let plain = |t: &str| {
        unlink(t)
            .replace("**", "")
            .replace(" *", " ")
            .replace("* ", " ")
    };
    let flush = |para: &mut Vec<&str>, blocks: &mut Vec<Block>| {
        if para.is_empty() {
            return;
        }
        let text = para.join(" ");
        para.clear();
        let titled = text
            .strip_prefix("- **")
            .and_then(|rest| rest.split_once("**"));
        blocks.push(match (titled, text.strip_prefix("- ")) {
            (Some((title, body)), _) => Item(
                leak(plain(title).trim_end_matches('.')),
                leak(plain(body).trim()),
            ),
            (None, Some(item)) => P(leak(plain(item).trim())),
            (None, None) => P(leak(plain(&text).trim())),
        });
    };
    for line in markdown.lines() {
        if let Some(lines) = &mut fence {
            if line.starts_with("```") {
                blocks.push(Pre(leak(lines.join("\n"))));
                fence = None;
            } else {
                lines.push(line);
            }
            continue;
        }
        if line.starts_with("```") {
            flush(&mut para, &mut blocks);
            fence = Some(Vec::new());
        } else if line.trim().is_empty() {
            flush(&mut para, &mut blocks);
        } else if line.starts_with("- ") {
            flush(&mut para, &mut blocks);
            para.push(line);
        } else {
            para.push(line.trim());
        }
    }
    flush(&mut para, &mut blocks);
    blocks
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
    blocks: &[Pre(
        "# cron, the same line on several hosts: once per schedule, at most 4 minutes
PATH=/usr/local/bin:/usr/bin:/bin
*/5 * * * * rlock exec -k sync -n -E 0 --hold-at-least 1m --timeout 4m -- /usr/local/bin/sync.sh

# CI: one deploy at a time, waiting up to 15 minutes for the lock, 30 to deploy
rlock exec -k deploy-prod -w 15m --timeout 30m -- ./deploy.sh production

# who holds the deploy lock, and who waits for it, in line order
rlock inspect -k deploy-prod

# hold a lock across part of a shell script (not eval \"$(...)\" alone:
# eval of nothing succeeds, so a failed acquire would go unnoticed)
lock=$(rlock acquire --export -k jobs --ttl 5m) || exit
eval \"$lock\"
do_the_work
rlock release -k jobs

# is it locked?
rlock inspect -q -k jobs && echo locked

# who holds what
rlock inspect",
    )],
};

// ---------------------------------------------------------------------------------------------
