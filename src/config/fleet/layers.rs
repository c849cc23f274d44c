//! [`Layers`]: named layers in order, each fed new versions by a source (a
//! file, a fleet document), merged and applied to a limiter as one set.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use super::document;
use super::layer::{merge, Layer};
use crate::config::watch::ReloadResult;
use crate::primitive::{lock, Mutex, MutexGuard};
use crate::values::error::BuildError;
use crate::values::limit::Limits;

type Apply = Box<dyn Fn(&Limits) -> ReloadResult + Send + Sync>;

/// Layers of limits, lowest first, merged key by key
/// ([`merge`](super::merge)) and applied as one set whenever one of them
/// takes a new version. Clones share the layers.
///
/// Each layer is fed by a [`Feed`] ([`add`](Self::add) returns it): a
/// `Document` watcher (with `redis` or `postgres`), a [`Watch`](crate::config::watch::Watch)
/// of a local file ([`Feed::reload`]), or your own code. A layer only goes
/// forward: a version at or below the one it holds is ignored. A version
/// that cannot be used (a broken document, a set the limiter refuses) is
/// reported and changes nothing: the layer keeps its last good version,
/// and the others go on.
///
/// ```
/// # #[cfg(feature = "keyed")]
/// # fn main() -> Result<(), paceline::BuildError> {
/// use paceline::config::fleet::{Layer, Layers};
/// use paceline::{KeyedLimiter, Rate};
/// use std::sync::Arc;
///
/// let limiter = Arc::new(KeyedLimiter::<String>::new(Rate::per_second(1)));
/// let target = Arc::clone(&limiter);
/// let layers = Layers::new(move |limits| target.apply(limits));
/// let global = layers.add("global");
/// let local = layers.add("local");
///
/// global.offer(1, Layer::new().with_default(Rate::per_second(100)).with_override("b", Rate::per_second(10)))?;
/// local.offer(1, Layer::new().with_override("b", Rate::per_second(5)))?;
/// assert_eq!(limiter.rate_for("b").0, Rate::per_second(5));
/// assert_eq!(limiter.limits().layer("b"), Some("local"));
///
/// // An older version never replaces a newer one.
/// global.offer(2, Layer::new().with_default(Rate::per_second(200)))?;
/// global.offer(1, Layer::new().with_default(Rate::per_second(100)))?;
/// assert_eq!(limiter.rate(), Rate::per_second(200));
///
/// // A broken version is refused; the layer keeps version 2.
/// assert!(global.offer_text(3, "[default]\nrate = \"ten/s\"\n").is_err());
/// assert_eq!(limiter.rate(), Rate::per_second(200));
/// assert_eq!(layers.status()[0].version, Some(2));
/// # Ok(())
/// # }
/// # #[cfg(not(feature = "keyed"))]
/// # fn main() {}
/// ```
#[derive(Clone)]
pub struct Layers {
    shared: Arc<Shared>,
}

struct Shared {
    apply: Apply,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    slots: Vec<Slot>,
    /// The set last applied.
    in_force: Option<Limits>,
}

struct Slot {
    name: Arc<str>,
    /// The last good version and its layer.
    good: Option<(u64, Layer)>,
    /// The newest version offered, good or not: one at or below it is
    /// ignored.
    seen: Option<u64>,
    /// Why the last offer or read failed, until a version is taken.
    error: Option<Arc<str>>,
}

/// What became of a version offered to a layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Offered {
    /// Taken, and the merged set applied.
    Applied,
    /// Taken, but no layer sets a default yet: nothing applied.
    NoDefault,
    /// At or below the version the layer has seen: ignored.
    Stale,
}

/// One layer as [`Layers::status`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LayerStatus {
    /// The layer's name.
    pub name: Arc<str>,
    /// The version in force, `None` before the first good one.
    pub version: Option<u64>,
    /// Why the last version offered or read was not taken (the message of
    /// its [`BuildError::Layer`]), until one is.
    pub error: Option<Arc<str>>,
}

impl Layers {
    /// No layers yet; each merged set is handed to `apply` (typically
    /// [`KeyedLimiter::apply`](crate::KeyedLimiter::apply), which takes it
    /// whole or not at all). A set `apply` refuses is reported and the
    /// version that made it is not taken.
    pub fn new<F, E>(apply: F) -> Layers
    where
        F: Fn(&Limits) -> Result<(), E> + Send + Sync + 'static,
        E: Into<Box<dyn StdError + Send + Sync>>,
    {
        Layers {
            shared: Arc::new(Shared {
                apply: Box::new(move |limits| apply(limits).map_err(Into::into)),
                state: Mutex::new(State::default()),
            }),
        }
    }

    /// Adds a layer above those added before, and returns what feeds it.
    pub fn add(&self, name: impl Into<Arc<str>>) -> Feed {
        let mut state = self.lock();
        state.slots.push(Slot {
            name: name.into(),
            good: None,
            seen: None,
            error: None,
        });
        Feed {
            layers: self.clone(),
            index: state.slots.len() - 1,
        }
    }

    /// Every layer, lowest first.
    pub fn status(&self) -> Vec<LayerStatus> {
        self.lock()
            .slots
            .iter()
            .map(|s| LayerStatus {
                name: Arc::clone(&s.name),
                version: s.good.as_ref().map(|(v, _)| *v),
                error: s.error.clone(),
            })
            .collect()
    }

    /// The set last applied, each limit naming its layer.
    pub fn in_force(&self) -> Option<Limits> {
        self.lock().in_force.clone()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        lock(&self.shared.state)
    }

