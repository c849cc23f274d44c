//! [`ResponseFuture`]: what a limited service returns, the inner service's
//! future as it is, the layer's own answer, or a boxed future for the
//! paths that wait or add fields to every response; and [`AnswerBody`],
//! the response bodies the layer can write its own answers in.

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
/// response body type, so that a limited service answers with the inner
/// one's response type and an admitted response's body passes through the
/// layer untouched.
///
/// Implemented for axum's `Body` (feature `axum`), tonic's `Body` (feature
/// `tonic`), `Full<Bytes>`, `BoxBody`, `UnsyncBoxBody` and `String`, and, for
/// services called in process rather than served by hyper (tests, mostly),
/// `Vec<u8>` and `Bytes`. A body type of your own may implement it. A body
/// that cannot be built from bytes (hyper's `Incoming` in a proxy,
/// tower-http's `ResponseBody`, `CompressionBody` or `TimeoutBody` when
/// those layers sit between this one and the service) goes through
/// [`LimitBody`]: map the responses into it below the limit, or put the
/// limit inside those layers (the guide's [HTTP](crate::guide::http)
/// chapter shows both).
///
/// The contract: `answer(bytes)` is a body that sends `bytes` and ends; for
/// empty `bytes`, one that has ended already (`is_end_stream()` is true,
/// no empty data frame), which a gRPC refusal (headers only) relies on.
#[diagnostic::on_unimplemented(
    message = "the limit layer cannot write its answers in a `{Self}` body",
    note = "an axum app: turn on paceline's `axum` feature (`features = [\"axum\"]`), which answers in `axum::body::Body`; a tonic server: the `tonic` feature",
    note = "any other body: map the inner responses into `paceline::http::LimitBody` (`response.map(LimitBody::new)`) below the limit, or put the limit inside the layers that wrap the body"
)]
pub trait AnswerBody: Sized {
    /// A body sending `bytes` in one frame and ending; for empty `bytes`,
    /// one that has ended.
    fn answer(bytes: Bytes) -> Self;
}

/// [`AnswerBody`] for each body type, `impl for Type => make;`, `make`
/// building the body from the bytes.
macro_rules! answer_bodies {
    ($($(#[$attr:meta])* impl $(<$generic:ident>)? for $body:ty => $make:expr;)*) => {$(
        $(#[$attr])*
        impl$(<$generic>)? AnswerBody for $body {
            fn answer(bytes: Bytes) -> Self {
                $make(bytes)
            }
        }
    )*};
}

answer_bodies! {
    impl for Full<Bytes> => Full::new;
    impl for Bytes => std::convert::identity;
    impl for Vec<u8> => Vec::from;
    /// The layer's answers are text or JSON, UTF-8 whole, so nothing is
    /// ever replaced.
    impl for String => |bytes: Bytes| String::from_utf8(Vec::from(bytes))
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
    impl<E> for BoxBody<Bytes, E> =>
        |bytes| BoxBody::new(Full::new(bytes).map_err(|never| match never {}));
    impl<E> for UnsyncBoxBody<Bytes, E> =>
        |bytes| UnsyncBoxBody::new(Full::new(bytes).map_err(|never| match never {}));
    #[cfg(feature = "axum")]
    impl for axum::body::Body => axum::body::Body::from;
    #[cfg(feature = "tonic")]
    impl for tonic::body::Body => |bytes| tonic::body::Body::new(Full::new(bytes));
}

impl<B> AnswerBody for LimitBody<B> {
    /// The layer's own answer, `bytes`, sent in one frame.
    fn answer(bytes: Bytes) -> Self {
        LimitBody {
            kind: Kind::Refusal {
                data: (!bytes.is_empty()).then(|| Box::new(bytes)),
            },
        }
    }
}

pin_project_lite::pin_project! {
    /// A response body that is either another body or the layer's own
    /// answer (a refusal's text or JSON): for an inner service whose body is
    /// not an [`AnswerBody`] already. Map its responses into this one
    /// (`response.map(LimitBody::new)`, e.g. with tower's `map_response`)
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

impl<B> LimitBody<B> {
    /// `body`, as it is.
    pub fn new(body: B) -> Self {
        LimitBody {
            kind: Kind::Inner { body },
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

/// A boxed response future, for the paths that wait (a bounded wait, a
/// remote limiter).
pub(super) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The fields an admitted response gets, when asked for on every one
/// (boxed: what carries them stays two words).
pub(super) type AddedFields = Option<Box<[(HeaderName, HeaderValue); 2]>>;

pin_project_lite::pin_project! {
    /// The response future of [`Limited`](super::Limited).
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
            StateProj::Answer { response } => Poll::Ready(Ok(response
                .take()
                .expect("a ResponseFuture polled after it completed")
                .map(B::answer))),
            StateProj::Boxed { future } => future.as_mut().poll(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::task::Waker;

    use super::*;

    /// `body`'s bytes, polled with no runtime (every body here is ready),
    /// and whether it had ended before the first poll.
    fn sent<B: Body<Data = Bytes> + Unpin>(mut body: B) -> (Vec<u8>, bool)
    where
        B::Error: fmt::Debug,
    {
        let ended = body.is_end_stream();
        let mut cx = Context::from_waker(Waker::noop());
        let mut bytes = Vec::new();
        loop {
            match Pin::new(&mut body).poll_frame(&mut cx) {
                Poll::Ready(Some(frame)) => {
                    if let Ok(data) = frame.unwrap().into_data() {
                        assert!(!data.is_empty(), "an empty data frame");
                        bytes.extend_from_slice(&data);
                    }
                }
                Poll::Ready(None) => return (bytes, ended),
                Poll::Pending => panic!("a body of bytes in hand was not ready"),
            }
        }
    }

    /// Each body sends the answer's bytes whole and ends; an empty answer
    /// has ended before it is polled (a gRPC refusal is headers only).
    fn holds_the_contract<B: AnswerBody + Body<Data = Bytes> + Unpin>(name: &str)
    where
        B::Error: fmt::Debug,
    {
        let text = "Too Many Requests: retry in 2 s";
        let (bytes, _) = sent(B::answer(Bytes::from_static(text.as_bytes())));
        assert_eq!(bytes, text.as_bytes(), "{name}");
        assert_eq!(sent(B::answer(Bytes::new())), (Vec::new(), true), "{name}");
    }

    #[test]
    fn every_answer_body_sends_the_answer_and_an_empty_one_has_ended() {
        holds_the_contract::<Full<Bytes>>("Full");
        holds_the_contract::<BoxBody<Bytes, Infallible>>("BoxBody");
        holds_the_contract::<UnsyncBoxBody<Bytes, std::io::Error>>("UnsyncBoxBody");
        holds_the_contract::<String>("String");
        holds_the_contract::<LimitBody<Full<Bytes>>>("LimitBody");
        #[cfg(feature = "axum")]
        holds_the_contract::<axum::body::Body>("axum");
        #[cfg(feature = "tonic")]
        holds_the_contract::<tonic::body::Body>("tonic");
        let bytes = Bytes::from_static(b"{\"a\":1}");
        assert_eq!(Vec::<u8>::answer(bytes.clone()), bytes.to_vec());
        assert_eq!(Bytes::answer(bytes.clone()), bytes);
    }

    #[test]
    fn a_limit_body_passes_the_inner_body_through() {
        let body = LimitBody::new(Full::new(Bytes::from_static(b"inner")));
        assert!(!body.is_refusal());
        assert_eq!(sent(body).0, b"inner");
        assert!(LimitBody::<Full<Bytes>>::answer(Bytes::from_static(b"x")).is_refusal());
    }
}
