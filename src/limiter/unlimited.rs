//! [`Unlimited`]: a limiter that never limits (uber's `NewUnlimited`).

use crate::observe::stats::{Counted, Stats};

/// A limiter that admits every call at once: for configurations where pacing
/// is off, behind the same [`Take`](crate::Take) interface.
///
/// Its calls are the interface's, for any key: it keeps no clock, so a
/// take answers that its permit went at `Duration::ZERO`.
///
/// ```
/// use paceline::{Take, Unlimited};
///
/// for _ in 0..1000 {
///     Unlimited.take(&())?;
/// }
/// assert!(Unlimited.try_take_n(&(), u64::MAX).is_ok());
/// # Ok::<(), paceline::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Unlimited;

impl Unlimited {
    /// Does nothing: there is no state to forget.
    #[inline]
    pub fn reset(&self) {}
}

/// Counts nothing: [`stats`](Counted::stats) is `None`.
impl Counted for Unlimited {
    fn stats(&self) -> Option<Stats> {
        None
    }
}