    fn offer(&self, index: usize, version: u64, layer: Layer) -> Result<Offered, BuildError> {
        let mut state = self.lock();
        let slot = &mut state.slots[index];
        if slot.is_stale(version) {
            return Ok(Offered::Stale);
        }
        slot.seen = Some(version);
        let old = slot.good.replace((version, layer));
        let Some(merged) = merge(state.slots.iter().filter_map(Slot::layer)) else {
            state.slots[index].error = None;
            return Ok(Offered::NoDefault);
        };
        if let Err(e) = (self.shared.apply)(&merged) {
            let slot = &mut state.slots[index];
            slot.good = old;
            return Err(slot.failed(Some(version), e.to_string()));
        }
        let slot = &mut state.slots[index];
        crate::observe::event::info!(layer = %slot.name, version, "paceline: layer applied");
        slot.error = None;
        state.in_force = Some(merged);
        Ok(Offered::Applied)
    }

    fn refuse(&self, index: usize, version: Option<u64>, reason: String) -> BuildError {
        self.lock().slots[index].failed(version, reason)
    }
}

impl Slot {
    /// Its last good version's layer, named, as [`merge`] takes it.
    fn layer(&self) -> Option<(Arc<str>, &Layer)> {
        self.good.as_ref().map(|(_, l)| (Arc::clone(&self.name), l))
    }

    /// Whether `version` is at or below the newest this layer has seen.
    fn is_stale(&self, version: u64) -> bool {
        self.seen.is_some_and(|seen| version <= seen)
    }

    /// Records why `version` (or, `None`, a read) failed: the version
    /// counts as seen, the error stays in the status until a version is
    /// taken, and is sent as an event.
    fn failed(&mut self, version: Option<u64>, reason: String) -> BuildError {
        if let Some(v) = version {
            self.seen = Some(self.seen.map_or(v, |s| s.max(v)));
        }
        let e = BuildError::Layer {
            layer: Arc::clone(&self.name),
            version,
            reason: reason.into(),
        };
        self.error = Some(e.to_string().into());
        crate::observe::event::warning!(layer = %self.name, error = %e, "paceline: layer not applied");
        e
    }
}

impl fmt::Debug for Layers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Layers")
            .field("layers", &self.status())
            .finish_non_exhaustive()
    }
}

/// What feeds one layer of [`Layers`]: new versions, or why one could not
/// be read.
#[derive(Clone, Debug)]
pub struct Feed {
    layers: Layers,
    index: usize,
}

impl Feed {
    /// Offers `layer` as version `version`: taken if newer than every
    /// version this layer has seen, and the merged set applied.
    ///
    /// # Errors
    /// [`BuildError::Layer`]: the merged set was refused by the limiter (a
    /// slack too large, too many overrides); the layer keeps its last good
    /// version.
    pub fn offer(&self, version: u64, layer: Layer) -> Result<Offered, BuildError> {
        self.layers.offer(self.index, version, layer)
    }

    /// [`offer`](Self::offer) of a document's text (TOML, the shape of
    /// [`Limits`], the default optional), checked whole first
    /// ([`check`](super::check)).
    ///
    /// # Errors
    /// A broken document, naming the bad value; or as for `offer`. A
    /// broken version counts as seen: it is reported once.
    pub fn offer_text(&self, version: u64, text: &str) -> Result<Offered, BuildError> {
        if self.layers.lock().slots[self.index].is_stale(version) {
            return Ok(Offered::Stale);
        }
        match document::check(text) {
            Ok(layer) => self.offer(version, layer),
            Err(e) => Err(self.layers.refuse(self.index, Some(version), e.to_string())),
        }
    }

    /// Reports that the layer's source could not be read (its server away,
    /// its file gone): the layer keeps its last good version, and
    /// [`Layers::status`] shows `reason` until a version is taken. The
    /// [`BuildError::Layer`] returned (its `version` `None`) is the one
    /// reported.
    pub fn fail(&self, reason: impl fmt::Display) -> BuildError {
        self.layers.refuse(self.index, None, reason.to_string())
    }

    /// A reload function for [`Watch::start`](crate::config::watch::Watch::start):
    /// each version of the file that the watcher loads is this layer's
    /// next version; a broken one fails the reload, so the watcher reports
    /// it and keeps the file's last good version in force.
    ///
    /// ```no_run
    /// # #[cfg(feature = "keyed")]
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use paceline::config::fleet::Layers;
    /// use paceline::config::watch::Watch;
    /// use paceline::{KeyedLimiter, Rate};
    /// use std::sync::Arc;
    ///
    /// let limiter = Arc::new(KeyedLimiter::<String>::new(Rate::per_second(10)));
    /// let target = Arc::clone(&limiter);
    /// let layers = Layers::new(move |limits| target.apply(limits));
    /// let _global = layers.add("global"); // fed by a fleet document
    /// let _local = Watch::new("local.toml").start(layers.add("local").reload())?;
    /// # Ok(())
    /// # }
    /// # #[cfg(not(feature = "keyed"))]
    /// # fn main() {}
    /// ```
    pub fn reload(self) -> impl FnMut(&str) -> ReloadResult + Send + 'static {
        let mut version = 0;
        move |text| {
            version += 1;
            self.offer_text(version, text)?;
            Ok(())
        }
    }

    /// The layer's name.
    pub fn name(&self) -> Arc<str> {
        Arc::clone(&self.layers.lock().slots[self.index].name)
    }
}
