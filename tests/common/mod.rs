//! Shared harness for the integration tests: real `redis-server` processes on free loopback
//! ports, the `rlock` binary with a clean environment, and deadline-based waiting.
//!
//! Every helper panics with a message that says what went wrong (and, for a server that will not
//! come up, its log): a test that cannot set itself up fails, it never skips.
#![allow(dead_code)]

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fmt;
use std::fs::{self, File};
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use redis::IntoConnectionInfo;

/// How long a server may take to answer its first PING.
pub const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Connect, read and write timeout of the harness's own connections.
pub const CONN_TIMEOUT: Duration = Duration::from_secs(5);
/// Hard limit for one `run` of the binary under test.
pub const RUN_TIMEOUT: Duration = Duration::from_secs(60);
/// Fresh ports tried by `RedisServer::start_with` before giving up.
const START_ATTEMPTS: usize = 5;
/// Pause between polls in every wait loop.
const POLL: Duration = Duration::from_millis(10);

// ---------------------------------------------------------------------------------------------
// redis-server discovery and spawning (shared with the Cluster and Sentinel harnesses to come)
// ---------------------------------------------------------------------------------------------

const NOT_FOUND: &str = "redis-server not found: install it with `apt-get install -y redis-server`";

/// The `redis-server` executable from PATH; panics (never skips) when there is none.
fn redis_server_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|dir| dir.join("redis-server"))
            .find(|p| {
                use std::os::unix::fs::PermissionsExt;
                p.metadata()
                    .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
            })
            .unwrap_or_else(|| panic!("{NOT_FOUND}"))
    })
}

/// `(major, minor, patch)` of the `redis-server` on PATH, e.g. `(7, 0, 15)`.
pub fn redis_version() -> (u32, u32, u32) {
    static VERSION: OnceLock<(u32, u32, u32)> = OnceLock::new();
    *VERSION.get_or_init(|| {
        let out = Command::new(redis_server_bin())
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{NOT_FOUND} ({e})"));
        // "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=…"
        let text = String::from_utf8_lossy(&out.stdout);
        let v = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix("v="))
            .unwrap_or_else(|| {
                panic!("cannot read a version from `redis-server --version`: {text}")
            });
        let mut parts = v.split('.').map(|n| n.parse::<u32>().unwrap_or(0));
        let mut next = || parts.next().unwrap_or(0);
        (next(), next(), next())
    })
}

/// A port that was free on 127.0.0.1 a moment ago. Racy by nature: callers retry on failure.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

/// The arguments every harness server gets: loopback only, nothing persisted, logs in `dir`.
fn base_args(port: u16, dir: &Path) -> Vec<String> {
    let mut args: Vec<String> = [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        &dir.display().to_string(),
        "--logfile",
        &dir.join("redis.log").display().to_string(),
        "--daemonize",
        "no",
    ]
    .map(String::from)
    .into();
    // DEBUG (SLEEP, SET-ACTIVE-EXPIRE, …) is refused by default since Redis 7, and the option
    // does not exist before it.
    if redis_version().0 >= 7 {
        args.extend(["--enable-debug-command", "yes"].map(String::from));
    }
    args
}

/// Spawns `redis-server` with `args` (which carry the port) in the foreground. Output that
/// comes before the log file is open (bad arguments, say) lands in `dir/stderr.log`.
fn spawn_redis(args: &[String], dir: &Path) -> Child {
    let out = File::options()
        .create(true)
        .append(true)
        .open(dir.join("stderr.log"))
        .expect("open stderr.log");
    let mut cmd = Command::new(redis_server_bin());
    cmd.args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("dup stderr.log"))
        .stderr(out);
    spawn_orphan_proof(cmd).unwrap_or_else(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            panic!("{NOT_FOUND}");
        }
        panic!("cannot spawn redis-server: {e}")
    })
}

type SpawnRequest = (Command, mpsc::Sender<std::io::Result<Child>>);

/// Spawns `cmd` with SIGKILL as its parent-death signal, so a test binary killed outright
/// (timeout, SIGKILL) leaves no server behind. That signal fires when the *thread* that forked
/// exits, and tests may start servers from short-lived threads, so every spawn happens on one
/// thread that lives as long as the test process.
fn spawn_orphan_proof(mut cmd: Command) -> std::io::Result<Child> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        thread::Builder::new()
            .name("redis-spawner".into())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("start the redis-spawner thread");
        Mutex::new(tx)
    });
    let parent = nix::unistd::getpid();
    // SAFETY: only async-signal-safe calls (prctl, getppid) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::other("test process died before exec"));
            }
            Ok(())
        });
    }
    let (reply_tx, reply_rx) = mpsc::channel();
    spawner
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .send((cmd, reply_tx))
        .expect("redis-spawner thread is gone");
    reply_rx.recv().expect("redis-spawner thread is gone")
}

