//! A small deterministic generator (xorshift64), so that a failure can be replayed and a
//! schedule varied with no crate.

use std::time::Duration;

pub struct Rng(pub u64);

impl Rng {
    /// The next number; the methods below draw from it.
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A duration between `lo` and `hi`, both included, to the microsecond.
    pub fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let span = hi.saturating_sub(lo).as_micros() as u64;
        lo + Duration::from_micros(self.next() % (span + 1))
    }

    /// Text of `len` characters drawn from ASCII controls, printable ASCII, and a few wider
    /// characters (accents, CJK, emoji, line separators, bidi overrides).
    pub fn text(&mut self, len: usize) -> String {
        const WIDE: [char; 8] = [
            'é', '中', '🔒', '\u{2028}', '\u{202e}', '\u{85}', '\u{7f}', ' ',
        ];
        (0..len)
            .map(|_| match self.below(3) {
                0 => char::from(self.below(32) as u8),
                1 => char::from(32 + self.below(95) as u8),
                _ => WIDE[self.below(WIDE.len() as u64) as usize],
            })
            .collect()
    }

    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.below(256) as u8).collect()
    }
}
