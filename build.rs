//! Puts together the Lua scripts rlock sends and their SHA1s, at build time: EVALSHA needs the
//! hash of every script on every run, and hashing the Lua at each start would be work every run
//! repeats for nothing.

use std::fmt::Write as _;
use std::path::Path;

/// Each script, as the files of `src/lock` it is made of: common.lua (the server clock, replies
/// by name, telling a multi-holder lock, waking the next waiter) goes in front of every script,
/// and multi.lua (the holders and line of a lock with several) after it where they are needed;
/// slot.lua, acquire's grant of such a lock, only in front of acquire.lua. RECORD, sent at the end
/// of every exec, stands alone: common.lua's definitions would cost more than its work. What goes
/// to Redis leaves out the comments (lines that are only a comment) and blank lines: LEAVE is sent
/// whole (EVAL), and every script is after a SCRIPT FLUSH or a restart.
const SCRIPTS: &[(&str, &[&str])] = &[
    (
        "ACQUIRE",
        &["common.lua", "multi.lua", "slot.lua", "acquire.lua"],
    ),
    ("RELEASE", &["common.lua", "multi.lua", "release.lua"]),
    ("RENEW", &["common.lua", "renew.lua"]),
    ("LEAVE", &["common.lua", "multi.lua", "leave.lua"]),
    ("INSPECT", &["common.lua", "multi.lua", "inspect.lua"]),
    ("FENCE", &["common.lua", "fence.lua"]),
    ("RECORD", &["record.lua"]),
    ("HISTORY", &["common.lua", "history.lua"]),
    ("ONCE", &["common.lua", "once.lua"]),
];

fn main() {
    let dir = Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("src/lock");
    println!("cargo::rerun-if-changed={}", dir.display());
    let mut out = String::new();
    for (name, files) in SCRIPTS {
        let mut source = String::new();
        for file in *files {
            let path = dir.join(file);
            println!("cargo::rerun-if-changed={}", path.display());
            source.push_str(&sent_part(&std::fs::read_to_string(&path).unwrap()));
        }
        let sha = sha1_smol::Sha1::from(source.as_bytes())
            .digest()
            .to_string();
        writeln!(
            out,
            "/// {}\npub const {name}: (&str, &str) = ({source:?}, {sha:?});",
            files.join(" + "),
        )
        .unwrap();
    }
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("scripts.rs");
    std::fs::write(dest, out).unwrap();
}

/// The part of a Lua file that is sent to Redis: its lines less those that are blank or only a
/// comment (the scripts use no long brackets, `[[` or `[=[`, which a line could begin inside of).
fn sent_part(lua: &str) -> String {
    assert!(
        !lua.contains("[[") && !lua.contains("[="),
        "a long bracket in a script"
    );
    lua.lines()
        .filter(|line| {
            let code = line.trim_start();
            !code.is_empty() && !code.starts_with("--")
        })
        .flat_map(|line| [line, "\n"])
        .collect()
}
