//! Reentrancy: a nested rlock on the key its parent holds runs at once and leaves the lock to
//! its owner.

use super::*;

// ---------------------------------------------------------------------------------------------
// 11. Reentrancy
// ---------------------------------------------------------------------------------------------

#[test]
fn nested_exec_and_acquire_reuse_the_inherited_lock() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let outer = r#"echo $$ > "$D/pid"; echo "$RLOCK_TOKEN $RLOCK_FENCE" > "$D/outer"
"$RL" --url "$URL" exec -k k -w 2s -- sh -c 'echo "$RLOCK_TOKEN $RLOCK_FENCE" > "$D/nested"'
echo $? > "$D/nested_rc"
"$RL" --url "$URL" acquire -k k -w 2s > "$D/acquired"
echo $? > "$D/acquire_rc"
"$RL" --url "$URL" exec -k third -w 2s -- env > "$D/env"
"$RL" --url "$URL" exec -k other -w 2s -- sh -c 'echo "$RLOCK_KEY $RLOCK_TOKEN $RLOCK_FENCE" > "$D/other.tmp"; mv "$D/other.tmp" "$D/other"; while [ ! -e "$D/go2" ]; do sleep 0.02; done'
echo $? > "$D/other_rc"
: > "$D/after"
while [ ! -e "$D/go" ]; do sleep 0.02; done
exit 0"#;
    let mut rl = start_exec(&server, d, &["--ttl", "2s"], outer);

    // The nested exec of another key holds that key, and the outer lock is still held.
    let other = rl.file(d.join("other"), FINISH);
    let outer_line = read(d.join("outer"));
    let (outer_token, outer_fence) = outer_line
        .trim()
        .split_once(' ')
        .expect("outer: token fence");
    let o: Vec<&str> = other.split_whitespace().collect();
    assert_eq!(o.len(), 3, "other: {other:?}");
    assert_eq!(o[0], "other");
    // The lock's variables replace the outer lock's, never stand beside them: getenv reads the
    // first of two, a shell the last (`env`, the command itself, shows both).
    let env = read(d.join("env"));
    let mut names: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split_once('=').map(|(name, _)| name))
        .filter(|name| name.starts_with("RLOCK_"))
        .collect();
    assert!(names.contains(&"RLOCK_KEY"), "env: {env}");
    names.sort_unstable();
    let count = names.len();
    names.dedup();
    assert_eq!(
        names.len(),
        count,
        "a variable twice in the nested command's environment: {env}"
    );
    assert!(env.contains("RLOCK_KEY=third\n"), "env: {env}");
    assert_ne!(o[1], outer_token, "a different key got the outer token");
    assert_eq!(
        server.get("rlock:other").as_deref(),
        Some(o[1]),
        "the nested exec of another key does not hold that key"
    );
    assert_eq!(
        server.get(LOCK).as_deref(),
        Some(outer_token),
        "the outer lock is gone or changed after the nested exec and acquire of it ended\n{}",
        drained(&rl.err)
    );
    touch(d.join("go2"));

    rl.wait_for("the outer child to finish its nested runs", FINISH, || {
        d.join("after").exists()
    });
    let stderr = drained(&rl.err);
    assert_eq!(
        read(d.join("nested_rc")).trim(),
        "0",
        "nested exec failed:\n{stderr}"
    );
    assert_eq!(
        read(d.join("nested")).trim(),
        format!("{outer_token} {outer_fence}"),
        "the nested exec must see the outer token and fence"
    );
    assert_eq!(
        read(d.join("acquire_rc")).trim(),
        "0",
        "nested acquire failed:\n{stderr}"
    );
    assert_eq!(
        read(d.join("acquired")).trim(),
        outer_token,
        "nested acquire must print the inherited token"
    );
    assert_eq!(
        read(d.join("other_rc")).trim(),
        "0",
        "nested exec of another key failed:\n{stderr}"
    );
    assert!(
        !server.exists("rlock:other"),
        "the other key was not released"
    );
    // The nested runs released nothing, and the outer rlock still renews its lock.
    LockWatch::new(&server, LOCK, outer_token, Duration::from_secs(2))
        .wait_renewals(2, Duration::from_secs(5));
    touch(d.join("go"));
    let (out, _) = rl.wait(FINISH);
    assert_eq!(out.code, 0, "{out}");
    assert!(!server.exists(LOCK), "lock not released");
}

/// Every lock the enclosing execs hold is recognised, not only the innermost: A > B > A runs the
/// command at once (with `-n` it would be busy, without it would wait on itself for ever), and
/// the innermost exec leaves A to the outermost one, which still holds it afterwards.
#[test]
fn a_lock_held_two_execs_up_is_recognised() {
    let server = RedisServer::start();
    let dir = tempdir();
    let d = dir.path();
    let script = r#""$RL" --url "$URL" exec -k b -- "$RL" --url "$URL" exec -n -k k -- sh -c 'echo "$RLOCK_TOKEN" > "$D/inner"'
echo $? > "$D/inner_rc"
"$RL" --url "$URL" inspect -q -k k; echo $? > "$D/held_after""#;
    let started = Instant::now();
    let out = run(&mut exec_sh(&server, d, &[], script));
    assert_eq!(out.code, 0, "{out}");
    assert_eq!(read(d.join("inner_rc")).trim(), "0", "A > B > A: {out}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "A > B > A took {:?}",
        started.elapsed()
    );
    assert_eq!(
        read(d.join("held_after")).trim(),
        "0",
        "A was released early"
    );
    assert!(!server.exists(LOCK), "the outer exec did not release A");
    assert!(!server.exists("rlock:b"), "B was not released");
    // Another Redis is another lock: a key of the same name there is taken anew.
    let other = RedisServer::start();
    let script = format!(
        r#""$RL" --url "{}" exec -n -k k -- sh -c 'echo "$RLOCK_TOKEN" > "$D/other"'"#,
        other.url()
    );
    let out = run(&mut exec_sh(&server, d, &[], &script));
    assert_eq!(out.code, 0, "{out}");
    assert_ne!(
        read(d.join("other")),
        read(d.join("inner")),
        "a lock on another Redis was taken for the one held here"
    );
}
