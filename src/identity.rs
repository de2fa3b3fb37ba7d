//! Who takes a lock, as `inspect` shows it: this machine, a process, a user and a command. The
//! lock protocol only stores it; where it comes from is the operating system's business.

/// Who takes the lock, as `inspect` shows it.
#[derive(Debug, Clone)]
pub struct Identity {
    pub host: String,
    pub pid: u32,
    pub user: String,
    pub command: String,
}

impl Identity {
    /// `pid` and `command` are the holder's: rlock itself for `exec`, the calling shell for
    /// `acquire` (which exits at once).
    pub fn current(pid: u32, command: String) -> Self {
        let host = nix::unistd::gethostname()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "unknown-host".into());
        // $USER, or $LOGNAME (what cron and login set), before asking the user database.
        let user = ["USER", "LOGNAME"]
            .iter()
            .find_map(|var| std::env::var(var).ok().filter(|u| !u.is_empty()))
            .or_else(|| {
                nix::unistd::User::from_uid(nix::unistd::getuid())
                    .ok()
                    .flatten()
                    .map(|u| u.name)
            })
            .unwrap_or_else(|| nix::unistd::getuid().to_string());
        Identity {
            host,
            pid,
            user,
            command,
        }
    }
}
