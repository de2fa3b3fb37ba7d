//! The ACL lines of docs/connecting.md ("ACL: the rights a lock user needs"), as the tests use
//! them: verbatim, the password aside. With `RLOCK_TEST_ACL` set, every `rlock_at` connects as the
//! documented user instead of the default one, so that a whole module runs with only the rights
//! the docs give (`RLOCK_TEST_ACL=history`: the lock and its history; `lock`: the lock only).

use crate::server::RedisServer;

/// The password the tests give the documented users (the docs say `PASSWORD`).
pub const ACL_PASSWORD: &str = "acl-Tst-pw-47";

/// Which documented line a run uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AclLine {
    /// The lock and its history: the first line.
    History,
    /// The lock only: the second line.
    LockOnly,
}

/// Every `ACL SETUSER` line of docs/connecting.md's ACL section, in order, as written.
pub fn documented_acl_lines() -> Vec<String> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/connecting.md");
    let doc = std::fs::read_to_string(path).expect("read docs/connecting.md");
    let section = doc
        .split("\n## ")
        .find(|s| s.starts_with("ACL: the rights a lock user needs"))
        .expect("the ACL section of docs/connecting.md");
    section
        .lines()
        .filter(|l| l.starts_with("ACL SETUSER "))
        .map(String::from)
        .collect()
}

/// The line for `which` (the first two lines of the section), as written.
pub fn documented_acl(which: AclLine) -> String {
    let lines = documented_acl_lines();
    let line = match which {
        AclLine::History => &lines[0],
        AclLine::LockOnly => &lines[1],
    };
    line.clone()
}

/// Runs the documented `line` on `server`, verbatim but for the password.
pub fn apply_acl_line(server: &RedisServer, line: &str) {
    let line = line.replace(">PASSWORD", &format!(">{ACL_PASSWORD}"));
    let args: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(server.cmd(&args), redis::Value::Okay, "{line}");
}

/// The user of the line (`ACL SETUSER NAME …`).
pub fn acl_user_of(line: &str) -> &str {
    line.split_whitespace().nth(2).expect("ACL SETUSER NAME")
}

/// `redis://USER:PASSWORD@127.0.0.1:PORT` for a user made from a documented line.
pub fn acl_url(server: &RedisServer, user: &str) -> String {
    format!("redis://{user}:{ACL_PASSWORD}@127.0.0.1:{}", server.port())
}

/// Makes the user `RLOCK_TEST_ACL` asks for on `server`, if any (as the server starts).
pub fn make_suite_user(server: &RedisServer) {
    if let Some(which) = suite_acl() {
        apply_acl_line(server, &documented_acl(which));
    }
}

/// The line `RLOCK_TEST_ACL` asks every test to connect with, if any.
pub fn suite_acl() -> Option<AclLine> {
    match std::env::var("RLOCK_TEST_ACL").as_deref() {
        Ok("history") => Some(AclLine::History),
        Ok("lock") => Some(AclLine::LockOnly),
        Ok("") | Err(_) => None,
        Ok(other) => panic!("RLOCK_TEST_ACL={other}: expected history or lock"),
    }
}
