//! stdout carries only the table, hints go to stderr; and when each lease was last renewed.

use super::*;

/// Output: inspect's stdout carries only the table (or the JSON); the stale
/// holder's "break it with" line goes to stderr, so `rlock inspect | tail -n +2` counts locks.
#[test]
fn inspect_stdout_carries_only_the_table_and_hints_go_to_stderr() {
    let server = RedisServer::start();
    let dir = tempdir();
    let gone = acquire_from_a_shell_that_exits(&server, "left", "--ttl 1h");
    let hint_start = format!("rlock: stale: pid {gone} is gone on this host; break it with: ");

    for args in [&["inspect"][..], &["inspect", "-k", "left"]] {
        let out = run(rlock_at(&server).args(args));
        assert_eq!(out.code, 0, "{out}");
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(lines.len(), 2, "a header and one row: {out}");
        assert!(lines[0].starts_with("KEY "), "{out}");
        assert!(lines[1].starts_with("left "), "{out}");
        assert!(lines[1].contains(&format!("pid {gone} (stale)")), "{out}");
        assert!(!lines.iter().any(|l| l.starts_with("stale")), "{out}");
        let err: Vec<&str> = out.stderr.lines().collect();
        assert_eq!(err.len(), 1, "{out}");
        assert!(err[0].starts_with(&hint_start), "{out}");
    }

    // --json: the document, nothing else, on stdout; the JSON says stale itself.
    for args in [
        &["inspect", "--json"][..],
        &["inspect", "--json", "-k", "left"],
    ] {
        let out = run(rlock_at(&server).args(args));
        assert_eq!(out.code, 0, "{out}");
        let json: Value =
            serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out}"));
        let one = if json.is_array() { &json[0] } else { &json };
        assert_eq!(one["stale"], true, "{out}");
        assert_eq!(out.stdout.lines().count(), 1, "{out}");
    }

    // -q: nothing on either (as before: -q only answers with the exit code).
    let out = run(rlock_at(&server).args(["-q", "inspect", "-k", "left"]));
    assert_eq!((out.code, &*out.stdout, &*out.stderr), (0, "", ""), "{out}");

    // --watch into a file: the table alone on stdout, the hint on stderr.
    let mut cmd = rlock_at(&server);
    cmd.args(["inspect", "--watch", "1m"]);
    let mut watch = Background::spawn("watch", dir.path(), &mut cmd);
    let errors = dir.path().join("watch.stderr");
    watch.wait_for("the hint", SOON, || {
        lines_of(&errors).iter().any(|l| l.starts_with(&hint_start))
    });
    // Stdout was flushed before the hint was written.
    let lines = lines_of(&dir.path().join("watch.stdout"));
    assert_eq!(lines.len(), 2, "{lines:#?}");
    assert!(
        lines[0].starts_with("KEY ") && lines[1].starts_with("left "),
        "{lines:#?}"
    );
    assert_eq!(lines_of(&errors).len(), 1, "{:#?}", lines_of(&errors));
    watch.kill(Signal::SIGTERM);
    watch.finish(SOON);

    // Nothing held, watched into a file: a table of no rows (its header) on stdout, and what
    // that means on stderr.
    let mut cmd = rlock_at(&server);
    cmd.args(["--prefix", "empty:", "inspect", "--watch", "1m"]);
    let mut watch = Background::spawn("empty", dir.path(), &mut cmd);
    let errors = dir.path().join("empty.stderr");
    watch.wait_for("the note", SOON, || !lines_of(&errors).is_empty());
    assert_eq!(
        lines_of(&errors),
        ["rlock: no locks held under prefix 'empty:'"]
    );
    let lines = lines_of(&dir.path().join("empty.stdout"));
    assert_eq!(lines.len(), 1, "{lines:#?}");
    assert!(lines[0].starts_with("KEY "), "{lines:#?}");
    watch.kill(Signal::SIGTERM);
    watch.finish(SOON);
}

#[test]
fn inspect_shows_when_each_lease_was_last_renewed() {
    let server = RedisServer::start();
    let dir = tempdir();

    // Taken and never renewed: renewed when it was taken.
    let out = run(rlock_at(&server).args(["acquire", "-k", "manual", "--ttl", "1m"]));
    assert_eq!(out.code, 0, "{out}");
    let token = out.stdout.trim().to_string();
    let json = inspect_json(&server, "manual");
    assert_eq!(json["renewed_ms"], json["holder"]["since_ms"], "{json}");
    assert_eq!(
        json["holders"][0]["renewed_ms"], json["renewed_ms"],
        "{json}"
    );
    let taken = renewed_ms(&server, "manual");
    // `rlock renew` moves it on (the server's clock, in ms: poll until it has ticked).
    wait_until("a renewal to be recorded", SOON, || {
        let out = run(rlock_at(&server).args(["renew", "-k", "manual", "--token", &token]));
        assert_eq!(out.code, 0, "{out}");
        renewed_ms(&server, "manual") > taken
    });

    // Held by exec with a 1s lease (renewed every 333ms): the time keeps moving.
    let mut holders = Vec::new();
    for (key, opts) in [("lock", &[][..]), ("sem", &["--limit", "2"][..])] {
        let mut args = vec!["--ttl", "1s"];
        args.extend_from_slice(opts);
        holders.push(live_holder(&server, dir.path(), key, key, &args));
        let first = renewed_ms(&server, key);
        let mut seen = vec![first];
        wait_until(&format!("{key}: three renewals"), SOON, || {
            let now = renewed_ms(&server, key);
            if now != *seen.last().unwrap() {
                seen.push(now);
            }
            seen.len() >= 4
        });
        assert!(seen.windows(2).all(|w| w[0] < w[1]), "{key}: {seen:?}");
        let since = inspect_json(&server, key)["holders"][0]["since_ms"]
            .as_i64()
            .expect("since_ms");
        assert!(seen[3] > since, "{key}: renewed {seen:?}, taken {since}");
        // Well within the lease of 1s, however loaded the machine.
        assert!(seen[3] - seen[1] < 3_000, "{key}: {seen:?}");
    }

    let out = run(rlock_at(&server).arg("inspect"));
    let header = out.stdout.lines().next().unwrap_or_default().to_string();
    assert!(header.contains("RENEWED"), "{out}");
    let row = out
        .stdout
        .lines()
        .find(|l| l.starts_with("lock "))
        .unwrap_or_else(|| panic!("{out}"));
    let at = header.find("RENEWED").unwrap();
    assert!(
        row[at..].contains("ms ago") || row[at..].contains("s ago"),
        "{out}"
    );
}
