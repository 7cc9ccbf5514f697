//! A tiny seeded generator: reproducible orders and picks, no dependency.

/// SplitMix64 (Steele, Lea, Flood 2014): good enough to shuffle benchmark ids.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..bound` (`bound > 0`).
    pub(crate) fn below(&mut self, bound: u64) -> u64 {
        self.next_u64() % bound.max(1)
    }

    /// `0..n` in an order given by the seed (Fisher–Yates).
    pub(crate) fn permutation(&mut self, n: u64) -> Vec<u64> {
        let mut ids: Vec<u64> = (0..n).collect();
        for i in (1..ids.len()).rev() {
            let j = usize::try_from(self.below(i as u64 + 1)).unwrap_or(0);
            ids.swap(i, j);
        }
        ids
    }
}