/// Opens a connection with `CONN_TIMEOUT` on connect, read and write.
fn connect(
    port: u16,
    password: Option<&str>,
    timeout: Duration,
) -> redis::RedisResult<redis::Connection> {
    let mut info = format!("redis://127.0.0.1:{port}").into_connection_info()?;
    let mut settings = info.redis_settings().clone().set_skip_set_lib_name();
    if let Some(pw) = password {
        settings = settings.set_password(pw);
    }
    info = info.set_redis_settings(settings);
    let conn = redis::Client::open(info)?.get_connection_with_timeout(timeout)?;
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;
    Ok(conn)
}

/// Polls until the server on `port` answers PING and is `child` (not some other server that won
/// the race for the port), or `child` exits, or `deadline` passes.
fn wait_ready(
    child: &mut Child,
    port: u16,
    password: Option<&str>,
    deadline: Instant,
) -> Result<(), String> {
    loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!("redis-server exited early with {status}"));
        }
        let probe = connect(port, password, Duration::from_secs(1)).and_then(|mut c| {
            redis::cmd("PING").query::<String>(&mut c)?;
            redis::cmd("INFO").arg("server").query::<String>(&mut c)
        });
        let err = match probe {
            Ok(info) => {
                let pid = info
                    .lines()
                    .find_map(|l| l.strip_prefix("process_id:"))
                    .and_then(|p| p.trim().parse::<u32>().ok());
                if pid == Some(child.id()) {
                    return Ok(());
                }
                format!("port {port} is answered by another server (pid {pid:?})")
            }
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(format!("no PING answer within {READY_TIMEOUT:?}: {err}"));
        }
        thread::sleep(POLL);
    }
}

/// SIGKILL and reap; errors ignored (the process may be gone already).
fn kill_and_reap(child: &mut Child) {
    let pid = Pid::from_raw(child.id() as i32);
    let _ = signal::kill(pid, Signal::SIGCONT);
    let _ = signal::kill(pid, Signal::SIGKILL);
    let _ = child.wait();
}

