//! A small deterministic generator (SplitMix64) for random schedules. The seed is
//! fixed unless `ADVERSARIAL_SEED` is set; failure messages name it so a run can be
//! repeated.

/// SplitMix64.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// The generator for `stream` (one per check or pipeline) under the run's seed.
    pub fn new(stream: u64) -> Rng {
        Rng(seed() ^ stream.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// One of `choices`.
    pub fn pick<T: Clone>(&mut self, choices: &[T]) -> T {
        choices[self.below(choices.len() as u64) as usize].clone()
    }
}

/// The run's seed: `ADVERSARIAL_SEED`, or a fixed default.
pub fn seed() -> u64 {
    std::env::var("ADVERSARIAL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5EED_FA11_u64)
}
