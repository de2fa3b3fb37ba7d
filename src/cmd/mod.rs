//! One file per subcommand; this one holds what they share.

pub mod acquire;
pub mod exec;
pub mod inspect;
pub mod release;
pub mod renew;

use crate::backend::{Settings, TlsFiles, split_urls};
use crate::cli::{Global, SharingArgs};
use crate::exit::Failure;
use crate::lock::{Grant, LockKey, Locker, Sharing, human_ms};
use crate::observe::{Note, Observer};

/// The global options, resolved.
pub struct Context {
    pub global: Global,
    pub settings: Settings,
}

impl Context {
    pub fn new(global: Global) -> Result<Self, Failure> {
        let password = Settings::resolve_password(global.password_file.as_deref())?;
        // RLOCK_URL lists its URLs comma-separated; a --url is one URL, whatever it holds (a
        // password may have a comma).
        let env_urls = std::env::var("RLOCK_URL").ok();
        let urls = match global.urls.as_slice() {
            [one] if env_urls.as_deref() == Some(one.as_str()) => split_urls(one),
            many => many.to_vec(),
        };
        let settings = Settings {
            urls,
            cluster: global.cluster,
            sentinel: global.sentinel.clone(),
            password,
            user: global.user.clone(),
            replicas: global.replicas,
            tls: TlsFiles {
                ca: global.tls_ca.clone(),
                cert: global.tls_cert.clone(),
                key: global.tls_key.clone(),
            },
            op_timeout: global.op_timeout,
        };
        Ok(Context { global, settings })
    }

    /// `rlock` and the global options that reach the locks this run reaches (servers, prefix,
    /// credentials' files, TLS files), for a command line rlock suggests: pasted, it acts on
    /// the same lock, not on one of the same name elsewhere. Options left at their defaults,
    /// and those that came from the environment (which will give them again), are left out; so
    /// a URL with a password is named only when it was given on the command line, redacted.
    pub fn rlock_line(&self) -> String {
        use crate::cmd::acquire::shell_quote;
        let g = &self.global;
        let from_env = |var: &str, value: &str| std::env::var(var).is_ok_and(|v| v == value);
        let mut line = String::from("rlock");
        let mut add = |flag: &str, value: Option<&str>| {
            line.push(' ');
            line.push_str(flag);
            if let Some(v) = value {
                line.push(' ');
                line.push_str(&shell_quote(v));
            }
        };
        let env_urls = std::env::var("RLOCK_URL").ok().map(|v| split_urls(&v));
        if self.settings.urls != [crate::cli::DEFAULT_URL]
            && env_urls.as_ref() != Some(&self.settings.urls)
        {
            for url in &self.settings.urls {
                add("-u", Some(&crate::redact::redact(url)));
            }
        }
        if g.cluster && std::env::var_os("RLOCK_CLUSTER").is_none() {
            add("--cluster", None);
        }
        let named = [
            ("--sentinel", "RLOCK_SENTINEL", g.sentinel.as_deref()),
            ("--user", "RLOCK_USER", g.user.as_deref()),
        ];
        for (flag, var, value) in named {
            if let Some(v) = value.filter(|v| !from_env(var, v)) {
                add(flag, Some(v));
            }
        }
        let files = [
            ("--password-file", "", &g.password_file),
            ("--tls-ca", "RLOCK_TLS_CA", &g.tls_ca),
            ("--tls-cert", "RLOCK_TLS_CERT", &g.tls_cert),
            ("--tls-key", "RLOCK_TLS_KEY", &g.tls_key),
        ];
        for (flag, var, path) in files {
            if let Some(path) = path.as_ref().map(|p| p.to_string_lossy())
                && !from_env(var, &path)
            {
                add(flag, Some(&path));
            }
        }
        if g.prefix != crate::cli::DEFAULT_PREFIX && !from_env("RLOCK_PREFIX", &g.prefix) {
            add("--prefix", Some(&g.prefix));
        }
        line
    }

    pub fn key(&self, name: &str) -> Result<LockKey, Failure> {
        LockKey::new(&self.global.prefix, name)
    }

    pub fn locker(&self) -> Result<Locker, Failure> {
        let nodes = self.settings.connect()?;
        for node in &nodes {
            self.say(format_args!("using {}", node.name()));
        }
        if nodes.len() > 1 {
            self.say(format_args!(
                "Redlock over {} masters: a majority of {} must agree",
                nodes.len(),
                nodes.len() / 2 + 1
            ));
        }
        if self.settings.replicas > 0 {
            self.say(format_args!(
                "a grant or renewal counts once {} replica(s) have it (WAIT, within {})",
                self.settings.replicas,
                humantime::format_duration(self.settings.op_timeout)
            ));
        }
        Ok(Locker::new(nodes, self.settings.op_timeout))
    }