/// The state letter from /proc/PID/stat (`R`, `S`, `T`, `Z`, …), `None` if there is no such process.
fn proc_state(pid: i32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "PID (COMM) S …": COMM may itself hold spaces and parentheses.
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

// ---------------------------------------------------------------------------------------------
// RedisServer
// ---------------------------------------------------------------------------------------------

/// A `redis-server` on 127.0.0.1 at a free port, with its own temporary directory. Killed (and
/// reaped) on drop, frozen or not.
pub struct RedisServer {
    child: Option<Child>,
    pid: i32,
    port: u16,
    extra: Vec<String>,
    password: Option<String>,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// A plain server.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// A server with extra `redis-server` arguments appended (later ones win), e.g.
    /// `&["--requirepass", "s3cret"]`. A `--requirepass` is remembered so `conn()` authenticates.
    pub fn start_with(extra: &[&str]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("rlock-redis-")
            .tempdir()
            .expect("create temp dir for redis-server");
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        let password = extra
            .windows(2)
            .rev()
            .find(|w| w[0] == "--requirepass")
            .map(|w| w[1].clone())
            .filter(|p| !p.is_empty());
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port();
            let mut args = base_args(port, dir.path());
            args.extend(extra.iter().cloned());
            let mut child = spawn_redis(&args, dir.path());
            let deadline = Instant::now() + READY_TIMEOUT;
            match wait_ready(&mut child, port, password.as_deref(), deadline) {
                Ok(()) => {
                    return RedisServer {
                        pid: child.id() as i32,
                        child: Some(child),
                        port,
                        extra,
                        password,
                        dir,
                    };
                }
                Err(e) => {
                    kill_and_reap(&mut child);
                    failures.push(format!("port {port}: {e}"));
                }
            }
        }
        panic!(
            "redis-server did not come up after {START_ATTEMPTS} attempts:\n  {}\n{}",
            failures.join("\n  "),
            read_logs(dir.path())
        );
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT`, without the password even if one is required.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The pid of the current (or, after `kill9`, the last) server process.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The server's temporary directory (its `--dir`; holds `redis.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The password from `--requirepass`, if one was given.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// A fresh connection (authenticated when the server requires a password) with 5 s
    /// connect, read and write timeouts.
    pub fn conn(&self) -> redis::Connection {
        connect(self.port, self.password.as_deref(), CONN_TIMEOUT).unwrap_or_else(|e| {
            panic!(
                "cannot connect to redis-server on port {}: {e}\n{}",
                self.port,
                self.log()
            )
        })
    }

    /// SIGSTOP: the server keeps its socket but answers nothing. Returns once it is stopped.
    pub fn freeze(&self) {
        self.signal(Signal::SIGSTOP);
        let pid = self.pid;
        wait_until("redis-server to stop after SIGSTOP", CONN_TIMEOUT, || {
            matches!(proc_state(pid), Some('T') | None)
        });
    }

    /// SIGCONT after `freeze`. Returns once the server is no longer stopped.
    pub fn thaw(&self) {
        self.signal(Signal::SIGCONT);
        let pid = self.pid;
        wait_until("redis-server to resume after SIGCONT", CONN_TIMEOUT, || {
            !matches!(proc_state(pid), Some('T'))
        });
    }

    /// SIGKILL and reap: the server is gone, with its data, and the port is closed.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
    }

    /// Starts the server again on the same port with the same arguments (killing it first if it
    /// still runs). Nothing persists, so it comes back empty. Returns once it answers PING.
    pub fn restart(&mut self) {
        self.kill9();
        let deadline = Instant::now() + READY_TIMEOUT;
        let mut args = base_args(self.port, self.dir.path());
        args.extend(self.extra.iter().cloned());
        loop {
            let mut child = spawn_redis(&args, self.dir.path());
            match wait_ready(&mut child, self.port, self.password.as_deref(), deadline) {
                Ok(()) => {
                    self.pid = child.id() as i32;
                    self.child = Some(child);
                    return;
                }
                Err(e) => {
                    kill_and_reap(&mut child);
                    // The port may be briefly held by someone else; retry until the deadline.
                    if Instant::now() >= deadline {
                        panic!(
                            "redis-server did not restart on port {}: {e}\n{}",
                            self.port,
                            self.log()
                        );
                    }
                    thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }

    /// The server's log (and anything it printed before opening it), for failure messages.
    pub fn log(&self) -> String {
        read_logs(self.dir.path())
    }

    /// Runs one command and returns its reply; panics on an error reply.
    pub fn cmd(&self, args: &[&str]) -> redis::Value {
        self.try_cmd(args)
            .unwrap_or_else(|e| panic!("redis {args:?} failed: {e}"))
    }

    /// Runs one command; an error reply comes back as `Err`.
    pub fn try_cmd(&self, args: &[&str]) -> redis::RedisResult<redis::Value> {
        let (name, rest) = args
            .split_first()
            .expect("cmd needs at least a command name");
        redis::cmd(name).arg(rest).query(&mut self.conn())
    }

    pub fn get(&self, key: &str) -> Option<String> {
        self.query(redis::cmd("GET").arg(key))
    }

    /// PTTL in ms: -1 without expiry, -2 when the key does not exist.
    pub fn pttl(&self, key: &str) -> i64 {
        self.query(redis::cmd("PTTL").arg(key))
    }

    pub fn exists(&self, key: &str) -> bool {
        self.query(redis::cmd("EXISTS").arg(key))
    }

    pub fn set(&self, key: &str, val: &str) {
        self.query::<()>(redis::cmd("SET").arg(key).arg(val));
    }

    pub fn hgetall(&self, key: &str) -> HashMap<String, String> {
        self.query(redis::cmd("HGETALL").arg(key))
    }

    /// `TYPE key`: `string`, `hash`, `list`, …, or `none`.
    pub fn key_type(&self, key: &str) -> String {
        self.query(redis::cmd("TYPE").arg(key))
    }

    fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        cmd.query(&mut self.conn())
            .unwrap_or_else(|e| panic!("redis command failed on port {}: {e}", self.port))
    }

    fn signal(&self, sig: Signal) {
        assert!(
            self.child.is_some(),
            "redis-server on port {} is not running",
            self.port
        );
        signal::kill(Pid::from_raw(self.pid), sig)
            .unwrap_or_else(|e| panic!("kill -{sig} {}: {e}", self.pid));
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
    }
}

impl fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("pid", &self.pid)
            .field("running", &self.child.is_some())
            .finish()
    }
}

