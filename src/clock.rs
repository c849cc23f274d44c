//! Clocks: where a limiter reads the time and how it waits.
//!
//! A [`Clock`] answers "how many nanoseconds since my origin?" and blocks a
//! thread until a given reading. paceline ships four:
//!
//! | clock | reads | for |
//! |---|---|---|
//! | [`DefaultClock`] | quanta's TSC clock, about 10 ns a read | production |
//! | [`StdClock`] | `std::time::Instant`, about 20 ns a read | portability, no TSC |
//! | [`ManualClock`] | a counter you move | deterministic tests |
//! | `TokioClock` (feature `tokio`) | `tokio::time::Instant` | paused-time tests |
//!
//! How a limiter waits on a clock (plain sleep, or sleep then spin) is
//! [`Wait`](crate::Wait), in `wait`.

use std::fmt;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::model::schedule::ORIGIN;
use crate::primitive::{lock, AtomicU64, Condvar, Mutex, Ordering};

/// A source of time for a limiter.
///
/// Readings are nanoseconds since a fixed origin of the clock's choosing.
/// They should not go backwards; a limiter tolerates it when they do (it may
/// delay a caller, never admit one early).
pub trait Clock: Send + Sync {
    /// Nanoseconds since this clock's origin.
    fn now(&self) -> u64;

    /// The Unix time, ns, of this clock's origin, where the clock knows it:
    /// `Some(0)` for [`UnixClock`] (its readings are Unix times) and for
    /// [`ManualClock`] (its readings are read as Unix times, so a test sets
    /// the date by advancing it). `None`, the default, for a clock with an
    /// origin of its own: a limiter that counts windows of the wall clock
    /// on it measures the offset once, when it is built, and counts on
    /// this clock from then on (a wall clock stepped later moves no window).
    fn unix_origin(&self) -> Option<u64> {
        None
    }

    /// Blocks the current thread until [`now`](Clock::now) reads at least
    /// `deadline`. May return late (that is the sleep's overshoot), never
    /// early.
    fn sleep_until(&self, deadline: u64) {
        while let Some(left) = time_left(self.now(), deadline) {
            thread::sleep(Duration::from_nanos(left));
        }
    }

    /// Like [`sleep_until`](Clock::sleep_until) but busy-waits: returns within
    /// a clock read of `deadline`, at the price of a core. Yields to other
    /// threads while more than [`SPIN_YIELD_ABOVE`] away.
    fn spin_until(&self, deadline: u64) {
        while let Some(left) = time_left(self.now(), deadline) {
            if left > SPIN_YIELD_ABOVE {
                thread::yield_now();
            } else {
                std::hint::spin_loop();
            }
        }
    }
}

/// How long from `now` until `deadline`; `None` once it is reached.
#[inline]
fn time_left(now: u64, deadline: u64) -> Option<u64> {
    deadline.checked_sub(now).filter(|&left| left > 0)
}

/// `clock`'s reading in the model's internal time (offset by
/// [`ORIGIN`](crate::model::schedule::ORIGIN), saturating): what every limiter
/// kind decides and waits with.
#[inline]
pub(crate) fn internal_now<C: Clock + ?Sized>(clock: &C) -> u64 {
    clock.now().saturating_add(ORIGIN)
}

/// While spinning, a waiter further than this from its deadline (ns) yields
/// its core instead of spinning, leaving it to threads that may hold earlier
/// permits. 150 µs, the default precise spin ([`Wait::DEFAULT_SPIN`](crate::Wait::DEFAULT_SPIN)), so the
/// default precise wait never yields: a yield can hand the core to a busy
/// thread for a whole scheduler slice (about 4 ms measured on Linux 6.18),
/// which made a precise 1k/s pacer sharing its core with one busy process
/// 1.4–2.2 ms late at p50 where spinning kept it on time.
pub const SPIN_YIELD_ABOVE: u64 = 150_000;

/// A `Duration` in nanoseconds, saturating at `u64::MAX` (584 years).
#[inline]
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The default clock: quanta's, which reads the CPU's time-stamp counter
/// where it is invariant (about 10 ns a read) and falls back to the OS's
/// monotonic clock elsewhere. Its origin is its creation; its readings
/// start again from 0 after 2^62 ns (146 years).
#[derive(Clone)]
pub struct DefaultClock {
    clock: quanta::Clock,
    origin: u64,
}

impl DefaultClock {
    /// A clock whose origin is now.
    pub fn new() -> DefaultClock {
        let clock = quanta::Clock::new();
        let origin = clock.raw();
        DefaultClock { clock, origin }
    }
}

