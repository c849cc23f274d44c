//! Leased batches: one limit shared by many processes past what one server
//! core decides. [`Leased`] pays its limiter's step for a batch of permits
//! in one round trip and spends them locally, lock-free, each valid until
//! `E` after the batch was asked for; the limiter underneath runs with the
//! slack reduced by `ceil(E / T)` permits, so the times permits are spent,
//! across every process, stay within the configured `S + 1 + w / T`.
//!
//! ```
//! use paceline::lease::Leased;
//! use paceline::remote::{memory::MemoryBackend, FailPolicy, RemoteLimiter};
//! use paceline::{Limit, take::OnKey, Rate, Take};
//! use std::time::Duration;
//!
//! // The limit shared by every process: 1000/s, a slack of 100.
//! let limit = Limit::new(Rate::per_second(1000), 100);
//! // One key of a remote limiter (Redis, PostgreSQL, memcached; here the
//! // in-memory backend for tests).
//! let remote = RemoteLimiter::with_backend(MemoryBackend::new(), limit, FailPolicy::Closed)?;
//! // Leases valid for 20 ms: the remote step runs with a slack of 100 - 20.
//! let leased = Leased::new(OnKey::new(remote, "api"), limit, Duration::from_millis(20))?
//!     .with_stats(true); // counting, as any limiter, only when asked
//! assert_eq!(leased.reduced_slack(), 80);
//! for _ in 0..10 {
//!     leased.take(&())?; // the first asks the server; most are local
//! }
//! let stats = leased.stats().unwrap().leases.unwrap();
//! assert_eq!(stats.spent, 10);
//! assert!(stats.round_trips < 10);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The bound, its proof, and how batches are sized: the guide's
//! [leases](crate::guide::leases) chapter.
//!
//! # Implementation details
//!
//! The held batch is one word (`held.rs`: its expiry and what is left),
//! spent by a CAS loop that never takes a lock. A take that finds too few
//! takes the lease's lock and refills: it settles the batch it held (what
//! is left goes back to the server if the server's state still is the
//! batch's, else counts as expired), sizes the next batch from the rate
//! the last one was spent at, and asks the limiter for it. A refusal is
//! kept until its retry-after, so takes in between refuse without a round
//! trip; a change of limit forgets it.

mod held;
mod lender;
mod refill;

use std::time::Duration;

use held::{Held, Spend};
pub use held::{MAX_BATCH, TICK};
pub use lender::Lender;
use refill::Slow;

use crate::clock::{Clock, DefaultClock};
use crate::limiter::take::{State, Take, Taken, Within};
use crate::observe::lease_stats::EXPIRED;
use crate::observe::stats::{Counted, Counting, LeaseStats, Meter, Stats};
use crate::observe::stripes::Counters;
use crate::primitive::{lock, Mutex};
use crate::remote::Error;
use crate::values::error::BuildError;
use crate::values::limit::Limit;
use crate::values::rate::Rate;
use crate::wait::{self, Wait};

/// A limit drawn in leased batches from a [`Lender`] (one key of a remote
/// limiter, typically): most takes spend a permit held locally (one CAS);
/// one in a batch asks the server.
///
/// It answers [`Take`] for the unit key, with the limit it was given; each
/// process (or each `Leased` in one) holds its own batches.
///
/// # The bound
/// With a lease valid for `E` and the limit's interval `T`, the limiter
/// underneath runs at the slack `S - ceil(E / T)`
/// ([`reduced_slack`](Self::reduced_slack)). Then in any window of `w` the
/// permits spent by every `Leased` on the limit together are at most
/// `S + 1 + w / T`: the plain limiter's bound. A process may take the key
/// without a lease beside them at `S` and `T` (the lender keeps the key's
/// states in the server until they are at rest at `S`). A take's
/// [`Taken::at`] is when its permit was spent, on the lease's clock: by
/// default the lender's ([`Lender::Clock`]), so it means what the lender's
/// own takes' times mean (Unix time over a remote limiter, as its takes
/// answer). The proof: [the guide](crate::guide::leases).
///
/// # What it costs
/// Permits leased and not spent before their expiry: given back when the
/// server still holds the batch's state, otherwise lost
/// ([`LeaseStats::expired`]). Batches follow demand (one lasts about `E / 2`
/// at the rate the last one was spent), so a steady demand loses little and
/// an idle process leases nothing. The largest request is the reduced
/// burst, `S - ceil(E / T) + 1`.
///
/// # A partition
/// While the server cannot answer, a take spends what is held; then the
/// limiter's [`FailPolicy`](crate::remote::FailPolicy) decides (a remote
/// limiter's `Open` admits).
pub struct Leased<L, C: Clock = DefaultClock> {
    held: Held,
    /// `E`, ns: how long after it was asked for a batch may be spent.
    expiry: u64,
    clock: C,
    /// How a blocking take waits for the next batch.
    wait: Wait,
    slow: Mutex<Slow<L>>,
    /// The limit and its reduction, read without the refill's lock.
    config: Mutex<Config>,
    meter: Meter,
    /// [`LeaseStats`]' counts by their index (`lease_stats::LEASED`, ...),
    /// but for `SPENT`, which the meter counts.
    counts: Counters<5>,
    /// The `metrics` facade's counters, if asked for.
    #[cfg(feature = "metrics")]
    facade: Option<[metrics::Counter; 5]>,
}

