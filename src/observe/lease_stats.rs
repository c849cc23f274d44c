//! [`LeaseStats`]: what a leased limiter's batches came to, and their
//! Prometheus families and `metrics` counters (`paceline_lease_*_total`),
//! beside [`Stats`](crate::observe::stats::Stats) (`src/observe/stats.rs`), which carries
//! them.

use std::fmt::{self, Write as _};

/// What a [`Leased`](crate::lease::Leased) limiter's batches came to, in
/// permits (and round trips). `leased = spent + given_back + expired +`
/// what is held now, but for spends that the lease admitted unpaid under
/// a fail-open policy (counted in `spent` only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct LeaseStats {
    /// Permits the server granted in batches.
    pub leased: u64,
    /// Permits spent by takes (the limiter's
    /// [`Stats::permits`](crate::observe::stats::Stats::permits)).
    pub spent: u64,
    /// Unspent permits given back to the server.
    pub given_back: u64,
    /// Unspent permits lost: expired before a take spent them, and not
    /// given back (the server's state had moved on, or could not be
    /// asked).
    pub expired: u64,
    /// Calls to the limiter underneath: batches asked for (granted or
    /// refused) and give-backs.
    pub round_trips: u64,
}

impl LeaseStats {
    /// The share of leased permits lost, `expired / leased` (0 when
    /// nothing was leased).
    pub fn unspent_ratio(&self) -> f64 {
        if self.leased == 0 {
            0.0
        } else {
            self.expired as f64 / self.leased as f64
        }
    }
}

/// [`LeaseStats`]' fields by index: [`LEASE_FAMILIES`]' order, which a
/// lease's counters and [`LeaseFacade`] follow.
pub(crate) const LEASED: usize = 0;
#[cfg(feature = "metrics")] // the meter counts spends
pub(crate) const SPENT: usize = 1;
pub(crate) const GIVEN_BACK: usize = 2;
pub(crate) const EXPIRED: usize = 3;
pub(crate) const ROUND_TRIPS: usize = 4;

/// The lease families: name, help, field.
type LeaseFamily = (&'static str, &'static str, fn(&LeaseStats) -> u64);

const LEASE_FAMILIES: [LeaseFamily; 5] = [
    (
        "paceline_lease_leased_total",
        "Permits granted to the lease in batches.",
        |l| l.leased,
    ),
    (
        "paceline_lease_spent_total",
        "Leased permits spent by takes.",
        |l| l.spent,
    ),
    (
        "paceline_lease_given_back_total",
        "Unspent leased permits given back.",
        |l| l.given_back,
    ),
    (
        "paceline_lease_expired_total",
        "Unspent leased permits lost at their expiry.",
        |l| l.expired,
    ),
    (
        "paceline_lease_round_trips_total",
        "Calls to the limiter under the lease.",
        |l| l.round_trips,
    ),
];

/// Appends the lease families, one sample per leased limiter (its name
/// escaped already); nothing when none is leased.
pub(crate) fn write_families(out: &mut String, leased: Vec<(String, LeaseStats)>) -> fmt::Result {
    if leased.is_empty() {
        return Ok(());
    }
    for (name, help, field) in LEASE_FAMILIES {
        writeln!(out, "# HELP {name} {help}")?;
        writeln!(out, "# TYPE {name} counter")?;
        for (limiter, leases) in &leased {
            writeln!(out, "{name}{{limiter=\"{limiter}\"}} {}", field(leases))?;
        }
    }
    Ok(())
}

/// With feature `serde`: the lease's fields of a serialized
/// [`Stats`](crate::observe::stats::Stats), skipped for every other kind.
#[cfg(feature = "serde")]
pub(crate) fn serialize<M: serde::ser::SerializeStruct>(
    map: &mut M,
    leases: Option<&LeaseStats>,
) -> Result<(), M::Error> {
    match leases {
        Some(l) => {
            map.serialize_field("leased", &l.leased)?;
            map.serialize_field("spent", &l.spent)?;
            map.serialize_field("given_back", &l.given_back)?;
            map.serialize_field("expired", &l.expired)?;
            map.serialize_field("round_trips", &l.round_trips)
        }
        None => {
            for field in ["leased", "spent", "given_back", "expired", "round_trips"] {
                map.skip_field(field)?;
            }
            Ok(())
        }
    }
}

/// A lease's counts as the `metrics` facade's counters (feature
/// `metrics`): the `paceline_lease_*_total` series, labelled
/// `limiter="name"`.
#[cfg(feature = "metrics")]
pub(crate) struct LeaseFacade {
    counters: [metrics::Counter; 5],
}

#[cfg(feature = "metrics")]
impl LeaseFacade {
    /// Registers the series of the lease `name`.
    pub(crate) fn register(name: &str) -> LeaseFacade {
        let label = [("limiter", name.to_owned())];
        let counters = LEASE_FAMILIES.map(|(series, help, _)| {
            metrics::describe_counter!(series, help);
            metrics::counter!(series, &label)
        });
        LeaseFacade { counters }
    }

    /// Adds `n` to the series of `field` ([`LEASED`], ...).
    pub(crate) fn add(&self, field: usize, n: u64) {
        self.counters[field].increment(n);
    }
}
