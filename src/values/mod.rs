//! The values a user states and handles: [`Rate`](crate::Rate),
//! [`Slack`](crate::Slack), [`Limit`](crate::Limit) and
//! [`Limits`](crate::Limits), durations as text, and the errors
//! ([`Error`](crate::Error), [`BuildError`](crate::BuildError)). Re-exported at the crate's root.

pub(crate) mod duration;
pub(crate) mod error;
pub(crate) mod limit;
pub(crate) mod rate;
pub(crate) mod slack;

/// Setters that store their argument in a builder's field, through `Into`
/// (a field's own type as given), each `setter(argument: Type) =>
/// field.path;` under its doc.
macro_rules! setters {
    ($($(#[$doc:meta])* $setter:ident($arg:ident: $type:ty) => $($field:ident).+;)*) => {$(
        $(#[$doc])*
        #[allow(clippy::useless_conversion)]
        pub fn $setter(mut self, $arg: $type) -> Self {
            self.$($field).+ = $arg.into();
            self
        }
    )*};
}
pub(crate) use setters;
