//! A partition cannot make two holders: links cut, slowed and blackholed by the fault proxy on
//! loopback while both ends live, for one server, a Redlock quorum, Sentinel and Cluster (split
//! brain). Safety is judged by the commands' own heartbeats: a holder's command stamps the time
//! every ~20 ms, the next holder's command stamps its start, and no stamp of the first may come at
//! or after it.

use crate::common::{Background as Bg, Dir, Mode, Proxy, RedisServer, rlock, wait_until};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// A command that stamps the time (ns) into `$D/<name>.beats` every ~20 ms for `secs` seconds,
/// then writes `$D/<name>.done`.
fn beating(name: &str, secs: u32) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            r#"end=$(( $(date +%s) + {secs} )); while [ "$(date +%s)" -lt "$end" ]; do date +%s%N >> "$D/{name}.beats"; sleep 0.02; done; touch "$D/{name}.done""#
        ),
    ]
}

/// A command that stamps its start into `$D/<name>.start` and ends.
fn starting(name: &str) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!(r#"date +%s%N > "$D/{name}.start""#),
    ]
}

fn stamps(dir: &Path, file: &str) -> Vec<i128> {
    std::fs::read_to_string(dir.join(file))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// A's last heartbeat came before B's command started.
fn assert_no_overlap(dir: &Path, a: &str, b: &str) {
    let beats = stamps(dir, &format!("{a}.beats"));
    let start = stamps(dir, &format!("{b}.start"));
    let (Some(last), Some(start)) = (beats.last(), start.first()) else {
        panic!(
            "no heartbeat of {a} ({} stamps) or no start of {b}",
            beats.len()
        );
    };
    assert!(
        last < start,
        "{a}'s command beat {:.1} ms after {b}'s command started",
        (last - start) as f64 / 1e6
    );
}

/// A plain RESP exchange through a socket: the reply's first line, or the read's error.
fn ping(stream: &mut TcpStream) -> std::io::Result<String> {
    stream.write_all(b"*1\r\n$4\r\nPING\r\n")?;
    let mut buf = [0u8; 64];
    let n = stream.read(&mut buf)?;
    Ok(String::from_utf8_lossy(&buf[..n]).trim_end().to_string())
}

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the proxy");
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .expect("read timeout");
    s
}

mod proxy {
    use super::*;

    #[test]
    fn passes_bytes_both_ways() {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        let mut c = connect(proxy.port());
        assert_eq!(ping(&mut c).expect("PING through the proxy"), "+PONG");
        assert_eq!(proxy.open_connections(), 1);
    }

