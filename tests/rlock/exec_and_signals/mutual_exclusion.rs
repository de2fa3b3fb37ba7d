//! Mutual exclusion with fencing: contended `exec`s never overlap, and each sees a larger fence.

use super::*;

// ---------------------------------------------------------------------------------------------
// 12. Mutual exclusion and fencing
// ---------------------------------------------------------------------------------------------

#[test]
fn concurrent_execs_never_overlap_and_fences_increase() {
    const WORKERS: usize = 6;
    const ROUNDS: usize = 6;
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    // `mkdir` is atomic: a second section inside at the same time fails it.
    let section = r#"mkdir "$D/inside" 2>/dev/null || { echo "overlap at fence $RLOCK_FENCE" >> "$D/errors"; exit 99; }
echo "start $RLOCK_FENCE" >> "$D/log"
sleep 0.02
echo "end $RLOCK_FENCE" >> "$D/log"
rmdir "$D/inside""#;
    let worker = format!(
        r#"i=0
while [ $i -lt {ROUNDS} ]; do
  "$RL" --url "$URL" exec -k k -w 20s -- sh -c "$SECTION"
  rc=$?
  [ $rc -eq 0 ] || echo "worker $W round $i: exit $rc" >> "$D/errors"
  i=$((i+1))
done"#
    );
    let mut workers: Vec<Running> = (0..WORKERS)
        .map(|w| {
            let mut cmd = sh(&server, d, &worker);
            cmd.env("SECTION", section).env("W", w.to_string());
            Running::spawn(&mut cmd, Stdio::null())
        })
        .collect();
    for w in &mut workers {
        let (out, _) = w.wait(Duration::from_secs(90));
        assert_eq!(out.code, 0, "{out}");
    }
    let errors = read(d.join("errors"));
    assert!(errors.is_empty(), "errors:\n{errors}");

    let log = read(d.join("log"));
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2 * WORKERS * ROUNDS, "log:\n{log}");
    let mut last: Option<i64> = None;
    for pair in lines.chunks(2) {
        let start = pair[0]
            .strip_prefix("start ")
            .unwrap_or_else(|| panic!("sections overlap at {pair:?}\n{log}"));
        let end = pair[1]
            .strip_prefix("end ")
            .unwrap_or_else(|| panic!("sections overlap at {pair:?}\n{log}"));
        assert_eq!(start, end, "sections overlap at {pair:?}\n{log}");
        let fence: i64 = start.parse().expect("integer fence");
        if let Some(prev) = last {
            assert!(
                fence > prev,
                "fence {fence} after {prev}: not strictly increasing\n{log}"
            );
        }
        last = Some(fence);
    }
    assert!(!server.exists(LOCK), "lock left behind");
}
