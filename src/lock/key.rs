//! The Redis names of one lock: the lock key, its helper keys in the same cluster slot, and its
//! wake channel.

use super::error::Error;
use crate::backend::hash_tag;

/// The Redis names of one lock.
#[derive(Debug, Clone)]
pub struct LockKey {
    /// The name the user gave (`-k`).
    pub name: String,
    /// PREFIX + name.
    pub redis_key: String,
    pub(super) state: String,
    pub(super) queue: String,
    pub(crate) channel: String,
    /// The runs on record (a stream, `history.rs`), in the lock's slot.
    pub(super) history: String,
}

/// What rlock appends to a lock's key for its helper keys (see `LockKey::is_helper`).
const HELPER_SUFFIXES: [&str; 4] = [":state", ":q", ":history", ":once"];

impl LockKey {
    pub fn new(prefix: &str, name: &str) -> Result<Self, Error> {
        if name.is_empty() {
            return Err(Error::Usage("the key must not be empty".into()));
        }
        let redis_key = format!("{prefix}{name}");
        // A key with a hash tag of its own keeps its helper keys beside it: a lock named like
        // another's helper (`{b}:history` beside `{b}`) would share that lock's keys.
        if hash_tag(&redis_key).is_some()
            && let Some(suffix) = HELPER_SUFFIXES.iter().find(|s| redis_key.ends_with(*s))
        {
            return Err(Error::Usage(format!(
                "key '{name}' ends in '{suffix}', the name of a helper key of lock '{}'; choose another name",
                &name[..name.len() - suffix.len()]
            )));
        }
        // Helper keys must hash to the lock key's cluster slot. Appending to a key that has a
        // hash tag keeps its tag; otherwise the whole key becomes the tag.
        let base = if hash_tag(&redis_key).is_some() {
            redis_key.clone()
        } else if redis_key.contains('}') {
            let culprit = if prefix.contains('}') {
                format!("--prefix '{prefix}'")
            } else {
                format!("key '{name}'")
            };
            return Err(Error::Usage(format!(
                "{culprit} has a '}}' outside a {{hash tag}}; rlock could not keep its helper keys in the lock's cluster slot"
            )));
        } else {
            format!("{{{redis_key}}}")
        };
        Ok(LockKey {
            name: name.to_string(),
            state: format!("{base}:state"),
            queue: format!("{base}:q"),
            channel: format!("{base}:wake"),
            history: format!("{base}:history"),
            redis_key,
        })
    }

    /// A key found by a listing, for reading only: a key with a `}` outside a hash tag (another
    /// client's lock) has no helper keys that share its cluster slot, so the lock key stands in
    /// for them, which the inspect script reads as "no state, no queue".
    pub(super) fn listed(prefix: &str, name: &str) -> Self {
        LockKey::new(prefix, name).unwrap_or_else(|_| {
            let redis_key = format!("{prefix}{name}");
            LockKey {
                name: name.to_string(),
                state: redis_key.clone(),
                queue: redis_key.clone(),
                channel: format!("{redis_key}:wake"),
                history: format!("{redis_key}:history"),
                redis_key,
            }
        })
    }

    /// The window record of `exec --once-per` (a hash, `once.rs`), beside the state in the
    /// lock's slot: made when asked for, as only `--once-per` needs it.
    pub(super) fn once(&self) -> String {
        match self.state.strip_suffix(":state") {
            Some(base) => format!("{base}:once"),
            None => format!("{}:once", self.redis_key),
        }
    }

    pub(super) fn keys(&self) -> [&str; 3] {
        [&self.redis_key, &self.state, &self.queue]
    }

    /// True for rlock's own helper keys, which a listing must not show as locks: `{K}:state`,
    /// `{K}:q`, `{K}:history` and `{K}:once`, or the same after a K with a hash tag of its own.
    pub fn is_helper(redis_key: &str) -> bool {
        let Some(base) = HELPER_SUFFIXES
            .iter()
            .find_map(|suffix| redis_key.strip_suffix(suffix))
        else {
            return false;
        };
        (base.starts_with('{') && base.ends_with('}')) || hash_tag(base).is_some()
    }
}

/// The `SCAN MATCH` pattern for every key under `prefix`, its own glob characters taken
/// literally.
pub(super) fn scan_pattern(prefix: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + 1);
    for c in prefix.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('*');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helper_keys_share_the_slot() {
        let k = LockKey::new("rlock:", "jobs").unwrap();
        assert_eq!(k.redis_key, "rlock:jobs");
        assert_eq!(k.state, "{rlock:jobs}:state");
        let k = LockKey::new("", "{user1}.jobs").unwrap();
        assert_eq!(k.state, "{user1}.jobs:state");
        assert_eq!(k.history, "{user1}.jobs:history");
        assert_eq!(k.once(), "{user1}.jobs:once");
        assert_eq!(
            LockKey::new("rlock:", "jobs").unwrap().once(),
            "{rlock:jobs}:once"
        );
        assert!(LockKey::new("", "a}b").is_err());
        let k = LockKey::new("", "a{b").unwrap();
        assert_eq!(hash_tag(&k.state), Some("a{b"));
        assert!(LockKey::is_helper("{rlock:jobs}:state"));
        assert!(LockKey::is_helper("rlock:{grp}jobs:q"));
        assert!(LockKey::is_helper("{rlock:jobs}:history"));
        assert!(LockKey::is_helper("{rlock:jobs}:once"));
        assert!(!LockKey::is_helper("rlock:jobs"));
    }

    #[test]
    fn a_name_that_is_another_locks_helper_is_refused() {
        for name in ["{t}a:history", "{t}a:state", "{b}:q", "{t}a:once"] {
            assert!(LockKey::new("rlock:", name).is_err(), "{name}");
            let owner = LockKey::new("rlock:", &name[..name.rfind(':').unwrap()]).unwrap();
            assert!(
                owner.keys().contains(&format!("rlock:{name}").as_str())
                    || owner.history == format!("rlock:{name}")
                    || owner.once() == format!("rlock:{name}")
            );
        }
        // Without a hash tag of its own the helper keys are `{…}`-wrapped: no collision.
        for name in ["a:history", "jobs:q", "x:state"] {
            assert!(LockKey::new("rlock:", name).is_ok(), "{name}");
        }
    }

    #[test]
    fn escapes_globs() {
        assert_eq!(scan_pattern("a*b?[c]"), "a\\*b\\?\\[c\\]*");
    }
}
