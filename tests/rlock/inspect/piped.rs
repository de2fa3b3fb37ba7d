//! Keys and labels whole when the output is a pipe or a file (a script reads them), and on a
//! terminal never two different keys shown as the same text: `inspect`'s table and `--history`.

use super::*;

/// Two keys alike for their first 150 characters, which a terminal's cut would make look one.
fn twins() -> [String; 2] {
    let stem = "cancel-polite-gi".repeat(10);
    [format!("{stem}-first"), format!("{stem}-second")]
}

#[test]
fn piped_tables_print_whole_keys_and_labels_and_a_terminal_never_shows_two_keys_alike() {
    let server = RedisServer::start();
    let keys = twins();
    let label = format!("nightly {}", "l".repeat(200));
    for key in &keys {
        let out = run(rlock_at(&server).args(["exec", "--label", &label, "-k", key, "--", "true"]));
        assert_eq!(out.code, 0, "{out}");
        let out =
            run(rlock_at(&server).args(["acquire", "--label", &label, "-k", key, "--ttl", "1h"]));
        assert_eq!(out.code, 0, "{out}");
    }
    for args in [&["inspect"][..], &["inspect", "--history"]] {
        // A pipe: every key and label whole.
        let out = run(rlock_at(&server).args(args));
        assert_eq!(out.code, 0, "{out}");
        for key in &keys {
            assert!(
                out.stdout.contains(key.as_str()),
                "{args:?}: {key} cut:\n{}",
                out.stdout
            );
        }
        assert!(
            out.stdout.contains(&label),
            "{args:?}: the label cut:\n{}",
            out.stdout
        );
        // A terminal: the key column shows two different texts.
        let shown = on_terminal(rlock_at(&server).args(args));
        let firsts: Vec<&str> = shown
            .lines()
            .skip(1)
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert!(firsts.len() >= 2, "{args:?}:\n{shown}");
        let distinct: std::collections::BTreeSet<&str> = firsts.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            2,
            "{args:?}: two keys shown alike:\n{shown}"
        );
    }
}
