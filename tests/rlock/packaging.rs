//! What a host without a Rust toolchain needs to run the built binary: nothing, so that copying
//! `target/<target>/release/rlock` (or installing the .deb) is the whole installation. And
//! what the crate and the .deb carry besides: the licences `license = "MIT OR Apache-2.0"`
//! promises, and for Debian a machine-readable copyright file and a real maintainer.
//!
//! Needs `ldd` (Debian: libc-bin, always there with glibc); a missing `ldd` fails with that hint.
//! The .deb checks read Cargo.toml and debian/copyright: cargo-deb need not be installed.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The Linux build is linked statically (`.cargo/config.toml`): the binary needs no shared
/// library at all, not even the host's glibc, so a copy runs on any Linux of its architecture,
/// and it starts without the dynamic loader's work (docs/install.md, "Static or dynamic"). The
/// dynamic build (`RUSTFLAGS="-C target-feature=-crt-static"`, as distributions make it) links
/// the host's glibc instead.
#[test]
fn the_binary_is_static_exactly_in_the_static_build() {
    let rlock = env!("CARGO_BIN_EXE_rlock");
    let out = Command::new("ldd").arg(rlock).output().unwrap_or_else(|e| {
        panic!("cannot run ldd ({e}): install it with `apt-get install -y libc-bin`")
    });
    let listing = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let is_static =
        listing.contains("statically linked") || stderr.contains("not a dynamic executable");
    if cfg!(target_feature = "crt-static") {
        assert!(
            is_static,
            "ldd {rlock} lists shared libraries in the static build:\n{listing}{stderr}"
        );
    } else {
        assert!(
            !is_static && listing.contains("libc.so"),
            "ldd {rlock}: the dynamic build should link the host's glibc:\n{listing}{stderr}"
        );
    }
}

/// A file of the crate's source tree, as text.
fn source(path: &str) -> String {
    let full = Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("cannot read {}: {e}", full.display()))
}

/// `text` with every run of white space made one blank, to compare wrapped texts.
fn words(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn the_crate_carries_both_licences_and_what_build_rs_builds_from() {
    let manifest: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let out = Command::new(env!("CARGO"))
        .args(["package", "--list", "--allow-dirty", "--manifest-path"])
        .arg(&manifest)
        .output()
        .expect("run cargo package --list");
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cargo package --list failed: {}{listing}",
        String::from_utf8_lossy(&out.stderr)
    );
    // ... and what build.rs builds from.
    for file in ["LICENSE-MIT", "LICENSE-APACHE", "debian/copyright"] {
        assert!(
            listing.lines().any(|l| l == file),
            "the crate's package leaves out {file}:\n{listing}"
        );
    }

    let mit = source("LICENSE-MIT");
    assert!(
        mit.lines()
            .any(|l| l == "Copyright (c) 2026 the rlock developers")
            && mit.contains("Permission is hereby granted, free of charge")
            && mit.contains("THE SOFTWARE IS PROVIDED \"AS IS\""),
        "LICENSE-MIT is not the MIT licence of the rlock developers:\n{mit}"
    );
    let apache = source("LICENSE-APACHE");
    assert!(
        words(&apache).starts_with("Apache License Version 2.0, January 2004")
            && apache.contains("END OF TERMS AND CONDITIONS"),
        "LICENSE-APACHE is not the Apache License 2.0"
    );
}

/// The `[package.metadata.deb]` table of Cargo.toml, as text: from its header to the next
/// table's (a line that starts with `[`; the assets' lines are indented).
fn deb_metadata(manifest: &str) -> &str {
    let start = manifest
        .find("\n[package.metadata.deb]\n")
        .expect("Cargo.toml has no [package.metadata.deb]");
    let rest = &manifest[start + 1..];
    let end = rest[1..].find("\n[").map_or(rest.len(), |i| i + 2);
    &rest[..end]
}

/// The value of `key = "…"` (or the first string of `key = ["…", …]`) in `table`.
fn first_string<'a>(table: &'a str, key: &str) -> Option<&'a str> {
    let line = table
        .lines()
        .find(|l| l.split('=').next().is_some_and(|k| k.trim() == key))?;
    line.split('"').nth(1)
}

