//! [`PaceLayer`]: the outbound layer. A client service (hyper-util's,
//! tonic's, any tower `Service`) whose calls leave at the limiter's pace.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tower_layer::Layer;
use tower_service::Service;

use crate::limiter::take::{AsyncTake, Error, Taken};
use crate::tokio::AsyncLimiter;

/// The error a [`Paced`] service fails with: the inner service's, or the
/// limiter's ([`paceline::Error`](crate::Error)) when it could not pace a
/// call (a remote limiter whose server is down under
/// [`FailPolicy::Closed`](crate::remote::FailPolicy::Closed)). Tower's own
/// fallible layers (`Timeout`, `Buffer`) answer the same boxed error, and
/// `downcast_ref` tells the two apart.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Paces the calls of the services it wraps through one limiter (clones of
/// the layer and of its services share it): an [`AsyncLimiter`] by
/// default, or any limiter answering [`AsyncTake`] with the unit key (a
/// Redis or PostgreSQL limit on one key through
/// [`OnKey`](crate::io::OnKey), [`Unlimited`](crate::Unlimited), one of your
/// own).
///
/// `poll_ready` waits for a slot (for paceline's async limiters, booking it
/// once it is within the async wait's 10 ms horizon), then for the inner
/// service's readiness; `call` spends the slot. So a caller that drives
/// readiness before calling, as tower's callers do (`ServiceExt::ready`,
/// `oneshot`, `Buffer`), sends each request at its slot, and the inner
/// service's readiness (a pool connection, a buffer slot) is not held
/// through the wait. A take that fails (see [`BoxError`]) fails
/// `poll_ready` and leaves the service ready to ask again.
///
/// # Cancel safety
/// A service dropped while waiting for its slot gives it back ([cancel
/// safety](crate::guide::waiting#cancel-safety)); a slot that came but was not used
/// by a `call` is spent. A clone starts without a slot.
#[derive(Clone)]
pub struct PaceLayer<L = AsyncLimiter> {
    limiter: L,
}

impl<L: AsyncTake + Clone + 'static> PaceLayer<L> {
    /// Paces through `limiter`.
    pub fn new(limiter: L) -> PaceLayer<L> {
        PaceLayer { limiter }
    }
}

impl<S, L: Clone> Layer<S> for PaceLayer<L> {
    type Service = Paced<S, L>;

    fn layer(&self, inner: S) -> Paced<S, L> {
        Paced {
            inner,
            limiter: self.limiter.clone(),
            slot: Slot::None,
        }
    }
}

/// A service paced by a [`PaceLayer`].
pub struct Paced<S, L = AsyncLimiter> {
    inner: S,
    limiter: L,
    slot: Slot,
}

/// The take a service waits on: boxed, as its type is the limiter's own.
type Pending = Pin<Box<dyn Future<Output = Result<Taken, Error>> + Send>>;

/// Where a service is with its next slot.
enum Slot {
    /// Not asked for yet.
    None,
    /// Asked for: the take, until it completes.
    Waiting(Pending),
    /// Come: the next `call` spends it.
    Come,
}

impl<S: Clone, L: Clone> Clone for Paced<S, L> {
    fn clone(&self) -> Self {
        Paced {
            inner: self.inner.clone(),
            limiter: self.limiter.clone(),
            slot: Slot::None,
        }
    }
}

impl<S: fmt::Debug, L: fmt::Debug> fmt::Debug for Paced<S, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Paced")
            .field("inner", &self.inner)
            .field("limiter", &self.limiter)
            .field("has_slot", &matches!(self.slot, Slot::Come))
            .finish()
    }
}

impl<S, L, R> Service<R> for Paced<S, L>
where
    S: Service<R>,
    S::Error: Into<BoxError>,
    L: AsyncTake + Clone + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Sent<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        loop {
            match &mut self.slot {
                Slot::None => {
                    let limiter = self.limiter.clone();
                    self.slot = Slot::Waiting(Box::pin(async move { limiter.take(&()).await }));
                }
                Slot::Waiting(take) => {
                    let taken = ready!(take.as_mut().poll(cx));
                    self.slot = Slot::None;
                    taken?;
                    self.slot = Slot::Come;
                }
                Slot::Come => return self.inner.poll_ready(cx).map_err(Into::into),
            }
        }
    }

    /// Sends `request`, spending the slot `poll_ready` waited for. Called
    /// without one (against tower's contract), it sends at once, unpaced,
    /// rather than panic.
    fn call(&mut self, request: R) -> Sent<S::Future> {
        self.slot = Slot::None;
        Sent {
            inner: self.inner.call(request),
        }
    }
}

pin_project_lite::pin_project! {
    /// A paced call in flight: the inner service's future, its error boxed.
    pub struct Sent<F> {
        #[pin]
        inner: F,
    }
}

impl<F, T, E> Future for Sent<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx).map_err(Into::into)
    }
}

impl<F> fmt::Debug for Sent<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sent").finish_non_exhaustive()
    }
}
