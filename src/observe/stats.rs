//! [`Stats`]: what a limiter decided, counted when its builder asks for it;
//! [`prometheus`] renders them in Prometheus' text format.
//!
//! ```
//! use paceline::stats::{self, Stats};
//! use paceline::{AtomicLimiter, Rate};
//!
//! let limiter = AtomicLimiter::builder(Rate::per_second(100))
//!     .stats(true)
//!     .build()?;
//! limiter.try_take_n(5)?;
//! assert!(limiter.try_take().is_err()); // the next permit is 50 ms away
//! let counted = limiter.stats().unwrap();
//! assert_eq!((counted.admitted, counted.permits, counted.refused), (1, 5, 1));
//!
//! let text = stats::prometheus(&[("api", &limiter)]); // for a /metrics page
//! assert!(text.contains("paceline_permits_total{limiter=\"api\"} 5\n"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! Every limiter kind counts the same way, and with feature `metrics` a
//! builder's `.metrics(name)` also sends the counts to the
//! [`metrics`](https://docs.rs/metrics) facade under the names [`prometheus`]
//! writes: the guide's [metrics](crate::guide::metrics) chapter.
//!
//! # Implementation details
//!
//! Counting is off unless asked for. Then a limiter holds a meter of
//! counters in stripes, a cache line each, each thread adding to its own
//! stripe (`stripes.rs`: a plain load and store where the thread owns it):
//! threads taking from one limiter then contend on its state word only,
//! not on a counter line too. Off, the take path pays one test of a
//! null pointer, a branch that always goes the same way (the `admit`
//! benchmarks in `benches/throughput.rs` measure both).
//!
//! The counters are statistics: relaxed additions, which decide nothing and
//! order nothing, outside the loom models. A reading ([`Stats`]) sums the
//! stripes; each field is exact and never goes down from one reading to
//! the next, but a reading taken while others take may catch one request's
//! `admitted` and not yet its `permits`.
//!
//! [`AtomicLimiter`]: crate::AtomicLimiter
//! [`MutexLimiter`]: crate::MutexLimiter

use std::fmt::{self, Write as _};
use std::sync::Arc;
use std::time::Duration;

use crate::observe::stripes::Counters;

pub use crate::observe::lease_stats::LeaseStats;
use crate::observe::lease_stats::LEASE_FAMILIES;

/// What a limiter decided since it was built: counts of requests, permits
/// and scheduled wait. A request is one call (`try_take_n(5)` is one
/// request of 5 permits).
///
/// Read with `stats()` on the limiter (an `Option`: `None` unless its
/// builder asked for counting with `.stats(true)`), or through
/// [`Counted`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Stats {
    /// Requests admitted (granted a slot, at once or later). An async take
    /// counts when its slot is booked, whether or not it is cancelled
    /// after ([`cancelled`](Self::cancelled)).
    pub admitted: u64,
    /// Permits of the admitted requests: the sum of their costs.
    pub permits: u64,
    /// Requests refused: by the limit (`RetryAfter`, `QueueFull`,
    /// `ExceedsBurst`), for a cost too large, by a keyed limiter's full
    /// map, or, for a remote limiter, for a failure its fail policy did not
    /// admit.
    pub refused: u64,
    /// The wait the admitted requests were scheduled for, in all: from the
    /// decision to the slot (zero for a permit free at once). Divided by
    /// [`admitted`](Self::admitted), the mean scheduled wait.
    pub wait: Duration,
    /// Admitted async takes dropped before their slot, and bookings
    /// settled at 0 (an all-or-nothing take's give-back when another part
    /// refused): their permits are counted in [`permits`](Self::permits),
    /// and were given back as an undo or a settle gives back.
    pub cancelled: u64,
    /// Calls a remote limiter's server failed (down, too slow, an error),
    /// whatever its fail policy made of them. Always 0 in process.
    pub failed: u64,
    /// A leased limiter's batches ([`LeaseStats`]); `None` for other kinds.
    pub leases: Option<LeaseStats>,
}