    #[test]
    fn delays_each_direction_by_its_setting() {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        let mut c = connect(proxy.port());
        ping(&mut c).expect("PING");
        proxy.set_dir(
            Dir::ToServer,
            Mode::Delay {
                base: Duration::from_millis(150),
                jitter: Duration::from_millis(50),
            },
        );
        let t = Instant::now();
        assert_eq!(ping(&mut c).expect("a delayed PING"), "+PONG");
        let took = t.elapsed();
        assert!(
            took >= Duration::from_millis(150) && took < Duration::from_millis(450),
            "a request delayed 150–200 ms took {took:?}"
        );
        proxy.set(Mode::Pass);
        let t = Instant::now();
        ping(&mut c).expect("PING");
        assert!(
            t.elapsed() < Duration::from_millis(100),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn a_blackhole_reads_and_answers_nothing_then_heals_with_a_new_connection() {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        let mut c = connect(proxy.port());
        ping(&mut c).expect("PING");
        proxy.set(Mode::Blackhole);
        // The write succeeds (the proxy reads it), and no reply ever comes.
        let err = ping(&mut c).expect_err("a reply through a blackhole");
        assert!(
            matches!(
                err.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{err}"
        );
        // A new connection is accepted and blackholed too.
        let mut c2 = connect(proxy.port());
        assert!(ping(&mut c2).is_err());
        proxy.heal();
        // The connections that lost bytes are closed on healing; a new one passes.
        let mut buf = [0u8; 8];
        assert_eq!(
            c.read(&mut buf).unwrap_or(0),
            0,
            "the old connection is closed"
        );
        let mut c3 = connect(proxy.port());
        assert_eq!(ping(&mut c3).expect("PING after healing"), "+PONG");
    }

    #[test]
    fn reset_closes_every_connection_and_every_new_one() {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        let mut c = connect(proxy.port());
        ping(&mut c).expect("PING");
        proxy.set(Mode::Reset);
        let mut buf = [0u8; 8];
        assert_eq!(c.read(&mut buf).unwrap_or(0), 0, "closed by the reset");
        let mut c2 = connect(proxy.port());
        assert!(
            ping(&mut c2).map_or(true, |r| r.is_empty()),
            "a new connection during a reset must not get a reply"
        );
        proxy.set(Mode::Pass);
        let mut c3 = connect(proxy.port());
        assert_eq!(ping(&mut c3).expect("PING after the reset"), "+PONG");
    }

    #[test]
    fn a_rule_for_one_process_leaves_the_others_alone() {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        // Two redis-cli processes: one is cut off, the other is not.
        let cli = |name: &str| {
            let dir = tempfile::tempdir().expect("dir");
            let mut cmd = std::process::Command::new(crate::common::redis_cli_bin());
            cmd.args(["-p", &proxy.port().to_string(), "--raw"])
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped());
            let child = cmd
                .spawn()
                .unwrap_or_else(|e| panic!("redis-cli {name}: {e}"));
            (child, dir)
        };
        let (mut cut, _d1) = cli("cut");
        let (mut kept, _d2) = cli("kept");
        wait_until("both clients to connect", Duration::from_secs(5), || {
            proxy.open_connections() == 2
        });
        proxy.set_for(&[cut.id() as i32], Mode::Blackhole);
        for (child, key) in [(&mut cut, "from_cut"), (&mut kept, "from_kept")] {
            let stdin = child.stdin.as_mut().expect("stdin");
            writeln!(stdin, "SET {key} 1").expect("write to redis-cli");
            stdin.flush().expect("flush");
        }
        wait_until("the kept client's write", Duration::from_secs(5), || {
            server.exists("from_kept")
        });
        // An absence is seen only over time: give the cut client's write every chance.
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !server.exists("from_cut"),
            "the blackholed client's write arrived"
        );
        let _ = cut.kill();
        let _ = kept.kill();
        let _ = cut.wait();
        let _ = kept.wait();
    }
}

/// A holder cut off from Redis by a blackhole on its own link (scenario 4): with `--ttl 3s
/// --renew-every 500ms --grace 300ms --op-timeout 250ms` it rides out a cut of half its TTL
/// (renewals fail, and one succeeds before deadline − grace), and is stopped (76) before its
/// lease can lapse when the cut lasts 0.9× or 1.5× its TTL. A waiter talking to Redis directly
/// is served only after the holder's last heartbeat, in every case.
mod holder_cut_off {
    use super::*;

    const TTL: Duration = Duration::from_secs(3);

