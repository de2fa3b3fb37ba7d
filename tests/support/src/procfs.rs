//! What /proc tells of a process, for the tests and the benchmark alike.

/// Voluntary context switches of every thread of `pid`, summed: how often it went to sleep and
/// was woken. 0 when the process is gone.
pub fn voluntary_switches(pid: i32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok())
        .filter_map(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .sum()
}
