//! [`PaceLayer`]: the outbound layer. A client service (hyper-util's,
//! tonic's, any tower `Service`) whose calls leave at the limiter's pace.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tower_layer::Layer;
use tower_service::Service;

use crate::tokio::AsyncLimiter;

/// Paces the calls of the services it wraps through one [`AsyncLimiter`]
/// (clones of the layer and of its services share it).
///
/// `poll_ready` waits for a slot (booking it once it is within the async
/// wait's 10 ms horizon), then for the inner service's readiness; `call`
/// spends the slot. So a caller that drives readiness before calling, as
/// tower's callers do (`ServiceExt::ready`, `oneshot`, `Buffer`), sends
/// each request at its slot, and the inner service's readiness (a pool
/// connection, a buffer slot) is not held through the wait.
///
/// # Cancel safety
/// A service dropped while waiting for its slot gives the slot back, as a
/// dropped `take().await` does. A slot that came but was not used by a
/// `call` (the service dropped after readiness) is spent. A clone starts
/// without a slot.
#[derive(Clone)]
pub struct PaceLayer {
    limiter: AsyncLimiter,
}

impl PaceLayer {
    /// Paces through `limiter`.
    pub fn new(limiter: AsyncLimiter) -> PaceLayer {
        PaceLayer { limiter }
    }
}

impl<S> Layer<S> for PaceLayer {
    type Service = Paced<S>;

    fn layer(&self, inner: S) -> Paced<S> {
        Paced {
            inner,
            limiter: self.limiter.clone(),
            slot: Slot::None,
        }
    }
}

/// A service paced by a [`PaceLayer`].
pub struct Paced<S> {
    inner: S,
    limiter: AsyncLimiter,
    slot: Slot,
}

/// Where a service is with its next slot.
enum Slot {
    /// Not asked for yet.
    None,
    /// Asked for: the take, until it completes.
    Waiting(Pin<Box<dyn Future<Output = Duration> + Send>>),
    /// Come: the next `call` spends it.
    Come,
}

impl<S: Clone> Clone for Paced<S> {
    fn clone(&self) -> Self {
        Paced {
            inner: self.inner.clone(),
            limiter: self.limiter.clone(),
            slot: Slot::None,
        }
    }
}

impl<S: fmt::Debug> fmt::Debug for Paced<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Paced")
            .field("inner", &self.inner)
            .field("limiter", &self.limiter)
            .field("has_slot", &matches!(self.slot, Slot::Come))
            .finish()
    }
}

impl<S, R> Service<R> for Paced<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        loop {
            match &mut self.slot {
                Slot::None => {
                    let limiter = self.limiter.clone();
                    self.slot = Slot::Waiting(Box::pin(async move { limiter.take().await }));
                }
                Slot::Waiting(take) => {
                    ready!(take.as_mut().poll(cx));
                    self.slot = Slot::Come;
                }
                Slot::Come => return self.inner.poll_ready(cx),
            }
        }
    }

    /// Sends `request`, spending the slot `poll_ready` waited for. Called
    /// without one (against tower's contract), it sends at once, unpaced,
    /// rather than panic.
    fn call(&mut self, request: R) -> S::Future {
        self.slot = Slot::None;
        self.inner.call(request)
    }
}
