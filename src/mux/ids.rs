//! Maps keyed by channel id, with a hash made for them.
//!
//! The ledger and the channels' plumbing are looked up by [`ChannelId`] several times
//! per frame (take a turn, stage, deliver, announce). std's default hasher (SipHash)
//! is built to resist chosen keys in general-purpose maps and costs tens of
//! nanoseconds per lookup here; a channel id is one `u64`, so a keyed bit mixer of
//! two multiplies (splitmix64's finalizer) spreads it well enough. The key is random
//! per map (drawn from std's `RandomState`),
//! so ids chosen by a remote peer cannot be aimed at one bucket without knowing it,
//! and a mux never holds more than its `max_channels` ids anyway.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

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

/// The id XORed with the key, then splitmix64's finalizer: two multiply-xorshift
/// rounds, a bijection on `u64` in which every input bit reaches every output bit, so
/// sequential ids spread over both the table's low bits (its bucket index) and its
/// top bits (its tag) whatever the key.
///
/// (A single folded multiply, the halves of `(id ^ key) * C` XORed, was used before:
/// for about one key in 130 it put 4,096 sequential ids into under half the buckets.)
#[derive(Debug)]
pub(crate) struct IdHasher {
    key: u64,
    hash: u64,
}

/// Mixes one word: splitmix64's finalizer (Steele, Lea and Flood's constants).
#[inline]
fn mix(word: u64) -> u64 {
    let mut z = word;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Hasher for IdHasher {
    #[inline]
    fn write_u64(&mut self, id: u64) {
        self.hash = mix(self.hash ^ id ^ self.key);
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

/// Entries of closed channels a [`Known`] may hold beyond twice the open channels
/// before it is pruned.
const PRUNE_SLACK: usize = 16;

/// One thread's own handles to the open channels' entries of a shared map (the
/// mux's plumbing, under its lock), so that using an entry does not clone its `Arc`.
///
/// A clone is a write to the entry's reference count, and the worker and the
/// demultiplexer each used every channel's entry for every frame, on two threads:
/// the count's cache line went back and forth with each frame. Here each side clones
/// an entry once, when it first meets the channel, and later only compares pointers.
///
/// An entry is only as fresh as the last [`sync`](Known::sync): a channel may have
/// closed since (and its id been opened again), which the caller finds out from the
/// entry itself or by syncing under the lock.
pub(crate) struct Known<V> {
    map: IdMap<Arc<V>>,
}

impl<V> Known<V> {
    pub(crate) fn new() -> Self {
        Known { map: id_map() }
    }

    /// The entry last synced for `id`, if any (it may be stale).
    pub(crate) fn get(&self, id: ChannelId) -> Option<&Arc<V>> {
        self.map.get(&id)
    }

    /// Forget `id`'s entry.
    pub(crate) fn remove(&mut self, id: ChannelId) {
        self.map.remove(&id);
    }

    /// Make `id`'s entry the one `open` holds now (the shared map, read under its
    /// lock), and return it; `None`, with the entry forgotten, when `id` is not open.
    /// Clones only when the entry is new or changed. While the lock is held anyway,
    /// the map is pruned to the open channels once it holds more than twice as many
    /// entries (plus a few), so entries of closed channels stay bounded: a pruning
    /// visits at most as many open entries (kept) as closed ones (removed), and each
    /// entry is removed once after being inserted once, so pruning costs at most two
    /// entry visits per sync, amortized.
    pub(crate) fn sync(&mut self, id: ChannelId, open: &IdMap<Arc<V>>) -> Option<&Arc<V>> {
        self.sync_found(id, open.get(&id), open)
    }

    /// [`sync`](Self::sync) for a caller that has looked `id` up in `open` already
    /// (`found`, from the same lock): one lookup fewer.
    pub(crate) fn sync_found(
        &mut self,
        id: ChannelId,
        found: Option<&Arc<V>>,
        open: &IdMap<Arc<V>>,
    ) -> Option<&Arc<V>> {
        debug_assert!(
            match (found, open.get(&id)) {
                (Some(found), Some(now)) => Arc::ptr_eq(found, now),
                (None, None) => true,
                _ => false,
            },
            "found is what open holds for the id"
        );
        if self.map.len() > 2 * open.len() + PRUNE_SLACK {
            self.map
                .retain(|id, known| open.get(id).is_some_and(|now| Arc::ptr_eq(now, known)));
        }
        let Some(now) = found else {
            self.map.remove(&id);
            return None;
        };
        let entry = self.map.entry(id).or_insert_with(|| now.clone());
        if !Arc::ptr_eq(entry, now) {
            *entry = now.clone();
        }
        Some(entry)
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;

    #[test]
    fn sequential_ids_spread_over_buckets_and_tags() {
        // Many keys, including fixed ones the former folded multiply got wrong (the
        // last two: 2,388 and 2,391 buckets; CI drew one such key): a random
        // placement fills about 63% (1 - 1/e) of 4,096 buckets with 4,096 ids, and
        // the mixer must come close for every key, not on average.
        let fixed = [
            1u64,
            u64::MAX,
            0x5555_5555_5555_5555,
            0x2cbf_cd80_4772_eb5f,
            0x976e_b299_f17b_1b73,
        ];
        let random = (0..500).map(|_| IdHash::new().key);
        for key in fixed.into_iter().chain(random) {
            let hash = IdHash { key };
            let hashes: Vec<u64> = (0..4096u64).map(|id| hash.hash_one(id)).collect();
            // Low bits choose the bucket, the top 7 bits the tag: both must vary.
            let buckets: std::collections::HashSet<u64> = hashes.iter().map(|h| h & 4095).collect();
            let tags: std::collections::HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
            assert!(
                buckets.len() > 2_400,
                "key {key:#x}: {} of 4096 buckets used",
                buckets.len()
            );
            assert_eq!(tags.len(), 128, "key {key:#x}: every tag used");
        }
    }

    #[test]
    fn known_entries_follow_the_shared_map_and_stay_bounded() {
        let mut open: IdMap<Arc<u64>> = id_map();
        let mut known = Known::new();
        let first = Arc::new(1);
        open.insert(7, first.clone());
        assert!(Arc::ptr_eq(known.sync(7, &open).unwrap(), &first));
        // Synced again: the same handle, no new clone.
        assert_eq!(Arc::strong_count(&first), 3);
        assert!(Arc::ptr_eq(known.sync(7, &open).unwrap(), &first));
        assert_eq!(Arc::strong_count(&first), 3);
        // The id closed and opened again: the entry follows, the old one is let go.
        let second = Arc::new(2);
        open.insert(7, second.clone());
        assert!(
            Arc::ptr_eq(known.get(7).unwrap(), &first),
            "stale until synced"
        );
        assert!(Arc::ptr_eq(known.sync(7, &open).unwrap(), &second));
        assert_eq!(Arc::strong_count(&first), 1, "only the test holds it now");
        // Closed: forgotten.
        open.remove(&7);
        assert!(known.sync(7, &open).is_none());
        assert!(known.get(7).is_none());
        // Many channels that closed without a sync of their own: pruned to the bound.
        for id in 0..1_000u64 {
            open.insert(id, Arc::new(id));
            known.sync(id, &open);
            // One open entry at the sync: pruned past 2 × 1 + slack, then one added.
            assert!(known.map.len() <= 2 * open.len() + PRUNE_SLACK + 1);
            open.remove(&id);
        }
        open.insert(5_000, Arc::new(5_000));
        known.sync(5_000, &open);
        assert!(known.map.len() <= PRUNE_SLACK + 3, "{}", known.map.len());
        assert!(known.get(5_000).is_some(), "the open entry is kept");
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
