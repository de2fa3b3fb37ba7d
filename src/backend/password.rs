//! Where the password comes from. Given once ($RLOCK_PASSWORD, $REDISCLI_AUTH) it is the same for
//! every connection; `--password-file` is read again and `--password-command` run again for every
//! new connection, so that a password that changes (a managed service's 15-minute token) is the
//! current one whenever rlock connects: at the start, after a cut connection, a failover or a long
//! wait. The password itself is never kept: it is asked for, sent in AUTH and dropped.

use std::ffi::CString;
use std::fmt;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::spawn::{PosixSpawnAttr, PosixSpawnFileActions, PosixSpawnFlags, posix_spawn};
use nix::sys::signal::{SigSet, Signal, killpg};
use nix::sys::stat::Mode;
use nix::sys::wait::{WaitStatus, waitpid};
use nix::unistd::{Pid, pipe2};
use rustix::process::PidfdFlags;

use super::SetupError;
use super::files::{PASSWORD_MAX, read_bounded};

/// A source of the Redis password.
#[derive(Clone, PartialEq, Eq)]
pub enum Password {
    /// The same for every connection ($RLOCK_PASSWORD, $REDISCLI_AUTH).
    Fixed(String),
    /// `--password-file`: its first line, read for every new connection.
    File(PathBuf),
    /// `--password-command`: `sh -c LINE` for every new connection, its output the password,
    /// stopped (its whole process group) after `timeout` (`--connect-timeout`).
    Command { line: String, timeout: Duration },
}

/// Why no password could be had: a file that cannot be read is a configuration error (78), as
/// at the start; a command that failed gives no credential (77).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PasswordError {
    File(SetupError),
    /// What went wrong with the command, in words that never hold its output.
    Command(String),
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Password::Fixed(_) => write!(f, "Password::Fixed(***)"),
            Password::File(path) => write!(f, "Password::File({path:?})"),
            Password::Command { line, timeout } => {
                write!(f, "Password::Command({line:?}, {timeout:?})")
            }
        }
    }
}

impl Password {
    /// Whether each connection asks for the password anew (a file, a command).
    pub fn changes(&self) -> bool {
        !matches!(self, Password::Fixed(_))
    }

    /// The password now.
    pub fn get(&self) -> Result<String, PasswordError> {
        match self {
            Password::Fixed(p) => Ok(p.clone()),
            Password::File(path) => read_file(path).map_err(PasswordError::File),
            Password::Command { line, timeout } => {
                run(line, *timeout).map_err(PasswordError::Command)
            }
        }
    }
}

/// The first line of the password file at `path`.
pub fn read_file(path: &std::path::Path) -> Result<String, SetupError> {
    let bytes = read_bounded("password file", path, PASSWORD_MAX)?;
    let text = String::from_utf8(bytes).map_err(|_| {
        SetupError::Config(format!(
            "password file '{}' is not UTF-8 text",
            path.display()
        ))
    })?;
    let first = text.lines().next().unwrap_or("").to_string();
    if first.is_empty() {
        return Err(SetupError::Config(format!(
            "password file '{}' is empty",
            path.display()
        )));
    }
    Ok(first)
}

/// Runs `sh -c line` (stdin /dev/null, stderr rlock's, so that the command's own complaints
/// reach the user), within `timeout`, and gives its output, one trailing newline taken off.
/// A command still running at `timeout` is killed with its whole process group: a helper that
/// waits for a prompt nobody answers must not hold up a connection.
fn run(line: &str, timeout: Duration) -> Result<String, String> {
    let deadline = Instant::now() + timeout;
    let (child, out) = spawn(line).map_err(|e| format!("could not be started: {e}"))?;
    // All in this thread: a thread of rlock's still alive when the guardian is forked would
    // leave the fork a copy of memory with locks that thread held. The command is rlock's
    // unreaped child, so its pidfd is surely its own.
    let pidfd = rustix::process::Pid::from_raw(child.as_raw())
        .and_then(|pid| rustix::process::pidfd_open(pid, PidfdFlags::empty()).ok());
    let read = read_until(&out, deadline);
    // Closed before the wait: a command whose output was cut short ends of the closed pipe.
    drop(out);
    let ended = matches!(read, Ok(Some(_))) && ends_by(child, pidfd.as_ref(), deadline);
    if !ended {
        let _ = killpg(child, Signal::SIGKILL);
        let _ = waitpid(child, None);
        if let Err(e) = read {
            return Err(format!("output could not be read: {e}"));
        }
        return Err(format!(
            "did not finish within {} and was stopped",
            humantime::format_duration(timeout)
        ));
    }
    let status = waitpid(child, None).map_err(|e| format!("could not be waited for: {e}"))?;
    let bytes = read.ok().flatten().unwrap_or_default();
    // Said first: a command whose output was cut short may die of the closed pipe.
    if bytes.len() as u64 > PASSWORD_MAX {
        return Err(format!(
            "printed more than {PASSWORD_MAX} bytes, more than a password"
        ));
    }
    match status {
        WaitStatus::Exited(_, 0) => password_of(bytes),
        WaitStatus::Exited(_, code) => Err(format!("exited with status {code}")),
        WaitStatus::Signaled(_, sig, _) => Err(format!("was killed by signal {}", sig as i32)),
        other => Err(format!("failed ({other:?})")),
    }
}