fn read_logs(dir: &Path) -> String {
    let mut text = String::new();
    for name in ["stderr.log", "redis.log"] {
        let log = fs::read_to_string(dir.join(name)).ok();
        if let Some(s) = log.filter(|s| !s.trim().is_empty()) {
            text.push_str(&format!("--- {name} ---\n{s}"));
        }
    }
    if text.is_empty() {
        text.push_str("(redis-server wrote no log)");
    }
    text
}

// ---------------------------------------------------------------------------------------------
// The binary under test
// ---------------------------------------------------------------------------------------------

/// `rlock` with every `RLOCK_*`, `REDIS_URL` and `REDISCLI_AUTH` removed from its environment,
/// so the developer's settings cannot leak into a test.
pub fn rlock() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rlock"));
    for (name, _) in std::env::vars_os() {
        if name.as_encoded_bytes().starts_with(b"RLOCK_") {
            cmd.env_remove(&name);
        }
    }
    cmd.env_remove("REDIS_URL").env_remove("REDISCLI_AUTH");
    cmd
}

/// `rlock --url <server.url()>`; add the subcommand and its options.
pub fn rlock_at(server: &RedisServer) -> Command {
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
    let started = Instant::now();
    let deadline = started + RUN_TIMEOUT;
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
        thread::sleep(Duration::from_millis(5));
    };
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
    Output {
        code: status
            .code()
            .or(status.signal().map(|s| -s))
            .expect("exit code or signal"),
        stdout: text(&out_buf),
        stderr: text(&err_buf),
    }
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

// ---------------------------------------------------------------------------------------------
// Waiting and processes
// ---------------------------------------------------------------------------------------------

/// Polls `cond` about every 10 ms until it holds; panics naming `what` after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        thread::sleep(POLL);
    }
}

/// Waits until `path` exists and is non-empty, and returns its contents. A writer that needs
/// the whole content seen should write elsewhere and rename, or the reader should wait for a
/// terminator with `wait_until`.
pub fn wait_for_file(path: impl AsRef<Path>, timeout: Duration) -> String {
    let path = path.as_ref();
    let mut contents = String::new();
    wait_until(
        &format!("file {} to be written", path.display()),
        timeout,
        || match fs::read_to_string(path) {
            Ok(s) if !s.is_empty() => {
                contents = s;
                true
            }
            _ => false,
        },
    );
    contents
}

/// Whether `pid` names a live process; a zombie (exited, not yet reaped) counts as dead.
pub fn pid_alive(pid: i32) -> bool {
    assert!(pid > 0, "pid_alive({pid}): not a single process id");
    match signal::kill(Pid::from_raw(pid), None) {
        Ok(()) | Err(Errno::EPERM) => !matches!(proc_state(pid), Some('Z' | 'X') | None),
        Err(_) => false,
    }
}

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

// ---------------------------------------------------------------------------------------------
// redis-cli, and replies read as maps
// ---------------------------------------------------------------------------------------------

/// The `redis-cli` executable from PATH; panics (never skips) when there is none.
pub fn redis_cli_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|dir| dir.join("redis-cli"))
            .find(|p| p.is_file())
            .unwrap_or_else(|| {
                panic!("redis-cli not found: install it with `apt-get install -y redis-tools`")
            })
    })
}

/// `INFO section` of the server on `port` as `field → value`.
fn info_on(port: u16, section: &str) -> redis::RedisResult<HashMap<String, String>> {
    let text: String =
        redis::cmd("INFO")
            .arg(section)
            .query(&mut connect(port, None, CONN_TIMEOUT)?)?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect())
}

// ---------------------------------------------------------------------------------------------
// RedisCluster
// ---------------------------------------------------------------------------------------------

