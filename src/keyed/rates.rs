//! Rates per class of keys: the default and the overrides, how a key finds
//! its class, and how a change moves the tracked keys (see the module doc's
//! "Overrides and rate changes").

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;

use super::classes::{moved, Resolved, Setting};
use super::shard::{Shard, MAX_CLASSES};
use super::{KeyOf, KeyedLimiter, MAX_PARENT_STEPS};
use crate::clock::Clock;
use crate::primitive::{lock, read, write, Ordering};
use crate::values::error::BuildError;
use crate::values::limit::{Limit, Limits};
use crate::values::rate::Rate;
use crate::values::slack::Slack;

impl<K, C: Clock> KeyedLimiter<K, C> {
    /// The most overrides a keyed limiter holds: 2^20 - 1 (1 048 575).
    /// Each tracked key stores the index of its limit in 20 bits, so that
    /// its entry fits 16 bytes; a change past this fails with
    /// [`BuildError::TooManyOverrides`] and changes nothing.
    pub const MAX_OVERRIDES: usize = MAX_CLASSES - 1;
}

/// `Err` when `overrides` are more than a class table holds (the default
/// takes class 0).
pub(super) fn check_overrides(overrides: usize) -> Result<(), BuildError> {
    if overrides > MAX_CLASSES - 1 {
        return Err(BuildError::TooManyOverrides {
            overrides,
            max: MAX_CLASSES - 1,
        });
    }
    Ok(())
}

impl<K: Hash + Eq + Clone, C: Clock> KeyedLimiter<K, C> {
    /// The class of `key`: its own override, else its parents' (at most
    /// [`MAX_PARENT_STEPS`] of them), else 0.
    pub(super) fn resolve<Q: KeyOf<K> + ?Sized>(&self, resolved: &Resolved<K>, key: &Q) -> u32 {
        if resolved.overrides.is_empty() {
            return 0;
        }
        if let Some(&class) = key.get_in(&resolved.overrides) {
            return class;
        }
        let Some(parent) = self.parent else {
            return 0;
        };
        let (mut k, mut steps) = (parent(&key.to_owned()), 0);
        while let Some(key) = k {
            if steps == MAX_PARENT_STEPS {
                // A cycle, or a chain deeper than any hierarchy of overrides:
                // this runs under a shard's lock, so give up, on the default,
                // visibly.
                self.counts.add(super::WALKS_CUT, 1);
                return 0;
            }
            if let Some(&class) = key.get_in(&resolved.overrides) {
                return class;
            }
            (k, steps) = (parent(&key), steps + 1);
        }
        0
    }

    /// Points every entry of `shard` at `resolved`'s table: an entry at rest
    /// at `now` under its old class moves to `FULL`, any other is rebased
    /// from its old parameters to its new ones (see [`moved`]).
    ///
    /// Runs under the shard's write lock, and every step on an entry runs
    /// under the read lock: no CAS races the rebase, so each entry's change
    /// happens between two of its steps, exactly.
    pub(super) fn reresolve(&self, shard: &mut Shard<K>, resolved: &Arc<Resolved<K>>, now: u64) {
        if Arc::ptr_eq(&shard.resolved, resolved) {
            return;
        }
        if !Arc::ptr_eq(&shard.classes, &resolved.classes) {
            let old = Arc::clone(&shard.classes);
            for (key, entry) in shard.map.iter_mut() {
                let before = &old[entry.class() as usize];
                let class = self.resolve(resolved, key);
                entry.set_class(class);
                let after = &resolved.classes[class as usize];
                // Relaxed: the write lock orders this against every step.
                let tat = entry.tat.load(Ordering::Relaxed);
                entry
                    .tat
                    .store(moved(tat, now, before, after), Ordering::Relaxed);
            }
            shard.generation += 1;
        }
        shard.classes = Arc::clone(&resolved.classes);
        shard.resolved = Arc::clone(resolved);
        // A shorter slack may bring rest closer.
        shard.earliest_rest = 0;
    }