/// What `out` gives until its end, or until more than a password could be; None at `deadline`.
fn read_until(out: &OwnedFd, deadline: Instant) -> nix::Result<Option<Vec<u8>>> {
    let mut bytes = Vec::new();
    let mut buf = [0u8; 4096];
    while bytes.len() as u64 <= PASSWORD_MAX {
        if !ready(out.as_fd(), deadline)? {
            return Ok(None);
        }
        match nix::unistd::read(out, &mut buf) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(Some(bytes))
}

/// Whether `child` ended by `deadline` (its pidfd readable; without pidfds, looked at in turn).
fn ends_by(child: Pid, pidfd: Option<&OwnedFd>, deadline: Instant) -> bool {
    match pidfd {
        Some(fd) => ready(fd.as_fd(), deadline).unwrap_or(false),
        // A zombie, unreaped: its stat's state is Z (and its pid is not reused meanwhile).
        None => loop {
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            let state = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next());
            match state {
                Some('Z') | None => break true,
                _ if Instant::now() >= deadline => break false,
                _ => std::thread::sleep(Duration::from_millis(5)),
            }
        },
    }
}

/// Whether `fd` can be read before `deadline`.
fn ready(fd: BorrowedFd, deadline: Instant) -> nix::Result<bool> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        let wait =
            PollTimeout::try_from(left.max(Duration::from_millis(1))).unwrap_or(PollTimeout::MAX);
        match poll(&mut [PollFd::new(fd, PollFlags::POLLIN)], wait) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => {}
            Ok(_) => return Ok(true),
            Err(e) => return Err(e),
        }
    }
}

/// Starts `/bin/sh -c line` (posix_spawn, no code of rlock's in the child): stdin /dev/null,
/// stdout a pipe whose reading end is returned, stderr rlock's, the leader of a process group
/// of its own, with no signal blocked (rlock blocks those it reads from a signalfd, and a child
/// would inherit the mask) and SIGPIPE as usual (rlock ignores it), in rlock's environment.
fn spawn(line: &str) -> nix::Result<(Pid, OwnedFd)> {
    let (read, write) = pipe2(OFlag::O_CLOEXEC)?;
    let mut actions = PosixSpawnFileActions::init()?;
    actions.add_open(0, "/dev/null", OFlag::O_RDONLY, Mode::empty())?;
    actions.add_dup2(write.as_raw_fd(), 1)?;
    let mut attr = PosixSpawnAttr::init()?;
    attr.set_flags(
        PosixSpawnFlags::POSIX_SPAWN_SETPGROUP
            | PosixSpawnFlags::POSIX_SPAWN_SETSIGMASK
            | PosixSpawnFlags::POSIX_SPAWN_SETSIGDEF,
    )?;
    attr.set_pgroup(Pid::from_raw(0))?;
    attr.set_sigmask(&SigSet::empty())?;
    let mut pipe = SigSet::empty();
    pipe.add(Signal::SIGPIPE);
    attr.set_sigdefault(&pipe)?;
    let to_c = |s: &[u8]| CString::new(s).map_err(|_| nix::errno::Errno::EINVAL);
    let args = [c"sh".to_owned(), c"-c".to_owned(), to_c(line.as_bytes())?];
    let env = std::env::vars_os()
        .filter_map(|(k, v)| {
            let mut kv = k.into_vec();
            kv.push(b'=');
            kv.extend(v.into_vec());
            CString::new(kv).ok()
        })
        .collect::<Vec<_>>();
    let pid = posix_spawn(c"/bin/sh", &actions, &attr, &args, &env)?;
    drop(write);
    Ok((pid, read))
}

/// The password in a command's output: one line, its newline taken off.
fn password_of(bytes: Vec<u8>) -> Result<String, String> {
    let mut text =
        String::from_utf8(bytes).map_err(|_| "printed something that is not UTF-8 text")?;
    if text.ends_with('\n') {
        text.pop();
        if text.ends_with('\r') {
            text.pop();
        }
    }
    if text.is_empty() {
        return Err("printed nothing".into());
    }
    if text.contains('\n') {
        return Err("printed more than one line (a password is one line)".into());
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(line: &str, ms: u64) -> Password {
        Password::Command {
            line: line.into(),
            timeout: Duration::from_millis(ms),
        }
    }

    #[test]
    fn a_command_prints_the_password() {
        assert_eq!(cmd("echo 's3c ret'", 5000).get(), Ok("s3c ret".into()));
        assert_eq!(cmd("printf 'pw\\r\\n'", 5000).get(), Ok("pw".into()));
        assert_eq!(cmd("printf pw", 5000).get(), Ok("pw".into()));
    }

    #[test]
    fn a_command_that_fails_gives_no_password_and_its_output_is_not_told() {
        let fail = |line: &str| match cmd(line, 5000).get() {
            Err(PasswordError::Command(why)) => why,
            other => panic!("{line}: {other:?}"),
        };
        assert_eq!(fail("echo S3C_out; exit 3"), "exited with status 3");
        assert_eq!(fail("kill -9 $$"), "was killed by signal 9");
        assert_eq!(fail("true"), "printed nothing");
        assert_eq!(fail("echo"), "printed nothing");
        assert!(fail("printf 'a\\nS3C\\n'").contains("more than one line"));
        assert!(fail("printf '\\377'").contains("not UTF-8"));
        assert!(fail("head -c 70000 /dev/zero | tr '\\0' a").contains("more than"));
    }

    #[test]
    fn a_command_that_hangs_is_stopped_with_its_children() {
        let started = std::time::Instant::now();
        // The grandchild keeps the pipe open: only killing the group ends it.
        let got = cmd("sleep 30 & echo late; wait", 300).get();
        assert!(
            matches!(&got, Err(PasswordError::Command(why)) if why.contains("did not finish within 300ms and was stopped")),
            "{got:?}"
        );
        let took = started.elapsed();
        assert!(took < Duration::from_secs(3), "{took:?}");
    }

    #[test]
    fn a_fixed_password_is_not_shown_by_debug() {
        assert_eq!(
            format!("{:?}", Password::Fixed("S3C".into())),
            "Password::Fixed(***)"
        );
    }
}