/// What a limit change sets.
#[derive(Clone, Copy, Debug)]
struct Config {
    /// The limit stated (the bound's `S`).
    limit: Limit,
    /// `S - ceil(E / T)`, the slack the lender runs at.
    reduced: u64,
}

impl<L: Lender> Leased<L, L::Clock> {
    /// Leases from `lender` under `limit` (the bound's `S` and `T`), each
    /// batch valid for `expiry` (`E`); sets the lender's limit to the
    /// reduced slack `S - ceil(E / T)`, so the lender must be built with
    /// `limit` itself (any other is refused: the lease would replace it
    /// silently). Timed on the lender's clock
    /// ([`Lender::Clock`]), so a take's [`Taken::at`] is on the time scale
    /// of the lender's own takes: Unix time over a remote limiter.
    ///
    /// # Errors
    /// [`BuildError::LeaseTooLong`] when `ceil(E / T)` is over the slack
    /// (or `E` is zero); [`BuildError::LeaseLimitMismatch`] when the
    /// lender's limit is not `limit`; the lender's errors for the reduced
    /// limit.
    pub fn new(lender: L, limit: impl Into<Limit>, expiry: Duration) -> Result<Self, BuildError> {
        let clock = lender.lease_clock();
        Leased::with_clock(lender, limit, expiry, clock)
    }
}

/// The reduction for `limit` and a lease of `expiry` ns, handed to `lender`
/// as its limit.
fn reduce(lender: &mut impl Lender, limit: Limit, expiry: u64) -> Result<Config, BuildError> {
    limit.paced("Leased")?;
    let rate = limit.rate();
    let interval = rate.interval_ns();
    let slack = limit.slack().permits_at(rate);
    let lost = expiry.div_ceil(interval);
    if expiry == 0 || lost > slack {
        return Err(BuildError::LeaseTooLong {
            expiry: Duration::from_nanos(expiry),
            slack,
            interval: rate.interval(),
        });
    }
    let reduced = slack - lost;
    lender.relimit(Limit::new(rate, reduced), limit)?;
    Ok(Config { limit, reduced })
}

impl<L: Lender, C: Clock> Leased<L, C> {
    /// As [`new`](Leased::new), with leases timed on `clock`.
    ///
    /// # Errors
    /// As [`new`](Leased::new).
    pub fn with_clock(
        mut lender: L,
        limit: impl Into<Limit>,
        expiry: Duration,
        clock: C,
    ) -> Result<Self, BuildError> {
        let (limit, expiry) = (limit.into(), wait::nanos(expiry));
        let permits = |l: Limit| (l.rate(), l.slack().permits_at(l.rate()));
        let built = lender.limit_for(&()).unwrap_or(limit);
        if permits(built) != permits(limit) {
            let (stated, lender) = (limit.to_string(), built.to_string());
            return Err(BuildError::LeaseLimitMismatch { stated, lender });
        }
        let config = reduce(&mut lender, limit, expiry)?;
        Ok(Leased {
            held: Held::new(clock.now()),
            expiry,
            clock,
            wait: Wait::Sleep,
            slow: Mutex::new(Slow {
                lender,
                batch: None,
                refused_until: 0,
                next: 1,
            }),
            config: Mutex::new(config),
            // Off until asked, as every limiter's.
            meter: Meter::default(),
            counts: Counters::new(),
            #[cfg(feature = "metrics")]
            facade: None,
        })
    }

