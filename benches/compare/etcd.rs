//! An etcd of the benchmark's own on loopback ports, for the `etcdctl lock` column of the host
//! and waiting tables. The tests have no etcd, so nothing of this is shared with them.

use std::fs::File;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use rlock_test_support::free_port;

use crate::process::{fail, output, wait_for};

/// An etcd on 127.0.0.1 (client and peer ports free), killed on drop.
pub struct Etcd {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

/// An etcd, when Debian's etcd-server and etcd-client are installed; else None, having said how
/// to install them.
pub fn start() -> Option<Etcd> {
    let etcd_bins = ["etcd", "etcdctl"].map(|name| {
        std::env::var_os("PATH")
            .iter()
            .flat_map(std::env::split_paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    match etcd_bins {
        [Some(server), Some(_)] => Some(Etcd::start(&server)),
        _ => {
            println!(
                "\netcd not found: the etcdctl lock column is left out (install Debian's \
                 etcd-server and etcd-client: `apt-get install -y etcd-server etcd-client`)"
            );
            None
        }
    }
}

impl Etcd {
    fn start(bin: &Path) -> Etcd {
        let dir = tempfile::Builder::new()
            .prefix("rlock-bench-etcd-")
            .tempdir()
            .expect("temp dir");
        let (port, peer) = (free_port(), free_port());
        let client = format!("http://127.0.0.1:{port}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let log = File::create(dir.path().join("etcd.log")).expect("log file");
        let child = Command::new(bin)
            .args(["--name", "bench", "--data-dir"])
            .arg(dir.path().join("data"))
            .args([
                "--listen-client-urls",
                &client,
                "--advertise-client-urls",
                &client,
            ])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("bench={peer_url}")])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| fail(&format!("etcd: {e}")));
        let etcd = Etcd {
            child,
            port,
            _dir: dir,
        };
        wait_for("etcd to answer", || {
            etcd.ctl()
                .args(["endpoint", "health"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        etcd
    }

    pub fn ctl(&self) -> Command {
        let mut cmd = Command::new("etcdctl");
        cmd.env("ETCDCTL_API", "3")
            .arg(format!("--endpoints=127.0.0.1:{}", self.port));
        cmd
    }

    /// How many keys are under `prefix` (a lock's holder and its waiters).
    pub fn count(&self, prefix: &str) -> usize {
        output(self.ctl().args(["get", "--prefix", "--keys-only", prefix]))
            .lines()
            .filter(|l| !l.trim().is_empty())
            .count()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