/// Three `redis-server` masters (no replicas) made into one Redis Cluster with
/// `redis-cli --cluster create`; every node is a [`RedisServer`], killed on drop.
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts the three nodes, creates the cluster and returns once every node says
    /// `cluster_state:ok` and knows the owner of all 16384 slots.
    pub fn start() -> Self {
        let nodes: Vec<RedisServer> = (0..3)
            .map(|_| {
                // The bus port is named, so a client port above 55535 (no room for +10000)
                // cannot stop a node from starting.
                let bus = free_port().to_string();
                RedisServer::start_with(&[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    "2000",
                    "--cluster-port",
                    &bus,
                ])
            })
            .collect();
        let cluster = RedisCluster { nodes };
        let mut create = Command::new(redis_cli_bin());
        create.args(["--cluster", "create"]);
        for n in &cluster.nodes {
            create.arg(format!("127.0.0.1:{}", n.port()));
        }
        create.args(["--cluster-replicas", "0", "--cluster-yes"]);
        let out = run(&mut create);
        assert_eq!(
            out.code,
            0,
            "redis-cli --cluster create failed: {out}\n{}",
            cluster.logs()
        );
        let ports: Vec<u16> = cluster.nodes.iter().map(RedisServer::port).collect();
        wait_until(
            "every cluster node to say cluster_state:ok and agree on the slots",
            Duration::from_secs(20),
            || {
                cluster.nodes.iter().all(|n| {
                    let ok = n
                        .try_cmd(&["CLUSTER", "INFO"])
                        .ok()
                        .and_then(|v| redis::from_redis_value::<String>(v).ok())
                        .is_some_and(|s| s.contains("cluster_state:ok"));
                    ok && slot_owners_on(n)
                        .is_some_and(|owners| owners.iter().all(|p| ports.contains(p)))
                })
            },
        );
        cluster
    }

    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }

    /// `redis://127.0.0.1:PORT` of every node, the seed list for `rlock --cluster`.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// `CLUSTER KEYSLOT key`.
    pub fn slot(&self, key: &str) -> u16 {
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.nodes[0].conn())
            .expect("CLUSTER KEYSLOT")
    }

    /// The index (into `nodes()`) of the master that serves `slot`, as node 0 sees it.
    pub fn owner_of_slot(&self, slot: u16) -> usize {
        let owners = slot_owners_on(&self.nodes[0]).expect("CLUSTER SLOTS on node 0");
        let port = owners[slot as usize];
        self.nodes
            .iter()
            .position(|n| n.port() == port)
            .unwrap_or_else(|| panic!("slot {slot} is served by unknown port {port}"))
    }

    /// The index of the master that serves `key`.
    pub fn owner(&self, key: &str) -> usize {
        self.owner_of_slot(self.slot(key))
    }

    /// `CLUSTER MYID` of node `i`.
    pub fn node_id(&self, i: usize) -> String {
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.nodes[i].conn())
            .expect("CLUSTER MYID")
    }

    /// The logs of every node, for failure messages.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(|n| format!("=== node on port {} ===\n{}", n.port(), n.log()))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// `CLUSTER SLOTS` of `node`: the port of the master of each of the 16384 slots (0 where
/// none), or None when the node does not answer it.
fn slot_owners_on(node: &RedisServer) -> Option<Vec<u16>> {
    let reply = node.try_cmd(&["CLUSTER", "SLOTS"]).ok()?;
    let redis::Value::Array(ranges) = reply else {
        return None;
    };
    let mut owners = vec![0u16; 16384];
    for range in ranges {
        let redis::Value::Array(parts) = range else {
            return None;
        };
        let (Some(redis::Value::Int(from)), Some(redis::Value::Int(to))) =
            (parts.first(), parts.get(1))
        else {
            return None;
        };
        let Some(redis::Value::Array(master)) = parts.get(2) else {
            return None;
        };
        let Some(redis::Value::Int(port)) = master.get(1) else {
            return None;
        };
        for slot in *from..=*to {
            owners[slot as usize] = *port as u16;
        }
    }
    Some(owners)
}

// ---------------------------------------------------------------------------------------------
// Sentinels
// ---------------------------------------------------------------------------------------------

/// One `redis-server --sentinel` process with its own config file (Sentinel rewrites it) in its
/// own temporary directory. Killed on drop.
struct SentinelProcess {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

impl SentinelProcess {
    fn start(name: &str, master_port: u16) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("rlock-sentinel-")
            .tempdir()
            .expect("create temp dir for a sentinel");
        let mut failures = Vec::new();
        for _ in 0..START_ATTEMPTS {
            let port = free_port();
            let conf = dir.path().join("sentinel.conf");
            let text = format!(
                "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\nlogfile {log}\n\
                 sentinel monitor {name} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {name} 1000\n\
                 sentinel failover-timeout {name} 5000\n",
                dir = dir.path().display(),
                log = dir.path().join("redis.log").display(),
            );
            fs::write(&conf, text).expect("write sentinel.conf");
            let args = [conf.display().to_string(), "--sentinel".to_string()];
            let mut child = spawn_redis(&args, dir.path());
            match wait_ready(&mut child, port, None, Instant::now() + READY_TIMEOUT) {
                Ok(()) => {
                    return SentinelProcess {
                        child: Some(child),
                        port,
                        dir,
                    };
                }
                Err(e) => {
                    kill_and_reap(&mut child);
                    failures.push(format!("port {port}: {e}"));
                }
            }
        }
        panic!(
            "redis-server --sentinel did not come up after {START_ATTEMPTS} attempts:\n  {}\n{}",
            failures.join("\n  "),
            read_logs(dir.path())
        );
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
    }
}

