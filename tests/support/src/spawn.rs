//! `redis-server` discovery and spawning, shared by `RedisServer`, the Cluster and the Sentinel
//! harnesses.

use std::fs::{self, File};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use redis::IntoConnectionInfo;

use crate::limits::{POLL, READY_TIMEOUT};

const NOT_FOUND: &str = "redis-server not found: install it with `apt-get install -y redis-server`";

/// The setting that names another server to run the suite against (a path, or a name looked
/// up on PATH), e.g. a `valkey-server`; `redis-server` from PATH when unset.
pub(crate) const SERVER_SETTING: &str = "RLOCK_TEST_REDIS_SERVER";

/// An executable: `setting`'s value when it is set (a path, or a name looked up on PATH), else
/// `default` on PATH. Panics (never skips) with `missing` when there is none.
pub(crate) fn executable(setting: &str, default: &str, missing: &str) -> PathBuf {
    let is_executable = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let on_path = |name: &str| {
        std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|dir| dir.join(name))
            .find(|p| is_executable(p))
    };
    match std::env::var(setting) {
        Ok(chosen) if !chosen.is_empty() => {
            let found = if chosen.contains('/') {
                Some(PathBuf::from(&chosen)).filter(|p| is_executable(p))
            } else {
                on_path(&chosen)
            };
            found.unwrap_or_else(|| panic!("{setting}={chosen}: no such executable"))
        }
        _ => on_path(default).unwrap_or_else(|| panic!("{missing}")),
    }
}

/// The server executable: `RLOCK_TEST_REDIS_SERVER`, or `redis-server` from PATH.
pub(crate) fn redis_server_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| executable(SERVER_SETTING, "redis-server", NOT_FOUND))
}

/// `(major, minor, patch)` of the server the tests run, e.g. `(7, 0, 15)` (for a Valkey, its
/// own version).
pub fn redis_version() -> (u32, u32, u32) {
    static VERSION: OnceLock<(u32, u32, u32)> = OnceLock::new();
    *VERSION.get_or_init(|| {
        let out = Command::new(redis_server_bin())
            .arg("--version")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{NOT_FOUND} ({e})"));
        // "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=…", or
        // "Valkey server v=8.1.8 …"
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
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local_addr").port()
}

/// The arguments every harness server gets: loopback only, nothing persisted, logs in `dir`.
pub(crate) fn base_args(port: u16, dir: &Path) -> Vec<String> {
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
pub(crate) fn spawn_redis(args: &[String], dir: &Path) -> Child {
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
pub(crate) fn connect(
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
pub(crate) fn wait_ready(
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
pub(crate) fn kill_and_reap(child: &mut Child) {
    let pid = Pid::from_raw(child.id() as i32);
    let _ = signal::kill(pid, Signal::SIGCONT);
    let _ = signal::kill(pid, Signal::SIGKILL);
    let _ = child.wait();
}

/// The state letter from /proc/PID/stat (`R`, `S`, `T`, `Z`, …), `None` if there is no such process.
pub(crate) fn proc_state(pid: i32) -> Option<char> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "PID (COMM) S …": COMM may itself hold spaces and parentheses.
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}
