//! The memory row of the first table: the resident memory of rlock and of flock(1) while they
//! hold a lock and run a command under it.

use std::fs;
use std::process::{Command, Stdio};
use std::thread;
use std::time::Duration;

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;

use crate::process::{Bg, rlock, wait_for};
use crate::setup::Bench;
use crate::table::{Figure, Row};

pub fn figure(b: &Bench) -> Figure {
    let mut conn = b.redis.conn();
    let mut holder = Bg::spawn(
        rlock(b.redis, &["exec", "-k", "mem", "--", "sleep", "30"]).stdout(Stdio::null()),
    );
    let pid = holder.pid();
    wait_for("rlock exec to hold the lock and run its child", || {
        redis::cmd("EXISTS")
            .arg("rlock:mem")
            .query::<bool>(&mut conn)
            .unwrap_or(false)
            && has_child(pid)
    });
    let m_rlock = sample_rss(pid);
    let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    holder.wait("rlock exec after SIGTERM");
    let mut fl = Bg::spawn(
        Command::new(b.flock)
            .arg(b.dir.join("mem.lock"))
            .args(["sleep", "30"]),
    );
    let fpid = fl.pid();
    wait_for("flock to run its child", || has_child(fpid));
    let m_flock = sample_rss(fpid);
    let _ = killpg(Pid::from_raw(fpid), Signal::SIGTERM);
    fl.wait("flock after SIGTERM");
    Figure {
        rows: vec![Row {
            figure: "resident memory (VmRSS) while holding".into(),
            unit: "MiB",
            rlock: m_rlock,
            flock: Some(m_flock),
            minimal: None,
            cli: None,
            target: "≤ 8 MiB".into(),
            met: Some(m_rlock <= 8.0),
            decimals: 2,
        }],
        note: None,
    }
}

/// VmRSS of `pid`, in KiB.
pub fn rss_kib(pid: i32) -> Option<f64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

fn has_child(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .is_ok_and(|c| !c.trim().is_empty())
}

/// The largest VmRSS of `pid` over a few samples, in MiB.
fn sample_rss(pid: i32) -> f64 {
    let mut max: f64 = 0.0;
    for _ in 0..10 {
        if let Some(kib) = rss_kib(pid) {
            max = max.max(kib);
        }
        thread::sleep(Duration::from_millis(20));
    }
    max / 1024.0
}
