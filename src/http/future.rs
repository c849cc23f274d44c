//! [`ResponseFuture`]: what a limited service returns, the inner service's
//! future as it is, the layer's own answer, or a boxed future for the
//! paths that wait or add fields to every response.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::Response;
use http_body::{Body, Frame, SizeHint};

pin_project_lite::pin_project! {
    /// The response body of a limited service: the inner service's, or the
    /// layer's own (a refusal's text or JSON).
    ///
    /// As small as the inner body when that is a pointer pair (axum's
    /// `Body`): the refusal's bytes are boxed, so an admitted response
    /// moves through the futures above it as cheaply as one the layer did
    /// not touch.
    pub struct LimitBody<B> {
        #[pin]
        kind: Kind<B>,
    }
}

pin_project_lite::pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Refusal { data: Option<Box<Bytes>> },
    }
}

impl<B> LimitBody<B> {
    /// The inner service's body.
    fn inner(body: B) -> Self {
        LimitBody {
            kind: Kind::Inner { body },
        }
    }

    /// The layer's own answer, `bytes`, sent in one frame.
    fn refusal(bytes: Bytes) -> Self {
        LimitBody {
            kind: Kind::Refusal {
                data: (!bytes.is_empty()).then(|| Box::new(bytes)),
            },
        }
    }

    /// Whether this is the layer's own answer rather than the inner
    /// service's body.
    pub fn is_refusal(&self) -> bool {
        matches!(self.kind, Kind::Refusal { .. })
    }
}

impl<B: Body<Data = Bytes>> Body for LimitBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.project().kind.project() {
            KindProj::Inner { body } => body.poll_frame(cx),
            KindProj::Refusal { data } => Poll::Ready(data.take().map(|d| Ok(Frame::data(*d)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Refusal { data } => data.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Refusal { data } => {
                SizeHint::with_exact(data.as_ref().map_or(0, |d| d.len() as u64))
            }
        }
    }
}

impl<B> fmt::Debug for LimitBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitBody")
            .field("refusal", &self.is_refusal())
            .finish_non_exhaustive()
    }
}

/// An inner response as the layer's: its body wrapped, and the fields
/// added when asked for.
pub(super) fn forwarded<B>(response: Response<B>, fields: AddedFields) -> Response<LimitBody<B>> {
    let mut response = response.map(LimitBody::inner);
    for (name, value) in fields.into_iter().flat_map(|f| *f) {
        response.headers_mut().insert(name, value);
    }
    response
}

/// The layer's own answer as a limited service's response.
#[inline]
pub(super) fn answered<B>(response: Response<Bytes>) -> Response<LimitBody<B>> {
    response.map(LimitBody::refusal)
}

/// A boxed response future, for the paths that wait (a bounded wait, a
/// remote limiter).
pub(super) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The fields an admitted response gets, when asked for on every one
/// (boxed: what carries them stays two words).
pub(super) type AddedFields = Option<Box<[(HeaderName, HeaderValue); 2]>>;

pin_project_lite::pin_project! {
    /// The response future of [`Limit`](super::Limit).
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        state: State<F, B, E>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<F, B, E> {
        Inner { #[pin] future: F },
        Answer { response: Option<Box<Response<Bytes>>> },
        Boxed { future: BoxFuture<'static, Result<Response<LimitBody<B>>, E>> },
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    /// The inner service's future: an admitted request's response, its
    /// body wrapped as it comes back and nothing else done to it (the
    /// common path: no fields, no box).
    #[inline]
    pub(super) fn inner(future: F) -> Self {
        ResponseFuture {
            state: State::Inner { future },
        }
    }

    /// The inner service's future, its response to get `fields`: boxed
    /// with them (the fields are boxed already), out of line, so that the
    /// common path's future is the inner one and a tag.
    #[cold]
    #[inline(never)]
    pub(super) fn with_fields(future: F, fields: Box<[(HeaderName, HeaderValue); 2]>) -> Self
    where
        F: Future<Output = Result<Response<B>, E>> + Send + 'static,
        B: Send + 'static,
        E: 'static,
    {
        ResponseFuture::boxed(Box::pin(async move {
            Ok(forwarded(future.await?, Some(fields)))
        }))
    }

    /// The layer's own answer: a refusal, or the answer to a request
    /// without a key.
    pub(super) fn answer(response: Box<Response<Bytes>>) -> Self {
        ResponseFuture {
            state: State::Answer {
                response: Some(response),
            },
        }
    }

    /// A decision that waits (a bounded wait, a remote limiter's round
    /// trip), and then the inner service's future.
    pub(super) fn boxed(future: BoxFuture<'static, Result<Response<LimitBody<B>>, E>>) -> Self {
        ResponseFuture {
            state: State::Boxed { future },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<LimitBody<B>>, E>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Inner { future } => future.poll(cx).map_ok(|r| r.map(LimitBody::inner)),
            StateProj::Answer { response } => Poll::Ready(Ok(answered(
                *response
                    .take()
                    .expect("a ResponseFuture polled after it completed"),
            ))),
            StateProj::Boxed { future } => future.as_mut().poll(cx),
        }
    }
}
