//! The text after each page of `--help`: what the options alone do not say, and examples.

/// `rlock --help`.
pub const MAIN: &str = "\
Examples:
  rlock exec -k nightly -- ./cron.sh          run under the lock, renewing it meanwhile
  rlock exec -k deploy -w 10m -- make deploy   wait up to 10 minutes for the lock
  rlock inspect                                list every lock and who holds it

  # hold a lock across part of a shell script:
  lock=$(rlock acquire --export -k jobs) || exit; eval \"$lock\"
  ...
  rlock release -k jobs

Durations (DUR): 250ms, 30s, 5m, 1h 30m; a plain number is seconds (-w 10, --ttl 30).

Exit codes: 0 ok, 1 inspect: not held, 2 usage, 65 not a lock (or another kind), 69 unavailable,
70 internal, 75 busy, 76 lock lost during exec, 77 not owner / auth refused, 78 configuration,
79 exec --newest: displaced by a newer run, 124 exec --timeout ran out, 126/127 command not runnable / not found, 128+N command died of
signal N. See rlock(1).";

/// `rlock acquire --help`.
pub const ACQUIRE: &str = "\
Prints the owner token, a random UUID that says whose the lock is: `release` and `renew` need it
(--token or $RLOCK_TOKEN). The fencing token (RLOCK_FENCE, with --export or --json) is another
thing: a number that rises with every grant, for the storage the lock protects to check.

Examples:
  token=$(rlock acquire -k jobs --ttl 5m -n) || exit
  lock=$(rlock acquire --export -k jobs) || exit; eval \"$lock\"; ...; rlock release -k jobs";

/// `rlock release --help`.
pub const RELEASE: &str = "\
Releasing a lock the same token already released succeeds again (retries are safe);
releasing one that expired or was broken exits 77.

The hold that ends is recorded in the lock's history (see `rlock inspect --history`), in the same
script as the release: released, lost (its lease ran out first) or broken (--force, and by whom),
with when it was granted and the holder's fields, never how the script did. A release by a token
whose hold rlock no longer knows records nothing; a record that fails changes nothing (-v says so).

Examples:
  rlock release -k jobs --token \"$token\"
  rlock release -k jobs --force        # an operator breaking a stale lock";

/// `rlock renew --help`.
pub const RENEW: &str = "\
Examples:
  rlock renew -k jobs --ttl 10m        # token from $RLOCK_TOKEN";

/// `rlock inspect --help`.
pub const INSPECT: &str = "\
With keys, exits 0 if every one is held and 1 if any is free.

RENEWED says when each holder's lease was last renewed (or taken). A holder on this host whose
process is gone is marked stale (\"stale\": true in JSON), and a line on stderr gives the command
that breaks its lock; holders on other hosts never are. Stdout carries only the table (a header,
then one row per lock) or the JSON, so `rlock inspect | tail -n +2` counts locks. With -k, each
lock's waiters follow it, a row each in line order (STATE 'waiting N', HELD how long it has
waited); --json lists them in 'waiting' for every lock. A lock kept by --hold-at-least after its
command ended says 'held until ..., command ended'.

--watch shows the locks again every DUR (2s by default) until Ctrl-C or SIGTERM, and rlock then
dies of that signal. On a terminal the table is redrawn in place. Otherwise, and with --json (one
compact line each time), the locks are printed again only when they changed: a lock taken,
released or handed over, a holder joining or leaving, a new fence, another number of waiters,
a holder found stale. The clocks alone (expires in, held for, renewed) are no change. A look that
fails after the first is reported on stderr, and the watch goes on. --watch with -q exits 2.

--history shows the runs `rlock exec` recorded, and the holds `rlock release` ended, instead,
newest first: when each ended, the host, how long it waited and held the lock, how it ended, the
command. --json prints an array of runs.

Examples:
  rlock inspect                        # every lock under the prefix
  rlock inspect -q -k jobs && echo locked
  rlock inspect -k deploy              # who holds it, and who waits for it, in line order
  rlock inspect -k jobs --json
  rlock inspect --watch                # redraw every 2s until Ctrl-C
  rlock inspect --watch 500ms --json | jq -c '.[] | {key, fence}'
  rlock inspect -k nightly --history -n 5   # the last five runs of the nightly job
  rlock inspect --history                   # the last run of every lock";

/// `rlock exec --help`: what happens to the command, and the exit codes.
pub const EXEC: &str = "\
The command runs in a process group of its own with RLOCK_KEY, RLOCK_TOKEN (the owner token)
and RLOCK_FENCE (the fencing token: a number that rises with every grant) in its environment.
TERM, INT, HUP, QUIT, USR1 and USR2 sent to rlock are passed on to it. If the lock cannot be
renewed, the command gets --lost-signal by the lease deadline minus --grace and SIGKILL before
the deadline (by a tenth of the TTL), and rlock exits 76. Otherwise rlock exits with the
command's status.

A duration (DUR) without a unit is seconds: -w 10 is -w 10s, as flock and timeout read it.

Exit codes: the command's own status when it ran; 75 busy (-n, or -w ran out; -E sets another),
76 the lock was lost while the command ran (it was stopped), 65 the key is not a lock (or
another kind of lock), 69 Redis unavailable, 70 internal error, 77 Redis refused the password or
the ACL, 78 configuration (URL, TLS, files), 79 a newer run displaced this one (--newest,
--cancel-running), 2 usage, 124 the command ran past --timeout (it was stopped), 126 the command
cannot run, 127 not found,
128+N the command or rlock's wait ended by signal N.

Each run is recorded in the lock's history in Redis when it ends (see `rlock inspect --history`);
a history or metrics write that fails changes nothing else (-v says so).

Examples:
  rlock exec -k nightly -n -- ./cron.sh
  rlock exec -k deploy -w 15m --ttl 1m -- ./deploy.sh production
  rlock exec -k builds --limit 3 -- ./build.sh     # at most three builds at once
  rlock exec -k db --shared -- ./report.sh         # readers together, never beside a writer
  rlock exec -k deploy --newest -- ./deploy.sh     # queued deploys: only the newest waits on
  rlock exec -k nightly --metrics-file /var/lib/node_exporter/rlock.prom -- ./backup.sh";
