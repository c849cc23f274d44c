//! A keyed limiter's answers to the take interface: each key its own limit
//! (its override's, if it has one).

use std::borrow::Borrow;
use std::hash::Hash;
use std::time::Duration;

use super::{find, on_entry, Decided, KeyedLimiter};
use crate::clock::Clock;
use crate::limit::Limit;
use crate::primitive::read;
use crate::schedule::{self, Admit, ORIGIN};
use crate::take::{Error, State, Take, Taken};
use crate::wait::Ask;

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, C> {
    /// The limit in force for `key` (its override's, its parent's, or the
    /// default), its slack in permits.
    pub fn limit_for<Q>(&self, key: &Q) -> Limit
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let (rate, slack) = self.rate_for(key);
        Limit::new(rate, slack)
    }

    /// A try through the interface: for a tracked key, the decision and
    /// the state it left (from the new state word, the entry's class and its
    /// limit) in one lookup under one read lock, as the HTTP layer's
    /// admitted path needs it; a key not tracked yet takes the insert path
    /// and then looks.
    fn try_taken<Q>(&self, key: &Q, cost: u64) -> Result<Taken, Error>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let admit = Admit::Within(0);
        let (hash, lock) = self.shard(key);
        let tracked = {
            let shard = read(lock);
            find(&shard.map, hash, key).map(|entry| {
                on_entry(
                    &shard,
                    &self.counts,
                    entry,
                    || self.now(),
                    cost,
                    admit,
                    Ask::Answer,
                )
                .map(|(now, grant, class)| Decided::on(&shard, class, now, grant))
            })
        };
        let decided = match tracked {
            Some(decided) => decided,
            None => self.decide_new(lock, hash, key, cost, admit, Ask::Answer),
        };
        let d = match decided {
            Ok(d) => d,
            Err(refusal) => {
                self.meter.refused();
                return Err(refusal.into());
            }
        };
        let (now, next, p) = (d.now, d.grant.next, d.params);
        self.meter.admitted(cost, d.grant.slot.saturating_sub(now));
        let after = State::new(
            schedule::available(next, now, p),
            Duration::from_nanos(schedule::next_free(next, now, p)),
            Some(Limit::new(d.rate, p.slack())),
        );
        let at = Duration::from_nanos(d.grant.slot.max(now).saturating_sub(ORIGIN));
        Ok(Taken::new(at, after))
    }

    /// `key`'s state now, as [`Take::state`] reports it.
    pub(crate) fn state_of<Q>(&self, key: &Q) -> State
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        State::new(
            self.available(key),
            self.next_free(key),
            Some(self.limit_for(key)),
        )
    }
}

impl<K, Q, C> Take<Q> for KeyedLimiter<K, C>
where
    K: Hash + Eq + Clone + Borrow<Q> + Send + Sync,
    Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    C: Clock,
{
    fn take_n(&self, key: &Q, cost: u64) -> Result<Taken, Error> {
        let at = KeyedLimiter::take_n(self, key, cost)?;
        Ok(Taken::new(at, self.state_of(key)))
    }

    fn try_take_n(&self, key: &Q, cost: u64) -> Result<Taken, Error> {
        self.try_taken(key, cost)
    }

    fn take_n_timeout(&self, key: &Q, cost: u64, max_wait: Duration) -> Result<Taken, Error> {
        let at = KeyedLimiter::take_n_timeout(self, key, cost, max_wait)?;
        Ok(Taken::new(at, self.state_of(key)))
    }

    fn can_take(&self, key: &Q, cost: u64) -> Result<bool, Error> {
        Ok(KeyedLimiter::can_take(self, key, cost))
    }

    fn state(&self, key: &Q) -> Result<State, Error> {
        Ok(self.state_of(key))
    }

    fn limit_for(&self, key: &Q) -> Option<Limit> {
        Some(KeyedLimiter::limit_for(self, key))
    }
}