impl Default for DefaultClock {
    fn default() -> Self {
        DefaultClock::new()
    }
}

impl fmt::Debug for DefaultClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DefaultClock")
            .field("now_ns", &self.now())
            .finish()
    }
}

impl Clock for DefaultClock {
    #[inline]
    fn now(&self) -> u64 {
        // Saturates at 0 if the counter reads behind the origin (TSCs of
        // different cores may disagree by a few cycles). Below 2^62, so that
        // the internal time line's origin is added unsaturated: two
        // instructions fewer on every take.
        self.clock.delta_as_nanos(self.origin, self.clock.raw()) & (ORIGIN - 1)
    }
}

/// A clock on [`std::time::Instant`]. Its origin is its creation.
#[derive(Clone, Copy, Debug)]
pub struct StdClock {
    origin: std::time::Instant,
}

impl StdClock {
    /// A clock whose origin is now.
    pub fn new() -> StdClock {
        StdClock {
            origin: std::time::Instant::now(),
        }
    }
}

impl Default for StdClock {
    fn default() -> Self {
        StdClock::new()
    }
}

impl Clock for StdClock {
    #[inline]
    fn now(&self) -> u64 {
        nanos(self.origin.elapsed())
    }
}

/// A clock that moves only when told: for deterministic tests.
///
/// Clones share one time. A thread that waits on it (a blocking `take` whose
/// slot is ahead) blocks until another thread [`advance`](Self::advance)s the
/// clock past its slot, which is how multi-threaded pacing is tested without
/// real time. A clock made with [`with_auto_advance`](Self::with_auto_advance)
/// instead jumps forward to whatever a waiter waits for, as Tokio's paused
/// time does, so single-threaded tests never block.
///
/// A multi-threaded test should move the clock only while its workers are
/// quiescent, each parked on its next slot: [`wait_for_waiters`](Self::wait_for_waiters)
/// waits for that, and [`next_deadline`](Self::next_deadline) says how far the
/// clock may move before the first of them wakes (so a test can step from one
/// slot to the next and never skip one).
///
/// ```
/// use paceline::{AtomicLimiter, clock::ManualClock, Rate};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let limiter = AtomicLimiter::builder(Rate::per_second(10))
///     .slack(0)
///     .clock(clock.clone())
///     .build()?;
/// assert!(limiter.try_take().is_ok());
/// assert!(limiter.try_take().is_err());
/// clock.advance(Duration::from_millis(100));
/// assert!(limiter.try_take().is_ok());
/// # Ok::<(), paceline::BuildError>(())
/// ```
#[derive(Clone, Default)]
pub struct ManualClock {
    inner: Arc<Manual>,
}

#[derive(Default)]
struct Manual {
    now: AtomicU64,
    auto_advance: bool,
    /// The deadlines of the threads blocked in `sleep_until`. Waiters sleep
    /// on `moved`; the lock orders an advance against a waiter's check so
    /// that no wake-up is lost, and a park against a `wait_for_waiters`.
    lock: Mutex<Vec<u64>>,
    /// Notified when the clock moves or a thread parks.
    moved: Condvar,
}

impl ManualClock {
    /// A clock at 0 that moves only through [`advance`](Self::advance) and
    /// [`set`](Self::set); waiters block until it reaches their deadline.
    pub fn new() -> ManualClock {
        ManualClock::default()
    }

    /// A clock at 0 that also jumps forward to any deadline waited for, so a
    /// waiting thread returns at once with the clock at its slot.
    pub fn with_auto_advance() -> ManualClock {
        let manual = Manual {
            auto_advance: true,
            ..Manual::default()
        };
        ManualClock {
            inner: Arc::new(manual),
        }
    }

    /// Moves the clock forward by `d` (saturating) and wakes waiters.
    pub fn advance(&self, d: Duration) {
        let d = nanos(d);
        let now = &self.inner.now;
        let add = |t: u64| Some(t.saturating_add(d));
        // Always `Ok`: `add` never refuses.
        let _ = now.fetch_update(Ordering::SeqCst, Ordering::SeqCst, add);
        self.notify();
    }

    /// Sets the clock to `t` since its origin, backwards too (to test a clock
    /// that steps back), and wakes waiters.
    pub fn set(&self, t: Duration) {
        self.inner.now.store(nanos(t), Ordering::SeqCst);
        self.notify();
    }

