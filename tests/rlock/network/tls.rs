//! `-w` bounds a TLS handshake too: a rediss:// URL whose port takes the connection and never
//! answers ends with the wait, as a plain one does.

use super::*;
use crate::common::rlock;
use std::net::TcpListener;

/// How far past `-w` a run against a silent port may end: the process's start and end, on a
/// loaded machine (nothing is waited for past the wait: the port never answered).
const PAST_THE_WAIT: Duration = Duration::from_millis(300);

fn silent_port_ends_with_the_wait(scheme: &str) {
    // Listening, never accepting: the kernel completes the connection, nobody answers.
    let silent = TcpListener::bind("127.0.0.1:0").expect("bind a silent port");
    let url = format!(
        "{scheme}://127.0.0.1:{}",
        silent.local_addr().unwrap().port()
    );
    for run in 0..runs() {
        let started = Instant::now();
        let out =
            crate::common::run(rlock().args(["--url", &url, "acquire", "-k", KEY, "-w", "1s"]));
        let took = started.elapsed();
        assert_eq!(out.code, 69, "{url}, run {run}: unavailable\n{out}");
        assert!(out.stderr.contains("127.0.0.1"), "names the server: {out}");
        assert!(
            took >= Duration::from_secs(1) && took <= Duration::from_secs(1) + PAST_THE_WAIT,
            "{url} with -w 1s, run {run}: took {took:?}\n{out}"
        );
    }
}

#[test]
fn a_tls_handshake_with_a_silent_port_ends_with_the_wait() {
    silent_port_ends_with_the_wait("rediss");
}

#[test]
fn a_plain_connection_to_a_silent_port_ends_with_the_wait() {
    silent_port_ends_with_the_wait("redis");
}
