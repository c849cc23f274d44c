//! [`PacedExt`]: paces an [`Iterator`]'s items through a blocking limiter.

use std::fmt;
use std::iter::FusedIterator;

use crate::limiter::take::Take;

/// Paces any [`Iterator`]: `jobs.into_iter().paced(&limiter)` yields the
/// same items, each after a blocking [`take`](Take::take) on `limiter`.
/// For the per-thread pacing of batch jobs; works with any direct limiter,
/// through [`Take`] (including `&dyn Take`). The async twin for streams is
/// `paceline::tokio::PacedStreamExt` (feature `tokio`).
///
/// ```
/// use paceline::{AtomicLimiter, PacedExt, Rate};
/// use std::time::{Duration, Instant};
///
/// let limiter = AtomicLimiter::new(Rate::per_second(200));
/// let start = Instant::now();
/// let done: Vec<u32> = (1..=5).paced(&limiter).map(|job| job * 10).collect();
/// assert_eq!(done, [10, 20, 30, 40, 50]);
/// assert!(start.elapsed() >= Duration::from_millis(20)); // 5 ms apart
/// ```
pub trait PacedExt: Iterator + Sized {
    /// Yields this iterator's items, each after taking one permit from
    /// `limiter` (blocking). An item is pulled first and then paced, so an
    /// exhausted iterator spends no permit.
    fn paced<L: Take + ?Sized>(self, limiter: &L) -> PacedIter<'_, Self, L> {
        PacedIter {
            iter: self,
            limiter,
        }
    }
}

impl<I: Iterator> PacedExt for I {}

/// The iterator [`PacedExt::paced`] returns.
#[must_use = "iterators are lazy and do nothing unless consumed"]
pub struct PacedIter<'a, I, L: ?Sized> {
    iter: I,
    limiter: &'a L,
}

impl<I: Iterator, L: Take + ?Sized> Iterator for PacedIter<'_, I, L> {
    type Item = I::Item;

    fn next(&mut self) -> Option<I::Item> {
        let item = self.iter.next()?;
        // A direct limiter refuses a single permit never (only a cost past
        // 146 years); a failure of a limiter of one's own passes the item.
        let _ = self.limiter.take(&());
        Some(item)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.iter.size_hint()
    }
}

impl<I: ExactSizeIterator, L: Take + ?Sized> ExactSizeIterator for PacedIter<'_, I, L> {}

impl<I: FusedIterator, L: Take + ?Sized> FusedIterator for PacedIter<'_, I, L> {}

impl<I: fmt::Debug, L: ?Sized> fmt::Debug for PacedIter<'_, I, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PacedIter")
            .field("iter", &self.iter)
            .finish_non_exhaustive()
    }
}