    /// Sets the default rate, for every key without an override. As for
    /// [`AtomicLimiter::set_rate`](crate::AtomicLimiter::set_rate), per key:
    /// slots already handed out stand, and a busy key's next slot is one
    /// new interval after its last; keys at rest stay at rest (a burst of
    /// `slack + 1` at the new rate). Applies to every tracked key at one
    /// instant (takes wait for the pass over the map). Async takes (`paceline::tokio::AsyncKeyedLimiter`) that
    /// wait for their slot to come within 10 ms wake once the change is in
    /// force and ask again, as after any change of overrides
    /// ([`set_override`](Self::set_override), [`apply`](Self::apply),
    /// [`remove_override`](Self::remove_override)) or a reset.
    ///
    /// A default counted by window becomes pacing at `rate` with the
    /// default slack ([`Slack::DEFAULT`]), never the quota less one: its
    /// keys start as new keys of the new kind, as on any move between the
    /// two ([`set_default_limit`](Self::set_default_limit) sets a window).
    ///
    /// ```
    /// use paceline::{KeyedLimiter, clock::ManualClock, Rate};
    /// use std::time::Duration;
    /// use paceline::Take;
    ///
    /// let clock = ManualClock::new();
    /// let limiter = KeyedLimiter::<u32>::builder(Rate::per_hour(1))
    ///     .slack(0)
    ///     .clock(clock.clone())
    ///     .build()?;
    /// limiter.try_take(&7)?;
    /// limiter.set_rate(Rate::per_second(100))?;
    /// // Key 7's next permit is 10 ms after its last, not an hour.
    /// let wait = Duration::from_millis(10);
    /// assert_eq!(limiter.try_take(&7).unwrap_err().retry_after(), Some(wait));
    /// clock.advance(wait);
    /// assert!(limiter.try_take(&7).is_ok());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`BuildError::SlackTooLarge`] when the default slack at `rate` banks
    /// over 146 years; nothing changes then.
    pub fn set_rate(&self, rate: Rate) -> Result<(), BuildError> {
        let _admin = lock(&self.admin);
        let current = Arc::clone(&read(&self.resolved));
        let default = &current.settings[0].limit;
        let slack = match default.window() {
            None => default.slack(),
            // A quota's slack is the quota less one: not a pace's.
            Some(_) => Slack::DEFAULT,
        };
        let limit = Limit::new(rate, slack);
        let default = Setting::new(limit, None, self.origin)?;
        self.publish(default, self.overrides_except(&current, None));
        Ok(())
    }