#[test]
fn the_deb_has_a_copyright_file_and_a_real_maintainer() {
    let manifest = source("Cargo.toml");
    let deb = deb_metadata(&manifest);

    // The assets: one `["source", "target", "mode"],` a line.
    let assets: Vec<Vec<&str>> = deb
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("[\""))
        .map(|l| l.split('"').skip(1).step_by(2).collect())
        .collect();
    assert!(
        assets.contains(&vec![
            "debian/copyright",
            "usr/share/doc/rlock/copyright",
            "644"
        ]),
        "the .deb does not install debian/copyright as /usr/share/doc/rlock/copyright:\n{deb}"
    );
    // cargo-deb writes a copyright file of its own only when no asset is installed there; a
    // second source for it would be ignored, and misleading.
    for key in ["copyright", "license-file"] {
        assert!(
            first_string(deb, key).is_none(),
            "[package.metadata.deb] {key} is unused: debian/copyright is the copyright file"
        );
    }

    // The Maintainer field: [package.metadata.deb] maintainer, or else (as cargo-deb does) the
    // first of [package] authors. Debian wants "Name <address>", and one that reaches someone.
    let package = &manifest[..manifest.find("\n[").expect("a table after [package]")];
    let maintainer = first_string(deb, "maintainer")
        .or_else(|| first_string(package, "authors"))
        .expect("no maintainer for the .deb: set [package] authors");
    let (name, address) = maintainer
        .strip_suffix('>')
        .and_then(|m| m.split_once(" <"))
        .unwrap_or_else(|| panic!("maintainer {maintainer:?} is not \"Name <address>\""));
    let domain = address.split_once('@').map(|(_, d)| d).unwrap_or_default();
    assert!(
        !name.trim().is_empty() && domain.contains('.') && !address.contains(' '),
        "maintainer {maintainer:?} is not \"Name <address>\""
    );
    // Names and domains (RFC 2606 and the like) that stand for someone not yet named.
    let name = name.trim().to_lowercase();
    let domain = domain.to_lowercase();
    let placeholder = [
        "todo",
        "fixme",
        "tbd",
        "your name",
        "firstname lastname",
        "maintainer",
    ]
    .contains(&name.as_str())
        || [
            "localhost",
            "example.com",
            "example.org",
            "example.net",
            "example",
            "invalid",
            "test",
            "local",
        ]
        .iter()
        .any(|d| domain == *d || domain.ends_with(&format!(".{d}")));
    assert!(!placeholder, "maintainer {maintainer:?} is a placeholder");
}

#[test]
fn debian_copyright_is_machine_readable_and_names_both_licences() {
    let copyright = source("debian/copyright");
    assert!(
        copyright.starts_with(
            "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"
        ),
        "debian/copyright does not start with the Format line of copyright-format 1.0"
    );
    // Deb822 paragraphs: "Field: value" lines, continuation lines that start with a blank and
    // hold more than white space (an empty one is " ."), one empty line between paragraphs.
    let paragraphs: Vec<&str> = copyright.trim_end().split("\n\n").collect();
    for (n, line) in copyright.lines().enumerate() {
        let ok = if let Some(rest) = line.strip_prefix(' ') {
            !rest.trim().is_empty()
        } else {
            line.split_once(':')
                .is_some_and(|(field, _)| !field.is_empty() && !field.contains(char::is_whitespace))
        };
        assert!(
            ok || line.is_empty(),
            "debian/copyright line {} is neither a field nor a continuation: {line:?}",
            n + 1
        );
    }
    assert!(
        !copyright.contains("\n\n\n"),
        "more than one empty line between paragraphs"
    );
    let field = |para: &str, name: &str| -> Option<String> {
        para.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.trim().to_string())
    };

    // Every file: both licences, at the user's option, and the holder LICENSE-MIT names.
    let files = paragraphs
        .iter()
        .find(|p| field(p, "Files").as_deref() == Some("*"))
        .expect("no 'Files: *' paragraph");
    assert_eq!(
        field(files, "License").as_deref(),
        Some("Expat or Apache-2.0"),
        "{files}"
    );
    assert_eq!(
        field(files, "Copyright").as_deref(),
        Some("2026 the rlock developers"),
        "{files}"
    );

    // Each licence in a paragraph of its own: the MIT (Expat) text whole, since Debian has no
    // copy of it; Apache-2.0 by reference to the copy every Debian system has.
    let licence = |name: &str| -> String {
        let para = paragraphs
            .iter()
            .find(|p| p.starts_with(&format!("License: {name}\n")))
            .unwrap_or_else(|| panic!("no 'License: {name}' paragraph"));
        let body: Vec<&str> = para
            .lines()
            .skip(1)
            .map(|l| if l == " ." { "" } else { l })
            .collect();
        words(&body.join("\n"))
    };
    let mit = source("LICENSE-MIT");
    let mit_text = &mit[mit.find("Permission is hereby granted").expect("MIT text")..];
    assert_eq!(
        licence("Expat"),
        words(mit_text),
        "the Expat text is not LICENSE-MIT's"
    );
    let apache = licence("Apache-2.0");
    assert!(
        apache.contains("Licensed under the Apache License, Version 2.0")
            && apache.contains("/usr/share/common-licenses/Apache-2.0"),
        "{apache}"
    );
}
