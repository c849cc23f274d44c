//! A limits document: [`check`] (whole, before anyone stores it), its
//! [`Versioned`] versions, and [`FleetError`].

use std::fmt;

use super::layer::Layer;
use crate::values::limit::Limit;

/// The document's name when none is given.
pub const DEFAULT_NAME: &str = "paceline:limits";

/// The largest document stored or read, in bytes: room for a few hundred
/// thousand overrides, small enough that every reader parses it in about a
/// second at most. A document past it is refused before anyone stores it.
pub const MAX_DOCUMENT_BYTES: usize = 16 << 20;

/// The most overrides a document may hold: what a keyed limiter takes
/// (`KeyedLimiter::MAX_OVERRIDES`), so that no reader refuses a document
/// the writer let through.
pub const MAX_OVERRIDES: usize = (1 << 20) - 1;

/// Why a document was not read, written or used.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FleetError {
    /// The document is broken; the message names the bad value (and, for
    /// TOML, its line). Nothing was stored.
    Invalid(String),
    /// A write asked for version `expected`, and the stored one is `found`
    /// (0: no document): someone wrote in between. Nothing was stored.
    Conflict {
        /// The version the writer read.
        expected: u64,
        /// The version stored now.
        found: u64,
    },
    /// The server could not be reached in time, or answered with an error;
    /// the message names the document and its server's address (never a
    /// password).
    Server(String),
    /// A connection string, URL or name that cannot be used.
    Config(String),
}

impl fmt::Display for FleetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FleetError::Invalid(why) => write!(f, "invalid limits document: {why}"),
            FleetError::Conflict { expected, found } => write!(
                f,
                "the document is at version {found}, not {expected}: someone wrote it since \
                 it was read; read it again"
            ),
            FleetError::Server(why) => write!(f, "limits server: {why}"),
            FleetError::Config(why) => write!(f, "limits document: {why}"),
        }
    }
}

impl std::error::Error for FleetError {}

/// One version of a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    /// The version: 1 for the first write, one more for each write after.
    pub version: u64,
    /// The document, as written.
    pub text: String,
}

/// Checks a limits document whole: TOML in the shape of
/// [`Limits`](crate::Limits) (`[default]`, `[overrides]`, `rate`,
/// `burst`, or `quota` and `window`), the default optional (a layer may leave it to one below);
/// every limit one a limiter can take, at most [`MAX_OVERRIDES`]
/// overrides, at most [`MAX_DOCUMENT_BYTES`].
///
/// ```
/// use paceline::config::fleet::{check, FleetError};
///
/// let layer = check("[default]\nrate = \"100/s\"\nburst = 20\n")?;
/// assert_eq!(layer.default_limit().unwrap().burst(), 20);
///
/// let FleetError::Invalid(why) = check("[default]\nrate = \"100/s\"\nbrust = 20\n").unwrap_err() else {
///     unreachable!()
/// };
/// assert!(why.contains("brust") && why.contains("line 3"), "{why}");
///
/// // A quota per window, as an override (or the default) may be.
/// let layer = check("[overrides]\n\"acme\" = { quota = 10000, window = \"day\" }\n")?;
/// assert_eq!(layer.overrides()[0].1.to_string(), "10000 per day");
/// let FleetError::Invalid(why) =
///     check("[overrides]\n\"acme\" = { quota = 10000, window = \"fortnight\" }\n").unwrap_err()
/// else {
///     unreachable!()
/// };
/// assert!(why.contains("\"fortnight\"") && why.contains("line 2"), "{why}");
/// # Ok::<(), FleetError>(())
/// ```
///
/// # Errors
/// [`FleetError::Invalid`], naming the bad value.
pub fn check(text: &str) -> Result<Layer, FleetError> {
    if text.len() > MAX_DOCUMENT_BYTES {
        return Err(FleetError::Invalid(format!(
            "{} bytes, more than the {MAX_DOCUMENT_BYTES} a document may hold",
            text.len()
        )));
    }
    let layer: Layer =
        toml::from_str(text).map_err(|e| FleetError::Invalid(e.to_string().trim().to_owned()))?;
    if layer.overrides().len() > MAX_OVERRIDES {
        return Err(FleetError::Invalid(format!(
            "{} overrides, more than the {MAX_OVERRIDES} a keyed limiter holds",
            layer.overrides().len()
        )));
    }
    let usable = |what: &dyn fmt::Display, limit: &Limit| {
        // A quota per window was checked when it was read.
        if limit.window().is_some() {
            return Ok(());
        }
        crate::limiter::pacer::params(limit.rate(), limit.slack())
            .map(drop)
            .map_err(|e| FleetError::Invalid(format!("{what}: {limit}: {e}")))
    };
    if let Some(default) = layer.default_limit() {
        usable(&"the default", default)?;
    }
    for (key, limit) in layer.overrides() {
        usable(&format_args!("override {key:?}"), limit)?;
    }
    Ok(layer)
}

/// A store's failure, in the words of its server or client.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) fn server(e: impl fmt::Display) -> FleetError {
    FleetError::Server(e.to_string())
}

/// What a subscription hands on: `Ok` for each announcement that may be
/// the document's, then the error that ended it, if it knows one.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) type Notes = std::sync::mpsc::Receiver<Result<(), FleetError>>;

/// A server that keeps documents: each backend runs these, and
/// [`Document`] does the rest once.
#[cfg(any(feature = "redis", feature = "postgres"))]
pub(crate) trait Store: Send {
    /// The document, if there is one.
    fn get(&mut self) -> Result<Option<Versioned>, FleetError>;
    /// Stores `text` as the next version, only over `if_version` if given
    /// (0: only if there is none), and announces it.
    fn set(&mut self, text: &str, if_version: Option<u64>) -> Result<u64, FleetError>;
    /// Subscribes to announcements (again, after a failure, ending the
    /// subscription before): they come on the channel returned.
    fn listen(&mut self) -> Result<Notes, FleetError>;
}

#[cfg(test)]
#[cfg(feature = "keyed")]
mod tests;
