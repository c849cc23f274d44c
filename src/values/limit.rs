//! [`Limit`]: a rate and its slack, or a quota per window, as configuration
//! states one; [`Limits`]: a default limit and overrides by key, in order.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::model::window::{self, Window};
use crate::values::error::BuildError;
use crate::values::rate::Rate;
use crate::values::slack::Slack;
use crate::values::window::nominal_seconds;

/// One limit: a [`Rate`] and its [`Slack`], what a limiter is built from.
///
/// With the `serde` feature it reads from a bare rate, `"100/s"` (the
/// default slack), or from a map: `{ rate = "10/s", burst = 5 }` (a burst
/// of `N` permits is slack `N - 1`), `{ rate = "10/s", slack = 19 }` (in
/// permits), `{ rate = "10/s", slack = "10ms" }` (in time), and writes
/// the map. See [`Limits`] for a whole document.
///
/// ```
/// use paceline::{Limit, Rate, Slack};
///
/// let limit = Limit::new(Rate::per_second(10), 4);
/// let (rate, slack): (Rate, Slack) = limit.into();
/// assert_eq!((rate, slack), (Rate::per_second(10), Slack::permits(4)));
/// assert_eq!(Limit::from(rate).slack(), Slack::DEFAULT);
/// assert_eq!(limit.to_string(), "10/s, slack 4 permits");
/// ```
///
/// # Slack and burst
///
/// One setting, two words: the API states the **slack** `S`, what
/// operators and clients read (configuration, the CLI, HTTP fields, the look
/// inside) states the **burst** `S + 1`; configuration takes either. The
/// guide's [model](crate::guide::model#slack-and-burst-the-window-bound)
/// has the table of which surface says which.
///
/// ```
/// use paceline::{AtomicLimiter, Limit, Rate};
///
/// let limit = Limit::new(Rate::per_second(10), 4);
/// assert_eq!(limit.burst(), 5);
/// // A bucket that is whole holds the burst.
/// let limiter = AtomicLimiter::builder(limit.rate())
///     .slack(limit.slack())
///     .full_credit(true)
///     .build()?;
/// assert_eq!(limiter.state().available(), 5);
/// # #[cfg(feature = "serde")]
/// # {
/// let burst: Limit = serde_json::from_str(r#"{ "rate": "10/s", "burst": 5 }"#)?;
/// let slack: Limit = serde_json::from_str(r#"{ "rate": "10/s", "slack": 4 }"#)?;
/// assert_eq!((burst, slack), (limit, limit));
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Counted by window
///
/// A limit can instead be a quota per window of the wall clock,
/// [`per_window`](Self::per_window): `10000 per day`, back at midnight UTC.
/// It is counted, not paced: the whole quota may go at once, and a window
/// spent waits for the next one's start (see the guide's
/// [model](crate::guide::model#windows-beside-pacing)). Such a limit's
/// [`window`](Self::window) is `Some`; its [`burst`](Self::burst) is the
/// quota, its [`rate`](Self::rate) the quota over the window's nominal
/// length, what it admits in the long run. A keyed limiter and the remote
/// ones count windows; a direct in-process limiter paces only, and refuses
/// one with [`BuildError::WindowNotPaced`].
///
/// ```
/// use paceline::Limit;
/// use paceline::model::window::Window;
///
/// let daily = Limit::per_window(10_000, "day".parse()?)?;
/// assert_eq!(daily.window(), Some(Window::Day { offset: 0 }));
/// assert_eq!(daily.burst(), 10_000);
/// assert_eq!(daily.to_string(), "10000 per day");
/// assert_eq!(daily.rate().interval(), std::time::Duration::from_millis(8_640));
/// # Ok::<(), paceline::BuildError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Limit {
    rate: Rate,
    slack: Slack,
    /// `Some`: counted by this window, `slack + 1` permits in each.
    window: Option<Window>,
}

impl Limit {
    /// `rate` with `slack` (a `u64` of permits, a `Duration`, or a [`Slack`]).
    pub fn new(rate: Rate, slack: impl Into<Slack>) -> Limit {
        Limit {
            rate,
            slack: slack.into(),
            window: None,
        }
    }

