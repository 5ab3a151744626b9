//! What a source remembers of recent stream sequences: how often it delivered each,
//! and which were settled (acked or terminated), so that a message the server sends
//! again after it was settled is not processed twice.
//!
//! Why: a JetStream server writes a consumer's state (deliveries, acks) to its store
//! at most ten times a second. A server killed hard loses the last writes, and after
//! its restart delivers again messages that were already acked, with a delivery
//! count that starts over. The source keeps its own account over a horizon of the
//! most recent `H` sequences: a delivery of a settled sequence is acked again and
//! not passed on (counted as suppressed); a delivery of a sequence it delivered
//! before is a redelivery whatever count the server gives.
//!
//! The account is a ring of `H` bytes indexed by `sequence % H`, valid for
//! sequences in `base..base + H`: the low 7 bits count deliveries (saturating at
//! 127), the top bit marks settled. A sequence beyond the window moves it forward,
//! clearing what falls out; a sequence below it is unknown (delivered as the server
//! says). One short lock per message.

use std::sync::Mutex;

/// The top bit of a slot: settled.
const SETTLED: u8 = 0x80;

/// What the source should do with an arriving sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// Deliver it; `count` is how many times this source has delivered it,
    /// this time included (1 the first time), or 0 when it is below the horizon
    /// (unknown).
    Deliver { count: u64 },
    /// Settled before: ack it again, do not deliver.
    Settled,
}

struct Window {
    base: u64,
    slots: Box<[u8]>,
}

impl Window {
    fn horizon(&self) -> u64 {
        self.slots.len() as u64
    }

    fn slot(&mut self, seq: u64) -> Option<&mut u8> {
        let horizon = self.horizon();
        if seq < self.base {
            return None;
        }
        if seq >= self.base + horizon {
            let new_base = seq + 1 - horizon;
            if new_base - self.base >= horizon {
                self.slots.fill(0);
            } else {
                for old in self.base..new_base {
                    self.slots[(old % horizon) as usize] = 0;
                }
            }
            self.base = new_base;
        }
        Some(&mut self.slots[(seq % horizon) as usize])
    }
}

/// The account of one source (shared by its subscriptions and its messages).
pub(crate) struct Ledger {
    window: Mutex<Window>,
}

impl Ledger {
    /// An account of the last `horizon` sequences (at least 1).
    pub(crate) fn new(horizon: usize) -> Self {
        Ledger {
            window: Mutex::new(Window {
                base: 0,
                slots: vec![0; horizon.max(1)].into_boxed_slice(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Window> {
        // Only this module's arithmetic runs under the lock.
        self.window.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A message of stream sequence `seq` arrived.
    pub(crate) fn arrive(&self, seq: u64) -> Arrival {
        let mut window = self.lock();
        let Some(slot) = window.slot(seq) else {
            return Arrival::Deliver { count: 0 };
        };
        if *slot & SETTLED != 0 {
            return Arrival::Settled;
        }
        let count = (*slot & !SETTLED).saturating_add(1).min(!SETTLED);
        *slot = count;
        Arrival::Deliver {
            count: u64::from(count),
        }
    }

    /// `seq` was acked or terminated: later deliveries of it are suppressed.
    pub(crate) fn settle(&self, seq: u64) {
        if let Some(slot) = self.lock().slot(seq) {
            *slot |= SETTLED;
        }
    }
}

#[cfg(all(test, not(weir_loom)))]
mod tests {
    use super::*;

    #[test]
    fn counts_deliveries_and_suppresses_settled_sequences() {
        let ledger = Ledger::new(8);
        assert_eq!(ledger.arrive(5), Arrival::Deliver { count: 1 });
        assert_eq!(ledger.arrive(5), Arrival::Deliver { count: 2 });
        ledger.settle(5);
        assert_eq!(ledger.arrive(5), Arrival::Settled);
        assert_eq!(ledger.arrive(6), Arrival::Deliver { count: 1 });
    }

    #[test]
    fn the_window_moves_forward_and_forgets_what_falls_out() {
        let ledger = Ledger::new(4);
        ledger.arrive(1);
        ledger.settle(1);
        ledger.arrive(2);
        // 0..4 is the window; 6 moves it to 3..7: 1 and 2 are forgotten.
        assert_eq!(ledger.arrive(6), Arrival::Deliver { count: 1 });
        assert_eq!(
            ledger.arrive(1),
            Arrival::Deliver { count: 0 },
            "below: unknown"
        );
        assert_eq!(ledger.arrive(2), Arrival::Deliver { count: 0 });
        // A jump past a whole window clears it.
        ledger.settle(6);
        assert_eq!(ledger.arrive(100), Arrival::Deliver { count: 1 });
        assert_eq!(ledger.arrive(6), Arrival::Deliver { count: 0 });
        assert_eq!(ledger.arrive(100), Arrival::Deliver { count: 2 });
    }

    #[test]
    fn the_count_saturates() {
        let ledger = Ledger::new(2);
        for _ in 0..300 {
            ledger.arrive(1);
        }
        assert_eq!(ledger.arrive(1), Arrival::Deliver { count: 127 });
        ledger.settle(1);
        assert_eq!(ledger.arrive(1), Arrival::Settled);
    }
}
