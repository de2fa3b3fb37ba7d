//! The binary under test: the `rlock` command builder and running it to completion.

use std::ffi::OsStr;
use std::fmt;
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::limits::RUN_TIMEOUT;
use crate::server::RedisServer;

/// The `rlock` executable under test. Cargo builds it for the package's integration tests and
/// benchmarks, and cargo 1.94 and later name it in `CARGO_BIN_EXE_rlock` when they run the tests
/// (the tests' own `env!("CARGO_BIN_EXE_rlock")` is set when they are compiled, which a
/// dependency such as this crate is not). Without it (an older cargo, or an executable run by
/// hand) the binary is where cargo puts it: `target/…/debug/rlock` beside the `deps/` directory
/// of the running test or benchmark executable. Panics when there is no such file.
pub fn rlock_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let bin = match std::env::var_os("CARGO_BIN_EXE_rlock") {
            Some(named) if !named.is_empty() => PathBuf::from(named),
            _ => {
                let exe = std::env::current_exe().expect("the running executable's path");
                let dir = exe.parent().expect("the executable's directory");
                let dir = match dir.ends_with("deps") {
                    true => dir.parent().unwrap_or(dir),
                    false => dir,
                };
                dir.join("rlock")
            }
        };
        assert!(
            bin.is_file(),
            "no rlock binary at {} (cargo builds it for the tests and the benchmark: run them \
             with `cargo test` or `cargo bench`)",
            bin.display()
        );
        bin
    })
}

/// `rlock` with every `RLOCK_*`, `REDIS_URL` and `REDISCLI_AUTH` removed from its environment,
/// so the developer's settings cannot leak into a test.
pub fn rlock() -> Command {
    let mut cmd = Command::new(rlock_bin());
    for (name, _) in std::env::vars_os() {
        if name.as_encoded_bytes().starts_with(b"RLOCK_") {
            cmd.env_remove(&name);
        }
    }
    cmd.env_remove("REDIS_URL").env_remove("REDISCLI_AUTH");
    // The managed-service profile's CA, trusted as a system's roots are (managed.rs).
    if let Some(ca) = crate::managed::ca_file() {
        cmd.env("SSL_CERT_FILE", ca);
    }
    cmd
}

/// `rlock --url <server.url()>`; add the subcommand and its options. With `RLOCK_TEST_ACL`, as
/// the documented ACL user (which `RedisServer` makes as it starts).
pub fn rlock_at(server: &RedisServer) -> Command {
    let mut cmd = rlock();
    cmd.arg("--url").arg(crate::acl::suite_url(server.port()));
    cmd
}

/// `rlock --url <server.url()>` as the default user, whatever `RLOCK_TEST_ACL` says: for the
/// tests that compare it with users of their own, or use another prefix.
pub fn rlock_as_default(server: &RedisServer) -> Command {
    let mut cmd = rlock();
    cmd.arg("--url").arg(server.url());
    cmd
}

/// What a finished process left behind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Output {
    /// The exit code, or `-N` when the process died of signal N (so it never collides with an
    /// exit code of 128+N).
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl fmt::Display for Output {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "exit code {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `cmd` to completion with stdin from /dev/null and captured stdout and stderr. Panics
/// (after SIGKILL) if it takes longer than `RUN_TIMEOUT`, or if a process it left behind keeps
/// its stdout or stderr open that long.
pub fn run(cmd: &mut Command) -> Output {
    run_looking(cmd, Duration::from_millis(5), |_| {}).0
}

/// `run`, calling `look` with the child's pid every `pause` while it runs, each time before its
/// exit is looked for (so the last call is at most one pause before the end); also returns
/// when its exit was seen.
pub(crate) fn run_looking(
    cmd: &mut Command,
    pause: Duration,
    mut look: impl FnMut(u32),
) -> (Output, Instant) {
    let deadline = Instant::now() + RUN_TIMEOUT;
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot spawn {:?}: {e}", cmd.get_program()));
    let (out_buf, out_thread) = drain(child.stdout.take().expect("piped stdout"));
    let (err_buf, err_thread) = drain(child.stderr.take().expect("piped stderr"));
    let text =
        |buf: &Arc<Mutex<Vec<u8>>>| String::from_utf8_lossy(&buf.lock().unwrap()).into_owned();
    let describe = || {
        format!(
            "{:?} {:?}",
            cmd.get_program(),
            cmd.get_args().collect::<Vec<&OsStr>>()
        )
    };

    let status = loop {
        look(child.id());
        if let Some(status) = child.try_wait().expect("wait for child") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{} did not finish within {RUN_TIMEOUT:?} and was killed\n--- stdout ---\n{}\n--- stderr ---\n{}",
                describe(),
                text(&out_buf),
                text(&err_buf)
            );
        }
        thread::sleep(pause);
    };
    let exited = Instant::now();
    while !(out_thread.is_finished() && err_thread.is_finished()) {
        if Instant::now() >= deadline {
            panic!(
                "{} exited with {status} but its stdout/stderr stayed open for {RUN_TIMEOUT:?} \
                 (a process it started still holds them)\n--- stdout ---\n{}\n--- stderr ---\n{}",
                describe(),
                text(&out_buf),
                text(&err_buf)
            );
        }
        thread::sleep(Duration::from_millis(5));
    }
    let _ = out_thread.join();
    let _ = err_thread.join();
    let out = Output {
        code: status
            .code()
            .or(status.signal().map(|s| -s))
            .expect("exit code or signal"),
        stdout: text(&out_buf),
        stderr: text(&err_buf),
    };
    (out, exited)
}

/// A buffer that a thread fills from a reader, and that thread: what `drain` returns.
pub type Drain = (Arc<Mutex<Vec<u8>>>, thread::JoinHandle<()>);

/// Reads `src` to its end on a thread, into a buffer that stays readable meanwhile.
pub fn drain(mut src: impl Read + Send + 'static) -> Drain {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&buf);
    let handle = thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        loop {
            match src.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => sink.lock().unwrap().extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
    });
    (buf, handle)
}