    /// `quota` permits in each `window`, counted, not paced.
    ///
    /// # Errors
    /// [`BuildError::ZeroQuota`]; [`BuildError::QuotaTooLarge`] when the
    /// window's state word cannot count that many (over 2^29 - 1 a second,
    /// 2^46 - 1 a day); [`BuildError::ZeroWindow`];
    /// [`BuildError::WindowOffset`].
    pub fn per_window(quota: u64, window: Window) -> Result<Limit, BuildError> {
        if quota == 0 {
            return Err(BuildError::ZeroQuota);
        }
        window::Params::new(quota, window)?;
        Ok(Limit {
            rate: Rate::nominal(quota, Duration::from_secs(nominal_seconds(window))),
            slack: Slack::permits(quota - 1),
            window: Some(window),
        })
    }

    /// The rate; for a limit [counted by window](Self#counted-by-window),
    /// the quota over the window's nominal length (a month's is an average
    /// Gregorian month, 2 629 746 s), what it admits in the long run.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// The slack; for a limit counted by window, the quota less one.
    pub fn slack(&self) -> Slack {
        self.slack
    }

    /// The window the limit is counted by, `None` for a pacing limit.
    pub fn window(&self) -> Option<Window> {
        self.window
    }

    /// `Err` naming `by` when the limit is counted by window: for a
    /// limiter that paces only.
    pub(crate) fn paced(&self, by: &'static str) -> Result<(), BuildError> {
        match self.window {
            None => Ok(()),
            Some(_) => Err(BuildError::WindowNotPaced {
                limit: self.to_string(),
                by,
            }),
        }
    }

    /// The burst: the most permits one request may take at once,
    /// `slack + 1`, the slack in permits at the rate (saturating). The
    /// slack is what the API sets (uber's word); configuration files, the
    /// CLI and the HTTP fields state the burst.
    ///
    /// ```
    /// use paceline::{Limit, Rate};
    /// use std::time::Duration;
    ///
    /// assert_eq!(Limit::new(Rate::per_second(10), 4).burst(), 5);
    /// assert_eq!(Limit::new(Rate::per_second(1000), Duration::from_millis(20)).burst(), 21);
    /// ```
    pub fn burst(&self) -> u64 {
        self.slack.permits_at(self.rate).saturating_add(1)
    }
}

impl From<Rate> for Limit {
    /// `rate` with [`Slack::DEFAULT`].
    fn from(rate: Rate) -> Limit {
        Limit::new(rate, Slack::DEFAULT)
    }
}

impl From<Limit> for (Rate, Slack) {
    fn from(limit: Limit) -> (Rate, Slack) {
        (limit.rate, limit.slack)
    }
}

impl fmt::Display for Limit {
    /// `10/s, slack 4 permits`; `10000 per day` for a quota.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.window {
            None => write!(f, "{}, slack {}", self.rate, self.slack),
            Some(window) => write!(f, "{} per {window}", self.burst()),
        }
    }
}