/// With feature `serde`: a map of the fields, the wait in seconds
/// (`{"admitted": 3, ..., "wait": 0.25, ...}`), for a JSON status page.
#[cfg(feature = "serde")]
impl serde::Serialize for Stats {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut map = s.serialize_struct("Stats", if self.leases.is_some() { 11 } else { 6 })?;
        map.serialize_field("admitted", &self.admitted)?;
        map.serialize_field("permits", &self.permits)?;
        map.serialize_field("refused", &self.refused)?;
        map.serialize_field("wait", &self.wait.as_secs_f64())?;
        map.serialize_field("cancelled", &self.cancelled)?;
        map.serialize_field("failed", &self.failed)?;
        crate::observe::lease_stats::serialize(&mut map, self.leases.as_ref())?;
        map.end()
    }
}

/// A limiter that may count what it decides: implemented by every limiter
/// kind, so that [`prometheus`] takes them side by side.
pub trait Counted {
    /// What it decided so far, or `None` when its builder did not ask for
    /// counting.
    fn stats(&self) -> Option<Stats>;
}

impl<T: Counted + ?Sized> Counted for &T {
    fn stats(&self) -> Option<Stats> {
        (**self).stats()
    }
}

impl<T: Counted + ?Sized> Counted for Arc<T> {
    fn stats(&self) -> Option<Stats> {
        (**self).stats()
    }
}

/// The counters in Prometheus' text exposition format (version 0.0.4),
/// one series per limiter, labelled `limiter="name"`:
///
/// | series | type | what |
/// |---|---|---|
/// | `paceline_admitted_total` | counter | [`Stats::admitted`] |
/// | `paceline_permits_total` | counter | [`Stats::permits`] |
/// | `paceline_refused_total` | counter | [`Stats::refused`] |
/// | `paceline_cancelled_total` | counter | [`Stats::cancelled`] |
/// | `paceline_failed_total` | counter | [`Stats::failed`] |
/// | `paceline_wait_seconds_sum`, `_count` | summary | [`Stats::wait`], [`Stats::admitted`] |
/// | `paceline_lease_leased_total`, `_spent_total`, `_given_back_total`, `_expired_total`, `_round_trips_total` | counter | [`LeaseStats`]'s fields, for leased limiters only |
///
/// Limiters that do not count are left out. Names are escaped as the
/// format asks (`\\`, `\"`, `\n`).
///
/// ```
/// # #[cfg(feature = "keyed")]
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use paceline::stats::prometheus;
/// use paceline::{AtomicLimiter, KeyedLimiter, Rate};
///
/// let global = AtomicLimiter::builder(Rate::per_second(1000)).stats(true).build()?;
/// let users = KeyedLimiter::<String>::builder(Rate::per_second(10)).stats(true).build()?;
/// global.try_take()?;
/// let text = prometheus(&[("global", &global), ("per_user", &users)]);
/// assert!(text.contains("paceline_admitted_total{limiter=\"global\"} 1\n"));
/// assert!(text.contains("paceline_admitted_total{limiter=\"per_user\"} 0\n"));
/// # Ok(())
/// # }
/// # #[cfg(not(feature = "keyed"))]
/// # fn main() {}
/// ```
pub fn prometheus(limiters: &[(&str, &dyn Counted)]) -> String {
    let read: Vec<(&str, Stats)> = limiters
        .iter()
        .filter_map(|(name, limiter)| Some((*name, limiter.stats()?)))
        .collect();
    prometheus_read(&read, &[])
}