    fn cut_for(fraction: f64) -> (crate::common::Output, tempfile::TempDir) {
        let server = RedisServer::start();
        let proxy = Proxy::start(server.port());
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        let mut a = rlock();
        a.args(["-u", &proxy.url(), "--op-timeout", "250ms"])
            .args(["exec", "-k", "cut", "--ttl", "3s", "--renew-every", "500ms"])
            .args(["--grace", "300ms", "--"])
            .args(beating("a", 6));
        let mut a = Bg::spawn_group("a", d, &mut a);
        a.wait_for("A's first heartbeat", Duration::from_secs(10), || {
            !stamps(d, "a.beats").is_empty()
        });
        // A waiter that reaches Redis directly, queued before the cut.
        let mut b = rlock();
        b.args(["-u", &server.url(), "exec", "-k", "cut", "-w", "30s", "--"])
            .args(starting("b"));
        let mut b = Bg::spawn_group("b", d, &mut b);
        b.wait_for("B to queue", Duration::from_secs(10), || {
            matches!(
                server.try_cmd(&["ZCARD", "{rlock:cut}:q"]),
                Ok(redis::Value::Int(1))
            )
        });
        proxy.set(Mode::Blackhole);
        let cut = Instant::now();
        let length = TTL.mul_f64(fraction);
        wait_until("the cut to last", length + Duration::from_secs(5), || {
            cut.elapsed() >= length
        });
        proxy.heal();
        let (a_out, _) = a.finish(Duration::from_secs(20));
        let (b_out, _) = b.finish(Duration::from_secs(20));
        assert_eq!(b_out.code, 0, "the waiter: {b_out}");
        assert_no_overlap(d, "a", "b");
        (a_out, dir)
    }

    #[test]
    fn half_the_ttl_is_ridden_out() {
        let (a, dir) = cut_for(0.5);
        assert_eq!(a.code, 0, "a cut of half the TTL must be ridden out: {a}");
        assert!(
            dir.path().join("a.done").exists(),
            "A's command ran to its end"
        );
    }

    #[test]
    fn nine_tenths_of_the_ttl_stops_the_holder_in_time() {
        let (a, dir) = cut_for(0.9);
        assert_eq!(a.code, 76, "{a}");
        assert!(
            !dir.path().join("a.done").exists(),
            "A's command was stopped"
        );
    }

    #[test]
    fn one_and_a_half_ttls_stop_the_holder_in_time() {
        let (a, dir) = cut_for(1.5);
        assert_eq!(a.code, 76, "{a}");
        assert!(
            !dir.path().join("a.done").exists(),
            "A's command was stopped"
        );
    }
}

/// Redlock over five masters, each behind its own proxy (scenario 6): a holder cut off from two
/// keeps its majority and runs on; cut off from a third, it is stopped before its validity ends,
/// and a waiter reaching all five directly is served after its last heartbeat.
mod redlock {
    use super::*;

    struct Five {
        servers: Vec<RedisServer>,
        proxies: Vec<Proxy>,
    }

    fn five() -> Five {
        let servers: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
        let proxies = servers.iter().map(|s| Proxy::start(s.port())).collect();
        Five { servers, proxies }
    }

    fn holder(five: &Five, d: &Path) -> Bg {
        let mut a = rlock();
        for p in &five.proxies {
            a.args(["-u", &p.url()]);
        }
        a.args(["--op-timeout", "250ms", "exec", "-k", "rl", "--ttl", "3s"])
            .args(["--renew-every", "500ms", "--grace", "300ms", "--"])
            .args(beating("a", 5));
        let mut a = Bg::spawn_group("a", d, &mut a);
        a.wait_for("A's first heartbeat", Duration::from_secs(10), || {
            !stamps(d, "a.beats").is_empty()
        });
        a
    }

    fn waiter(five: &Five, d: &Path) -> Bg {
        let mut b = rlock();
        for s in &five.servers {
            b.args(["-u", &s.url()]);
        }
        b.args(["exec", "-k", "rl", "-w", "30s", "--"])
            .args(starting("b"));
        Bg::spawn_group("b", d, &mut b)
    }

    #[test]
    fn a_holder_cut_off_from_two_of_five_keeps_its_majority() {
        let five = five();
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        let mut a = holder(&five, d);
        five.proxies[0].set(Mode::Blackhole);
        five.proxies[3].set(Mode::Blackhole);
        let mut b = waiter(&five, d);
        let (a_out, _) = a.finish(Duration::from_secs(20));
        assert_eq!(a_out.code, 0, "A keeps three of five: {a_out}");
        assert!(d.join("a.done").exists(), "A's command ran to its end");
        for p in &five.proxies {
            p.heal();
        }
        let (b_out, _) = b.finish(Duration::from_secs(20));
        assert_eq!(b_out.code, 0, "{b_out}");
        assert_no_overlap(d, "a", "b");
    }

