//! [`BuildError`]: every bad value a rate, a slack, a limiter, a layer or a
//! watched file is configured with, named in its message.

use std::error::Error;
use std::fmt;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::model::window;

/// Why something could not be built or configured: a [`Rate`](crate::Rate)
/// (made or parsed), a [`Slack`](crate::Slack) parsed, a limiter built or
/// its rate changed, an HTTP layer built, a fleet layer's version or a
/// watched file's loaded. Every message names the bad value.
///
/// Equality is value by value, except for a file's error (an
/// [`io::Error`], a reload's error), which has none of its own: there, two
/// errors are equal when they are clones of one.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BuildError {
    /// A rate's count was 0: a limiter must let something through.
    ZeroCount,
    /// A rate's period was 0.
    ZeroPeriod,
    /// `period / count` is under one nanosecond, paceline's unit of time.
    IntervalTooShort {
        /// The requested count.
        count: u64,
        /// The requested period.
        period: Duration,
    },
    /// `period / count` is over 2^62 ns (about 146 years).
    IntervalTooLong {
        /// The requested count.
        count: u64,
        /// The requested period.
        period: Duration,
    },
    /// Whole nanoseconds can only approximate `period / count` to worse than
    /// [`Rate::MAX_ROUNDING`](crate::Rate::MAX_ROUNDING).
    Imprecise {
        /// The requested count.
        count: u64,
        /// The requested period.
        period: Duration,
        /// The nearest whole-nanosecond interval.
        interval_ns: u64,
    },
    /// A string did not parse as a rate.
    ParseRate {
        /// The string given.
        input: String,
        /// What was wrong with it.
        reason: &'static str,
    },
    /// A rate's string had a decimal point, `"10/1.5s"`: rates are whole
    /// numbers.
    RateDecimals {
        /// The string given.
        input: String,
        /// The same rate in whole numbers, `"20/3s"`, where there is one.
        instead: Option<String>,
    },
    /// The string read as `COUNT/PERIOD`, but that rate is refused
    /// (`"0/s"`): the string, and [`Rate::new`](crate::Rate::new)'s error,
    /// which is also this error's [`source`](Error::source).
    InvalidRate {
        /// The string given.
        input: String,
        /// Why the rate it spells is refused: one of the variants from
        /// `ZeroCount` to `Imprecise`.
        error: Box<BuildError>,
    },
    /// A string did not parse as a [`Slack`](crate::Slack).
    ParseSlack {
        /// The string given.
        input: String,
        /// What was wrong with it.
        reason: String,
    },
    /// `slack * interval`, the time a limiter may bank, is over 2^62 ns
    /// (about 146 years).
    SlackTooLarge {
        /// The requested slack, in permits.
        slack: u64,
        /// The interval between permits.
        interval: Duration,
    },
    /// A warm-up period over 2^62 ns (about 146 years).
    WarmUpTooLong {
        /// The requested period (saturated at `u64::MAX` ns).
        warm_up: Duration,
    },
    /// More overrides than a keyed limiter holds
    /// (`KeyedLimiter::MAX_OVERRIDES`, 1 048 575: each tracked key stores
    /// its limit's index in 20 bits).
    TooManyOverrides {
        /// How many overrides the change asked for.
        overrides: usize,
        /// The most a keyed limiter holds.
        max: usize,
    },
    /// A lease's expiry `E` is zero, or longer than the slack banks: the
    /// limiter underneath would run at a slack of `S - ceil(E / T)`, under
    /// zero ([`Leased`](crate::lease::Leased)).
    LeaseTooLong {
        /// The expiry asked for.
        expiry: Duration,
        /// The slack, in permits.
        slack: u64,
        /// The interval between permits.
        interval: Duration,
    },
    /// A lease was given another limit than its lender's
    /// ([`Leased`](crate::lease::Leased)): the lease sets its lender's
    /// limit (to the reduced slack), which would silently replace the one
    /// the lender was built with.
    LeaseLimitMismatch {
        /// The limit the lease was given (`"100/s, slack 10 permits"`).
        stated: String,
        /// The lender's own.
        lender: String,
    },
    /// An adaptive rate's floor above its ceiling
    /// ([`Adaptive`](crate::adapt::Adaptive)).
    AdaptiveBounds {
        /// The floor given.
        floor: String,
        /// The ceiling given.
        ceiling: String,
    },
    /// An adaptive rate's step out of its range
    /// ([`AdaptiveBuilder`](crate::adapt::AdaptiveBuilder)): an increase
    /// negative or not finite, a backoff not strictly between 0 and 1, a
    /// latency tolerance not above 1.
    AdaptiveStep {
        /// Which (`"increase"`, `"backoff"`, `"latency tolerance"`).
        what: &'static str,
        /// The value given.
        value: String,
    },
    /// An address block (`http::Cidr`, a trusted proxy of the HTTP layer)
    /// that does not parse, or whose prefix is longer than the address.
    AddressBlock {
        /// The text given (`addr/prefix` when built from parts).
        input: String,
    },
    /// A header name for the HTTP layer's key that is not one.
    HeaderName {
        /// The name given.
        name: String,
    },
    /// A policy name (or a quota unit) for the HTTP layer with a character
    /// a Structured Field String cannot hold (only printable ASCII).
    PolicyName {
        /// The name given.
        name: String,
    },
    /// A client prefix for the HTTP layer longer than the address (IPv4 up
    /// to 32, IPv6 up to 128).
    PrefixTooLong {
        /// The prefix given, in bits.
        prefix: u8,
    },
    /// A fleet layer's version (or a read of its source) was not taken:
    /// the layer keeps its last good version, and the limits in force are
    /// unchanged (`fleet::Layers`).
    Layer {
        /// The layer's name.
        layer: Arc<str>,
        /// The version refused; `None` when its source could not be read.
        version: Option<u64>,
        /// Why: the bad value, or the limiter's refusal of the merged set.
        reason: Arc<str>,
    },
    /// A window quota (`model::window::Params`) over what its state word's
    /// count holds for that window: the word keeps the window's index in
    /// its high bits (35 for windows of a second, 18 for a day) and the
    /// count in the rest.
    QuotaTooLarge {
        /// The quota given.
        quota: u64,
        /// The largest quota that window's count holds.
        max: u64,
    },
    /// A fixed window of 0 seconds (`model::window::Window::Fixed`).
    ZeroWindow,
    /// A calendar window's offset from UTC beyond ±26 hours
    /// (`model::window::MAX_OFFSET`).
    WindowOffset {
        /// The offset given, seconds east of UTC.
        offset: i32,
    },
    /// A string did not parse as a window (`"day"`, `"30d"`, `"month UTC+02:00"`).
    ParseWindow {
        /// The string given.
        input: String,
        /// What was wrong with it.
        reason: String,
    },
    /// A quota of 0 per window: a limit must let something through.
    ZeroQuota,
    /// A limit counted by window was given to something that paces only:
    /// a direct in-process limiter, a lease, an adaptive rate, a paced
    /// stream. Windows are counted by a keyed limiter and by the remote
    /// ones (see the guide's chapter on choosing pacing or a window).
    WindowNotPaced {
        /// The limit, as its `Display` writes it (`10000 per day`).
        limit: String,
        /// What refused it.
        by: &'static str,
    },
    /// A watched file ([`watch`](crate::config::watch)) could not be read; its
    /// `io::Error` is this error's [`source`](Error::source).
    FileUnreadable {
        /// The watched file.
        path: PathBuf,
        /// Why it could not be read.
        error: Cause<io::Error>,
    },
    /// A watched file was read but its reload function refused it: the
    /// limits in force are unchanged. The reload's error is this error's
    /// [`source`](Error::source).
    FileNotLoaded {
        /// The watched file.
        path: PathBuf,
        /// The reload function's error.
        error: Cause<dyn Error + Send + Sync>,
    },
    /// A keyed limiter's state file (`KeyedLimiter::save`, `load`) not
    /// written, not read, or refused: another format or version, another
    /// set of limits, a checksum that does not match, an entry that does
    /// not parse. A refused file applies nothing. An I/O error is this
    /// error's [`source`](Error::source).
    StateFile {
        /// The state file.
        path: PathBuf,
        /// What was wrong, and what was not done.
        problem: String,
        /// The I/O error, where there was one.
        error: Option<Cause<io::Error>>,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::ZeroCount => f.write_str("rate must be at least 1 per period, got 0"),
            BuildError::ZeroPeriod => f.write_str("rate period must be longer than 0"),
            BuildError::IntervalTooShort { count, period } => write!(
                f,
                "rate {count} per {period:?} is faster than 1 per nanosecond, paceline's resolution"
            ),
            BuildError::IntervalTooLong { count, period } => write!(
                f,
                "rate {count} per {period:?} spaces permits more than 146 years apart"
            ),
            BuildError::Imprecise {
                count,
                period,
                interval_ns,
            } => write!(
                f,
                "rate {count} per {period:?} needs a fractional-nanosecond interval; \
                 the nearest, {interval_ns} ns, is off by more than 0.1 % \
                 (use Rate::every with an exact interval)"
            ),
            BuildError::ParseRate { input, reason } => {
                write!(f, "cannot parse rate {input:?}: {reason}")
            }
            BuildError::RateDecimals { input, instead } => {
                write!(f, "cannot parse rate {input:?}: decimals are not supported")?;
                match instead {
                    Some(rate) => write!(f, " (write {rate:?})"),
                    None => Ok(()),
                }
            }
            BuildError::InvalidRate { input, error } => {
                write!(f, "invalid rate {input:?}: {error}")
            }
            BuildError::ParseSlack { input, reason } => {
                write!(f, "cannot parse slack {input:?}: {reason}")
            }
            BuildError::SlackTooLarge { slack, interval } => write!(
                f,
                "slack of {slack} permits at one per {interval:?} banks more than 146 years"
            ),
            BuildError::WarmUpTooLong { warm_up } => {
                write!(f, "a warm-up of {warm_up:?} is over 146 years")
            }
            BuildError::TooManyOverrides { overrides, max } => write!(
                f,
                "{overrides} overrides are more than a keyed limiter holds (at most {max})"
            ),
            BuildError::LeaseTooLong {
                expiry,
                slack,
                interval,
            } => write!(
                f,
                "a lease expiring after {expiry:?} needs a nonzero expiry of at most the slack \
                 ({slack} permits at one per {interval:?})"
            ),
            BuildError::LeaseLimitMismatch { stated, lender } => write!(
                f,
                "a lease of {stated} on a lender built with {lender}: the lease would replace \
                 the lender's limit; build it with the lease's"
            ),
            BuildError::AdaptiveBounds { floor, ceiling } => write!(
                f,
                "an adaptive rate's floor {floor} is above its ceiling {ceiling}"
            ),
            BuildError::AdaptiveStep { what, value } => {
                let range = match *what {
                    "increase" => "a finite number of permits per second, 0 or more",
                    "backoff" => "above 0 and below 1",
                    _ => "a finite number above 1",
                };
                write!(
                    f,
                    "an adaptive rate's {what} must be {range}, got {what} {value}"
                )
            }
            BuildError::AddressBlock { input } => write!(
                f,
                "not an address block: {input:?} (expected e.g. \"10.0.0.0/8\", \"::1\" or \
                 \"2001:db8::/32\")"
            ),
            BuildError::HeaderName { name } => write!(f, "not a header name: {name:?}"),
            BuildError::PolicyName { name } => {
                write!(
                    f,
                    "{name:?} in a RateLimit field (a policy name or quota unit): only \
                     printable ASCII can be sent"
                )
            }
            BuildError::PrefixTooLong { prefix } => {
                write!(f, "prefix /{prefix} is longer than the address")
            }
            BuildError::Layer {
                layer,
                version,
                reason,
            } => match version {
                Some(v) => write!(
                    f,
                    "layer {layer:?} version {v} not applied, the limits in force are \
                     unchanged: {reason}"
                ),
                None => write!(
                    f,
                    "layer {layer:?} not read, it keeps its last good version: {reason}"
                ),
            },
            BuildError::QuotaTooLarge { quota, max } => write!(
                f,
                "a quota of {quota} per window is more than the state word counts for that \
                 window (at most {max})"
            ),
            BuildError::ZeroWindow => f.write_str("a window must be at least 1 second long, got 0"),
            BuildError::ParseWindow { input, reason } => {
                write!(f, "not a window: {input:?}: {reason}")
            }
            BuildError::ZeroQuota => f.write_str("a quota must be at least 1 per window, got 0"),
            BuildError::WindowNotPaced { limit, by } => write!(
                f,
                "{by} paces and cannot count the window of {limit:?}: a keyed limiter or a \
                 remote one counts windows"
            ),
            BuildError::WindowOffset { offset } => write!(
                f,
                "a window's offset of {offset} s from UTC is beyond ±26 hours ({} s)",
                window::MAX_OFFSET
            ),
            BuildError::FileUnreadable { path, error } => {
                write!(f, "cannot read {}: {error}", path.display())
            }
            BuildError::FileNotLoaded { path, error } => write!(
                f,
                "{} not loaded, the limits in force are unchanged: {error}",
                path.display()
            ),
            BuildError::StateFile {
                path,
                problem,
                error,
            } => {
                write!(f, "state file {}: {problem}", path.display())?;
                match error {
                    Some(error) => write!(f, ": {error}"),
                    None => Ok(()),
                }
            }
        }
    }
}

