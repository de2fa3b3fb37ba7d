//! `--watch`: a line per change in JSON, a redraw only when the table changed, in place within the
//! terminal's size, and an end on a signal or when the reader goes.

use super::*;

#[test]
fn watch_json_prints_a_line_per_change_and_ends_on_a_signal() {
    let server = RedisServer::start();
    let dir = tempdir();
    let mut cmd = rlock_at(&server);
    cmd.args(["inspect", "--watch", "100ms", "--json"]);
    let mut watch = Background::spawn("watch", dir.path(), &mut cmd);
    let printed = dir.path().join("watch.stdout");
    watch.wait_for("the first line", SOON, || lines_of(&printed).len() == 1);
    assert_eq!(lines_of(&printed), ["[]"]);

    // A lock taken, renewed every 100ms (its times change at every look): one line.
    let holder = live_holder(&server, dir.path(), "holder", "w", &["--ttl", "300ms"]);
    watch.wait_for("the lock to be shown", SOON, || {
        lines_of(&printed).len() == 2
    });
    renewals(&server, "w", 5);
    let lines = lines_of(&printed);
    assert_eq!(lines.len(), 2, "a line without a change: {lines:#?}");
    let shown: Value = serde_json::from_str(&lines[1]).expect("JSON line");
    assert_eq!(shown[0]["key"], "w", "{shown}");
    assert_eq!(shown[0]["holder"]["pid"], holder.pid() as i64, "{shown}");

    // Released: one more line, with nothing held.
    holder.kill(Signal::SIGTERM);
    watch.wait_for("the release to be shown", SOON, || {
        lines_of(&printed).len() == 3
    });
    assert_eq!(lines_of(&printed)[2], "[]");

    let sent = Instant::now();
    watch.kill(Signal::SIGTERM);
    let (out, at) = watch.finish(SOON);
    assert_eq!(out.code, -(Signal::SIGTERM as i32), "{out}");
    assert!(at - sent < Duration::from_secs(1), "took {:?}", at - sent);
    assert_eq!(out.stderr, "", "{out}");
}

#[test]
fn watch_prints_the_table_again_only_when_it_changed() {
    let server = RedisServer::start();
    let dir = tempdir();
    let _holder = live_holder(&server, dir.path(), "holder", "t1", &["--ttl", "300ms"]);
    let mut cmd = rlock_at(&server);
    cmd.args(["inspect", "--watch", "100ms"]);
    let mut watch = Background::spawn("watch", dir.path(), &mut cmd);
    let printed = dir.path().join("watch.stdout");
    let tables = |printed: &Path| {
        lines_of(printed)
            .iter()
            .filter(|l| l.starts_with("KEY "))
            .count()
    };
    watch.wait_for("the first table", SOON, || tables(&printed) == 1);
    renewals(&server, "t1", 5);
    assert_eq!(tables(&printed), 1, "{:#?}", lines_of(&printed));

    let out = run(rlock_at(&server).args(["acquire", "-k", "t2", "--ttl", "1m"]));
    assert_eq!(out.code, 0, "{out}");
    watch.wait_for("the second table", SOON, || tables(&printed) == 2);
    renewals(&server, "t1", 3);
    let lines = lines_of(&printed);
    assert_eq!(tables(&printed), 2, "{lines:#?}");
    // The second table, after a blank line, has both locks; no terminal codes in a file.
    let second = lines.iter().rposition(|l| l.starts_with("KEY ")).unwrap();
    assert_eq!(lines[second - 1], "", "{lines:#?}");
    assert!(lines[second + 1].starts_with("t1 "), "{lines:#?}");
    assert!(lines[second + 2].starts_with("t2 "), "{lines:#?}");
    assert!(!lines.concat().contains('\x1b'), "{lines:#?}");

    // Ctrl-C: rlock dies of SIGINT, at once.
    let sent = Instant::now();
    watch.kill(Signal::SIGINT);
    let (out, at) = watch.finish(SOON);
    assert_eq!(out.code, -(Signal::SIGINT as i32), "{out}");
    assert!(at - sent < Duration::from_secs(1), "took {:?}", at - sent);
}