    /// The overrides of `current` but `except`'s, as `publish` takes them.
    fn overrides_except<Q>(&self, current: &Resolved<K>, except: Option<&Q>) -> Vec<(K, Setting)>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        current
            .in_order()
            .into_iter()
            .filter(|(_, k)| except.is_none_or(|e| (*k).borrow() != e))
            .map(|(class, k)| (k.clone(), current.settings[class].clone()))
            .collect()
    }

    /// Gives `key`, and with a [`parent`](super::KeyedBuilder::parent) function every
    /// key under it, its own `rate` and `slack`, replacing any override it
    /// had. Applies to keys already tracked at one instant, as
    /// [`set_rate`](Self::set_rate) does: slots handed out stand, a busy
    /// key's next slot is one new interval after its last, keys at rest stay
    /// at rest.
    ///
    /// # Errors
    /// [`BuildError::SlackTooLarge`] when `slack` at `rate` banks over 146
    /// years; [`BuildError::TooManyOverrides`] for a new override past
    /// [`MAX_OVERRIDES`](Self::MAX_OVERRIDES). Nothing changes then.
    pub fn set_override(
        &self,
        key: K,
        rate: Rate,
        slack: impl Into<Slack>,
    ) -> Result<(), BuildError> {
        self.set_override_limit(key, Limit::new(rate, slack))
    }

    /// [`set_override`](Self::set_override) with a whole [`Limit`]: a rate
    /// and its slack, or a quota per window ([`Limit::per_window`]). A
    /// key moving between pacing and a window starts in its new kind as a
    /// new key would; one whose window's quota changes keeps what its
    /// window counted (see the guide's
    /// [keyed limits](crate::guide::keyed#window-keys)).
    ///
    /// ```
    /// use paceline::{clock::ManualClock, KeyedLimiter, Limit, Rate};
    /// use paceline::Take;
    ///
    /// let limiter = KeyedLimiter::<String>::builder(Rate::per_second(100))
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// let daily = Limit::per_window(2, "day".parse()?)?;
    /// limiter.set_override_limit("tenant:free".to_string(), daily)?;
    /// limiter.try_take_n("tenant:free", 2)?;
    /// assert!(limiter.try_take("tenant:free").is_err()); // until midnight UTC
    /// assert_eq!(limiter.limit_of("tenant:free"), daily);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`set_override`](Self::set_override).
    pub fn set_override_limit(&self, key: K, limit: Limit) -> Result<(), BuildError> {
        let setting = Setting::new(limit, None, self.origin)?;
        let _admin = lock(&self.admin);
        let current = Arc::clone(&read(&self.resolved));
        // An override set again keeps its place (see `limits`).
        let mut entries = self.overrides_except(&current, None::<&K>);
        match entries.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = setting,
            None => entries.push((key, setting)),
        }
        check_overrides(entries.len())?;
        self.publish(current.settings[0].clone(), entries);
        Ok(())
    }

    /// Replaces the default limit and every override with `limits`', in one
    /// step: the whole table is checked first (a bad limit changes nothing),
    /// then published at once, so a request decides by the old set or the
    /// new, never by a mix. Tracked keys move to their new limits as for
    /// [`set_rate`](Self::set_rate), in one pass over the map whatever the
    /// number of overrides; keys whose limit did not change decide exactly
    /// as before.
    ///
    /// # Credit: a key at rest gets the new burst
    ///
    /// Unlike a lone limiter's [`apply`](crate::limiter::Pacer::apply), which never
    /// refills (banked credit is kept in permits), a key **at rest** under
    /// its old limit (its whole burst banked, for a millisecond at least) is
    /// at rest under the new one too: it gets the *full new burst*, as a key
    /// never seen would, since a key at rest and an absent key must decide
    /// alike (that is what lets them be dropped). A key that is busy (some
    /// of its burst spent) keeps its booked slots and the rule of
    /// [`set_rate`](Self::set_rate). So raising a burst from 3 to 10 lets
    /// each key at rest send 10 at once, where a lone limiter keeps 3:
    ///
    /// ```
    /// use paceline::{AtomicLimiter, KeyedLimiter, Limit, Limits, clock::ManualClock, Rate};
    /// use std::time::Duration;
    /// use paceline::Take;
    ///
    /// let clock = ManualClock::new();
    /// let keyed = KeyedLimiter::<String>::builder(Rate::per_second(1))
    ///     .slack(2) // a burst of 3
    ///     .clock(clock.clone())
    ///     .build()?;
    /// let lone = AtomicLimiter::builder(Rate::per_second(1))
    ///     .slack(2)
    ///     .full_credit(true)
    ///     .clock(clock.clone())
    ///     .build()?;
    /// keyed.try_take("a")?;
    /// lone.try_take()?;
    /// clock.advance(Duration::from_secs(60)); // both at rest, 3 banked
    /// assert_eq!((keyed.available("a"), lone.available()), (3, 3));
    ///
    /// keyed.apply(&Limits::new(Limit::new(Rate::per_second(1), 9)))?;
    /// lone.apply(Limit::new(Rate::per_second(1), 9))?;
    /// assert_eq!(keyed.available("a"), 10); // the full new burst
    /// assert_eq!(lone.available(), 3); // credit kept, never refilled
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// ```
    /// use paceline::{KeyedLimiter, Limit, Limits, Rate};
    ///
    /// let limiter = KeyedLimiter::<String>::new(Rate::per_second(10));
    /// let limits = Limits::new(Rate::per_second(100))
    ///     .with_override("tenant:acme", Limit::new(Rate::per_second(1000), 50))
    ///     .with_override("tenant:free", Rate::per_second(1));
    /// limiter.apply(&limits)?;
    /// assert_eq!(limiter.rate(), Rate::per_second(100));
    /// assert_eq!(limiter.rate_for("tenant:acme"), (Rate::per_second(1000), 50));
    /// assert_eq!(limiter.limits(), limits);
    /// # Ok::<(), paceline::BuildError>(())
    /// ```
    ///
    /// # Errors
    /// [`BuildError::SlackTooLarge`] for the first limit whose slack banks
    /// over 146 years at its rate; [`BuildError::TooManyOverrides`] past
    /// [`MAX_OVERRIDES`](Self::MAX_OVERRIDES). Nothing changes then.
    pub fn apply(&self, limits: &Limits) -> Result<(), BuildError>
    where
        K: for<'a> From<&'a str>,
    {
        check_overrides(limits.overrides().len())?;
        let layers = limits.layers();
        let default = Setting::new(*limits.default_limit(), layers[0].clone(), self.origin)?;
        let entries = limits
            .overrides()
            .iter()
            .zip(&layers[1..])
            .map(|((key, limit), layer)| {
                let setting = Setting::new(*limit, layer.clone(), self.origin)?;
                Ok((K::from(key.as_str()), setting))
            })
            .collect::<Result<Vec<_>, BuildError>>()?;
        let _admin = lock(&self.admin);
        self.publish(default, entries);
        Ok(())
    }

    /// The limits in force: the default and every override, in the order
    /// they were set (an override set again keeps its place), as
    /// [`apply`](Self::apply) takes them, each with the layer it came
    /// from ([`Limits::layer`]; none for a limit set by hand).
    pub fn limits(&self) -> Limits
    where
        K: AsRef<str>,
    {
        self.limits_upto(usize::MAX, |key| key.as_ref().to_owned())
            .0
    }

    /// [`limits`](Self::limits) with at most `most` overrides (the first
    /// in their order), each key as `text` writes it; and how many
    /// overrides there are. For the look inside, which shows a page of
    /// them.
    pub(crate) fn limits_upto(&self, most: usize, text: impl Fn(&K) -> String) -> (Limits, usize) {
        let current = Arc::clone(&read(&self.resolved));
        let default = &current.settings[0];
        let mut limits = Limits::new(default.limit);
        limits.set_default_from(default.limit, default.layer.clone());
        let by_class = current.in_order();
        for &(class, key) in by_class.iter().take(most) {
            let Setting { limit, layer, .. } = &current.settings[class];
            limits.insert_from(text(key), *limit, layer.clone());
        }
        (limits, by_class.len())
    }

    /// Removes `key`'s override; its keys fall back to their parent's rate or
    /// the default, moving to it as in [`set_rate`](Self::set_rate). `false`
    /// if it had none.
    pub fn remove_override<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let _admin = lock(&self.admin);
        let current = Arc::clone(&read(&self.resolved));
        if !current.overrides.contains_key(key) {
            return false;
        }
        let entries = self.overrides_except(&current, Some(key));
        self.publish(current.settings[0].clone(), entries);
        true
    }

    /// Publishes a new table with `default` and the overrides `entries`,
    /// then brings every shard to it. Runs under `admin`.
    fn publish(&self, default: Setting, overrides: Vec<(K, Setting)>) {
        let next = Arc::new(Resolved::new(default, overrides));
        // Every shard at once, so that the change is one instant for all
        // keys: no decision after it is by the old table, none before by
        // the new (takes wait for the pass: about 10 ns per tracked key, 1 ms
        // for 100 000 on the machine of `docs/PERFORMANCE.md`).
        // No deadlock: a taker waits for one shard's lock at most, and
        // takes others' only without waiting.
        let mut shards: Vec<_> = self.shards.iter().map(|lock| write(lock)).collect();
        *write(&self.resolved) = Arc::clone(&next);
        // Release: an insert that sees this epoch sees `next` (or later).
        let epoch = self.epoch.fetch_add(1, Ordering::Release) + 1;
        let now = self.now();
        for shard in &mut shards {
            self.reresolve(shard, &next, now);
            shard.epoch = shard.epoch.max(epoch);
        }
        // A move may bring rest closer (see `reresolve`).
        self.next_rest.store(0, Ordering::Relaxed);
        drop(shards);
        // Every shard is at the new rates: async waiters ask again.
        #[cfg(feature = "tokio")]
        self.changed.notify_waiters();
    }

    /// The rate and slack a key gets (its override's, its parent's, or the
    /// default); for a key counted by window, the quota over the window's
    /// nominal length and the quota less one ([`limit_of`](Self::limit_of)
    /// has the window).
    pub fn rate_for<Q>(&self, key: &Q) -> (Rate, u64)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let resolved = Arc::clone(&read(&self.resolved));
        let class = self.resolve(&resolved, key) as usize;
        (
            resolved.settings[class].limit.rate(),
            resolved.classes[class].slack(),
        )
    }

    /// The limit a key gets (its override's, its parent's, or the
    /// default): a rate and its slack in permits, or a quota per window.
    pub fn limit_of<Q>(&self, key: &Q) -> Limit
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let resolved = Arc::clone(&read(&self.resolved));
        let class = self.resolve(&resolved, key) as usize;
        let rate = resolved.settings[class].limit.rate();
        resolved.classes[class].limit(rate)
    }

    /// Sets the default limit, for every key without an override: a rate
    /// and its slack, or a quota per window. Keys move to it as for
    /// [`set_rate`](Self::set_rate) and
    /// [`set_override_limit`](Self::set_override_limit).
    ///
    /// # Errors
    /// As [`set_rate`](Self::set_rate).
    pub fn set_default_limit(&self, limit: Limit) -> Result<(), BuildError> {
        let default = Setting::new(limit, None, self.origin)?;
        let _admin = lock(&self.admin);
        let current = Arc::clone(&read(&self.resolved));
        self.publish(default, self.overrides_except(&current, None));
        Ok(())
    }

    /// The default rate, for keys without an override.
    pub fn rate(&self) -> Rate {
        read(&self.resolved).settings[0].limit.rate()
    }

    /// The default slack, in permits: a key's burst is `slack + 1`.
    pub fn slack(&self) -> u64 {
        read(&self.resolved).classes[0].slack()
    }
}

/// The parent of a `/`-separated path: `"api/upload/10.0.0.7"` →
/// `"api/upload"` → `"api"` → `None`. For [`KeyedBuilder::parent`](super::KeyedBuilder::parent) on
/// `String` (or `Box<str>`, `Arc<str>`) keys.
///
/// ```
/// use paceline::keyed::path_parent;
///
/// assert_eq!(path_parent(&"api/upload/10.0.0.7".to_string()).as_deref(), Some("api/upload"));
/// assert_eq!(path_parent(&"api".to_string()), None);
/// ```
pub fn path_parent<S>(key: &S) -> Option<S>
where
    S: AsRef<str> + for<'a> From<&'a str>,
{
    let s = key.as_ref();
    s.rfind('/').map(|i| S::from(&s[..i]))
}