/// A set of limits: a default, and overrides for particular keys (a tenant,
/// a user within it), in the order given. A key names its own override
/// exactly; a keyed limiter with a parent function (such as
/// `keyed::path_parent` for `"tenant:acme/user:7"`)
/// lets a key without its own fall back to its parents'.
///
/// With the `serde` feature it reads the same from any format; in TOML:
///
/// ```
/// # #[cfg(feature = "serde")] {
/// use paceline::{Limit, Limits, Rate};
///
/// let limits: Limits = toml::from_str(r#"
///     [default]
///     rate = "100/s"
///     burst = 20
///
///     [overrides]
///     "tenant:acme" = "1000/s"
///     "tenant:acme/user:7" = { rate = "10/s", burst = 5 }
/// "#)?;
/// assert_eq!(*limits.default_limit(), Limit::new(Rate::per_second(100), 19));
/// assert_eq!(limits.get("tenant:acme"), Some(&Limit::from(Rate::per_second(1000))));
/// assert_eq!(limits.overrides()[1].0, "tenant:acme/user:7");
/// assert_eq!(limits.get("tenant:acme/user:7").unwrap().slack().min_permits(), 4);
///
/// let bad = toml::from_str::<Limits>("[default]\nrate = \"10/1.5s\"\n").unwrap_err();
/// assert!(bad.to_string().contains("line 2"));
/// assert!(bad.to_string().contains(r#"decimals are not supported (write "20/3s")"#));
/// # }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// The overrides keep the document's order where the format's reader does
/// (serde_json and serde_norway do; the `toml` crate with its
/// `preserve_order` feature).
///
/// Every document has a `default`; `overrides` may be left out. A key given
/// twice, an unknown field (`brust`), a burst of 0, or a burst and a slack
/// in one limit are errors that name the value, and the parser names where
/// it is in the file.
///
/// Each limit may say which layer it came from ([`layer`](Self::layer),
/// [`default_layer`](Self::default_layer)): a set merged from several
/// documents by `fleet::Layers` (feature `fleet`) names them, and a
/// keyed limiter's [`limits`](crate::KeyedLimiter::limits) gives them
/// back. A limit set by hand comes from no layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    default: Limit,
    overrides: Vec<(String, Limit)>,
    /// The layer each limit came from: `[0]` the default's, `[i + 1]`
    /// override `i`'s. Always one longer than `overrides`.
    layers: Vec<Option<Arc<str>>>,
}

impl Limits {
    /// `default` for every key, no overrides.
    pub fn new(default: impl Into<Limit>) -> Limits {
        Limits {
            default: default.into(),
            overrides: Vec::new(),
            layers: vec![None],
        }
    }

    /// The limit of every key without an override.
    pub fn default_limit(&self) -> &Limit {
        &self.default
    }

    /// The overrides, in the order given.
    pub fn overrides(&self) -> &[(String, Limit)] {
        &self.overrides
    }

    /// The override for exactly `key`, if any.
    pub fn get(&self, key: &str) -> Option<&Limit> {
        self.overrides
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, limit)| limit)
    }

    /// Sets `key`'s override: in its place if it has one (returning the
    /// old), else at the end. It comes from no layer.
    pub fn insert(&mut self, key: impl Into<String>, limit: impl Into<Limit>) -> Option<Limit> {
        self.insert_from(key.into(), limit.into(), None)
    }

    /// [`insert`](Self::insert), the limit from `layer`.
    pub(crate) fn insert_from(
        &mut self,
        key: String,
        limit: Limit,
        layer: Option<Arc<str>>,
    ) -> Option<Limit> {
        match self.overrides.iter().position(|(k, _)| *k == key) {
            Some(i) => {
                self.layers[i + 1] = layer;
                Some(std::mem::replace(&mut self.overrides[i].1, limit))
            }
            None => {
                self.overrides.push((key, limit));
                self.layers.push(layer);
                None
            }
        }
    }

    /// Replaces the default limit, from `layer`.
    #[cfg(any(feature = "keyed", feature = "fleet"))]
    pub(crate) fn set_default_from(&mut self, limit: Limit, layer: Option<Arc<str>>) {
        self.default = limit;
        self.layers[0] = layer;
    }

    /// The layer the default came from, if it came from one.
    pub fn default_layer(&self) -> Option<&str> {
        self.layers[0].as_deref()
    }

    /// The layer `key`'s override came from, if it has one and it came
    /// from a layer.
    ///
    /// ```
    /// use paceline::{Limits, Rate};
    ///
    /// let limits = Limits::new(Rate::per_second(10)).with_override("a", Rate::per_second(1));
    /// assert_eq!(limits.layer("a"), None); // set by hand
    /// ```
    pub fn layer(&self, key: &str) -> Option<&str> {
        let i = self.overrides.iter().position(|(k, _)| k == key)?;
        self.layers[i + 1].as_deref()
    }

    /// Every limit's layer, `[0]` the default's, then the overrides' in
    /// order.
    #[cfg(feature = "keyed")]
    pub(crate) fn layers(&self) -> &[Option<Arc<str>>] {
        &self.layers
    }

    /// [`insert`](Self::insert), by value.
    pub fn with_override(mut self, key: impl Into<String>, limit: impl Into<Limit>) -> Limits {
        self.insert(key, limit);
        self
    }
}
