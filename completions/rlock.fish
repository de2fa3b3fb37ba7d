# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_rlock_global_optspecs
    string join \n u/url= cluster sentinel= password-file= password-command= user= tls-ca= tls-cert= tls-key= prefix= op-timeout= connect-timeout= replicas= v/verbose q/quiet events= events-to= h/help V/version
end

function __fish_rlock_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_rlock_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_rlock_using_subcommand
    set -l cmd (__fish_rlock_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c rlock -n "__fish_rlock_needs_command" -s u -l url -d 'Redis endpoint: redis://, rediss:// (TLS) or unix://. Repeat it (3, 5, ...) for a Redlock quorum over independent masters; RLOCK_URL takes them comma-separated' -r -f
complete -c rlock -n "__fish_rlock_needs_command" -l sentinel -d 'The URLs are Sentinels; lock on the master they call NAME' -r -f
complete -c rlock -n "__fish_rlock_needs_command" -l password-file -d 'Read the Redis password from this file (first line), again for every new connection: a password rotated in the file is used from the next connection on. Without it, $RLOCK_PASSWORD, then $REDISCLI_AUTH; a password in the URL itself wins over all of them' -r -F
complete -c rlock -n "__fish_rlock_needs_command" -l password-command -d 'Run CMD with `sh -c` for every new connection and log in with what it prints (one line): a short-lived token (a managed service\'s IAM token) is fresh at each connection. It must exit 0 within --connect-timeout (else it is killed, exit 77); its output is never shown or stored. Not with --password-file, $RLOCK_PASSWORD or $REDISCLI_AUTH' -r -f -a "(__fish_complete_command)"
complete -c rlock -n "__fish_rlock_needs_command" -l user -d 'ACL user to log in as, with the password from --password-file, $RLOCK_PASSWORD or $REDISCLI_AUTH (like redis-cli --user). It applies to every server whose URL names no user, and so to the master the Sentinels name (the Sentinels themselves take only their URL\'s own credentials)' -r -f
complete -c rlock -n "__fish_rlock_needs_command" -l tls-ca -d 'CA certificate (PEM) to verify rediss:// servers with, instead of the system roots' -r -F
complete -c rlock -n "__fish_rlock_needs_command" -l tls-cert -d 'Client certificate (PEM) for rediss:// servers that ask for one' -r -F
complete -c rlock -n "__fish_rlock_needs_command" -l tls-key -d 'Private key (PEM) of --tls-cert' -r -F
complete -c rlock -n "__fish_rlock_needs_command" -l prefix -d 'Prefix of every Redis key: the lock KEY lives at PREFIX+KEY. Use --prefix \'\' to share a lock with another Redis client (redis-py Lock, redsync, node-redlock)' -r -f
complete -c rlock -n "__fish_rlock_needs_command" -l op-timeout -d 'Connect and per-command timeout, each reply bounded as a whole (its first byte to its last): a dead or trickling server costs at most this per attempt' -r -f
complete -c rlock -n "__fish_rlock_needs_command" -l connect-timeout -d 'How long a run that has not reached Redis yet keeps trying to, before it exits 69: a mistake in a URL never hangs a cron job. Once Redis has answered, a wait rides out outages for as long as the wait lasts' -r -f
complete -c rlock -n "__fish_rlock_needs_command" -l replicas -d 'After a grant and after each renewal, wait (Redis WAIT, within --op-timeout) until N replicas have the write. A grant fewer replicas acknowledged is given back: a wait tries again (a failover\'s new master gets its replicas back), -n exits 69; a renewal fewer acknowledged counts as failed, and the lease deadline rules' -r -f
complete -c rlock -n "__fish_rlock_needs_command" -l events -d 'Also write each step of a lock as one JSON object a line, for a log pipeline: waiting, acquired, renewal failed, and how the run ended (docs/inspect.md, "Events"). To stderr, beside the usual lines, or to --events-to' -r -f -a "json\t''"
complete -c rlock -n "__fish_rlock_needs_command" -l events-to -d 'Where --events go instead of stderr: a file, appended to (created if missing; never through a symbolic link), or /dev/fd/N for a descriptor the caller opened' -r -F
complete -c rlock -n "__fish_rlock_needs_command" -l cluster -d 'The URLs are Redis Cluster seed nodes'
complete -c rlock -n "__fish_rlock_needs_command" -s v -l verbose -d 'Say what rlock does, on stderr: the servers, a wait (who holds the lock, your place in line, then at least once a minute), the grant, renewals that failed'
complete -c rlock -n "__fish_rlock_needs_command" -s q -l quiet -d 'Say nothing but errors (inspect: print nothing, answer with the exit code)'
complete -c rlock -n "__fish_rlock_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlock -n "__fish_rlock_needs_command" -s V -l version -d 'Print version'
complete -c rlock -n "__fish_rlock_needs_command" -f -a "acquire" -d 'Take the lock and return; it lives for --ttl unless renewed or released'
complete -c rlock -n "__fish_rlock_needs_command" -f -a "release" -d 'Give the lock back, if the token still owns it (or break it with --force)'
complete -c rlock -n "__fish_rlock_needs_command" -f -a "renew" -d 'Extend the lock, if the token still owns it'
complete -c rlock -n "__fish_rlock_needs_command" -f -a "inspect" -d 'Show who holds locks: the named KEYs, or every lock under the prefix'
complete -c rlock -n "__fish_rlock_needs_command" -f -a "exec" -d 'Run a command under the lock, renewing it while the command runs'
complete -c rlock -n "__fish_rlock_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -s k -l key -d 'Name of the lock (the Redis key is PREFIX+KEY)' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l ttl -d 'How long the lock lives unless renewed or released' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -s w -l wait -d 'Give up after waiting this long [default: wait as long as it takes]' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -s E -l conflict-exit-code -d 'Exit code when the lock is busy [default: 75]; with `exec --once-per`, also when the window\'s run is already done [default there: 0]' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l limit -d 'Up to N holders at once, like `consul lock -n N` (a counting semaphore); every holder of the key must ask the same N. --limit 1 is an ordinary lock' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l label -d 'What `inspect` and the history show as the holder\'s description instead of its program\'s name (a CI job\'s URL, say)' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l hold-at-least -d 'Nobody else gets the lock until DUR after the grant, by Redis\'s clock, even if the holder releases it sooner. Keep DUR below the schedule\'s period less the hosts\' largest firing skew: a hold as long as the period makes the next firing find it held, and skip. To run the same cron line on several hosts once per period, --once-per counts windows and drops none. `release --force` still frees it. The hold is kept in Redis: a single Redis that restarts empty forgets it, and the next firing runs the job again' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l once-per -d 'Refused: a window is done when its command succeeds (`rlock exec --once-per`)' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -s u -l url -d 'Redis endpoint: redis://, rediss:// (TLS) or unix://. Repeat it (3, 5, ...) for a Redlock quorum over independent masters; RLOCK_URL takes them comma-separated' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l sentinel -d 'The URLs are Sentinels; lock on the master they call NAME' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l password-file -d 'Read the Redis password from this file (first line), again for every new connection: a password rotated in the file is used from the next connection on. Without it, $RLOCK_PASSWORD, then $REDISCLI_AUTH; a password in the URL itself wins over all of them' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l password-command -d 'Run CMD with `sh -c` for every new connection and log in with what it prints (one line): a short-lived token (a managed service\'s IAM token) is fresh at each connection. It must exit 0 within --connect-timeout (else it is killed, exit 77); its output is never shown or stored. Not with --password-file, $RLOCK_PASSWORD or $REDISCLI_AUTH' -r -f -a "(__fish_complete_command)"
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l user -d 'ACL user to log in as, with the password from --password-file, $RLOCK_PASSWORD or $REDISCLI_AUTH (like redis-cli --user). It applies to every server whose URL names no user, and so to the master the Sentinels name (the Sentinels themselves take only their URL\'s own credentials)' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l tls-ca -d 'CA certificate (PEM) to verify rediss:// servers with, instead of the system roots' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l tls-cert -d 'Client certificate (PEM) for rediss:// servers that ask for one' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l tls-key -d 'Private key (PEM) of --tls-cert' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l prefix -d 'Prefix of every Redis key: the lock KEY lives at PREFIX+KEY. Use --prefix \'\' to share a lock with another Redis client (redis-py Lock, redsync, node-redlock)' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l op-timeout -d 'Connect and per-command timeout, each reply bounded as a whole (its first byte to its last): a dead or trickling server costs at most this per attempt' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l connect-timeout -d 'How long a run that has not reached Redis yet keeps trying to, before it exits 69: a mistake in a URL never hangs a cron job. Once Redis has answered, a wait rides out outages for as long as the wait lasts' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l replicas -d 'After a grant and after each renewal, wait (Redis WAIT, within --op-timeout) until N replicas have the write. A grant fewer replicas acknowledged is given back: a wait tries again (a failover\'s new master gets its replicas back), -n exits 69; a renewal fewer acknowledged counts as failed, and the lease deadline rules' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l events -d 'Also write each step of a lock as one JSON object a line, for a log pipeline: waiting, acquired, renewal failed, and how the run ended (docs/inspect.md, "Events"). To stderr, beside the usual lines, or to --events-to' -r -f -a "json\t''"
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l events-to -d 'Where --events go instead of stderr: a file, appended to (created if missing; never through a symbolic link), or /dev/fd/N for a descriptor the caller opened' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -s n -l no-wait -d 'Try once and do not wait'
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l shared -d 'A shared (read) lock, like `flock -s`: any number of shared holders, none while an exclusive holder has the key; shared requests queue behind a waiting exclusive one'
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l record-args -d 'Record the holder\'s whole command line, its secrets masked, rather than only its program\'s name (`mysql`), the default: any user of the same Redis can read what is recorded with `rlock inspect`. --label still wins'
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l export -d 'Print shell assignments (RLOCK_KEY, RLOCK_TOKEN, RLOCK_FENCE) for `eval`'
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l json -d 'Print one JSON object: key, token, fence, ttl_ms'
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -l cluster -d 'The URLs are Redis Cluster seed nodes'
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -s v -l verbose -d 'Say what rlock does, on stderr: the servers, a wait (who holds the lock, your place in line, then at least once a minute), the grant, renewals that failed'
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -s q -l quiet -d 'Say nothing but errors (inspect: print nothing, answer with the exit code)'
complete -c rlock -n "__fish_rlock_using_subcommand acquire" -s h -l help -d 'Print help'
complete -c rlock -n "__fish_rlock_using_subcommand release" -s k -l key -d 'Name of the lock (the Redis key is PREFIX+KEY)' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand release" -l token -d 'The owner token `acquire` printed (a UUID; not the fencing token RLOCK_FENCE)' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand release" -l history-limit -d 'How many runs the lock\'s history in Redis keeps (see `inspect --history`); 0 records nothing' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand release" -l history-ttl -d 'How long the history lives after its last run' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand release" -s u -l url -d 'Redis endpoint: redis://, rediss:// (TLS) or unix://. Repeat it (3, 5, ...) for a Redlock quorum over independent masters; RLOCK_URL takes them comma-separated' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand release" -l sentinel -d 'The URLs are Sentinels; lock on the master they call NAME' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand release" -l password-file -d 'Read the Redis password from this file (first line), again for every new connection: a password rotated in the file is used from the next connection on. Without it, $RLOCK_PASSWORD, then $REDISCLI_AUTH; a password in the URL itself wins over all of them' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand release" -l password-command -d 'Run CMD with `sh -c` for every new connection and log in with what it prints (one line): a short-lived token (a managed service\'s IAM token) is fresh at each connection. It must exit 0 within --connect-timeout (else it is killed, exit 77); its output is never shown or stored. Not with --password-file, $RLOCK_PASSWORD or $REDISCLI_AUTH' -r -f -a "(__fish_complete_command)"
complete -c rlock -n "__fish_rlock_using_subcommand release" -l user -d 'ACL user to log in as, with the password from --password-file, $RLOCK_PASSWORD or $REDISCLI_AUTH (like redis-cli --user). It applies to every server whose URL names no user, and so to the master the Sentinels name (the Sentinels themselves take only their URL\'s own credentials)' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand release" -l tls-ca -d 'CA certificate (PEM) to verify rediss:// servers with, instead of the system roots' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand release" -l tls-cert -d 'Client certificate (PEM) for rediss:// servers that ask for one' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand release" -l tls-key -d 'Private key (PEM) of --tls-cert' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand release" -l prefix -d 'Prefix of every Redis key: the lock KEY lives at PREFIX+KEY. Use --prefix \'\' to share a lock with another Redis client (redis-py Lock, redsync, node-redlock)' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand release" -l op-timeout -d 'Connect and per-command timeout, each reply bounded as a whole (its first byte to its last): a dead or trickling server costs at most this per attempt' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand release" -l connect-timeout -d 'How long a run that has not reached Redis yet keeps trying to, before it exits 69: a mistake in a URL never hangs a cron job. Once Redis has answered, a wait rides out outages for as long as the wait lasts' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand release" -l replicas -d 'After a grant and after each renewal, wait (Redis WAIT, within --op-timeout) until N replicas have the write. A grant fewer replicas acknowledged is given back: a wait tries again (a failover\'s new master gets its replicas back), -n exits 69; a renewal fewer acknowledged counts as failed, and the lease deadline rules' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand release" -l events -d 'Also write each step of a lock as one JSON object a line, for a log pipeline: waiting, acquired, renewal failed, and how the run ended (docs/inspect.md, "Events"). To stderr, beside the usual lines, or to --events-to' -r -f -a "json\t''"
complete -c rlock -n "__fish_rlock_using_subcommand release" -l events-to -d 'Where --events go instead of stderr: a file, appended to (created if missing; never through a symbolic link), or /dev/fd/N for a descriptor the caller opened' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand release" -l force -d 'Break the lock whoever holds it, and say who did'
complete -c rlock -n "__fish_rlock_using_subcommand release" -l cluster -d 'The URLs are Redis Cluster seed nodes'
complete -c rlock -n "__fish_rlock_using_subcommand release" -s v -l verbose -d 'Say what rlock does, on stderr: the servers, a wait (who holds the lock, your place in line, then at least once a minute), the grant, renewals that failed'
complete -c rlock -n "__fish_rlock_using_subcommand release" -s q -l quiet -d 'Say nothing but errors (inspect: print nothing, answer with the exit code)'
complete -c rlock -n "__fish_rlock_using_subcommand release" -s h -l help -d 'Print help'
complete -c rlock -n "__fish_rlock_using_subcommand renew" -s k -l key -d 'Name of the lock (the Redis key is PREFIX+KEY)' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand renew" -l token -d 'The owner token `acquire` printed (a UUID; not the fencing token RLOCK_FENCE)' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand renew" -l ttl -d 'New time to live; a renewal never shortens the lease [default: the TTL the lock was last given]' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand renew" -s u -l url -d 'Redis endpoint: redis://, rediss:// (TLS) or unix://. Repeat it (3, 5, ...) for a Redlock quorum over independent masters; RLOCK_URL takes them comma-separated' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand renew" -l sentinel -d 'The URLs are Sentinels; lock on the master they call NAME' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand renew" -l password-file -d 'Read the Redis password from this file (first line), again for every new connection: a password rotated in the file is used from the next connection on. Without it, $RLOCK_PASSWORD, then $REDISCLI_AUTH; a password in the URL itself wins over all of them' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand renew" -l password-command -d 'Run CMD with `sh -c` for every new connection and log in with what it prints (one line): a short-lived token (a managed service\'s IAM token) is fresh at each connection. It must exit 0 within --connect-timeout (else it is killed, exit 77); its output is never shown or stored. Not with --password-file, $RLOCK_PASSWORD or $REDISCLI_AUTH' -r -f -a "(__fish_complete_command)"
complete -c rlock -n "__fish_rlock_using_subcommand renew" -l user -d 'ACL user to log in as, with the password from --password-file, $RLOCK_PASSWORD or $REDISCLI_AUTH (like redis-cli --user). It applies to every server whose URL names no user, and so to the master the Sentinels name (the Sentinels themselves take only their URL\'s own credentials)' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand renew" -l tls-ca -d 'CA certificate (PEM) to verify rediss:// servers with, instead of the system roots' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand renew" -l tls-cert -d 'Client certificate (PEM) for rediss:// servers that ask for one' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand renew" -l tls-key -d 'Private key (PEM) of --tls-cert' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand renew" -l prefix -d 'Prefix of every Redis key: the lock KEY lives at PREFIX+KEY. Use --prefix \'\' to share a lock with another Redis client (redis-py Lock, redsync, node-redlock)' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand renew" -l op-timeout -d 'Connect and per-command timeout, each reply bounded as a whole (its first byte to its last): a dead or trickling server costs at most this per attempt' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand renew" -l connect-timeout -d 'How long a run that has not reached Redis yet keeps trying to, before it exits 69: a mistake in a URL never hangs a cron job. Once Redis has answered, a wait rides out outages for as long as the wait lasts' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand renew" -l replicas -d 'After a grant and after each renewal, wait (Redis WAIT, within --op-timeout) until N replicas have the write. A grant fewer replicas acknowledged is given back: a wait tries again (a failover\'s new master gets its replicas back), -n exits 69; a renewal fewer acknowledged counts as failed, and the lease deadline rules' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand renew" -l events -d 'Also write each step of a lock as one JSON object a line, for a log pipeline: waiting, acquired, renewal failed, and how the run ended (docs/inspect.md, "Events"). To stderr, beside the usual lines, or to --events-to' -r -f -a "json\t''"
complete -c rlock -n "__fish_rlock_using_subcommand renew" -l events-to -d 'Where --events go instead of stderr: a file, appended to (created if missing; never through a symbolic link), or /dev/fd/N for a descriptor the caller opened' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand renew" -l cluster -d 'The URLs are Redis Cluster seed nodes'
complete -c rlock -n "__fish_rlock_using_subcommand renew" -s v -l verbose -d 'Say what rlock does, on stderr: the servers, a wait (who holds the lock, your place in line, then at least once a minute), the grant, renewals that failed'
complete -c rlock -n "__fish_rlock_using_subcommand renew" -s q -l quiet -d 'Say nothing but errors (inspect: print nothing, answer with the exit code)'
complete -c rlock -n "__fish_rlock_using_subcommand renew" -s h -l help -d 'Print help'
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -s k -l key -d 'Locks to show (repeatable); without any, list every lock under the prefix' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -l watch -d 'Show the locks again every DUR until interrupted; elsewhere than on a terminal, and with --json, only when they changed [default: 2s; at least 100ms]' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -s n -l count -d 'How many runs of each KEY --history shows' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -s u -l url -d 'Redis endpoint: redis://, rediss:// (TLS) or unix://. Repeat it (3, 5, ...) for a Redlock quorum over independent masters; RLOCK_URL takes them comma-separated' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -l sentinel -d 'The URLs are Sentinels; lock on the master they call NAME' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -l password-file -d 'Read the Redis password from this file (first line), again for every new connection: a password rotated in the file is used from the next connection on. Without it, $RLOCK_PASSWORD, then $REDISCLI_AUTH; a password in the URL itself wins over all of them' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -l password-command -d 'Run CMD with `sh -c` for every new connection and log in with what it prints (one line): a short-lived token (a managed service\'s IAM token) is fresh at each connection. It must exit 0 within --connect-timeout (else it is killed, exit 77); its output is never shown or stored. Not with --password-file, $RLOCK_PASSWORD or $REDISCLI_AUTH' -r -f -a "(__fish_complete_command)"
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -l user -d 'ACL user to log in as, with the password from --password-file, $RLOCK_PASSWORD or $REDISCLI_AUTH (like redis-cli --user). It applies to every server whose URL names no user, and so to the master the Sentinels name (the Sentinels themselves take only their URL\'s own credentials)' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -l tls-ca -d 'CA certificate (PEM) to verify rediss:// servers with, instead of the system roots' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -l tls-cert -d 'Client certificate (PEM) for rediss:// servers that ask for one' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -l tls-key -d 'Private key (PEM) of --tls-cert' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -l prefix -d 'Prefix of every Redis key: the lock KEY lives at PREFIX+KEY. Use --prefix \'\' to share a lock with another Redis client (redis-py Lock, redsync, node-redlock)' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -l op-timeout -d 'Connect and per-command timeout, each reply bounded as a whole (its first byte to its last): a dead or trickling server costs at most this per attempt' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -l connect-timeout -d 'How long a run that has not reached Redis yet keeps trying to, before it exits 69: a mistake in a URL never hangs a cron job. Once Redis has answered, a wait rides out outages for as long as the wait lasts' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -l replicas -d 'After a grant and after each renewal, wait (Redis WAIT, within --op-timeout) until N replicas have the write. A grant fewer replicas acknowledged is given back: a wait tries again (a failover\'s new master gets its replicas back), -n exits 69; a renewal fewer acknowledged counts as failed, and the lease deadline rules' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -l events -d 'Also write each step of a lock as one JSON object a line, for a log pipeline: waiting, acquired, renewal failed, and how the run ended (docs/inspect.md, "Events"). To stderr, beside the usual lines, or to --events-to' -r -f -a "json\t''"
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -l events-to -d 'Where --events go instead of stderr: a file, appended to (created if missing; never through a symbolic link), or /dev/fd/N for a descriptor the caller opened' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -l json -d 'Print JSON: one object for a single -k, an array of objects otherwise'
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -l history -d 'Show the runs on record instead, newest first: the KEYs\' last runs (-n of them), or, without -k, the last run of every lock under the prefix'
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -l timeline -d 'With --history: draw the runs along time, one row per host, in 80 columns (runs, waits, skipped windows, busy and failed runs), so a gap or a pile-up shows at a glance'
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -l cluster -d 'The URLs are Redis Cluster seed nodes'
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -s v -l verbose -d 'Say what rlock does, on stderr: the servers, a wait (who holds the lock, your place in line, then at least once a minute), the grant, renewals that failed'
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -s q -l quiet -d 'Say nothing but errors (inspect: print nothing, answer with the exit code)'
complete -c rlock -n "__fish_rlock_using_subcommand inspect" -s h -l help -d 'Print help'
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -s k -l key -d 'Name of the lock (the Redis key is PREFIX+KEY)' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l ttl -d 'Lease time: how long the lock outlives a renewal that never comes' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -s w -l wait -d 'Give up after waiting this long [default: wait as long as it takes]' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -s E -l conflict-exit-code -d 'Exit code when the lock is busy [default: 75]; with `exec --once-per`, also when the window\'s run is already done [default there: 0]' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l limit -d 'Up to N holders at once, like `consul lock -n N` (a counting semaphore); every holder of the key must ask the same N. --limit 1 is an ordinary lock' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l renew-every -d 'How often to renew the lock [default: TTL/3]' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l lost-signal -d 'Signal the command\'s process group gets when the lock is lost (name or number)' -r -f -a "TERM\t''
INT\t''
HUP\t''
QUIT\t''
KILL\t''
USR1\t''
USR2\t''
ALRM\t''"
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l grace -d 'Time between --lost-signal and SIGKILL when renewals keep failing [default: TTL/4]' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l timeout -d 'Stop the command after DUR, as timeout(1) does: --lost-signal to everything it started, SIGKILL --grace later; the lock is given back and rlock exits 124' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l hold-at-least -d 'Nobody else gets the lock until DUR after the grant, by Redis\'s clock, even if the holder releases it sooner. Keep DUR below the schedule\'s period less the hosts\' largest firing skew: a hold as long as the period makes the next firing find it held, and skip. To run the same cron line on several hosts once per period, --once-per counts windows and drops none. `release --force` still frees it. The hold is kept in Redis: a single Redis that restarts empty forgets it, and the next firing runs the job again' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l once-per -d 'At most one successful run per window of DUR, and a run in every window in which any host fired: windows are counted by Redis\'s clock from the Unix epoch (every host agrees which window "now" is), and a run that finds its window\'s work done exits 0 at once (-E chooses another code) without running CMD. A failed run leaves its window to the next firing. For the same crontab line on several hosts: see `--hold-at-least` for why not that' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l label -d 'What `inspect` and the history show as the holder\'s description instead of its program\'s name (a CI job\'s URL, say)' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l contain -d 'How everything the command starts is kept under the lock: `auto` runs it in a cgroup v2 of its own where rlock may make one (root, or a delegated systemd slice), else in the process tree below rlock\'s guardian; `tree` never makes a cgroup; `cgroup` makes one or fails (78). `-v` says which is in use' -r -f -a "auto\t'A cgroup where rlock may make one, else the process tree'
cgroup\t'A cgroup, or the command does not start (exit 78)'
tree\t'The process tree below the guardian, never a cgroup'"
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l history-limit -d 'How many runs the lock\'s history in Redis keeps (see `inspect --history`); 0 records nothing' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l history-ttl -d 'How long the history lives after its last run' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l metrics-file -d 'At the end of the run, write this key\'s last run as Prometheus text (node_exporter\'s textfile collector), keeping the other keys\' lines in the file. PATH must be a regular file or none: a link is never followed' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -s u -l url -d 'Redis endpoint: redis://, rediss:// (TLS) or unix://. Repeat it (3, 5, ...) for a Redlock quorum over independent masters; RLOCK_URL takes them comma-separated' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l sentinel -d 'The URLs are Sentinels; lock on the master they call NAME' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l password-file -d 'Read the Redis password from this file (first line), again for every new connection: a password rotated in the file is used from the next connection on. Without it, $RLOCK_PASSWORD, then $REDISCLI_AUTH; a password in the URL itself wins over all of them' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l password-command -d 'Run CMD with `sh -c` for every new connection and log in with what it prints (one line): a short-lived token (a managed service\'s IAM token) is fresh at each connection. It must exit 0 within --connect-timeout (else it is killed, exit 77); its output is never shown or stored. Not with --password-file, $RLOCK_PASSWORD or $REDISCLI_AUTH' -r -f -a "(__fish_complete_command)"
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l user -d 'ACL user to log in as, with the password from --password-file, $RLOCK_PASSWORD or $REDISCLI_AUTH (like redis-cli --user). It applies to every server whose URL names no user, and so to the master the Sentinels name (the Sentinels themselves take only their URL\'s own credentials)' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l tls-ca -d 'CA certificate (PEM) to verify rediss:// servers with, instead of the system roots' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l tls-cert -d 'Client certificate (PEM) for rediss:// servers that ask for one' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l tls-key -d 'Private key (PEM) of --tls-cert' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l prefix -d 'Prefix of every Redis key: the lock KEY lives at PREFIX+KEY. Use --prefix \'\' to share a lock with another Redis client (redis-py Lock, redsync, node-redlock)' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l op-timeout -d 'Connect and per-command timeout, each reply bounded as a whole (its first byte to its last): a dead or trickling server costs at most this per attempt' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l connect-timeout -d 'How long a run that has not reached Redis yet keeps trying to, before it exits 69: a mistake in a URL never hangs a cron job. Once Redis has answered, a wait rides out outages for as long as the wait lasts' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l replicas -d 'After a grant and after each renewal, wait (Redis WAIT, within --op-timeout) until N replicas have the write. A grant fewer replicas acknowledged is given back: a wait tries again (a failover\'s new master gets its replicas back), -n exits 69; a renewal fewer acknowledged counts as failed, and the lease deadline rules' -r -f
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l events -d 'Also write each step of a lock as one JSON object a line, for a log pipeline: waiting, acquired, renewal failed, and how the run ended (docs/inspect.md, "Events"). To stderr, beside the usual lines, or to --events-to' -r -f -a "json\t''"
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l events-to -d 'Where --events go instead of stderr: a file, appended to (created if missing; never through a symbolic link), or /dev/fd/N for a descriptor the caller opened' -r -F
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -s n -l no-wait -d 'Try once and do not wait'
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l shared -d 'A shared (read) lock, like `flock -s`: any number of shared holders, none while an exclusive holder has the key; shared requests queue behind a waiting exclusive one'
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l newest -d 'Newest wins: this run, joining the line, displaces every older waiter of the key that asked for --newest too; each exits 79 at once, naming this run. Exclusive locks on one Redis, Sentinel or Cluster (refused with several --url)'
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l cancel-running -d 'As --newest, and a holder that ran with --cancel-running is stopped too: its command gets --lost-signal (SIGKILL --grace later), its rlock gives the lock back and exits 79, and the lock goes to the newest waiter. A holder that did not ask for it runs on'
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l record-args -d 'Record the holder\'s whole command line, its secrets masked, rather than only its program\'s name (`mysql`), the default: any user of the same Redis can read what is recorded with `rlock inspect`. --label still wins'
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -l cluster -d 'The URLs are Redis Cluster seed nodes'
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -s v -l verbose -d 'Say what rlock does, on stderr: the servers, a wait (who holds the lock, your place in line, then at least once a minute), the grant, renewals that failed'
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -s q -l quiet -d 'Say nothing but errors (inspect: print nothing, answer with the exit code)'
complete -c rlock -n "__fish_rlock_using_subcommand exec; and not __fish_rlock_exec_command_line >/dev/null" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c rlock -n "__fish_rlock_using_subcommand help; and not __fish_seen_subcommand_from acquire release renew inspect exec help" -f -a "acquire" -d 'Take the lock and return; it lives for --ttl unless renewed or released'
complete -c rlock -n "__fish_rlock_using_subcommand help; and not __fish_seen_subcommand_from acquire release renew inspect exec help" -f -a "release" -d 'Give the lock back, if the token still owns it (or break it with --force)'
complete -c rlock -n "__fish_rlock_using_subcommand help; and not __fish_seen_subcommand_from acquire release renew inspect exec help" -f -a "renew" -d 'Extend the lock, if the token still owns it'
complete -c rlock -n "__fish_rlock_using_subcommand help; and not __fish_seen_subcommand_from acquire release renew inspect exec help" -f -a "inspect" -d 'Show who holds locks: the named KEYs, or every lock under the prefix'
complete -c rlock -n "__fish_rlock_using_subcommand help; and not __fish_seen_subcommand_from acquire release renew inspect exec help" -f -a "exec" -d 'Run a command under the lock, renewing it while the command runs'
complete -c rlock -n "__fish_rlock_using_subcommand help; and not __fish_seen_subcommand_from acquire release renew inspect exec help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'

# No file names for the value of a global option that is not a path, before the subcommand too.
# (Added to clap_complete's script by tests/rlock/cli_and_help/generated/completions.rs.)
complete -c rlock -n "not __fish_seen_subcommand_from acquire release renew inspect exec; and contains -- (commandline -opc)[-1] -u --url --sentinel --password-command --user --prefix --op-timeout --connect-timeout --replicas --events" -f

# `rlock exec` runs a command line of its own: from its first word that is not an option (or
# an option's value), or after `--`, complete it as that command's, as `complete -C` of the
# command's words would. (Added to clap_complete's script by tests/rlock/cli_and_help/generated/completions.rs.)
function __fish_rlock_exec_optspecs
    string join \n k/key= ttl= w/wait= n/no-wait E/conflict-exit-code= limit= shared renew-every= lost-signal= grace= timeout= hold-at-least= once-per= newest cancel-running label= record-args contain= history-limit= history-ttl= metrics-file= u/url= cluster sentinel= password-file= password-command= user= tls-ca= tls-cert= tls-key= prefix= op-timeout= connect-timeout= replicas= v/verbose q/quiet events= events-to= h/help
end

# Prints the command's words before the one being completed; fails outside the command.
function __fish_rlock_exec_command_line
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_rlock_global_optspecs) -- $cmd 2>/dev/null
    or return 1
    test "$argv[1]" = exec
    or return 1
    set -e argv[1]
    set -l rest $argv
    argparse -s (__fish_rlock_exec_optspecs) -- $rest 2>/dev/null
    or return 1
    string escape -- $argv
    # The command has started, or comes right after `--`, or is the word being completed.
    set -q argv[1]
    or contains -- -- $rest
    or not string match -q -- '-*' (commandline -ct)
end

function __fish_rlock_exec_complete
    set -l words (__fish_rlock_exec_command_line)
    set -l current (commandline -ct)
    set -q current[1]
    or set current ''
    complete -C (string join ' ' -- $words $current)
end

complete -c rlock -n "__fish_rlock_exec_command_line >/dev/null" -f -a "(__fish_rlock_exec_complete)"
