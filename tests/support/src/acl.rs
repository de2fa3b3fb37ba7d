//! The ACL lines of docs/connecting.md ("ACL: the rights a lock user needs"), as the tests use
//! them: verbatim, the password aside. With `RLOCK_TEST_ACL` set, every `rlock_at` connects as the
//! documented user instead of the default one, so that a whole module runs with only the rights
//! the docs give (`RLOCK_TEST_ACL=history`: the lock and its history; `lock`: the lock only).
//!
//! The scale-out set-ups (`RedisCluster`, `Sentinels`, Redlock masters) add, on each of their
//! servers, the line the page gives for their deployment, and take rlock's scripts away from the
//! default user there: a test that reached such a server as the default user, not as the
//! documented one, fails (77) instead of passing with rights the docs do not give.

use std::process::Command;

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

/// A deployment whose servers need more than the first line: the additions of the ACL section,
/// in the page's order (after its first two lines), each run after the first line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deployment {
    /// `--cluster`, on every node: `+cluster|slots +asking`.
    Cluster,
    /// The master behind Sentinels (on every server a failover may promote): `+role`.
    Sentinel,
    /// `--replicas`: `+wait`.
    Replicas,
    /// Several independent masters (Redlock), on every master: `+info`.
    Redlock,
}

impl Deployment {
    /// The documented addition for this deployment, as written. Panics if the page no longer
    /// gives that right on that line.
    pub fn addition(self) -> String {
        let (index, right) = match self {
            Deployment::Cluster => (2, "+cluster|slots"),
            Deployment::Sentinel => (3, "+role"),
            Deployment::Replicas => (4, "+wait"),
            Deployment::Redlock => (5, "+info"),
        };
        let line = documented_acl_lines().swap_remove(index);
        assert!(
            line.split_whitespace().any(|w| w == right),
            "docs/connecting.md's ACL line {index} should add {right} for {self:?}: {line}"
        );
        line
    }
}

/// What the default user loses on a server of a scale-out deployment under `RLOCK_TEST_ACL`:
/// the commands rlock runs its scripts with, and nothing the harness, replication, Sentinel or
/// `redis-cli --cluster` use.
const DEFAULT_WITHOUT_SCRIPTS: [&str; 5] = ["ACL", "SETUSER", "default", "-eval", "-evalsha"];

/// The documented `line`, verbatim but for the password, as a command's words.
fn with_password(line: &str) -> Vec<String> {
    let line = line.replace(">PASSWORD", &format!(">{ACL_PASSWORD}"));
    line.split_whitespace().map(String::from).collect()
}

/// The user of the line (`ACL SETUSER NAME …`).
pub fn acl_user_of(line: &str) -> &str {
    line.split_whitespace().nth(2).expect("ACL SETUSER NAME")
}

/// `redis://127.0.0.1:PORT`, or with `RLOCK_TEST_ACL` the documented user's
/// `redis://USER:PASSWORD@127.0.0.1:PORT`: how the tests' rlock reaches a server on `port`
/// (through the proxy in front of it, when it is behind a network: network.rs). With
/// `RLOCK_TEST_MANAGED`, the managed user's `rediss://` URL of the server's TLS front.
pub fn suite_url(port: u16) -> String {
    if let Some(url) = crate::managed::url(port) {
        return url;
    }
    let port = crate::network::client_port(port);
    match suite_acl() {
        Some(which) => {
            let line = documented_acl(which);
            let user = acl_user_of(&line);
            format!("redis://{user}:{ACL_PASSWORD}@127.0.0.1:{port}")
        }
        None => format!("redis://127.0.0.1:{port}"),
    }
}

/// With `RLOCK_TEST_ACL`, logs `cmd` (an rlock `--sentinel` run) in to the master as the
/// documented user, the way docs/connecting.md says (`--user NAME`, the password from
/// `$RLOCK_PASSWORD`): the Sentinels themselves have no users.
pub fn suite_login_behind_sentinels(cmd: &mut Command) -> &mut Command {
    if let Some(which) = suite_acl() {
        let line = documented_acl(which);
        cmd.arg("--user")
            .arg(acl_user_of(&line))
            .env("RLOCK_PASSWORD", ACL_PASSWORD);
    }
    cmd
}

/// The commands that make the user `RLOCK_TEST_ACL` asks for, if any, on a server of the
/// `deployments` given, with their additions; on a server of any deployment, the default user
/// loses rlock's scripts. `RedisServer` runs them as it starts, and again when it joins a
/// deployment (each must answer OK).
pub(crate) fn suite_user_commands(deployments: &[Deployment]) -> Vec<Vec<String>> {
    let Some(which) = suite_acl() else {
        return Vec::new();
    };
    let mut commands = vec![with_password(&documented_acl(which))];
    commands.extend(deployments.iter().map(|d| with_password(&d.addition())));
    if !deployments.is_empty() {
        commands.push(DEFAULT_WITHOUT_SCRIPTS.map(String::from).to_vec());
    }
    commands
}

/// The users `suite_user_commands` makes, as `redis-server` arguments: `--user NAME` and the rules of
/// each line in the order they are run (a server's configuration defines a user once), and the
/// default user likewise. For a server restarted under a running rlock, which between its start
/// and an `ACL SETUSER` would refuse the documented user's login (WRONGPASS, 77), never a
/// deployment's.
pub fn suite_user_args(deployments: &[Deployment]) -> Vec<String> {
    let Some(which) = suite_acl() else {
        return Vec::new();
    };
    let first = documented_acl(which);
    let user = acl_user_of(&first).to_string();
    let mut args: Vec<String> = vec!["--user".into()];
    args.extend(with_password(&first).into_iter().skip(2));
    for deployment in deployments {
        let addition = deployment.addition();
        assert_eq!(acl_user_of(&addition), user, "{addition}");
        args.extend(addition.split_whitespace().skip(3).map(String::from));
    }
    if !deployments.is_empty() {
        args.extend(["--user", "default", "on", "nopass", "~*", "&*", "+@all"].map(String::from));
        args.extend(DEFAULT_WITHOUT_SCRIPTS[3..].iter().map(|r| r.to_string()));
    }
    args
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
