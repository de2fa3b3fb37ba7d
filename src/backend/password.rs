//! Where the password comes from. Given once ($RLOCK_PASSWORD, $REDISCLI_AUTH) it is the same for
//! every connection; `--password-file` is read again and `--password-command` run again for every
//! new connection, so that a password that changes (a managed service's 15-minute token) is the
//! current one whenever rlock connects: at the start, after a cut connection, a failover or a long
//! wait. The password itself is never kept: it is asked for, sent in AUTH and dropped.

use std::fmt;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use nix::sys::signal::{SigSet, SigmaskHow, Signal, killpg, sigprocmask};
use nix::unistd::Pid;

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
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(line)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0);
    // SAFETY: sigprocmask is async-signal-safe. rlock blocks the signals it reads from a
    // signalfd, and a child inherits the mask: the command gets signals as any program does.
    unsafe {
        cmd.pre_exec(|| {
            sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not be started: {e}"))?;
    let group = Pid::from_raw(child.id() as i32);
    let Some(out) = child.stdout.take() else {
        return Err("could not be started: no pipe for its output".into());
    };
    let (tx, rx) = mpsc::channel();
    // A thread of its own reads the output and reaps the command, so that this one can stop
    // waiting at `timeout` whatever the command does with its pipe.
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let read = out.take(PASSWORD_MAX + 1).read_to_end(&mut bytes);
        let status = child.wait();
        let _ = tx.send((read.map(|_| bytes), status));
    });
    let (read, status) = match rx.recv_timeout(timeout) {
        Ok(done) => done,
        Err(_) => {
            let _ = killpg(group, Signal::SIGKILL);
            return Err(format!(
                "did not finish within {} and was stopped",
                humantime::format_duration(timeout)
            ));
        }
    };
    let status = status.map_err(|e| format!("could not be waited for: {e}"))?;
    let bytes = read.map_err(|e| format!("output could not be read: {e}"))?;
    // Said first: a command whose output was cut short may die of the closed pipe.
    if bytes.len() as u64 > PASSWORD_MAX {
        return Err(format!(
            "printed more than {PASSWORD_MAX} bytes, more than a password"
        ));
    }
    if !status.success() {
        return Err(
            match (
                status.code(),
                std::os::unix::process::ExitStatusExt::signal(&status),
            ) {
                (Some(code), _) => format!("exited with status {code}"),
                (_, Some(sig)) => format!("was killed by signal {sig}"),
                _ => format!("failed ({status})"),
            },
        );
    }
    password_of(bytes)
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
