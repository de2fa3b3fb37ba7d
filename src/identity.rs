//! Who takes a lock, as `inspect` shows it: this machine, a process, a user and a command. The
//! lock protocol only stores it; where it comes from is the operating system's business.

use std::sync::OnceLock;

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
        let host = host_name();
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

/// This machine's name, as a holder records it.
fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".into())
}

/// True when a holder recorded as `pid` on `host` is this machine's, and no such process exists
/// any more (`kill(pid, 0)` fails with ESRCH; EPERM means it exists, as another user's). A
/// holder on another host, or with no usable pid, is never called gone: nobody here can know.
///
/// Two limits: a pid the system gave to a new process since looks alive (the lock is then not
/// called stale); and a holder in a container that shares this host's name but not its process
/// namespace is judged by this namespace's processes (and may be called stale wrongly).
pub fn process_gone(host: &str, pid: &str) -> bool {
    static HOST: OnceLock<String> = OnceLock::new();
    let Ok(pid) = pid.parse::<i32>() else {
        return false;
    };
    // 0 and negative numbers name process groups to kill(2), not one process.
    if pid <= 0 || host != HOST.get_or_init(host_name) {
        return false;
    }
    matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}
