//! The scripts answer alike in Lua 5.1 and Lua 5.4. mlua embeds one Lua per build, so the two
//! are two builds of this crate (the features `lua51` and `lua54`): each writes the answers of a
//! few fixed runs beside its test executable, keyed by the hash of the sources they depend on
//! (build.rs), and compares them with the other Lua's answers of the same sources when those
//! are there. CI runs the 5.1 build, then the 5.4 build with `RLOCK_SIM_OTHER_LUA=required`:
//! there the 5.1 answers must be found, and agree.

use std::path::PathBuf;

use super::*;

/// The Lua of this build, and the other.
#[cfg(feature = "lua51")]
const LUAS: (&str, &str) = ("5.1", "5.4");
#[cfg(feature = "lua54")]
const LUAS: (&str, &str) = ("5.4", "5.1");

/// The inputs of the runs (rlock's code and scripts, the simulation's code), hashed by build.rs.
const SOURCES: &str = env!("SIM_SOURCES");

/// Where the answers of `lua` are kept: beside the test executable, where both builds put theirs.
fn file_of(lua: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable");
    let dir = exe.parent().expect("its folder");
    dir.join(format!("rlock-sim-answers-lua{lua}.txt"))
}

/// One line per run: what it did, and a hash of its trace (every reply is in it).
fn answers() -> Vec<String> {
    let setups = [
        Setup::new(Mode::Single, Sharing::Exclusive),
        Setup::new(Mode::Single, Sharing::Limit(2)),
        Setup::new(Mode::Single, Sharing::Shared),
        Setup::new(Mode::Replicas, Sharing::Exclusive),
        Setup::new(Mode::Redlock(3), Sharing::Exclusive),
        with_empty_restarts(Mode::Redlock(3)),
    ];
    let mut out = Vec::new();
    for setup in &setups {
        for seed in 0..3 {
            let o = run(setup, seed);
            assert!(o.violation.is_none(), "{}", o.report());
            let trace = sha1_smol::Sha1::from(o.trace.join("\n")).digest();
            out.push(format!(
                "{:?} {:?} seed {seed}: {} steps, {} grants, {} us, trace {trace}",
                setup.mode, setup.sharing, o.steps, o.grants, o.simulated
            ));
        }
    }
    out
}

#[test]
fn the_scripts_answer_alike_in_lua_5_1_and_5_4() {
    let (this, other) = LUAS;
    let mine = answers();
    let header = format!("sources {SOURCES}");
    let text = format!("{header}\n{}\n", mine.join("\n"));
    std::fs::write(file_of(this), text).expect("the answers written");
    let theirs = std::fs::read_to_string(file_of(other)).unwrap_or_default();
    let mut lines = theirs.lines();
    if lines.next() != Some(header.as_str()) {
        let required = std::env::var("RLOCK_SIM_OTHER_LUA").is_ok_and(|v| v == "required");
        assert!(
            !required,
            "no answers of Lua {other} for these sources beside {}: run the simulation's \
             Lua {other} build first (docs/tests.md, \"The simulation\")",
            file_of(other).display()
        );
        eprintln!(
            "Lua {this}'s answers written; Lua {other}'s for these sources are not there yet"
        );
        return;
    }
    let theirs: Vec<&str> = lines.collect();
    assert_eq!(theirs.len(), mine.len(), "Lua {other} made other runs");
    for (a, b) in mine.iter().zip(&theirs) {
        assert_eq!(
            a, b,
            "Lua {this} (left) and Lua {other} (right) answer otherwise"
        );
    }
    eprintln!(
        "{} runs answer alike in Lua {this} and Lua {other}",
        mine.len()
    );
}
