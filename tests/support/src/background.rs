//! `Background`: a process the test does not wait for at once, killed on drop.

use std::fs::{self, File};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

use crate::binary::Output;

/// A process running in the background with its output in files (`DIR/NAME.stdout` and
/// `DIR/NAME.stderr`), so a failing test leaves no process behind:
///
/// - started with `spawn`, it is SIGKILLed and reaped on drop if it is still running (`rlock
///   exec` children die with it: they have SIGKILL as parent-death signal);
/// - started with `spawn_group`, it leads a process group of its own. On drop its group is
///   SIGKILLed, and so is the group of the child whose pid it wrote to `$D/pid` (rlock exec's
///   child leads a group of its own).
pub struct Background {
    name: String,
    child: Child,
    dir: PathBuf,
    /// Started with `spawn_group`.
    group: bool,
    /// Exit code (-N for death by signal N) and when the exit was first seen.
    exited: Option<(i32, Instant)>,
}

impl Background {
    /// Spawns `cmd` as it is, stdin from /dev/null and output to files in `dir`.
    pub fn spawn(name: &str, dir: &Path, cmd: &mut Command) -> Background {
        Self::start(name, dir, cmd, false)
    }

    /// Spawns `cmd` with `$D` set to `dir`, leading a process group of its own, stdin from
    /// /dev/null and output to files in `dir`.
    pub fn spawn_group(name: &str, dir: &Path, cmd: &mut Command) -> Background {
        cmd.env("D", dir).process_group(0);
        Self::start(name, dir, cmd, true)
    }

    fn start(name: &str, dir: &Path, cmd: &mut Command, group: bool) -> Background {
        let out = File::create(dir.join(format!("{name}.stdout"))).expect("create stdout file");
        let err = File::create(dir.join(format!("{name}.stderr"))).expect("create stderr file");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {name} ({:?}): {e}", cmd.get_program()));
        Background {
            name: name.to_string(),
            child,
            dir: dir.to_path_buf(),
            group,
            exited: None,
        }
    }

    /// The name it was started with, which also names its output files.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The directory its output files are in (`$D` for `spawn_group`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn kill(&self, sig: Signal) {
        signal::kill(Pid::from_raw(self.pid()), sig)
            .unwrap_or_else(|e| panic!("kill -{sig} {} ({}): {e}", self.pid(), self.name));
    }

    /// The exit code and when it was seen, once the process has exited.
    pub fn poll(&mut self) -> Option<(i32, Instant)> {
        if self.exited.is_none()
            && let Some(status) = self.child.try_wait().expect("try_wait")
        {
            let code = status
                .code()
                .or(status.signal().map(|s| -s))
                .expect("exit code or signal");
            self.exited = Some((code, Instant::now()));
        }
        self.exited
    }

    pub fn running(&mut self) -> bool {
        self.poll().is_none()
    }

    /// What it printed so far, for failure messages.
    pub fn output(&self, code: i32) -> Output {
        let read = |ext: &str| {
            fs::read_to_string(self.dir.join(format!("{}.{ext}", self.name))).unwrap_or_default()
        };
        Output {
            code,
            stdout: read("stdout"),
            stderr: read("stderr"),
        }
    }

    /// Its name, pid, state and what it printed so far, for failure messages.
    pub fn describe(&mut self) -> String {
        let (state, o) = match self.poll() {
            Some((code, _)) => (format!("exit code {code}"), self.output(code)),
            None => ("still running".to_string(), self.output(0)),
        };
        format!(
            "{} (pid {}, {state})\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.name,
            self.pid(),
            o.stdout,
            o.stderr
        )
    }

    /// Polls `cond` until it holds; fails at once (with the output) if the process exits first.
    pub fn wait_for(&mut self, what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            if cond() {
                return;
            }
            if !self.running() {
                if cond() {
                    return;
                }
                panic!("{what}: but {}", self.describe());
            }
            if Instant::now() >= deadline {
                panic!(
                    "timed out after {timeout:?} waiting for {what}; {}",
                    self.describe()
                );
            }
            thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits for the exit; returns the output and when the exit was seen (polled every 2 ms).
    pub fn finish(&mut self, timeout: Duration) -> (Output, Instant) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((code, at)) = self.poll() {
                return (self.output(code), at);
            }
            if Instant::now() >= deadline {
                panic!("did not exit within {timeout:?}: {}", self.describe());
            }
            thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if self.group {
            let _ = signal::killpg(Pid::from_raw(self.pid()), Signal::SIGKILL);
            if let Ok(pid) = fs::read_to_string(self.dir.join("pid"))
                .unwrap_or_default()
                .trim()
                .parse::<i32>()
                && pid > 1
            {
                let _ = signal::killpg(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
        if self.exited.is_none() {
            if !self.group {
                let _ = self.child.kill();
            }
            let _ = self.child.wait();
        }
    }
}