#[test]
fn a_signal_ends_a_slow_watch_at_once_and_quiet_watch_is_refused() {
    let server = RedisServer::start();
    let dir = tempdir();
    let mut cmd = rlock_at(&server);
    cmd.args(["inspect", "--watch", "1m", "--json"]);
    let mut watch = Background::spawn("watch", dir.path(), &mut cmd);
    let printed = dir.path().join("watch.stdout");
    watch.wait_for("the first line", SOON, || lines_of(&printed).len() == 1);
    let sent = Instant::now();
    watch.kill(Signal::SIGINT);
    let (out, at) = watch.finish(SOON);
    assert_eq!(out.code, -(Signal::SIGINT as i32), "{out}");
    assert!(at - sent < Duration::from_secs(1), "took {:?}", at - sent);

    let out = run(rlock_at(&server).args(["-q", "inspect", "--watch"]));
    assert_eq!(out.code, 2, "{out}");
    assert!(
        out.stderr.contains("--watch") && out.stderr.contains("-q"),
        "{out}"
    );
    assert_eq!(out.stdout, "", "{out}");
    let out = run(rlock_at(&server).args(["inspect", "--watch", "10ms"]));
    assert_eq!(out.code, 2, "{out}");
    assert!(out.stderr.contains("at least 100ms"), "{out}");
}

#[test]
fn a_watch_into_a_pipe_ends_when_the_reader_goes() {
    // `rlock inspect --watch 1m | head -1`: head reads the first table and exits; nothing
    // changes after that, so there is no next write to fail. The watch must end anyway, and not
    // hang on until the next change; it exits 0, as when a write finds the pipe closed.
    let server = RedisServer::start();
    let out = run(rlock_at(&server).args(["acquire", "-k", "p", "--ttl", "1m"]));
    assert_eq!(out.code, 0, "{out}");
    let mut watch = rlock_at(&server)
        .args(["inspect", "--watch", "1m"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn rlock");
    let mut first = String::new();
    let mut reader = std::io::BufReader::new(watch.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut reader, &mut first).expect("read the first line");
    assert!(first.starts_with("KEY "), "{first:?}");
    let closed = Instant::now();
    drop(reader);
    let mut status = None;
    wait_until("the watch to end after its reader went", SOON, || {
        status = watch.try_wait().expect("try_wait");
        status.is_some()
    });
    let took = closed.elapsed();
    let status = status.unwrap();
    assert!(took < Duration::from_secs(2), "took {took:?}");
    assert_eq!(status.code(), Some(0), "{status:?}");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut watch.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(stderr, "", "a closed pipe is no error to report");
}

#[test]
fn a_watch_on_a_terminal_redraws_in_place_within_its_size() {
    // A terminal of 8 rows and 40 columns: every frame starts at home, overwrites its lines and
    // clears what is left, and is cut to the terminal (no wrap, no scroll). The screen is never
    // cleared as a whole (what makes `watch` flicker).
    let server = RedisServer::start();
    let size = nix::pty::Winsize {
        ws_row: 8,
        ws_col: 40,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let pty = nix::pty::openpty(Some(&size), None).expect("openpty");
    let mut cmd = rlock_at(&server);
    cmd.args(["inspect", "--watch", "100ms"])
        .stdout(std::process::Stdio::from(pty.slave))
        .stderr(std::process::Stdio::piped());
    let mut watch = cmd.spawn().expect("spawn rlock");
    drop(cmd);
    let (screen, _reader) = crate::common::drain(std::fs::File::from(pty.master));
    let shown = || String::from_utf8_lossy(&screen.lock().unwrap()).into_owned();
    wait_until("a frame saying nothing is held", SOON, || {
        shown().contains("no locks")
    });
    for key in ["first-of-many-locks", "second-of-many-locks"] {
        let out = run(rlock_at(&server).args(["acquire", "-k", key, "--ttl", "1m"]));
        assert_eq!(out.code, 0, "{out}");
    }
    wait_until("a frame with both locks", SOON, || {
        let text = shown();
        let last = text.rsplit("\x1b[H").next().unwrap_or_default();
        last.contains("first-of-many") && last.contains("second-of-many")
    });
    let _ = watch.kill();
    let _ = watch.wait();

    let text = shown();
    assert!(
        !text.contains("\x1b[2J"),
        "the screen was cleared: {text:?}"
    );
    let frames: Vec<&str> = text.split("\x1b[H").skip(1).collect();
    assert!(frames.len() >= 2, "{text:?}");
    for frame in &frames[..frames.len() - 1] {
        assert!(
            frame.ends_with("\x1b[J"),
            "a frame that does not clear below: {frame:?}"
        );
        let lines: Vec<&str> = frame
            .trim_end_matches("\x1b[J")
            .split_terminator("\r\n")
            .collect();
        assert!(
            lines.len() <= 7,
            "more lines than the terminal has rows: {lines:#?}"
        );
        for line in &lines {
            let line = line
                .strip_suffix("\x1b[K")
                .unwrap_or_else(|| panic!("{line:?}"));
            assert!(
                line.chars().count() < 40,
                "a line wider than the terminal: {line:?}"
            );
        }
    }
    assert!(
        frames[0].starts_with("rlock inspect, every 100ms: "),
        "{:?}",
        frames[0]
    );
}
