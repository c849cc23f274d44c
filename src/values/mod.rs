//! The values a user states and handles: [`Rate`](crate::Rate),
//! [`Slack`](crate::Slack), [`Limit`](crate::Limit) and
//! [`Limits`](crate::Limits), durations as text, and the errors
//! ([`Error`](crate::Error), [`BuildError`](crate::BuildError)). Re-exported at the crate's root.

pub(crate) mod duration;
pub(crate) mod error;
pub(crate) mod limit;
pub(crate) mod rate;
pub(crate) mod slack;
pub(crate) mod window;

/// Setters that store their argument in a builder's field, each
/// `setter(argument: Type) => field.path;` under its doc: through `Into` (a
/// field's own type as given), or as `=> field.path = value;` says (a value
/// made of the argument: clamped, boxed, wrapped in `Some`).
macro_rules! setters {
    ($($(#[$doc:meta])* $setter:ident($arg:ident: $type:ty) => $($field:ident).+ $(= $value:expr)?;)*) => {$(
        $(#[$doc])*
        #[allow(clippy::useless_conversion)]
        pub fn $setter(mut self, $arg: $type) -> Self {
            self.$($field).+ = crate::values::setters!(@value $arg $($value)?);
            self
        }
    )*};
    (@value $arg:ident) => { $arg.into() };
    (@value $arg:ident $value:expr) => { $value };
}
pub(crate) use setters;