    #[test]
    fn a_holder_cut_off_from_three_of_five_is_stopped_in_time() {
        let five = five();
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        let mut a = holder(&five, d);
        for i in [0, 2, 4] {
            five.proxies[i].set(Mode::Blackhole);
        }
        let mut b = waiter(&five, d);
        let (a_out, _) = a.finish(Duration::from_secs(20));
        assert_eq!(a_out.code, 76, "A lost its majority: {a_out}");
        assert!(!d.join("a.done").exists(), "A's command was stopped");
        let (b_out, _) = b.finish(Duration::from_secs(20));
        assert_eq!(b_out.code, 0, "{b_out}");
        assert_no_overlap(d, "a", "b");
    }
}

/// How far A's heartbeats ran past B's start: positive is an overlap (ms), negative a gap.
fn overlap_ms(dir: &Path, a: &str, b: &str) -> f64 {
    let beats = stamps(dir, &format!("{a}.beats"));
    let start = stamps(dir, &format!("{b}.start"));
    match (beats.last(), start.first()) {
        (Some(last), Some(start)) => (last - start) as f64 / 1e6,
        _ => panic!(
            "no heartbeat of {a} ({} stamps) or no start of {b}",
            beats.len()
        ),
    }
}

/// Sentinel split brain (scenario 1): master M and replica R, three Sentinels, every link through
/// a proxy. Holder A runs on M through the Sentinels; then the network splits into {M, Sentinel
/// 0, A} and {R, Sentinels 1 and 2, B}: the majority promotes R, Sentinel 0 goes on naming M, and
/// B asks the majority's Sentinels for the lock.
mod sentinel_split_brain {
    use super::*;
    use crate::common::Sentinels;

    struct Outcome {
        a: crate::common::Output,
        b: crate::common::Output,
        overlap_ms: f64,
        _dir: tempfile::TempDir,
    }