    /// Counts what it does, for [`stats`](Self::stats) (`true`), or not
    /// (`false`, the default: then a spend counts nothing, as every
    /// limiter built without `.stats(true)`).
    pub fn with_stats(mut self, on: bool) -> Self {
        #[allow(clippy::needless_update)]
        let counting = Counting {
            on,
            ..Counting::default()
        };
        self.meter = Meter::new(&counting);
        self
    }

    /// Counts what it does, and sends the counts to the `metrics` facade
    /// too, labelled
    /// `limiter="name"`: the spends as every limiter's series
    /// (`paceline_admitted_total`, ...), the leases as
    /// `paceline_lease_*_total` (the guide's [metrics](crate::guide::metrics)).
    /// Registers with the recorder installed now.
    #[cfg(feature = "metrics")]
    pub fn metrics(mut self, name: &str) -> Self {
        self.meter = Meter::new(&Counting {
            on: true,
            facade: Some(name.to_owned()),
        });
        self.facade = Some(crate::observe::stats::facade::counters(
            crate::observe::lease_stats::LEASE_FAMILIES,
            name,
        ));
        self
    }

    crate::values::setters! {
        /// How a blocking take waits for a refused batch's retry: as every
        /// limiter waits ([`Wait`]); [`Wait::Sleep`] unless set.
        wait(wait: Wait) => wait;
    }

    /// The limit stated (the bound's `S`).
    pub fn limit(&self) -> Limit {
        lock(&self.config).limit
    }

    /// The slack the lender runs at: `S - ceil(E / T)`.
    pub fn reduced_slack(&self) -> u64 {
        lock(&self.config).reduced
    }

    /// `E`, how long a batch may be spent after it was asked for.
    pub fn expiry(&self) -> Duration {
        Duration::from_nanos(self.expiry)
    }

    /// The clock leases are timed on (and [`Taken::at`] read from).
    pub fn clock(&self) -> &C {
        &self.clock
    }

    /// Changes the limit (the lender's to the new reduced slack) and
    /// forgets the server's last refusal. A batch held stays valid until
    /// its expiry.
    ///
    /// # Errors
    /// [`BuildError::LeaseTooLong`] for a limit whose slack is under
    /// `ceil(E / T)`; the lender's errors. Either changes nothing.
    pub fn apply(&self, limit: impl Into<Limit>) -> Result<(), BuildError> {
        let mut slow = lock(&self.slow);
        let config = reduce(&mut slow.lender, limit.into(), self.expiry)?;
        slow.refused_until = 0;
        *lock(&self.config) = config;
        Ok(())
    }

    /// Changes the rate, keeping the slack as it was given.
    ///
    /// # Errors
    /// As [`apply`](Self::apply).
    pub fn set_rate(&self, rate: Rate) -> Result<(), BuildError> {
        self.apply(Limit::new(rate, self.limit().slack()))
    }

    /// Gives back what is held (if the server still holds the batch's
    /// state; else it counts as expired), so that a process that stops
    /// leaves its permits to the others.
    pub fn release(&self) {
        let mut slow = lock(&self.slow);
        let now = self.clock.now();
        self.settle(&mut slow, now);
    }

    /// What it did: spends (`admitted`, `permits`), refusals, and the
    /// leases ([`Stats::leases`]); `None` unless it was asked to count
    /// ([`with_stats(true)`](Self::with_stats), or
    /// [`metrics`](Self::metrics)), as every limiter's.
    pub fn stats(&self) -> Option<Stats> {
        let mut stats = self.meter.read()?;
        let [leased, _, given_back, expired, round_trips] = self.counts.read();
        stats.leases = Some(LeaseStats {
            leased,
            spent: stats.permits,
            given_back,
            expired,
            round_trips,
        });
        Some(stats)
    }

    /// Permits held now that can still be spent (a look): none once the
    /// batch held has expired, though it is settled (given back, or
    /// counted expired) only by the next refill or a release.
    pub fn held(&self) -> u64 {
        let (expiry, left) = self.held.split(self.held.load());
        Some(left)
            .filter(|_| self.clock.now() < expiry)
            .unwrap_or(0)
    }

