//! The exit codes are listed in three places a user reads: the README's table, `man rlock`'s
//! EXIT STATUS, and `rlock exec --help`. They list the same codes.

use std::collections::BTreeSet;
use std::fs;
use std::path::Path;

use crate::common::{rlock, run};

/// The numbers at the start of `cell` and after its separators: `126 / 127` is 126 and 127,
/// `128+N` is 128.
fn codes_in(cell: &str) -> Vec<u32> {
    cell.split(|c: char| c.is_whitespace() || c == '/' || c == ',')
        .filter_map(|w| {
            let digits: String = w.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .collect()
}

fn readme_codes() -> BTreeSet<u32> {
    let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    let table = text
        .split("\n## Exit codes\n")
        .nth(1)
        .expect("the README's Exit codes section");
    table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
        .flat_map(|row| codes_in(row.split('|').nth(1).unwrap_or("")))
        .collect()
}

fn man_codes() -> BTreeSet<u32> {
    let text = fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("man/rlock.1"))
        .expect("man/rlock.1");
    let section = text
        .split(".SH \"EXIT STATUS\"")
        .nth(1)
        .and_then(|s| s.split("\n.SH ").next())
        .expect("man rlock's EXIT STATUS");
    let lines: Vec<&str> = section.lines().collect();
    lines
        .windows(2)
        .filter(|w| w[0] == ".TP")
        .flat_map(|w| codes_in(&w[1].replace("\\fB", "").replace("\\fR", " ")))
        .collect()
}

#[test]
fn the_readme_and_man_rlock_list_the_same_exit_codes() {
    let readme = readme_codes();
    assert!(readme.contains(&75) && readme.contains(&128), "{readme:?}");
    assert_eq!(
        readme,
        man_codes(),
        "README.md's table / man rlock's EXIT STATUS"
    );
}

#[test]
fn exec_help_lists_every_exit_code_exec_can_end_with() {
    let out = run(rlock().args(["exec", "--help"]));
    assert_eq!(out.code, 0, "{out}");
    let help = out
        .stdout
        .split("Exit codes:")
        .nth(1)
        .expect("an Exit codes paragraph in rlock exec --help")
        .split("\n\n")
        .next()
        .unwrap_or("");
    let listed: BTreeSet<u32> = codes_in(&help.replace(['(', ')', ';', ','], " "))
        .into_iter()
        .collect();
    // 1 is inspect's alone; 0 is the command's own status, which the help names in words.
    for code in readme_codes().into_iter().filter(|c| *c > 1) {
        assert!(
            listed.contains(&code),
            "rlock exec --help does not list {code}:\n{help}"
        );
    }
}
