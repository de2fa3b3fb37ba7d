//! Puts together the Lua scripts rlock sends and their SHA1s, at build time: EVALSHA needs the
//! hash of every script on every run, and hashing ten kilobytes of Lua at each start is a
//! measurable part of a short `rlock exec`. And builds the guardian's stand-by
//! (`standby/standby.rs`), a program of its own that rlock's executable carries.

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
    ("IDENTITY", &["identity.lua"]),
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
    standby();
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

/// Builds `standby/standby.rs` into `OUT_DIR/standby`: a static program with neither the C
/// library nor Rust's, on x86-64 Linux (where rlock starts guardians that way). Elsewhere, or
/// should it fail, the file is empty, and rlock starts its guardians as its own executable
/// (slower to start, as safe).
fn standby() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap();
    let source = Path::new(&dir).join("standby/standby.rs");
    println!("cargo::rerun-if-changed={}", source.display());
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("standby");
    let target = std::env::var("TARGET").unwrap();
    let wanted = std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64")
        && std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux");
    let built = wanted
        && {
            let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
            let mut command = std::process::Command::new(rustc);
            command.args([
                "--edition",
                "2024",
                "--crate-type",
                "bin",
                "--target",
                &target,
            ]);
            for flag in [
                "panic=abort",
                "opt-level=s",
                "debuginfo=0",
                "strip=symbols",
                "relocation-model=static",
                "target-feature=+crt-static",
                // No start files, no libraries: `_start` is the program's own.
                "link-arg=-nostartfiles",
                "link-arg=-nostdlib",
                "link-arg=-static",
                "link-arg=-no-pie",
                // A few hundred bytes, not pages of padding.
                "link-arg=-Wl,--build-id=none",
                "link-arg=-Wl,-z,noseparate-code",
            ] {
                command.args(["-C", flag]);
            }
            // The linker cargo was told to use for this target, if any (as for rlock itself).
            if let Ok(linker) = std::env::var("RUSTC_LINKER") {
                command.arg("-C").arg(format!("linker={linker}"));
            }
            command.arg("-o").arg(&dest).arg(&source);
            match command.status() {
                Ok(status) if status.success() => true,
                outcome => {
                    println!(
                        "cargo::warning=the guardian's stand-by was not built ({outcome:?}): rlock starts its guardians as itself"
                    );
                    false
                }
            }
        };
    if !built {
        std::fs::write(&dest, b"").unwrap();
    }
}