    /// A take whose permits went at clock reading `at`, leaving `left`.
    fn taken(&self, at: u64, left: u64) -> Taken {
        let after = State::new(left, Duration::ZERO, Some(self.limit()));
        Taken::new(Duration::from_nanos(at), after)
    }

    /// Spends `cost` held permits, or refills.
    fn try_take(&self, cost: u64) -> Result<Taken, Error> {
        if cost == 0 {
            return Ok(self.taken(self.clock.now(), self.held()));
        }
        match self.spend_held(cost) {
            Some(taken) => Ok(taken),
            None => self.refill(cost),
        }
    }

    /// Spends `cost` of the permits held, if they cover it in time;
    /// `None` when they do not (those that came too late are counted lost).
    #[inline]
    fn spend_held(&self, cost: u64) -> Option<Taken> {
        match self.held.spend(cost, &self.clock) {
            Spend::Spent { at, left } => {
                self.spent(cost);
                Some(self.taken(at, left))
            }
            Spend::Late => {
                self.lost(cost);
                None
            }
            Spend::Short => None,
        }
    }

    /// Counts `cost` permits spent.
    #[inline]
    fn spent(&self, cost: u64) {
        self.meter.admitted(cost, 0);
        #[cfg(feature = "metrics")]
        if let Some(facade) = &self.facade {
            facade[crate::observe::lease_stats::SPENT].increment(cost);
        }
    }

    #[cold]
    fn lost(&self, cost: u64) {
        self.count(EXPIRED, cost);
    }

    /// Adds `n` to the count `i` (`lease_stats::LEASED`, ...), and to its
    /// series in the `metrics` facade.
    fn count(&self, i: usize, n: u64) {
        self.counts.add(i, n);
        #[cfg(feature = "metrics")]
        if let Some(facade) = &self.facade {
            facade[i].increment(n);
        }
    }

    /// Blocks until `cost` permits are spent, waiting out refusals up to
    /// `deadline` (clock ns); a refusal whose retry falls past it is
    /// returned as it is.
    fn take_until(&self, cost: u64, deadline: u64) -> Result<Taken, Error> {
        loop {
            match self.try_take(cost) {
                Err(Error::RetryAfter(wait)) => {
                    let until = self.clock.now().saturating_add(wait.0);
                    if until > deadline {
                        return Err(Error::RetryAfter(wait));
                    }
                    // A lease has no async face: a task takes from it on a blocking thread.
                    wait::on_runtime_check("tokio::task::spawn_blocking");
                    self.wait.wait_until(&self.clock, until);
                }
                other => return other,
            }
        }
    }
}

/// The unit key: a lease is one limit.
impl<L: Lender, C: Clock> Take for Leased<L, C> {
    fn take_within(&self, _: &(), cost: u64, within: Within) -> Result<Taken, Error> {
        let deadline = match within {
            Within::Now => return self.try_take(cost),
            Within::Any => u64::MAX,
            Within::Max(max_wait) => self.clock.now().saturating_add(wait::nanos(max_wait)),
        };
        // A bounded take's refusal is the full queue's.
        self.take_until(cost, deadline)
            .map_err(|e| within.refusal(e))
    }

    fn can_take(&self, _: &(), cost: u64) -> Result<bool, Error> {
        if self.held() >= cost {
            return Ok(true);
        }
        let slow = lock(&self.slow);
        if slow.refused_until > self.clock.now() {
            return Ok(false);
        }
        slow.lender.can_take(&(), cost)
    }

    fn state(&self, _: &()) -> Result<State, Error> {
        let found = lock(&self.slow).lender.state(&())?;
        Ok(State::new(
            found.available().saturating_add(self.held()),
            found.next_free(),
            Some(self.limit()),
        ))
    }

    fn limit_for(&self, _: &()) -> Option<Limit> {
        Some(self.limit())
    }
}

impl<L: Lender, C: Clock> Counted for Leased<L, C> {
    fn stats(&self) -> Option<Stats> {
        Leased::stats(self)
    }
}

impl<L: Lender, C: Clock> std::fmt::Debug for Leased<L, C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let config = *lock(&self.config);
        f.debug_struct("Leased")
            .field("limit", &config.limit)
            .field("reduced_slack", &config.reduced)
            .field("expiry", &Duration::from_nanos(self.expiry))
            .field("held", &self.held())
            .finish_non_exhaustive()
    }
}