/// [`prometheus`] of the limiters `read`, and of those `tallied`, which
/// count only what they admitted and refused (a keyed limiter always
/// does): these appear in those two families alone.
pub(crate) fn prometheus_read(read: &[(&str, Stats)], tallied: &[(&str, Stats)]) -> String {
    let mut out = String::new();
    for (i, family) in FAMILIES.iter().enumerate() {
        let both = tallied.iter().filter(|_| i == ADMITTED || i == REFUSED);
        let rows: Vec<_> = read.iter().chain(both).copied().collect();
        write_families(&mut out, std::slice::from_ref(family), &rows);
    }
    let name = "paceline_wait_seconds";
    let help = "Wait the admitted requests were scheduled for.";
    // Writing to a String cannot fail.
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} summary");
    for (limiter, stats) in read {
        let label = format!("{{limiter=\"{}\"}}", Escaped(limiter));
        let (wait, count) = (stats.wait.as_secs_f64(), stats.admitted);
        let _ = writeln!(out, "{name}_sum{label} {wait}\n{name}_count{label} {count}");
    }
    let leased: Vec<(&str, LeaseStats)> = read
        .iter()
        .filter_map(|(n, s)| Some((*n, s.leases?)))
        .collect();
    // The lease families only where a limiter is leased.
    if !leased.is_empty() {
        write_families(&mut out, &LEASE_FAMILIES, &leased);
    }
    out
}

/// One family: its name, help line and field of `T`.
pub(crate) type Family<T> = (&'static str, &'static str, fn(&T) -> u64);

const FAMILIES: [Family<Stats>; 5] = [
    ("paceline_admitted_total", "Requests admitted.", |s| {
        s.admitted
    }),
    (
        "paceline_permits_total",
        "Permits admitted (the sum of the admitted requests' costs).",
        |s| s.permits,
    ),
    ("paceline_refused_total", "Requests refused.", |s| s.refused),
    (
        "paceline_cancelled_total",
        "Admitted requests dropped before their slot.",
        |s| s.cancelled,
    ),
    (
        "paceline_failed_total",
        "Calls the limiter's server failed.",
        |s| s.failed,
    ),
];

/// Appends `families`, one sample per limiter read, each family a
/// `# HELP` line (escaped as the format asks), a `# TYPE` line, and
/// `name{limiter="..."} value` per limiter: a counter if its name ends in
/// `_total` (as the format's counters are named), else a gauge. For the
/// fittings that add series of their own after [`prometheus`]'s too.
pub(crate) fn write_families<T>(out: &mut String, families: &[Family<T>], read: &[(&str, T)]) {
    for (name, help, field) in families {
        let kind = if name.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        // Writing to a String cannot fail.
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (limiter, stats) in read {
            let (limiter, value) = (Escaped(limiter), field(stats));
            let _ = writeln!(out, "{name}{{limiter=\"{limiter}\"}} {value}");
        }
    }
}

/// A label value, escaped for the text format.
struct Escaped<'a>(&'a str);

/// `label`, escaped for the text format as a label's value, for the
/// fittings that write series of their own.
pub(crate) fn escaped(label: &str) -> impl fmt::Display + '_ {
    Escaped(label)
}

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for c in self.0.chars() {
            match c {
                '\\' => f.write_str("\\\\")?,
                '"' => f.write_str("\\\"")?,
                '\n' => f.write_str("\\n")?,
                c => f.write_char(c)?,
            }
        }
        Ok(())
    }
}

/// Whether and how a limiter counts, as its builder collects it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Counting {
    /// Count into the limiter's own counters ([`Stats`]).
    pub(crate) on: bool,
    /// Also to the `metrics` facade, under this `limiter` label (feature
    /// `metrics`; never set without it).
    pub(crate) facade: Option<String>,
}

/// A limiter's counters: none unless counting was asked for. A clone
/// shares them (a remote limiter's async face counts with its blocking one).
#[derive(Clone, Default)]
pub(crate) struct Meter(Option<Arc<Counts>>);

/// The meter's counters, by index: [`FAMILIES`]' order, then the wait.
const ADMITTED: usize = 0;
const PERMITS: usize = 1;
const REFUSED: usize = 2;
const CANCELLED: usize = 3;
const FAILED: usize = 4;
const WAIT_NS: usize = 5;

