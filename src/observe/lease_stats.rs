//! [`LeaseStats`]: what a leased limiter's batches came to, and their
//! families (`paceline_lease_*_total`), which `src/observe/stats.rs` writes
//! in Prometheus' text and registers with the `metrics` facade beside
//! [`Stats`](crate::observe::stats::Stats)' own.

/// What a [`Leased`](crate::lease::Leased) limiter's batches came to, in
/// permits (and round trips). `leased = spent + given_back + expired +`
/// what the lease still holds (what can be spent, and what expired and is
/// not settled yet: the next refill or a release settles it), but for
/// spends that the lease admitted unpaid under a fail-open policy
/// (counted in `spent` only).
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
/// lease's counters and its `metrics` series follow.
pub(crate) const LEASED: usize = 0;
#[cfg(feature = "metrics")] // the meter counts spends
pub(crate) const SPENT: usize = 1;
pub(crate) const GIVEN_BACK: usize = 2;
pub(crate) const EXPIRED: usize = 3;
pub(crate) const ROUND_TRIPS: usize = 4;

/// The lease families: name, help, field.
type LeaseFamily = (&'static str, &'static str, fn(&LeaseStats) -> u64);

pub(crate) const LEASE_FAMILIES: [LeaseFamily; 5] = [
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

/// With feature `serde`: the lease's fields of a serialized
/// [`Stats`](crate::observe::stats::Stats), skipped for every other kind.
#[cfg(feature = "serde")]
pub(crate) fn serialize<M: serde::ser::SerializeStruct>(
    map: &mut M,
    leases: Option<&LeaseStats>,
) -> Result<(), M::Error> {
    let fields = ["leased", "spent", "given_back", "expired", "round_trips"];
    // The fields in LEASE_FAMILIES' order, read by its accessors.
    for (field, (_, _, get)) in fields.into_iter().zip(LEASE_FAMILIES) {
        match leases {
            Some(l) => map.serialize_field(field, &get(l))?,
            None => map.skip_field(field)?,
        }
    }
    Ok(())
}