    fn split(replicas: bool, min_replicas_to_write: bool) -> Outcome {
        let s = Sentinels::start_behind_proxies("split");
        if min_replicas_to_write {
            s.server(0)
                .cmd(&["CONFIG", "SET", "min-replicas-to-write", "1"]);
            s.server(0)
                .cmd(&["CONFIG", "SET", "min-replicas-max-lag", "1"]);
            // The replica counts once it has acknowledged within the lag: until then M refuses
            // every write, A's grant included (NOREPLICAS, which rlock does not wait out).
            wait_until("M to count its replica", Duration::from_secs(10), || {
                s.server(0)
                    .try_cmd(&["SET", "probe-good-replicas", "1"])
                    .is_ok()
            });
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        let through = |urls: &[String]| {
            let mut cmd = rlock();
            cmd.args(["--sentinel", "split"]);
            for url in urls {
                cmd.args(["-u", url]);
            }
            cmd
        };
        let mut a = through(&s.urls());
        if replicas {
            a.args(["--replicas", "1"]);
        }
        a.args(["--op-timeout", "250ms", "exec", "-k", "sb", "--ttl", "3s"])
            .args(["--renew-every", "500ms", "--grace", "300ms", "--"])
            .args(beating("a", 12));
        let mut a = Bg::spawn_group("a", d, &mut a);
        a.wait_for("A's first heartbeat", Duration::from_secs(10), || {
            !stamps(d, "a.beats").is_empty()
        });
        wait_until("the lock to reach R", Duration::from_secs(5), || {
            s.server(1).get("rlock:sb").is_some()
        });
        s.partition(0, &[a.pid()]);
        let r_port = s.proxy(1).port();
        wait_until("the majority to promote R", Duration::from_secs(60), || {
            (1..3).all(|i| s.master_port_by(i) == Some(r_port))
        });
        assert_eq!(
            s.master_port_by(0),
            Some(s.proxy(0).port()),
            "the Sentinel on M's side still names M"
        );
        let mut b = through(&s.urls()[1..]);
        b.args(["exec", "-k", "sb", "-w", "30s", "--"])
            .args(starting("b"));
        let mut b = Bg::spawn_group("b", d, &mut b);
        let (b, _) = b.finish(Duration::from_secs(40));
        let (a, _) = a.finish(Duration::from_secs(40));
        s.heal();
        let overlap_ms = overlap_ms(d, "a", "b");
        eprintln!(
            "split brain, --replicas {}, min-replicas-to-write {}: A exit {}, B exit {}, A's last heartbeat {overlap_ms:.0} ms after B's start",
            u8::from(replicas),
            u8::from(min_replicas_to_write),
            a.code,
            b.code
        );
        Outcome {
            a,
            b,
            overlap_ms,
            _dir: dir,
        }
    }

    #[test]
    fn with_replicas_the_cut_off_holder_never_overlaps_the_next() {
        let o = split(true, false);
        assert_eq!(o.b.code, 0, "B: {}", o.b);
        assert!(
            o.overlap_ms < 0.0,
            "A beat {:.0} ms after B started; A: {}",
            o.overlap_ms,
            o.a
        );
    }

    /// What docs/safety.md states: without `--replicas`, the old master renews a
    /// lock the new master no longer has for as long as the partition lasts, so both commands
    /// run (here for about eight seconds: A's whole command after B got in).
    #[test]
    fn without_replicas_the_old_master_keeps_renewing_for_the_whole_partition() {
        let o = split(false, false);
        assert_eq!(o.b.code, 0, "B: {}", o.b);
        assert_eq!(
            o.a.code, 0,
            "A renewed on the old master throughout: {}",
            o.a
        );
        assert!(
            o.overlap_ms > 2000.0,
            "A and B must both have run, the documented split brain (A's last beat {:.0} ms after B's start)",
            o.overlap_ms
        );
    }

    /// `min-replicas-to-write 1` (`min-replicas-max-lag 1`) on the server: the old master
    /// refuses renewals once its replica has been silent for the lag, so A is stopped by its
    /// deadline (76). Renewals it took in the first second or two of the partition were not
    /// replicated, so the window narrows to about the lag plus a second; it does not close.
    #[test]
    fn min_replicas_to_write_narrows_the_window_to_about_the_lag() {
        let o = split(false, true);
        assert_eq!(o.b.code, 0, "B: {}", o.b);
        assert_eq!(o.a.code, 76, "{}", o.a);
        // The master's refusal (NOREPLICAS) is what stops A's renewals; under load the last
        // error A reports may be its cut-off Sentinels timing out on a later try instead.
        assert!(
            o.a.stderr.contains("Not enough good replicas")
                || o.a.stderr.contains("no Sentinel named the master"),
            "{}",
            o.a
        );
        assert!(
            o.overlap_ms < 3500.0,
            "the window must be bounded by the lag (1 s), Redis's one-second count and one renewal: A's last beat {:.0} ms after B's start",
            o.overlap_ms
        );
    }
}

/// Cluster split brain (scenario 2): three masters with a replica each, every link (client and
/// bus) through a proxy, `cluster-node-timeout 1000`. Holder A runs on the master M of its key's
/// slot; then {M, A} is cut off from the other five nodes, the majority promotes M's replica,
/// and B asks the majority for the lock. Redis Cluster's own guard helps: a master cut off from
/// the majority for the node timeout refuses writes (CLUSTERDOWN).
mod cluster_split_brain {
    use super::*;
    use crate::common::RedisCluster;