impl Error for BuildError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            BuildError::InvalidRate { error, .. } => Some(error.as_ref()),
            BuildError::FileUnreadable { error, .. } => Some(&**error),
            BuildError::FileNotLoaded { error, .. } => Some(&**error),
            BuildError::StateFile {
                error: Some(error), ..
            } => Some(&**error),
            _ => None,
        }
    }
}

impl From<window::Invalid> for BuildError {
    /// The window step's refusal of its parameters, as a user meets it.
    fn from(invalid: window::Invalid) -> BuildError {
        match invalid {
            window::Invalid::QuotaTooLarge { quota, max } => {
                BuildError::QuotaTooLarge { quota, max }
            }
            window::Invalid::ZeroWindow => BuildError::ZeroWindow,
            window::Invalid::WindowOffset { offset } => BuildError::WindowOffset { offset },
        }
    }
}

/// An error paceline's own errors carry from elsewhere: a server's (in an
/// [`Error`](crate::Error): for Redis a `redis::RedisError`, for
/// PostgreSQL a `tokio_postgres::Error` or a `deadpool_postgres::PoolError`,
/// which `downcast_ref` finds), a watched file's `io::Error` or a reload
/// function's error (in a [`BuildError`]). Shared by the clones of the
/// error that holds it, and read through it (`Deref`). It has no equality
/// of its own, so two are equal when they are one error: clones. A
/// server's error also keeps which server it came from, for the message
/// of the error that holds it.
#[derive(Debug)]
pub struct Cause<E: ?Sized = dyn Error + Send + Sync>(pub(crate) Arc<Sourced<E>>);

