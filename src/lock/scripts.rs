//! The Lua scripts rlock sends: every Redis command of the lock protocol is in the `.lua` files
//! beside this one. Each script carries a header with its KEYS, ARGV and replies.

use super::reply::{is_granted, is_renewed};
use crate::backend::Script;

/// The sources and SHA1s of the scripts, from build.rs (which lists the files of each).
mod sources {
    include!(concat!(env!("OUT_DIR"), "/scripts.rs"));
}

// Public so that tests can run and preload exactly what rlock sends.
// With --replicas, a grant and a renewal count only once the replicas have them.
pub static ACQUIRE: Script =
    Script::new("acquire", sources::ACQUIRE).replicated("grant", is_granted);
pub static RELEASE: Script = Script::new("release", sources::RELEASE);
pub static RENEW: Script = Script::new("renew", sources::RENEW).replicated("renewal", is_renewed);
// Sent whole: it gives back grants whose reply never came, often to a server that has just
// stalled and may never have cached it, and its own reply may never be read.
pub static LEAVE: Script = Script::sent_whole("leave", sources::LEAVE);
pub static INSPECT: Script = Script::new("inspect", sources::INSPECT);
pub static FENCE: Script = Script::new("fence", sources::FENCE);
// The history of runs (history.rs): one entry appended at the end of each run, and the reading.
pub static RECORD: Script = Script::new("record", sources::RECORD);
pub static HISTORY: Script = Script::new("history", sources::HISTORY);
/// Which server answers (its run_id): asked of every Redlock master before each grant.
pub static IDENTITY: Script = Script::new("identity", sources::IDENTITY);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_hashes_are_what_redis_computes() {
        for script in [
            &ACQUIRE, &RELEASE, &RENEW, &LEAVE, &INSPECT, &FENCE, &RECORD, &HISTORY, &IDENTITY,
        ] {
            let sha = redis::Script::new(script.source).get_hash().to_string();
            assert_eq!(script.sha, sha, "SHA1 of {}", script.name);
        }
        assert!(ACQUIRE.source.starts_with(include_str!("common.lua")));
        assert!(ACQUIRE.source.ends_with(include_str!("acquire.lua")));
    }

    #[test]
    fn the_give_back_fits_in_one_read_of_the_server() {
        // Sent whole, often to a server that has just stalled: in one 16 KB read of its query
        // buffer it runs when the server thaws, before the commands that other connections
        // (the waiter's next try) sent later.
        assert!(
            LEAVE.source.len() < 16 * 1024,
            "{} bytes",
            LEAVE.source.len()
        );
    }
}