    /// The reading, as a `Duration` since the origin.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.now())
    }

    /// How many threads are blocked in [`sleep_until`](Clock::sleep_until)
    /// on a deadline still ahead of the clock. A thread whose deadline the
    /// clock has reached no longer counts, even before it has woken.
    pub fn waiters(&self) -> usize {
        self.ahead(&lock(&self.inner.lock)).count()
    }

    /// Blocks until at least `n` threads are [`waiters`](Self::waiters), or
    /// until `timeout` of real time has passed; `true` when they are.
    ///
    /// With `n` the number of worker threads, it returns when every worker is
    /// parked on a slot ahead of the clock: none is running, so the test may
    /// look at what they did and move the clock. The timeout turns a test
    /// whose workers never park (a bug) into a failure instead of a hang.
    ///
    /// ```
    /// use paceline::{AtomicLimiter, clock::ManualClock, Rate};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let limiter = AtomicLimiter::builder(Rate::per_second(10))
    ///     .slack(0)
    ///     .clock(clock.clone())
    ///     .build()?;
    /// limiter.take(); // at 0
    /// std::thread::scope(|s| {
    ///     let second = s.spawn(|| limiter.take());
    ///     assert!(clock.wait_for_waiters(1, Duration::from_secs(10)));
    ///     assert_eq!(clock.next_deadline(), Some(Duration::from_millis(100)));
    ///     clock.advance(Duration::from_millis(100));
    ///     assert_eq!(second.join().unwrap().at(), Duration::from_millis(100));
    /// });
    /// # Ok::<(), paceline::BuildError>(())
    /// ```
    pub fn wait_for_waiters(&self, n: usize, timeout: Duration) -> bool {
        let start = std::time::Instant::now();
        let mut parked = lock(&self.inner.lock);
        loop {
            if self.ahead(&parked).count() >= n {
                return true;
            }
            let Some(left) = timeout.checked_sub(start.elapsed()) else {
                return false;
            };
            let waited = self.inner.moved.wait_timeout(parked, left);
            parked = waited.unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    /// The earliest deadline, since the origin, of the threads blocked in
    /// [`sleep_until`](Clock::sleep_until) that is still ahead of the clock;
    /// `None` when there is none.
    pub fn next_deadline(&self) -> Option<Duration> {
        let next = self.ahead(&lock(&self.inner.lock)).min();
        next.map(Duration::from_nanos)
    }

    /// The deadlines in `parked` still ahead of the clock (read under the
    /// lock, after the caller took it).
    fn ahead<'a>(&self, parked: &'a [u64]) -> impl Iterator<Item = u64> + 'a {
        let now = self.now();
        parked.iter().copied().filter(move |&d| d > now)
    }

    fn notify(&self) {
        // Taking the lock orders this change before any waiter's next check.
        drop(lock(&self.inner.lock));
        self.inner.moved.notify_all();
    }
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("now_ns", &self.now())
            .field("auto_advance", &self.inner.auto_advance)
            .finish()
    }
}

impl Clock for ManualClock {
    #[inline]
    fn now(&self) -> u64 {
        self.inner.now.load(Ordering::SeqCst)
    }

    fn unix_origin(&self) -> Option<u64> {
        Some(0)
    }

    fn sleep_until(&self, deadline: u64) {
        if self.inner.auto_advance {
            if self.inner.now.fetch_max(deadline, Ordering::SeqCst) < deadline {
                self.notify();
            }
            return;
        }
        let mut parked = lock(&self.inner.lock);
        if self.now() >= deadline {
            return;
        }
        parked.push(deadline);
        // Someone may be waiting for this thread to park.
        let moved = &self.inner.moved;
        moved.notify_all();
        while self.now() < deadline {
            parked = moved.wait(parked).unwrap_or_else(|e| e.into_inner());
        }
        if let Some(i) = parked.iter().position(|&d| d == deadline) {
            parked.swap_remove(i);
        }
    }

    /// A manual clock's sleep is already exact: spinning would only burn a
    /// core until another thread advances it.
    fn spin_until(&self, deadline: u64) {
        self.sleep_until(deadline);
    }
}

/// The host's Unix time, in nanoseconds: the clock a remote limiter's
/// times are on (a [`Leased`](crate::lease::Leased) over one reads it),
/// and the one a memcached limiter decides on unless its builder sets
/// another (every client sharing a memcached key must read the same time
/// scale). It reads [`SystemTime`](std::time::SystemTime) (a vDSO call,
/// ~20 ns), so it follows the host's NTP corrections, and a clock before
/// 1970 reads 0.
#[derive(Clone, Copy, Debug, Default)]
pub struct UnixClock;

impl Clock for UnixClock {
    #[inline]
    fn now(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, nanos)
    }

    fn unix_origin(&self) -> Option<u64> {
        Some(0)
    }
}
