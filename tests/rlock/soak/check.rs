//! The soak's log checker (`common::soak::check_log`) catches what the soaks must never see: a
//! holder's sign of life after the next holder started, a fence that does not rise, more holders
//! of a semaphore than its limit. A checker that missed them would let every soak pass.

use crate::common::soak::{Config, Report, check_log};
use std::fs;

fn checked(log: &str) -> Report {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    fs::write(&path, log).unwrap();
    let mut r = Report::default();
    check_log(&path, &Config::short(1), &mut r);
    r
}

#[test]
fn a_clean_log_passes() {
    let r = checked("start 1 10 a 1\nhb 1 20 a 0\nend 1 30 a 0\nstart 2 40 b 50\nhb 2 50 b 49\n");
    assert_eq!((r.grants, r.long_grants, r.cut_short), (2, 1, 1));
    assert!(r.overlaps.is_empty() && r.inversions.is_empty() && r.malformed.is_empty());
}

#[test]
fn three_holders_of_a_semaphore_of_two_are_caught() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let log = "start 1 10 a 1\nstart 2 11 b 1\nstart 3 12 c 1\nend 1 20 a 0\nend 2 21 b 0\nend 3 22 c 0\nstart 4 30 d 1\nend 4 40 d 0\n";
    fs::write(&path, log).unwrap();
    let cfg = Config {
        limit: Some(2),
        ..Config::short(1)
    };
    let mut r = Report::default();
    check_log(&path, &cfg, &mut r);
    assert_eq!(r.overlaps.len(), 1, "{r}");
    assert_eq!(r.max_running, 3);
    let mut r = Report::default();
    fs::write(
        &path,
        log.replace("start 3 12 c 1\n", "")
            .replace("end 3 22 c 0\n", ""),
    )
    .unwrap();
    check_log(&path, &cfg, &mut r);
    assert!(r.overlaps.is_empty() && r.inversions.is_empty(), "{r}");
    assert_eq!(r.max_running, 2);
}

#[test]
fn a_late_heartbeat_and_a_lower_fence_are_caught() {
    let r = checked("start 5 10 a 1\nstart 4 40 b 1\nhb 5 45 a 0\nend 4 50 b 0\n");
    assert_eq!(r.overlaps.len(), 1, "{r}");
    assert_eq!(r.inversions.len(), 1, "{r}");
}