    fn split(replicas: bool) -> (crate::common::Output, crate::common::Output, f64) {
        let cluster = RedisCluster::start_behind_proxies();
        let dir = tempfile::tempdir().expect("temp dir");
        let d = dir.path();
        let master = cluster.owner("rlock:cs");
        let replica = cluster.replica_of(master);
        let through = |urls: Vec<String>| {
            let mut cmd = rlock();
            cmd.arg("--cluster");
            for url in urls {
                cmd.args(["-u", &url]);
            }
            cmd
        };
        let mut a = through(cluster.urls());
        if replicas {
            a.args(["--replicas", "1"]);
        }
        a.args(["--op-timeout", "250ms", "exec", "-k", "cs", "--ttl", "3s"])
            .args(["--renew-every", "500ms", "--grace", "300ms", "--"])
            .args(beating("a", 12));
        let mut a = Bg::spawn_group("a", d, &mut a);
        a.wait_for("A's first heartbeat", Duration::from_secs(10), || {
            !stamps(d, "a.beats").is_empty()
        });
        wait_until(
            "the lock to reach the replica",
            Duration::from_secs(5),
            || {
                let mut conn = cluster.node(replica).conn();
                redis::cmd("READONLY").query::<()>(&mut conn).is_ok()
                    && redis::cmd("GET")
                        .arg("rlock:cs")
                        .query::<Option<String>>(&mut conn)
                        .ok()
                        .flatten()
                        .is_some()
            },
        );
        cluster.partition(master, &[a.pid()]);
        let slot = cluster.slot("rlock:cs");
        wait_until(
            "the majority to promote the replica",
            Duration::from_secs(60),
            || cluster.owner_of_slot_by(replica, slot) == replica,
        );
        let majority: Vec<String> = cluster
            .urls()
            .into_iter()
            .enumerate()
            .filter(|&(i, _)| i != master)
            .map(|(_, u)| u)
            .collect();
        let mut b = through(majority);
        b.args(["exec", "-k", "cs", "-w", "30s", "--"])
            .args(starting("b"));
        let mut b = Bg::spawn_group("b", d, &mut b);
        let (b, _) = b.finish(Duration::from_secs(40));
        let (a, _) = a.finish(Duration::from_secs(40));
        cluster.heal();
        let overlap = overlap_ms(d, "a", "b");
        eprintln!(
            "cluster split brain, --replicas {}: A exit {}, B exit {}, A's last heartbeat {overlap:.0} ms after B's start",
            u8::from(replicas),
            a.code,
            b.code
        );
        (a, b, overlap)
    }

    #[test]
    fn with_replicas_the_cut_off_holder_never_overlaps_the_next() {
        if !crate::common::proxied_cluster_or_skip() {
            return;
        }
        let (a, b, overlap) = split(true);
        assert_eq!(b.code, 0, "B: {b}");
        assert_eq!(a.code, 76, "A: {a}");
        assert!(
            overlap < 0.0,
            "A beat {overlap:.0} ms after B started; A: {a}"
        );
    }

    /// Without `--replicas`, what docs/safety.md states: the cut-off master takes A's renewals
    /// until it has missed the majority for the node timeout, then answers CLUSTERDOWN and A is
    /// stopped by its deadline (76); the renewals of that first second never reached the replica,
    /// so B can get in on the new master before A stops: a window of about the node timeout plus
    /// a second.
    #[test]
    fn without_replicas_the_cut_off_master_stops_at_the_node_timeout_with_a_window() {
        if !crate::common::proxied_cluster_or_skip() {
            return;
        }
        let (a, b, overlap) = split(false);
        assert_eq!(b.code, 0, "B: {b}");
        // Its last failed renewal says "The cluster is down" or, once it asks the other
        // nodes (cut off from it too), "timed out".
        assert_eq!(a.code, 76, "A: {a}");
        assert!(
            overlap < 3500.0,
            "the window must be bounded by the node timeout (1 s) and one renewal: A's last beat {overlap:.0} ms after B's start"
        );
    }
}

mod slow_links;