/// A cause's error, and the server it came from, if any, behind one thin
/// pointer: an [`Error`](crate::Error) holding a cause drops one `Arc`, so
/// its drop stays small enough to inline, and dropping a refusal (which
/// owns nothing) costs a compare, not a call.
#[derive(Debug)]
pub(crate) struct Sourced<E: ?Sized> {
    pub(crate) server: Option<Arc<str>>,
    pub(crate) error: Arc<E>,
}

impl<E: ?Sized> Cause<E> {
    /// `error`, from `server` if it names one.
    pub(crate) fn new(error: impl Into<Arc<E>>, server: Option<Arc<str>>) -> Cause<E> {
        let error = error.into();
        Cause(Arc::new(Sourced { server, error }))
    }
}

impl<E: ?Sized> Clone for Cause<E> {
    fn clone(&self) -> Self {
        Cause(Arc::clone(&self.0))
    }
}

impl<E: ?Sized> PartialEq for Cause<E> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0.error, &other.0.error)
    }
}

impl<E: ?Sized> Eq for Cause<E> {}

impl<E: ?Sized> std::ops::Deref for Cause<E> {
    type Target = E;

    fn deref(&self) -> &E {
        &self.0.error
    }
}

impl<E: fmt::Display + ?Sized> fmt::Display for Cause<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.error.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One of each variant: the comparison written by hand must hold each
    /// equal to its clone and unequal to the others.
    fn one_of_each() -> Vec<BuildError> {
        let second = Duration::from_secs(1);
        let path = PathBuf::from("limits.toml");
        vec![
            BuildError::ZeroCount,
            BuildError::ZeroPeriod,
            BuildError::IntervalTooShort {
                count: 2,
                period: Duration::from_nanos(1),
            },
            BuildError::IntervalTooLong {
                count: 1,
                period: Duration::MAX,
            },
            BuildError::Imprecise {
                count: 3,
                period: Duration::from_nanos(10),
                interval_ns: 3,
            },
            BuildError::ParseRate {
                input: "x".into(),
                reason: "no",
            },
            BuildError::RateDecimals {
                input: "1/1.5s".into(),
                instead: Some("2/3s".into()),
            },
            BuildError::InvalidRate {
                input: "0/s".into(),
                error: Box::new(BuildError::ZeroCount),
            },
            BuildError::ParseSlack {
                input: "x".into(),
                reason: "no".into(),
            },
            BuildError::SlackTooLarge {
                slack: u64::MAX,
                interval: second,
            },
            BuildError::WarmUpTooLong {
                warm_up: Duration::MAX,
            },
            BuildError::TooManyOverrides {
                overrides: 2,
                max: 1,
            },
            BuildError::LeaseTooLong {
                expiry: second,
                slack: 0,
                interval: second,
            },
            BuildError::LeaseLimitMismatch {
                stated: "2/s, slack 1 permit".into(),
                lender: "1/s, slack 1 permit".into(),
            },
            BuildError::AdaptiveBounds {
                floor: "2/s".into(),
                ceiling: "1/s".into(),
            },
            BuildError::AdaptiveStep {
                what: "backoff",
                value: "1".into(),
            },
            BuildError::AddressBlock {
                input: "10.0.0.0/33".into(),
            },
            BuildError::HeaderName { name: "a b".into() },
            BuildError::PolicyName { name: "é".into() },
            BuildError::PrefixTooLong { prefix: 129 },
            BuildError::Layer {
                layer: "local".into(),
                version: Some(2),
                reason: "why".into(),
            },
            BuildError::QuotaTooLarge {
                quota: 1 << 29,
                max: (1 << 29) - 1,
            },
            BuildError::ZeroWindow,
            BuildError::WindowOffset { offset: 93_601 },
            BuildError::ParseWindow {
                input: "fortnight".into(),
                reason: "why".into(),
            },
            BuildError::ZeroQuota,
            BuildError::WindowNotPaced {
                limit: "10 per day".into(),
                by: "AtomicLimiter",
            },
            BuildError::FileUnreadable {
                path: path.clone(),
                error: Cause::new(io::Error::from(io::ErrorKind::NotFound), None),
            },
            BuildError::FileNotLoaded {
                path: path.clone(),
                error: Cause::new(Box::<dyn Error + Send + Sync>::from("no"), None),
            },
            BuildError::StateFile {
                path,
                problem: "not loaded: checksum mismatch".into(),
                error: None,
            },
        ]
    }

    #[test]
    fn each_variant_equals_its_clone_and_no_other() {
        let all = one_of_each();
        for (i, a) in all.iter().enumerate() {
            for (j, b) in all.iter().enumerate() {
                assert_eq!(a == b, i == j, "{a:?} against {b:?}");
            }
            assert_eq!(a, &a.clone());
        }
    }

    #[test]
    fn a_window_s_bad_values_are_named() {
        use crate::model::window::{Params, Window};
        let err = BuildError::from(Params::new(1 << 29, Window::SECOND).unwrap_err());
        assert_eq!(
            err,
            BuildError::QuotaTooLarge {
                quota: 1 << 29,
                max: (1 << 29) - 1
            }
        );
        assert!(err.to_string().contains("536870912"), "{err}");
        assert!(err.to_string().contains("536870911"), "{err}");
        let err = BuildError::from(Params::new(1, Window::Day { offset: -93_601 }).unwrap_err());
        assert_eq!(err, BuildError::WindowOffset { offset: -93_601 });
        assert!(err.to_string().contains("-93601 s"), "{err}");
        let err = BuildError::from(Params::new(1, Window::Fixed { seconds: 0 }).unwrap_err());
        assert_eq!(err, BuildError::ZeroWindow);
        assert!(err.to_string().contains("got 0"), "{err}");
    }

    #[test]
    fn a_files_error_is_equal_only_to_its_clones() {
        let read = |e| BuildError::FileUnreadable {
            path: PathBuf::from("limits.toml"),
            error: Cause::new(e, None),
        };
        let missing = read(io::Error::from(io::ErrorKind::NotFound));
        assert_eq!(missing, missing.clone());
        assert_ne!(missing, read(io::Error::from(io::ErrorKind::NotFound)));
    }

    #[test]
    fn the_wrapped_errors_are_the_sources() {
        let invalid = "0/s".parse::<crate::Rate>().unwrap_err();
        let inner = invalid.source().unwrap().downcast_ref::<BuildError>();
        assert_eq!(inner, Some(&BuildError::ZeroCount));
        let unread = BuildError::FileUnreadable {
            path: PathBuf::from("limits.toml"),
            error: Cause::new(io::Error::from(io::ErrorKind::NotFound), None),
        };
        let cause = unread.source().unwrap().downcast_ref::<io::Error>();
        assert_eq!(cause.map(io::Error::kind), Some(io::ErrorKind::NotFound));
    }
}
