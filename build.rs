//! Puts together the Lua scripts rlock sends and their SHA1s, at build time: EVALSHA needs the
//! hash of every script on every run, and hashing ten kilobytes of Lua at each start is a
//! measurable part of a short `rlock exec`.

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
    hot_code();
    packed_relocations();
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

/// Asks the linker for packed relative relocations (`-z pack-relative-relocs`, DT_RELR): the
/// static executable relocates itself at start-up from a table of 1 kB instead of 110 kB (4,500
/// entries of 24 bytes), read from pages the run need not map (`exec -- true`: 6 page faults
/// fewer, ~0.1 ms on the VM it was measured on). The C library's start-up must know the format
/// (glibc 2.36 or later; an older one would leave the pointers unrelocated and rlock would crash
/// at once), so only where the glibc the build links is known to be that: a native build for
/// Linux with glibc, static (`.cargo/config.toml`), with the default linker (lld, which has the
/// option) or GNU ld through cc, no other sysroot, and `cc`'s own glibc headers saying 2.36 or
/// later. The script runs again when that glibc's libc.a changes.
fn packed_relocations() {
    let cfg = |name: &str| std::env::var(name).unwrap_or_default();
    let native = cfg("TARGET") == cfg("HOST");
    let static_glibc = cfg("CARGO_CFG_TARGET_OS") == "linux"
        && cfg("CARGO_CFG_TARGET_ENV") == "gnu"
        && cfg("CARGO_CFG_TARGET_FEATURE")
            .split(',')
            .any(|f| f == "crt-static");
    let flags = cfg("CARGO_ENCODED_RUSTFLAGS");
    let elsewhere = std::env::var_os("RUSTC_LINKER").is_some()
        || flags.split('\x1f').any(|f| {
            (f.contains("fuse-ld=") && !f.ends_with("fuse-ld=lld") && !f.ends_with("fuse-ld=bfd"))
                || f.starts_with("linker=")
                || f.contains("sysroot")
        });
    if !(native && static_glibc) || elsewhere {
        return;
    }
    let cc = |args: &[&str], input: &str| -> Option<String> {
        use std::io::Write as _;
        let mut child = std::process::Command::new("cc")
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        child.stdin.take()?.write_all(input.as_bytes()).ok()?;
        let out = child.wait_with_output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    };
    if let Some(libc) = cc(&["-print-file-name=libc.a"], "") {
        println!("cargo::rerun-if-changed={}", libc.trim());
    }
    // "2 36": the glibc whose headers (and libc.a) cc builds with.
    let version = cc(
        &["-E", "-P", "-x", "c", "-"],
        "#include <features.h>\n__GLIBC__ __GLIBC_MINOR__\n",
    )
    .and_then(|text| {
        let (major, minor) = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())?
            .trim()
            .split_once(' ')?;
        Some((
            major.parse::<u32>().ok()?,
            minor.trim().parse::<u32>().ok()?,
        ))
    });
    if version.is_some_and(|v| v >= (2, 36)) {
        println!("cargo::rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

/// Hands the linker `link/hot-code.ld` (written by `scripts/hot-code`): the code a short run
/// executes, placed before the rest, so that a run maps a few hundred kilobytes of rlock's
/// executable, not all of it. On x86-64 Linux with the GNU C library, where it was measured,
/// and only with the linkers that read its `INSERT` (lld, rustc's own, and GNU ld, through cc):
/// not when another linker is set (gold refuses `INSERT`, mold linker scripts with sections),
/// nor with `RLOCK_HOT_CODE=0`. `RLOCK_LINK_MAP=PATH` also asks for the link map
/// (`scripts/hot-code` reads it).
fn hot_code() {
    let script = Path::new(&std::env::var("CARGO_MANIFEST_DIR").unwrap()).join("link/hot-code.ld");
    println!("cargo::rerun-if-changed={}", script.display());
    for var in ["RLOCK_LINK_MAP", "RLOCK_HOT_CODE"] {
        println!("cargo::rerun-if-env-changed={var}");
    }
    let flags = std::env::var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    let other_linker = std::env::var_os("RUSTC_LINKER").is_some()
        || flags
            .split('\x1f')
            .any(|f| f.contains("fuse-ld=") && !f.ends_with("fuse-ld=lld"));
    let x86_64_gnu = std::env::var("TARGET").unwrap() == "x86_64-unknown-linux-gnu";
    // -Wl, splits its argument at commas.
    let usable = !other_linker && !script.to_string_lossy().contains(',') && script.exists();
    if x86_64_gnu && std::env::var("RLOCK_HOT_CODE").as_deref() != Ok("0") {
        if usable {
            println!("cargo::rustc-link-arg-bins=-Wl,-T,{}", script.display());
        } else {
            println!(
                "cargo::warning=link/hot-code.ld not used with this linker: a short run maps more of rlock's executable"
            );
        }
    }
    if let Ok(map) = std::env::var("RLOCK_LINK_MAP") {
        println!("cargo::rustc-link-arg-bins=-Wl,-Map={map}");
    }
}
