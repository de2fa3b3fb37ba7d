//! The simulation's inputs, as one hash (`SIM_SOURCES`): rlock's sources (its code and
//! scripts) and the simulation's own. Two builds whose hashes agree make the same runs, whichever
//! Lua each embeds: `answers.rs` compares their answers only then.

use std::fs;
use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files(&path, out);
        } else if path
            .extension()
            .is_some_and(|e| e == "rs" || e == "lua" || e == "toml")
        {
            out.push(path);
        }
    }
}

fn main() {
    let here = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let root = here.join("../..");
    let mut found = Vec::new();
    for dir in [root.join("src"), here.clone()] {
        println!("cargo:rerun-if-changed={}", dir.display());
        files(&dir, &mut found);
    }
    found.push(root.join("build.rs"));
    println!("cargo:rerun-if-changed={}", root.join("build.rs").display());
    found.sort();
    let mut hash = sha1_smol::Sha1::new();
    for path in &found {
        let name = path.strip_prefix(&root).unwrap_or(path);
        hash.update(name.to_string_lossy().as_bytes());
        hash.update(&fs::read(path).unwrap_or_default());
    }
    println!("cargo:rustc-env=SIM_SOURCES={}", hash.digest());
}
