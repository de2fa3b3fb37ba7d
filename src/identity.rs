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
    /// The pid namespace `pid` is counted in (`pid:[4026531836]`), so that `inspect` in
    /// another one (a container sharing the host's name) does not judge the holder's pid by
    /// its own processes. Empty when /proc cannot tell.
    pub pidns: String,
}

impl Identity {
    /// `pid` and `command` are the holder's: rlock itself for `exec`, the calling shell for
    /// `acquire` (which exits at once).
    ///
    /// The host, user and pid namespace are looked up once per process: `exec` asks again for
    /// the record of its run (`cmd/record.rs`), at its end, where each lookup would lengthen it.
    pub fn current(pid: u32, command: String) -> Self {
        static MACHINE: OnceLock<(String, String, String)> = OnceLock::new();
        let (host, user, pidns) = MACHINE
            .get_or_init(|| (host_name(), user_name(), pid_namespace()))
            .clone();
        Identity {
            host,
            pid,
            user,
            command,
            pidns,
        }
    }
}

/// Who runs rlock: $USER, or $LOGNAME (what cron and login set), before asking the user
/// database; the uid when it has no name.
fn user_name() -> String {
    let uid = nix::unistd::getuid();
    ["USER", "LOGNAME"]
        .iter()
        .find_map(|var| std::env::var(var).ok().filter(|u| !u.is_empty()))
        .or_else(|| name_of(uid))
        .unwrap_or_else(|| uid.to_string())
}

/// The name the user database gives `uid`. A static glibc knows users from /etc/passwd alone
/// (`names.rs`), so a static rlock reads that file itself rather than start the C library's
/// name services for one line; a dynamic one asks the C library, which follows nsswitch.conf
/// (and so finds the users of a directory service too).
fn name_of(uid: nix::unistd::Uid) -> Option<String> {
    if cfg!(all(
        target_os = "linux",
        target_env = "gnu",
        target_feature = "crt-static"
    )) {
        passwd_name(&std::fs::read("/etc/passwd").ok()?, uid.as_raw())
    } else {
        nix::unistd::User::from_uid(uid)
            .ok()
            .flatten()
            .map(|u| u.name)
    }
}

/// The name of the first entry for `uid` in `passwd` (the lines of /etc/passwd: `name:password:
/// uid:gid:gecos:home:shell`), as glibc's `files` service reads it: leading blanks, blank lines
/// and comments skipped, a line of fewer than seven fields refused.
fn passwd_name(passwd: &[u8], uid: u32) -> Option<String> {
    passwd.split(|&b| b == b'\n').find_map(|line| {
        let line = line.trim_ascii_start();
        if line.is_empty() || line.starts_with(b"#") {
            return None;
        }
        let fields: Vec<&[u8]> = line.split(|&b| b == b':').collect();
        let [name, _password, id, _, _, _, _, ..] = fields[..] else {
            return None;
        };
        let id: u32 = std::str::from_utf8(id).ok()?.parse().ok()?;
        (id == uid && !name.is_empty()).then(|| String::from_utf8_lossy(name).into_owned())
    })
}

/// This machine's name, as a holder records it.
fn host_name() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_else(|| "unknown-host".into())
}

/// This process's pid namespace, as /proc names it (`pid:[4026531836]`); empty when unknown.
/// (A holder's pid is its own or its parent's, which shares the namespace.)
fn pid_namespace() -> String {
    std::fs::read_link("/proc/self/ns/pid")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// True when a holder recorded as `pid` on `host` (in pid namespace `pidns`, when the record
/// says) is this machine's, and no such process exists any more (`kill(pid, 0)` fails with
/// ESRCH; EPERM means it exists, as another user's). A holder on another host, in another pid
/// namespace (a container that shares the host's name), or with no usable pid, is never called
/// gone: nobody here can know.
///
/// One limit: a pid the system gave to a new process since looks alive (the lock is then not
/// called stale). A record written before rlock recorded namespaces is judged by this one's.
pub fn process_gone(host: &str, pid: i64, pidns: Option<&str>) -> bool {
    static HOST: OnceLock<String> = OnceLock::new();
    static PIDNS: OnceLock<String> = OnceLock::new();
    // A number no process id can be (over 2^31) names no process.
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    // 0 and negative numbers name process groups to kill(2), not one process.
    if pid <= 0 || host != HOST.get_or_init(host_name) {
        return false;
    }
    if let Some(ns) = pidns.filter(|ns| !ns.is_empty())
        && ns != PIDNS.get_or_init(pid_namespace)
    {
        return false;
    }
    matches!(
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None),
        Err(nix::errno::Errno::ESRCH)
    )
}

#[cfg(test)]
mod tests {
    use super::passwd_name;

    #[test]
    fn a_uid_is_named_by_its_first_line_in_passwd() {
        let passwd =
            b"# users\n\nroot:x:0:0:root:/root:/bin/bash\nci:x:1000:1000::/home/ci:/bin/sh\n\
                       twin:x:1000:1000::/:/bin/sh\nbad:x:notanumber:0::/:/bin/sh\n:x:7:0::/:\n";
        assert_eq!(passwd_name(passwd, 0).as_deref(), Some("root"));
        assert_eq!(passwd_name(passwd, 1000).as_deref(), Some("ci"));
        assert_eq!(
            passwd_name(passwd, 7),
            None,
            "an entry without a name names nobody"
        );
        assert_eq!(passwd_name(passwd, 4242), None);
        assert_eq!(
            passwd_name(b"  ops:x:5:5::/:/bin/sh\n", 5).as_deref(),
            Some("ops")
        );
        assert_eq!(passwd_name(b"short:x:5\n", 5), None, "too few fields");
        assert_eq!(passwd_name(b"", 0), None);
    }
}