struct Counts {
    counters: Counters<6>,
    /// The `metrics` facade's series, if asked for: [`FAMILIES`]' counters
    /// and the wait, registered once at build.
    #[cfg(feature = "metrics")]
    facade: Option<([metrics::Counter; 5], metrics::Histogram)>,
}

impl Meter {
    /// A meter that counts as `counting` says.
    pub(crate) fn new(counting: &Counting) -> Meter {
        if !counting.on && counting.facade.is_none() {
            return Meter(None);
        }
        Meter(Some(Arc::new(Counts {
            counters: Counters::new(),
            #[cfg(feature = "metrics")]
            facade: counting.facade.as_deref().map(facade::register),
        })))
    }

    /// Counts a request of `permits` admitted with `wait_ns` to its slot.
    #[inline(always)]
    pub(crate) fn admitted(&self, permits: u64, wait_ns: u64) {
        if let Some(counts) = &self.0 {
            counts.admitted(permits, wait_ns);
        }
    }

    /// Counts a refused request.
    #[inline(always)]
    pub(crate) fn refused(&self) {
        if let Some(counts) = &self.0 {
            counts.add(REFUSED);
        }
    }

    /// Counts an admitted request dropped before its slot.
    #[inline]
    pub(crate) fn cancelled(&self) {
        if let Some(counts) = &self.0 {
            counts.add(CANCELLED);
        }
    }

    /// Counts a call the server failed.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    #[inline]
    pub(crate) fn failed(&self) {
        if let Some(counts) = &self.0 {
            counts.add(FAILED);
        }
    }

    /// The counts so far, if counting.
    pub(crate) fn read(&self) -> Option<Stats> {
        let [admitted, permits, refused, cancelled, failed, wait_ns] =
            self.0.as_deref()?.counters.read();
        Some(Stats {
            admitted,
            permits,
            refused,
            wait: Duration::from_nanos(wait_ns),
            cancelled,
            failed,
            leases: None,
        })
    }
}

impl Counts {
    // Out of line: the take path keeps only the test of the pointer.
    #[inline(never)]
    fn admitted(&self, permits: u64, wait_ns: u64) {
        self.counters
            .add_each([(ADMITTED, 1), (PERMITS, permits), (WAIT_NS, wait_ns)]);
        #[cfg(feature = "metrics")]
        if let Some((counters, wait)) = &self.facade {
            counters[ADMITTED].increment(1);
            counters[PERMITS].increment(permits);
            // Seconds, as the series' unit; an f64 holds any wait to the ns
            // for over 100 days.
            wait.record(wait_ns as f64 / 1e9);
        }
    }

    /// Adds one to counter `i`, one of [`FAMILIES`].
    #[inline(never)]
    fn add(&self, i: usize) {
        self.counters.add(i, 1);
        #[cfg(feature = "metrics")]
        if let Some((counters, _)) = &self.facade {
            counters[i].increment(1);
        }
    }
}

#[cfg(feature = "metrics")]
pub(crate) mod facade {
    use metrics::{counter, describe_counter, describe_histogram, histogram, Counter, Histogram};

    use super::{Family, FAMILIES};

    /// Registers `families`' series of the limiter `name` with the recorder
    /// installed now (as the facade does, a recorder installed later does
    /// not see them): a counter each, in their order.
    pub(crate) fn counters<T, const N: usize>(
        families: [Family<T>; N],
        name: &str,
    ) -> [Counter; N] {
        let label = [("limiter", name.to_owned())];
        families.map(|(series, help, _)| {
            describe_counter!(series, help);
            counter!(series, &label)
        })
    }

    /// Registers the series of the limiter `name`: [`FAMILIES`]' counters,
    /// and the wait.
    pub(super) fn register(name: &str) -> ([Counter; 5], Histogram) {
        describe_histogram!(
            "paceline_wait_seconds",
            metrics::Unit::Seconds,
            "Wait the admitted requests were scheduled for."
        );
        let wait = histogram!("paceline_wait_seconds", "limiter" => name.to_owned());
        (counters(FAMILIES, name), wait)
    }
}
