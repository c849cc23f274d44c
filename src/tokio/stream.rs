//! [`PacedStreamExt`]: paces a [`Stream`]'s items through an
//! [`AsyncLimiter`].

use crate::limiter::take::Taken;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures_core::{FusedStream, Stream};

use crate::clock::Clock;

use super::{AsyncLimiter, TokioClock};

/// Paces any [`Stream`]: `stream.paced(&limiter)` yields the same items, each
/// only once the limiter grants it a permit.
///
/// ```
/// use futures_util::StreamExt;
/// use paceline::tokio::{AsyncLimiter, PacedStreamExt};
/// use paceline::Rate;
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() {
/// let limiter = AsyncLimiter::new(Rate::per_second(10));
/// let jobs = futures_util::stream::iter(1..=5);
/// let mut paced = jobs.paced(&limiter);
/// let start = tokio::time::Instant::now();
/// while let Some(job) = paced.next().await {
///     println!("job {job} at {:?}", start.elapsed()); // 0, 100, 200, ... ms
/// }
/// assert_eq!(start.elapsed(), std::time::Duration::from_millis(400));
/// # }
/// ```
pub trait PacedStreamExt: Stream + Sized {
    /// Yields this stream's items, each after taking one permit from
    /// `limiter` (the stream holds a clone of it, so it may outlive the
    /// borrow). An item is pulled from the stream first and then paced, so
    /// an ended stream spends no permit.
    ///
    /// # Cancel safety
    /// Dropped while an item waits for its slot, the stream gives the slot
    /// back as [`AsyncLimiter::take`] does ([cancel
    /// safety](crate::guide::waiting#cancel-safety)), and the item is dropped with it.
    fn paced<C: Clock + 'static>(self, limiter: &AsyncLimiter<C>) -> PacedStream<Self, C> {
        PacedStream {
            inner: Box::pin(self),
            limiter: limiter.clone(),
            waiting: None,
        }
    }
}

impl<S: Stream> PacedStreamExt for S {}

/// The stream [`PacedStreamExt::paced`] returns.
#[must_use = "streams do nothing unless polled"]
pub struct PacedStream<S: Stream, C: Clock = TokioClock> {
    inner: Pin<Box<S>>,
    limiter: AsyncLimiter<C>,
    /// The item waiting for its slot, and its wait, which gives the slot
    /// back if dropped early.
    waiting: Option<(S::Item, SlotWait)>,
}

/// An item's wait for its slot, boxed so the stream stays `Unpin`.
type SlotWait = Pin<Box<dyn Future<Output = Taken> + Send>>;

// Nothing is ever pinned in place inside: the stream and the wait are boxed,
// and the item is only moved.
impl<S: Stream, C: Clock> Unpin for PacedStream<S, C> {}

impl<S: Stream, C: Clock + 'static> Stream for PacedStream<S, C> {
    type Item = S::Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let this = self.get_mut();
        // Is an item waiting for its slot?
        if let Some((_, wait)) = this.waiting.as_mut() {
            ready!(wait.as_mut().poll(cx));
            return Poll::Ready(this.waiting.take().map(|(item, _)| item));
        }
        let Some(item) = ready!(this.inner.as_mut().poll_next(cx)) else {
            return Poll::Ready(None);
        };
        // Covered by banked credit: no wait, no allocation.
        if this.limiter.limiter().try_take().is_ok() {
            return Poll::Ready(Some(item));
        }
        let limiter = this.limiter.clone();
        let mut wait: SlotWait = Box::pin(async move { limiter.take().await });
        if wait.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Some(item));
        }
        this.waiting = Some((item, wait));
        Poll::Pending
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let held = usize::from(self.waiting.is_some());
        let (lo, hi) = self.inner.size_hint();
        (
            lo.saturating_add(held),
            hi.and_then(|hi| hi.checked_add(held)),
        )
    }
}

impl<S: FusedStream, C: Clock + 'static> FusedStream for PacedStream<S, C> {
    fn is_terminated(&self) -> bool {
        self.waiting.is_none() && self.inner.is_terminated()
    }
}

impl<S: Stream, C: Clock> fmt::Debug for PacedStream<S, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PacedStream")
            .field("limiter", &self.limiter)
            .field("waiting", &self.waiting.is_some())
            .finish_non_exhaustive()
    }
}
