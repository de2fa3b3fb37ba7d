//! Waiting is visible: with -v, a waiter says when its wait begins (the lock, who holds it, its
//! place in line), names a new holder when its own tries find one, and says at least once a
//! minute (first at 10s) that it still waits; without -v it says nothing (cron mails what is
//! printed).

use super::*;

/// The waiter's stderr so far.
fn said(w: &Bg) -> String {
    fs::read_to_string(w.dir().join(format!("{}.stderr", w.name()))).unwrap_or_default()
}

/// Waits up to `within` for a line of `w`'s stderr that holds every one of `parts`.
fn wait_for_line(w: &mut Bg, within: Duration, parts: &[&str]) -> String {
    let mut found = String::new();
    let what = format!("a line of {} with {parts:?}", w.name());
    let path = w.dir().join(format!("{}.stderr", w.name()));
    w.wait_for(&what, within, || {
        let text = fs::read_to_string(&path).unwrap_or_default();
        match text.lines().find(|l| parts.iter().all(|p| l.contains(p))) {
            Some(line) => {
                found = line.to_string();
                true
            }
            None => false,
        }
    });
    found
}

/// `rlock acquire -k k --ttl 60s --label LABEL`; returns the token.
fn hold_as(server: &RedisServer, label: &str) -> String {
    let out = run(rlock_at(server).args(["acquire", "-k", KEY, "--ttl", "60s", "--label", label]));
    assert_eq!(out.code, 0, "{out}");
    out.stdout.trim().to_string()
}

#[test]
fn a_verbose_waiter_names_the_holder_and_its_place_within_a_second() {
    let server = RedisServer::start();
    let dir = tempdir();
    hold_as(&server, "https://ci.example/job/7");
    let mut first = Bg::spawn(
        "first",
        dir.path(),
        rlock_at(&server).args(["-v", "exec", "-k", KEY, "--", "true"]),
    );
    let line = wait_for_line(
        &mut first,
        Duration::from_secs(1),
        &["waiting for lock 'k'", "https://ci.example/job/7"],
    );
    assert!(line.contains(" pid "), "the holder's pid: {line}");
    assert!(line.contains("first in line"), "its place: {line}");
    wait_queued(&server, 1, std::slice::from_mut(&mut first));

    let mut second = Bg::spawn(
        "second",
        dir.path(),
        rlock_at(&server).args(["-v", "acquire", "-k", KEY]),
    );
    let line = wait_for_line(
        &mut second,
        Duration::from_secs(1),
        &["waiting for lock 'k'"],
    );
    assert!(line.contains("1 ahead in line"), "its place: {line}");

    // Without -v, a waiter says nothing at all.
    let silent = Bg::spawn(
        "silent",
        dir.path(),
        rlock_at(&server).args(["exec", "-k", KEY, "--", "true"]),
    );
    let mut procs = [first, second, silent];
    wait_queued(&server, 3, &mut procs);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(said(&procs[2]), "", "a waiter without -v printed something");
}

#[test]
fn a_verbose_waiter_names_a_new_holder_and_says_it_still_waits() {
    let server = RedisServer::start();
    let dir = tempdir();
    let token = hold_as(&server, "the first holder");
    let mut next = Bg::spawn(
        "next",
        dir.path(),
        rlock_at(&server).args([
            "exec",
            "-k",
            KEY,
            "--label",
            "the next holder",
            "--",
            "sleep",
            "30",
        ]),
    );
    wait_queued(&server, 1, std::slice::from_mut(&mut next));
    let started = Instant::now();
    let mut w = Bg::spawn(
        "waiter",
        dir.path(),
        rlock_at(&server).args(["-v", "exec", "-k", KEY, "--", "true"]),
    );
    wait_for_line(
        &mut w,
        Duration::from_secs(1),
        &["the first holder", "1 ahead"],
    );

    // The first holder goes; the waiter ahead takes the lock. The waiter's next try (when that
    // waiter's chance to claim it ends, about a second later) finds the new holder.
    release(&server, &token);
    let line = wait_for_line(
        &mut w,
        Duration::from_secs(5),
        &["now held by", "the next holder"],
    );
    assert!(line.contains("first in line"), "{line}");

    // The first line on its own comes 10s into the wait, naming who holds the lock now.
    let line = wait_for_line(
        &mut w,
        Duration::from_secs(15),
        &["still waiting for lock 'k' after 10s", "the next holder"],
    );
    let at = started.elapsed();
    assert!(
        at >= Duration::from_secs(10) && at < Duration::from_secs(14),
        "the 10s line came after {at:?}: {line}"
    );
    let lines = said(&w).lines().count();
    assert_eq!(lines, 4, "using, begins, new holder, 10s:\n{}", said(&w));
}
