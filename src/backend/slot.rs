//! Redis Cluster key slots: which part of a key Redis hashes, and the slot it lands in.

/// The part of a key Redis Cluster hashes: the text between the first `{` and the next `}`,
/// when not empty.
pub fn hash_tag(key: &str) -> Option<&str> {
    let open = key.find('{')?;
    let close = key[open + 1..].find('}')?;
    (close > 0).then(|| &key[open + 1..open + 1 + close])
}

/// The Redis Cluster slot of a key: CRC16 (XMODEM) of its hash tag, or of the whole key.
pub fn key_slot(key: &str) -> u16 {
    let hashed = hash_tag(key).unwrap_or(key);
    crc16::State::<crc16::XMODEM>::calculate(hashed.as_bytes()) % 16384
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_match_redis() {
        // Values from CLUSTER KEYSLOT.
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        assert_eq!(key_slot("{rlock:jobs}:state"), key_slot("rlock:jobs"));
        assert_eq!(key_slot("foo{}{bar}"), key_slot("foo{}{bar}"));
        assert_eq!(hash_tag("a{b}c"), Some("b"));
        assert_eq!(hash_tag("a{}c{d}"), None);
    }
}
