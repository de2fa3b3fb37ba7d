//! What a host without a Rust toolchain needs to run the built binary: nothing beyond glibc, so
//! that copying `target/release/rlock` (or installing the .deb) is the whole installation.
//!
//! Needs `ldd` (Debian: libc-bin, always there with glibc); a missing `ldd` fails with that hint.

use std::process::Command;

/// The shared objects of glibc and its runtime: the C library and loader, the math library, the
/// kernel's vDSO, the pieces older glibc split out (pthread, dl, rt), and libgcc_s, which Rust's
/// unwinder uses and every glibc system carries.
const GLIBC: &[&str] = &[
    "linux-vdso.so",
    "linux-gate.so",
    "ld-linux",
    "libc.so",
    "libm.so",
    "libgcc_s.so",
    "libpthread.so",
    "libdl.so",
    "librt.so",
];

#[test]
fn binary_needs_nothing_beyond_glibc() {
    let rlock = env!("CARGO_BIN_EXE_rlock");
    let out = Command::new("ldd").arg(rlock).output().unwrap_or_else(|e| {
        panic!("cannot run ldd ({e}): install it with `apt-get install -y libc-bin`")
    });
    let listing = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // A static build (a musl target, say) needs nothing at all.
    if listing.contains("statically linked") || stderr.contains("not a dynamic executable") {
        return;
    }
    assert!(
        out.status.success(),
        "ldd {rlock} failed: {stderr}{listing}"
    );
    // Lines such as "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or
    // "\t/lib64/ld-linux-x86-64.so.2 (0x...)".
    let libs: Vec<&str> = listing
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(
        libs.iter().any(|l| l.starts_with("libc.so")),
        "ldd lists no libc; not a dynamically linked glibc binary?\n{listing}"
    );
    let extra: Vec<&&str> = libs
        .iter()
        .filter(|lib| {
            let name = lib.rsplit('/').next().unwrap_or(lib);
            !GLIBC.iter().any(|g| name.starts_with(g))
        })
        .collect();
    assert!(
        extra.is_empty(),
        "rlock links {extra:?} beyond glibc: a host would need them installed to run a copied \
         binary (and the .deb would need to depend on them)\n{listing}"
    );
}