    /// A diagnostic line on stderr, with --verbose only.
    pub fn say(&self, msg: std::fmt::Arguments) {
        if self.global.verbose {
            eprintln!("rlock: {msg}");
        }
    }

    /// A note on stderr, unless --quiet.
    pub fn note(&self, msg: std::fmt::Arguments) {
        if !self.global.quiet {
            eprintln!("rlock: {msg}");
        }
    }
}

/// What the layers below report, as lines on stderr: outages a waiter rides out (unless -q),
/// failed renewals (with -v).
impl Observer for Context {
    fn observe(&self, note: Note<'_>) {
        match note {
            Note::WaitBegins { .. } => {}
            Note::OutageBegan { key, failure } => self.note(format_args!(
                "{failure}; still waiting for lock '{key}', trying again at most 1s apart"
            )),
            Note::OutageEnded { key, after } => self.note(format_args!(
                "Redis answers again after {}; still waiting for lock '{key}'",
                human_ms(after.as_millis() as i64)
            )),
            Note::RenewalFailed { error } => {
                self.say(format_args!("renewal failed, retrying: {error}"))
            }
        }
    }
}

/// The token from --token or $RLOCK_TOKEN, which release and renew need.
pub fn required_token(token: &Option<String>, what: &str) -> Result<String, Failure> {
    match token.as_deref() {
        Some(t) if !t.trim().is_empty() => Ok(t.trim().to_string()),
        Some(_) => Err(Failure::Usage(format!("the token to {what} with is empty"))),
        None => Err(Failure::Usage(format!(
            "no token to {what} with: pass --token T or set $RLOCK_TOKEN (printed by 'rlock acquire')"
        ))),
    }
}

/// A lock this process already holds through its environment: rlock run inside `rlock exec`
/// (or after `eval "$(rlock acquire --export …)"`) on the same key. Redis must confirm that the
/// inherited token still owns the key.
pub fn inherited(ctx: &Context, locker: &Locker, key: &LockKey) -> Result<Option<Grant>, Failure> {
    let env_key = std::env::var("RLOCK_KEY").ok();
    let env_token = std::env::var("RLOCK_TOKEN").ok().filter(|t| !t.is_empty());
    let (Some(env_key), Some(token)) = (env_key, env_token) else {
        return Ok(None);
    };
    if env_key != key.name {
        return Ok(None);
    }
    let owned = locker.owned(key, &token)?;
    match &owned {
        Some(_) => ctx.say(format_args!(
            "lock '{}' is already held by this process tree ($RLOCK_TOKEN); not taking it again",
            key.name
        )),
        None => ctx.say(format_args!(
            "$RLOCK_TOKEN does not own lock '{}' (any more); taking it normally",
            key.name
        )),
    }
    Ok(owned)
}

/// True when the lock `token` belongs to an enclosing `rlock exec`, which renews and releases
/// it: $RLOCK_EXEC_TOKEN names that token, and $RLOCK_EXEC_PID that exec, which must really be
/// one of this process's ancestors.
pub fn inside_exec(token: &str) -> bool {
    if std::env::var(exec::EXEC_TOKEN_VAR).ok().as_deref() != Some(token) {
        return false;
    }
    let Some(exec_pid) = std::env::var(exec::EXEC_PID_VAR)
        .ok()
        .and_then(|p| p.parse::<u32>().ok())
    else {
        return false;
    };
    let mut pid = std::process::id();
    for _ in 0..64 {
        let Some(parent) = parent_of(pid) else {
            return false;
        };
        if parent == exec_pid {
            return true;
        }
        if parent <= 1 {
            return false;
        }
        pid = parent;
    }
    false
}

/// The parent pid of `pid`, from /proc.
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid ...; comm may hold spaces and parentheses.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The kind of lock `--limit`/`--shared` ask for. Redlock (several URLs) takes only exclusive
/// locks: independent masters could each admit a different N holders (see the README).
pub fn sharing(locker: &Locker, args: &SharingArgs) -> Result<Sharing, Failure> {
    let sharing = Sharing::from_args(args.limit, args.shared);
    if sharing != Sharing::Exclusive && locker.is_quorum() {
        let what = if args.shared {
            "--shared".to_string()
        } else {
            format!("--limit {}", args.limit.unwrap_or_default())
        };
        return Err(Failure::Usage(format!(
            "{what} is not available with several --url (Redlock): rlock takes only exclusive locks over Redlock; use one Redis (or Sentinel, or Cluster) for semaphores and shared locks"
        )));
    }
    Ok(sharing)
}

/// A fresh owner token.
pub fn new_token() -> String {
    uuid::Uuid::new_v4().to_string()
}
