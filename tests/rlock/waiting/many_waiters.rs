//! Many waiters: served in arrival order, never two at once.

use super::*;

// Many waiters
// ---------------------------------------------------------------------------------------------

/// A critical section for `sh -c CS sh DIR`: `mkdir` is atomic, so a second holder inside at the
/// same time fails it and records an overlap. Appends the fence to DIR/log.
const CRITICAL_SECTION: &str = r#"
mkdir "$1/inside" 2>/dev/null || { echo "overlap $RLOCK_FENCE" >> "$1/overlaps"; exit 3; }
echo "$RLOCK_FENCE" >> "$1/log"
sleep 0.4
rmdir "$1/inside"
"#;

#[test]
fn many_waiters_all_finish_one_at_a_time() {
    const WAITERS: usize = 8;
    let server = RedisServer::start();
    let dir = tempdir();
    let cs = dir.path().join("cs");
    fs::create_dir(&cs).unwrap();
    // Park them all behind a holder, so every handoff goes through the queue.
    let holder = hold(&server, "60s");
    let mut waiters: Vec<Bg> = (0..WAITERS)
        .map(|i| {
            Bg::spawn(
                &format!("waiter-{i}"),
                dir.path(),
                rlock_at(&server)
                    .args(["exec", "-k", KEY, "-w", "60s", "--"])
                    .args(["sh", "-c", CRITICAL_SECTION, "sh"])
                    .arg(&cs),
            )
        })
        .collect();
    wait_queued(&server, WAITERS, &mut waiters);
    release(&server, &holder);

    let deadline = Instant::now() + Duration::from_secs(40);
    for w in &mut waiters {
        let left = deadline.saturating_duration_since(Instant::now());
        let (out, _) = w.finish(left);
        assert_eq!(out.code, 0, "{} failed: {out}", w.name());
    }
    assert!(
        !cs.join("overlaps").exists(),
        "two holders overlapped: {}",
        fs::read_to_string(cs.join("overlaps")).unwrap_or_default()
    );
    let log = fs::read_to_string(cs.join("log")).expect("critical sections ran");
    let fences: Vec<i64> = log.lines().map(|l| l.parse().expect("a fence")).collect();
    assert_eq!(fences.len(), WAITERS, "critical sections run: {log}");
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences not strictly increasing in the order the critical sections ran: {fences:?}"
    );
    assert!(!server.exists(LOCK), "the lock is still held");
    assert_no_waiters_left(&server);
}

#[test]
fn waiters_get_the_lock_in_arrival_order() {
    const NAMES: [&str; 5] = ["A", "B", "C", "D", "E"];
    let server = RedisServer::start();
    let dir = tempdir();
    let log = dir.path().join("order");
    let holder = hold(&server, "60s");

    let mut waiters: Vec<Bg> = Vec::new();
    let mut tokens: Vec<String> = Vec::new();
    for name in NAMES {
        waiters.push(Bg::spawn(
            name,
            dir.path(),
            rlock_at(&server)
                .args(["exec", "-k", KEY, "-w", "60s", "--"])
                .args(["sh", "-c", "echo \"$2\" >> \"$1\"", "sh"])
                .arg(&log)
                .arg(name),
        ));
        // Only start the next one once this one is in line.
        let q = wait_queued(&server, waiters.len(), &mut waiters);
        assert_eq!(q[..tokens.len()], tokens[..], "the queue was reordered");
        tokens = q;
    }
    release(&server, &holder);

    let deadline = Instant::now() + Duration::from_secs(40);
    for w in &mut waiters {
        let left = deadline.saturating_duration_since(Instant::now());
        let (out, _) = w.finish(left);
        assert_eq!(out.code, 0, "{} failed: {out}", w.name());
    }
    let order = fs::read_to_string(&log).expect("the waiters ran");
    assert_eq!(
        order.lines().collect::<Vec<_>>(),
        NAMES,
        "waiters were not served in arrival order"
    );
    assert_no_waiters_left(&server);
}

// ---------------------------------------------------------------------------------------------
