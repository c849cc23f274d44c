//! [`AdaptStats`]: what an adaptive rate has done, and its series: in
//! Prometheus' text ([`prometheus`]) and, with feature `metrics`, in the
//! facade.

/// What an adaptive rate has done ([`Adaptive::stats`](super::Adaptive::stats)).
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct AdaptStats {
    /// The rate in force, permits per second.
    pub rate: f64,
    /// Requests sent (tickets handed out).
    pub sent: u64,
    /// Answers served.
    pub served: u64,
    /// Answers refused (every one, those that cut the rate and those of a
    /// window already cut).
    pub refused: u64,
    /// Times the rate was raised.
    pub increases: u64,
    /// Times the rate was cut.
    pub decreases: u64,
}

/// The rates' series in Prometheus' text format, one per adaptive rate,
/// labelled `limiter="name"`: the gauge `paceline_adaptive_rate` (permits
/// per second), and the counters `paceline_adaptive_refused_total`,
/// `paceline_adaptive_increases_total` and
/// `paceline_adaptive_decreases_total`. To append to
/// [`stats::prometheus`](crate::stats::prometheus)'s on a `/metrics` page.
///
/// ```
/// use paceline::adapt::{prometheus, Adaptive};
/// use paceline::{AtomicLimiter, Rate};
///
/// let limiter = AtomicLimiter::new(Rate::per_second(50));
/// let adaptive = Adaptive::new(&limiter, Rate::per_second(1), Rate::per_second(100))?;
/// let text = prometheus(&[("api", adaptive.stats())]);
/// assert!(text.contains("paceline_adaptive_rate{limiter=\"api\"} 50\n"));
/// # Ok::<(), paceline::BuildError>(())
/// ```
pub fn prometheus(rates: &[(&str, AdaptStats)]) -> String {
    let mut out = String::new();
    let name = "paceline_adaptive_rate";
    out.push_str("# HELP paceline_adaptive_rate The adaptive rate in force, permits per second.\n");
    out.push_str("# TYPE paceline_adaptive_rate gauge\n");
    for (limiter, stats) in rates {
        let label = crate::observe::stats::escaped(limiter);
        out.push_str(&format!("{name}{{limiter=\"{label}\"}} {}\n", stats.rate));
    }
    crate::observe::stats::write_families(&mut out, &FAMILIES, rates);
    out
}

/// The counters: name, help, field.
const FAMILIES: [crate::observe::stats::Family<AdaptStats>; 3] = [
    (
        "paceline_adaptive_refused_total",
        "Answers refused (429, 503) to requests paced by the adaptive rate.",
        |s| s.refused,
    ),
    (
        "paceline_adaptive_increases_total",
        "Times the adaptive rate was raised.",
        |s| s.increases,
    ),
    (
        "paceline_adaptive_decreases_total",
        "Times the adaptive rate was cut.",
        |s| s.decreases,
    ),
];

#[cfg(feature = "metrics")]
pub(super) mod facade {
    use metrics::{counter, describe_counter, describe_gauge, gauge, Counter, Gauge};

    use super::FAMILIES;
    use crate::model::aimd::{Answer, Change, NANO};

    /// An adaptive rate's series in the `metrics` facade.
    pub(crate) struct Series {
        rate: Gauge,
        counters: [Counter; 3],
    }

    impl Series {
        pub(crate) fn new(name: &str) -> Series {
            describe_gauge!(
                "paceline_adaptive_rate",
                "The adaptive rate in force, permits per second."
            );
            let label = [("limiter", name.to_owned())];
            Series {
                rate: gauge!("paceline_adaptive_rate", &label),
                counters: FAMILIES.map(|(series, help, _)| {
                    describe_counter!(series, help);
                    counter!(series, &label)
                }),
            }
        }

        pub(crate) fn record(&self, answer: Answer, change: Change, rate: u64) {
            self.rate.set(rate as f64 / NANO as f64);
            if answer == Answer::Refused {
                self.counters[0].increment(1);
            }
            match change {
                Change::Increased => self.counters[1].increment(1),
                Change::Decreased => self.counters[2].increment(1),
                Change::Kept => {}
            }
        }
    }
}
