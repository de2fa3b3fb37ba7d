//! The minimal Redis client the first table puts beside rlock: what a lock on Redis costs with
//! none of rlock's guarantees. It is this benchmark's own executable, run as
//! `compare minimal-client PORT KEY CMD…`: one connection, `SET KEY TOKEN NX PX` to take the
//! lock, CMD run and waited for, a compare-and-delete to give it back: two round trips. No renewal, no wait, no
//! supervision of CMD, no record; a taken KEY exits 75 at once, as rlock's `-n` does.

use std::process::Command;

use crate::redis_cli::CAD;

/// The first argument that makes this executable the minimal client.
pub const ARG: &str = "minimal-client";

/// When this process was started as the minimal client: runs it and exits with its code.
pub fn run_if_asked() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) != Some(ARG) {
        return;
    }
    let [_, _, port, key, cmd @ ..] = &args[..] else {
        eprintln!("usage: compare {ARG} PORT KEY CMD…");
        std::process::exit(64);
    };
    std::process::exit(client(port, key, cmd));
}

fn client(port: &str, key: &str, cmd: &[String]) -> i32 {
    // Without the `CLIENT SETINFO` the library sends on connecting by default: a round trip
    // that no lock needs (rlock sends none either).
    let info =
        redis::IntoConnectionInfo::into_connection_info(format!("redis://127.0.0.1:{port}/"))
            .expect("the URL");
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    let mut conn = redis::Client::open(info.set_redis_settings(settings))
        .and_then(|c| c.get_connection())
        .expect("connect");
    let token = format!("{}-{}", std::process::id(), crate::process::now_ns());
    let taken: Option<String> = redis::cmd("SET")
        .arg(key)
        .arg(&token)
        .arg("NX")
        .arg("PX")
        .arg(30_000)
        .query(&mut conn)
        .expect("SET");
    if taken.is_none() {
        return 75;
    }
    let status = Command::new(&cmd[0])
        .args(&cmd[1..])
        .status()
        .expect("run the command");
    let _: i64 = redis::cmd("EVAL")
        .arg(CAD)
        .arg(1)
        .arg(key)
        .arg(&token)
        .query(&mut conn)
        .expect("EVAL");
    status.code().unwrap_or(128)
}

/// The minimal client with `args` (PORT KEY CMD…).
pub fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("this executable"));
    cmd.arg(ARG).args(args);
    cmd
}
