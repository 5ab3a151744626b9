//! Shaping: ask upstream for items only as tokens allow (see the parent module).

use std::collections::VecDeque;

use super::Bucket;
use crate::stage::timed::{poll_queued_first, Action, Fx, Machine};
use crate::Error;

/// The shaping stage's state (behind the timed core's lock).
pub(super) struct Shaper<T> {
    /// The token bucket.
    pub(super) bucket: Bucket,
    /// Items received and not yet delivered (they were requested against demand).
    pub(super) transit: VecDeque<T>,
    /// Items requested upstream and not yet received (their tokens are spent).
    pub(super) owed: u64,
    /// The one timer is outstanding.
    pub(super) armed: bool,
    /// Upstream's terminal signal.
    pub(super) end: Option<Result<(), Error>>,
}

impl<T: Send + 'static> Machine for Shaper<T> {
    type In = T;
    type Out = T;
    const NAME: &'static str = "throttle";

    fn on_start(&mut self, fx: &mut Fx<'_, T>) {
        self.bucket.refill(fx.now(), 0);
    }

    fn on_item(&mut self, item: T, fx: &mut Fx<'_, T>) {
        // Never asked for (no token reserved for it): refused, not queued.
        match fx.arrival(Self::NAME, &mut self.owed, item) {
            Ok(item) => self.transit.push_back(item),
            Err(error) => self.on_end(Err(error), fx),
        }
    }

    fn on_end(&mut self, end: Result<(), Error>, _fx: &mut Fx<'_, T>) {
        // The first end stays (a rule 1.1 error, then upstream's own end).
        self.end.get_or_insert(end);
    }

    fn on_timer(&mut self, _fx: &mut Fx<'_, T>) {
        self.armed = false;
    }

    fn poll(&mut self, demand: u64, fx: &mut Fx<'_, T>) -> Option<Action<T>> {
        // Account for the time since the last refill under the reservations that held
        // during it, before any of them ends: a slot freed now fills from now on.
        let tokens = self
            .bucket
            .refill(fx.now(), self.owed + self.transit.len() as u64);
        if demand > 0 {
            if let Some(item) = self.transit.pop_front() {
                return Some(Action::Item(item));
            }
        }
        if self.transit.is_empty() {
            if let Some(end) = self.end.take() {
                return Some(Action::End(end));
            }
        }
        if self.end.is_some() {
            return None;
        }
        let reserved = self.owed + self.transit.len() as u64;
        let wanted = demand.saturating_sub(reserved);
        if wanted == 0 {
            return None;
        }
        let n = wanted.min(tokens);
        if n > 0 {
            self.bucket.spend(n);
            self.owed += n;
            fx.request = n;
        } else if !self.armed && reserved < self.bucket.burst {
            // (With every token reserved, only an arriving item can free one.)
            fx.arm = Some(self.bucket.until_next());
            self.armed = true;
        }
        None
    }

    /// The items in transit that the demand covers move as one run, after the
    /// refill `poll` makes first; `poll` then decides the rest (the end, a request, a
    /// timer).
    fn poll_into(
        &mut self,
        demand: u64,
        out: &mut Vec<T>,
        fx: &mut Fx<'_, T>,
    ) -> Option<Result<(), Error>> {
        self.bucket
            .refill(fx.now(), self.owed + self.transit.len() as u64);
        poll_queued_first(self, |m| &mut m.transit, demand, out, fx)
    }
}