/// A master, one replica (`--replicaof`) and three Sentinels watching the master under `name`
/// with quorum 2, `down-after-milliseconds 1000` and `failover-timeout 5000`. Every process is
/// killed on drop.
pub struct Sentinels {
    name: String,
    /// `[first master, first replica]`; after a failover their roles may have changed.
    servers: Vec<RedisServer>,
    sentinels: Vec<SentinelProcess>,
}

impl Sentinels {
    /// Starts everything and returns once every Sentinel knows the master, its replica (with a
    /// working link) and the two other Sentinels, so a failover can be voted on.
    pub fn start(name: &str) -> Self {
        let master = RedisServer::start();
        let replica =
            RedisServer::start_with(&["--replicaof", "127.0.0.1", &master.port().to_string()]);
        let sentinels = (0..3)
            .map(|_| SentinelProcess::start(name, master.port()))
            .collect();
        let s = Sentinels {
            name: name.to_string(),
            servers: vec![master, replica],
            sentinels,
        };
        s.wait_settled(s.servers[0].port(), Duration::from_secs(20));
        s
    }

    /// The name the Sentinels know the master by.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `redis://127.0.0.1:PORT` of every Sentinel.
    pub fn urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("redis://127.0.0.1:{}", s.port))
            .collect()
    }

    /// The server started as the master (index 0) or as the replica (index 1).
    pub fn server(&self, i: usize) -> &RedisServer {
        &self.servers[i]
    }

    pub fn server_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.servers[i]
    }

    /// The index of the server on `port`.
    pub fn index_of(&self, port: u16) -> usize {
        self.servers
            .iter()
            .position(|s| s.port() == port)
            .unwrap_or_else(|| panic!("no server of this set listens on port {port}"))
    }

    /// Runs one command on Sentinel `i`.
    pub fn sentinel_cmd(&self, i: usize, args: &[&str]) -> redis::RedisResult<redis::Value> {
        let (name, rest) = args.split_first().expect("a command name");
        redis::cmd(name)
            .arg(rest)
            .query(&mut connect(self.sentinels[i].port, None, CONN_TIMEOUT)?)
    }

    /// The master's port as Sentinel `i` names it now.
    pub fn master_port_by(&self, i: usize) -> Option<u16> {
        let v = self
            .sentinel_cmd(i, &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", &self.name])
            .ok()?;
        let (_, port): (String, u16) = redis::from_redis_value(v).ok()?;
        Some(port)
    }

    /// Waits until every Sentinel names the server on `port` as the master.
    pub fn wait_master(&self, port: u16, timeout: Duration) {
        wait_until(
            &format!(
                "every Sentinel to name port {port} as master '{}'",
                self.name
            ),
            timeout,
            || (0..self.sentinels.len()).all(|i| self.master_port_by(i) == Some(port)),
        );
    }

    /// Waits until every Sentinel names `master_port`, sees one replica and two other
    /// Sentinels, and the other server replicates from the master with its link up.
    pub fn wait_settled(&self, master_port: u16, timeout: Duration) {
        let replica = self
            .servers
            .iter()
            .find(|s| s.port() != master_port)
            .expect("a replica");
        wait_until(
            &format!("the Sentinels of '{}' to settle", self.name),
            timeout,
            || {
                let sentinels_ok = (0..self.sentinels.len()).all(|i| {
                    let Ok(v) = self.sentinel_cmd(i, &["SENTINEL", "MASTER", &self.name]) else {
                        return false;
                    };
                    let Ok(m) = redis::from_redis_value::<HashMap<String, String>>(v) else {
                        return false;
                    };
                    m.get("port").map(String::as_str) == Some(&master_port.to_string())
                        && m.get("flags").map(String::as_str) == Some("master")
                        && m.get("num-slaves").map(String::as_str) == Some("1")
                        && m.get("num-other-sentinels").map(String::as_str) == Some("2")
                });
                let link_up = info_on(replica.port(), "replication").is_ok_and(|i| {
                    i.get("master_link_status").map(String::as_str) == Some("up")
                        && i.get("master_port").map(String::as_str)
                            == Some(&master_port.to_string())
                });
                sentinels_ok && link_up
            },
        );
    }

    /// Every log (servers and Sentinels), for failure messages.
    pub fn logs(&self) -> String {
        let mut text = String::new();
        for s in &self.servers {
            text.push_str(&format!(
                "=== server on port {} ===\n{}\n",
                s.port(),
                s.log()
            ));
        }
        for s in &self.sentinels {
            text.push_str(&format!(
                "=== sentinel on port {} ===\n{}\n",
                s.port,
                read_logs(s.dir.path())
            ));
        }
        text
    }
}

