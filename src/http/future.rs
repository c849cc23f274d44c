//! [`ResponseFuture`]: what a limited service returns, the inner service's
//! future as it is, the layer's own answer, or a boxed future for the
//! paths that wait or add fields to every response; and [`AnswerBody`],
//! the response bodies the layer can write its own answers in.

use std::convert::Infallible;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::Response;
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::{BoxBody, UnsyncBoxBody};
use http_body_util::{BodyExt, Full};

/// A response body the layer can write its own answers in (a refusal's text
/// or JSON, the answer to a request without a key): the inner service's
/// response body type, so that an admitted response passes through the
/// layer untouched and a limited service answers with the inner one's
/// response type.
///
/// Implemented for axum's `Body` (feature `axum`), tonic's `Body` (feature
/// `tonic`), `Full<Bytes>`, `BoxBody`, `UnsyncBoxBody`, `String`, `Vec<u8>`
/// and `Bytes`; for any other
/// body, map the inner service's responses into [`LimitBody`] (as
/// `LimitBody::from`), which holds either.
pub trait AnswerBody: Sized {
    /// A body sending `bytes` in one frame.
    fn answer(bytes: Bytes) -> Self;
}

impl AnswerBody for Full<Bytes> {
    fn answer(bytes: Bytes) -> Self {
        Full::new(bytes)
    }
}

impl AnswerBody for Bytes {
    fn answer(bytes: Bytes) -> Self {
        bytes
    }
}

impl AnswerBody for Vec<u8> {
    fn answer(bytes: Bytes) -> Self {
        bytes.into()
    }
}

impl AnswerBody for String {
    /// The layer's answers are text or JSON: UTF-8 whole.
    fn answer(bytes: Bytes) -> Self {
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl<E> AnswerBody for BoxBody<Bytes, E> {
    fn answer(bytes: Bytes) -> Self {
        Full::new(bytes)
            .map_err(|never: Infallible| match never {})
            .boxed()
    }
}

impl<E> AnswerBody for UnsyncBoxBody<Bytes, E> {
    fn answer(bytes: Bytes) -> Self {
        Full::new(bytes)
            .map_err(|never: Infallible| match never {})
            .boxed_unsync()
    }
}

#[cfg(feature = "axum")]
impl AnswerBody for axum::body::Body {
    fn answer(bytes: Bytes) -> Self {
        axum::body::Body::from(bytes)
    }
}

#[cfg(feature = "tonic")]
impl AnswerBody for tonic::body::Body {
    fn answer(bytes: Bytes) -> Self {
        tonic::body::Body::new(Full::new(bytes))
    }
}

impl<B> AnswerBody for LimitBody<B> {
    fn answer(bytes: Bytes) -> Self {
        LimitBody::refusal(bytes)
    }
}

pin_project_lite::pin_project! {
    /// A response body that is either another body or the layer's own
    /// answer (a refusal's text or JSON): for an inner service whose body is
    /// not an [`AnswerBody`] already. Map its responses' bodies into this
    /// one (`LimitBody::from`, e.g. with tower-http's `MapResponseBodyLayer`)
    /// and put the limit over that.
    ///
    /// As small as the inner body when that is a pointer pair: the
    /// answer's bytes are boxed.
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

impl<B> From<B> for LimitBody<B> {
    /// `body`, as it is.
    fn from(body: B) -> Self {
        LimitBody {
            kind: Kind::Inner { body },
        }
    }
}

impl<B> LimitBody<B> {
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

/// An inner response with the fields added, when asked for.
pub(super) fn forwarded<B>(mut response: Response<B>, fields: AddedFields) -> Response<B> {
    for (name, value) in fields.into_iter().flat_map(|f| *f) {
        response.headers_mut().insert(name, value);
    }
    response
}

/// The layer's own answer as a limited service's response.
#[inline]
pub(super) fn answered<B: AnswerBody>(response: Response<Bytes>) -> Response<B> {
    response.map(B::answer)
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
        Boxed { future: BoxFuture<'static, Result<Response<B>, E>> },
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    /// The inner service's future: an admitted request's response, as it
    /// comes back (the common path: no fields, no box).
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
    pub(super) fn boxed(future: BoxFuture<'static, Result<Response<B>, E>>) -> Self {
        ResponseFuture {
            state: State::Boxed { future },
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
    B: AnswerBody,
{
    type Output = Result<Response<B>, E>;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Inner { future } => future.poll(cx),
            StateProj::Answer { response } => Poll::Ready(Ok(answered(
                *response
                    .take()
                    .expect("a ResponseFuture polled after it completed"),
            ))),
            StateProj::Boxed { future } => future.as_mut().poll(cx),
        }
    }
}
