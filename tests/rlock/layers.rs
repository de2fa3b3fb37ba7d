//! The import structure of `src/`: layers with no circle and no import running upward, as
//! README.md's "Design" and docs/design.md's "The code" say, and the picture they show is the
//! one `scripts/layers` draws from the code today. No Redis here.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `scripts/layers` with `args`: whether it succeeded, and what it printed.
fn layers(args: &[&str]) -> (bool, String) {
    let out = Command::new("python3")
        .arg(root().join("scripts/layers"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 scripts/layers (python3 is needed): {e}"));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

#[test]
fn the_modules_of_src_import_each_other_without_a_circle() {
    let (ok, said) = layers(&["--check"]);
    assert!(
        ok,
        "scripts/layers --check found a circle of imports, in src/ or another crate of the \
         workspace (a lower layer must not use a higher one: give it an error or a type of its \
         own, and a From above):\n{said}"
    );
}

/// The rows of the picture: `  N  module  module ...`, top first.
fn rows(picture: &str) -> Vec<String> {
    picture
        .lines()
        .take_while(|l| !l.starts_with("What each uses"))
        .filter(|l| is_row(l))
        .map(|l| l.trim_end().to_string())
        .collect()
}

fn is_row(line: &str) -> bool {
    let Some(rest) = line.strip_prefix("  ") else {
        return false;
    };
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    digits > 0 && rest[digits..].starts_with("  ")
}

#[test]
fn the_picture_of_the_layers_in_the_readme_and_design_page_is_the_code_s() {
    let (ok, picture) = layers(&[]);
    assert!(ok, "scripts/layers failed:\n{picture}");
    let rows = rows(&picture);
    assert!(rows.len() > 3, "no layers in:\n{picture}");
    for page in ["README.md", "docs/design.md"] {
        let text = std::fs::read_to_string(root().join(page)).unwrap();
        let shown: Vec<&str> = text.lines().filter(|l| is_row(l)).collect();
        // Each row as printed, alone on its line or followed by a note after 3+ blanks.
        let matches = |line: &str, row: &str| {
            line.strip_prefix(row)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with("   "))
        };
        let stale: Vec<&&str> = shown
            .iter()
            .filter(|l| !rows.iter().any(|r| matches(l, r)))
            .collect();
        let missing: Vec<&String> = rows
            .iter()
            .filter(|r| !shown.iter().any(|l| matches(l, r)))
            .collect();
        assert!(
            stale.is_empty() && missing.is_empty(),
            "{page}'s picture of the layers is not scripts/layers' (paste its rows again):\n\
             rows the code no longer has: {stale:#?}\nrows missing: {missing:#?}\n\
             scripts/layers prints:\n{picture}",
            page = Path::new(page).display()
        );
    }
}
