//! Maps keyed by channel id, with a hash made for them.
//!
//! The ledger and the channels' plumbing are looked up by [`ChannelId`] several times
//! per frame (take a turn, stage, deliver, announce). std's default hasher (SipHash)
//! is built to resist chosen keys in general-purpose maps and costs tens of
//! nanoseconds per lookup here; a channel id is one `u64`, so one keyed multiply
//! mixes it well enough. The key is random per map (drawn from std's `RandomState`),
//! so ids chosen by a remote peer cannot be aimed at one bucket without knowing it,
//! and a mux never holds more than its `max_channels` ids anyway.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};

use super::ChannelId;

/// A map from channel id to `V`.
pub(crate) type IdMap<V> = HashMap<ChannelId, V, IdHash>;

/// An empty [`IdMap`] with a fresh random key.
pub(crate) fn id_map<V>() -> IdMap<V> {
    HashMap::with_hasher(IdHash::new())
}

/// Builds [`IdHasher`]s with one random key.
#[derive(Clone, Debug)]
pub(crate) struct IdHash {
    key: u64,
}

impl IdHash {
    fn new() -> Self {
        IdHash {
            key: RandomState::new().hash_one(0x5eed_u64) | 1,
        }
    }
}

impl BuildHasher for IdHash {
    type Hasher = IdHasher;

    fn build_hasher(&self) -> IdHasher {
        IdHasher {
            key: self.key,
            hash: 0,
        }
    }
}

/// Folded multiply of the id with the key: the 128-bit product's halves, XORed, so
/// every bit of the id reaches both the high bits (the table's tag) and the low bits
/// (its bucket index).
#[derive(Debug)]
pub(crate) struct IdHasher {
    key: u64,
    hash: u64,
}

/// An odd constant with well-mixed bits (2^64 / φ).
const MIX: u64 = 0x9e37_79b9_7f4a_7c15;

impl Hasher for IdHasher {
    #[inline]
    fn write_u64(&mut self, id: u64) {
        let product = u128::from(id ^ self.key) * u128::from(MIX);
        self.hash ^= (product as u64) ^ ((product >> 64) as u64);
    }

    /// Other key types are not used with this hasher; fold their bytes in anyway.
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;

    #[test]
    fn sequential_ids_spread_over_buckets_and_tags() {
        let hash = IdHash::new();
        let hashes: Vec<u64> = (0..4096u64).map(|id| hash.hash_one(id)).collect();
        // Low bits choose the bucket, the top 7 bits the tag: both must vary.
        let buckets: std::collections::HashSet<u64> = hashes.iter().map(|h| h & 4095).collect();
        let tags: std::collections::HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        assert!(
            buckets.len() > 2_400,
            "{} of 4096 buckets used",
            buckets.len()
        );
        assert_eq!(tags.len(), 128, "every tag used");
    }

    #[test]
    fn maps_keep_their_entries() {
        let mut map = id_map();
        for id in (0..10_000u64).map(|i| i.wrapping_mul(0x1_0000_0001)) {
            map.insert(id, id + 1);
        }
        for id in (0..10_000u64).map(|i| i.wrapping_mul(0x1_0000_0001)) {
            assert_eq!(map.get(&id), Some(&(id + 1)));
        }
    }
}