// ---------------------------------------------------------------------------------------------
// TLS
// ---------------------------------------------------------------------------------------------

/// A certificate authority made for one test, a server certificate it signed, and a client
/// certificate it signed, as PEM files in a temporary directory.
pub struct TestCerts {
    dir: tempfile::TempDir,
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl TestCerts {
    /// A server certificate for 127.0.0.1 and localhost.
    pub fn new() -> Self {
        Self::for_server_names(&["127.0.0.1", "localhost"])
    }

    /// A server certificate for exactly `names` (IP addresses or DNS names).
    pub fn for_server_names(names: &[&str]) -> Self {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose,
        };
        let dir = tempfile::Builder::new()
            .prefix("rlock-tls-")
            .tempdir()
            .expect("create temp dir for certificates");
        let write = |name: &str, pem: &str| {
            let path = dir.path().join(name);
            fs::write(&path, pem).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
            path
        };

        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "rlock test CA");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate().expect("CA key");
        let ca_cert = ca_params.self_signed(&ca_key).expect("self-sign the CA");
        let issuer = Issuer::new(ca_params, ca_key);

        let leaf = |names: Vec<String>, cn: &str, usage: ExtendedKeyUsagePurpose| {
            let mut params = CertificateParams::new(names).expect("leaf params");
            params.distinguished_name.push(DnType::CommonName, cn);
            params.use_authority_key_identifier_extension = true;
            params.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            params.extended_key_usages = vec![usage];
            let key = KeyPair::generate().expect("leaf key");
            let cert = params.signed_by(&key, &issuer).expect("sign a leaf");
            (cert.pem(), key.serialize_pem())
        };
        let (server_pem, server_key_pem) = leaf(
            names.iter().map(|s| s.to_string()).collect(),
            names.first().copied().unwrap_or("server"),
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client_pem, client_key_pem) = leaf(
            vec!["rlock-test-client".to_string()],
            "rlock-test-client",
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        TestCerts {
            ca: write("ca.pem", &ca_cert.pem()),
            server_cert: write("server.pem", &server_pem),
            server_key: write("server.key", &server_key_pem),
            client_cert: write("client.pem", &client_pem),
            client_key: write("client.key", &client_key_pem),
            dir,
        }
    }

    /// The directory the PEM files are in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// A `redis-server` that speaks TLS on `tls_port` (certificates of a [`TestCerts`]) and plain
/// TCP on `server.port()`, which the harness's own helpers (`conn`, `get`, …) use.
pub struct TlsServer {
    pub server: RedisServer,
    pub tls_port: u16,
}

impl TlsServer {
    /// `auth_clients` is Redis's `tls-auth-clients`: `no`, `optional` or `yes` (mTLS).
    pub fn start(certs: &TestCerts, auth_clients: &str) -> Self {
        let tls_port = free_port();
        let path = |p: &Path| p.display().to_string();
        let server = RedisServer::start_with(&[
            "--tls-port",
            &tls_port.to_string(),
            "--tls-cert-file",
            &path(&certs.server_cert),
            "--tls-key-file",
            &path(&certs.server_key),
            "--tls-ca-cert-file",
            &path(&certs.ca),
            "--tls-auth-clients",
            auth_clients,
        ]);
        TlsServer { server, tls_port }
    }

    /// `rediss://127.0.0.1:TLS_PORT`.
    pub fn url(&self) -> String {
        format!("rediss://127.0.0.1:{}", self.tls_port)
    }
}
