//! [`Layer`]: one document of limits as a layer states it (the default may
//! be left to a layer below), and [`merge`], layers in order into one set.

use std::sync::Arc;

use crate::values::limit::{Limit, Limits};

/// One layer of limits: what one document (a fleet's global limits, one
/// server's tweak) says. The same shape as [`Limits`], but the default may
/// be left out, for a layer that only overrides some keys over another
/// that sets it.
///
/// ```
/// use paceline::config::fleet::Layer;
/// use paceline::{Limit, Rate};
///
/// let tweak: Layer = toml::from_str(r#"
///     [overrides]
///     "tenant:acme" = { rate = "50/s", burst = 10 }
/// "#)?;
/// assert_eq!(tweak.default_limit(), None);
/// assert_eq!(tweak.overrides()[0].1, Limit::new(Rate::per_second(50), 9));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Layer {
    default: Option<Limit>,
    overrides: Vec<(String, Limit)>,
}

impl Layer {
    /// A layer that says nothing: no default, no overrides.
    pub fn new() -> Layer {
        Layer::default()
    }

    /// A layer from its parts; a key given twice keeps its last limit, in
    /// its first place.
    pub fn from_parts(default: Option<Limit>, overrides: Vec<(String, Limit)>) -> Layer {
        let layer = Layer {
            default,
            overrides: Vec::with_capacity(overrides.len()),
        };
        overrides
            .into_iter()
            .fold(layer, |layer, (key, limit)| layer.with_override(key, limit))
    }

    /// This layer with `limit` as the default.
    #[must_use]
    pub fn with_default(mut self, limit: impl Into<Limit>) -> Layer {
        self.default = Some(limit.into());
        self
    }

    /// This layer with `key`'s override.
    #[must_use]
    pub fn with_override(mut self, key: impl Into<String>, limit: impl Into<Limit>) -> Layer {
        let (key, limit) = (key.into(), limit.into());
        match self.overrides.iter_mut().find(|(k, _)| *k == key) {
            Some((_, old)) => *old = limit,
            None => self.overrides.push((key, limit)),
        }
        self
    }

    /// The default this layer sets, if it sets one.
    pub fn default_limit(&self) -> Option<&Limit> {
        self.default.as_ref()
    }

    /// The overrides, in order.
    pub fn overrides(&self) -> &[(String, Limit)] {
        &self.overrides
    }
}

impl From<Limits> for Layer {
    fn from(limits: Limits) -> Layer {
        Layer {
            default: Some(*limits.default_limit()),
            overrides: limits.overrides().to_vec(),
        }
    }
}

/// Merges `layers`, lowest first: a later layer's default replaces an
/// earlier one's, and its override for a key replaces that key's (the key
/// keeps its first place); every limit says which layer it came from.
/// `None` when no layer sets a default.
///
/// ```
/// use paceline::config::fleet::{merge, Layer};
/// use paceline::{Limit, Rate};
///
/// let global = Layer::new()
///     .with_default(Rate::per_second(100))
///     .with_override("a", Rate::per_second(10))
///     .with_override("b", Rate::per_second(20));
/// let local = Layer::new().with_override("b", Rate::per_second(5));
/// let limits = merge([("global", &global), ("local", &local)]).unwrap();
/// assert_eq!(*limits.default_limit(), Limit::from(Rate::per_second(100)));
/// assert_eq!(limits.get("b"), Some(&Limit::from(Rate::per_second(5))));
/// assert_eq!((limits.layer("a"), limits.layer("b")), (Some("global"), Some("local")));
/// assert_eq!(limits.default_layer(), Some("global"));
/// ```
pub fn merge<'a, N>(layers: impl IntoIterator<Item = (N, &'a Layer)>) -> Option<Limits>
where
    N: Into<Arc<str>>,
{
    let layers: Vec<(Arc<str>, &Layer)> = layers.into_iter().map(|(n, l)| (n.into(), l)).collect();
    // The default is the last one set; the overrides go in as they come,
    // a later one for a key taking its place.
    let (name, default) = layers
        .iter()
        .rev()
        .find_map(|(name, layer)| layer.default.map(|d| (name, d)))?;
    let mut limits = Limits::new(default);
    limits.set_default_from(default, Some(Arc::clone(name)));
    for (name, layer) in &layers {
        for (key, limit) in &layer.overrides {
            limits.insert_from(key.clone(), *limit, Some(Arc::clone(name)));
        }
    }
    Some(limits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rate;

    fn r(n: u64) -> Limit {
        Limit::from(Rate::per_second(n))
    }

    #[test]
    fn a_later_layer_wins_key_by_key_and_keys_keep_their_first_place() {
        let a = Layer::new()
            .with_default(r(1))
            .with_override("x", r(2))
            .with_override("y", r(3));
        let b = Layer::new()
            .with_override("y", r(4))
            .with_override("z", r(5));
        let c = Layer::new().with_default(r(6)).with_override("x", r(7));
        let m = merge([("a", &a), ("b", &b), ("c", &c)]).unwrap();
        assert_eq!(*m.default_limit(), r(6));
        assert_eq!(m.default_layer(), Some("c"));
        let keys: Vec<_> = m
            .overrides()
            .iter()
            .map(|(k, l)| (k.as_str(), *l))
            .collect();
        assert_eq!(keys, [("x", r(7)), ("y", r(4)), ("z", r(5))]);
        let from: Vec<_> = ["x", "y", "z"].iter().map(|k| m.layer(k)).collect();
        assert_eq!(from, [Some("c"), Some("b"), Some("b")]);
    }

    #[test]
    fn overrides_below_the_first_default_are_kept() {
        let tweak = Layer::new().with_override("x", r(2));
        let base = Layer::new().with_default(r(1)).with_override("y", r(3));
        let m = merge([("tweak", &tweak), ("base", &base)]).unwrap();
        assert_eq!(m.get("x"), Some(&r(2)));
        assert_eq!(m.layer("x"), Some("tweak"));
        assert_eq!(m.overrides()[0].0, "x");
    }

    #[test]
    fn a_layer_writes_what_it_reads_and_leaves_out_what_it_lacks() {
        let tweak = Layer::new()
            .with_override("x", r(2))
            .with_override("y", r(3));
        let text = toml::to_string(&tweak).unwrap();
        assert!(!text.contains("default"), "{text}");
        assert_eq!(toml::from_str::<Layer>(&text).unwrap(), tweak);
        let whole = tweak.with_default(r(1));
        assert_eq!(
            toml::from_str::<Layer>(&toml::to_string(&whole).unwrap()).unwrap(),
            whole
        );
        assert_eq!(toml::to_string(&Layer::new()).unwrap(), "");
    }

    #[test]
    fn no_default_in_any_layer_merges_to_nothing() {
        let tweak = Layer::new().with_override("x", r(2));
        assert_eq!(merge([("tweak", &tweak)]), None);
        assert_eq!(merge(std::iter::empty::<(&str, &Layer)>()), None);
    }
}
