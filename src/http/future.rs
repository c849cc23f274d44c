//! [`ResponseFuture`]: what a limited service returns, the inner service's
//! future (with the fields an admitted response gets), the layer's own
//! answer, or a boxed future for the paths that wait.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::Response;
use http_body_util::{Either, Full};

/// The response body of a limited service: the inner service's, or the
/// layer's own (a refusal).
pub type LimitBody<B> = Either<B, Full<Bytes>>;

/// A boxed response future, for the paths that wait (a bounded wait, a
/// remote limiter).
pub(super) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The fields an admitted response gets, when asked for on every one
/// (boxed: the futures that carry them stay small to move).
pub(super) type AddedFields = Option<Box<[(HeaderName, HeaderValue); 2]>>;

pub(super) fn with_fields<B>(mut response: Response<B>, fields: AddedFields) -> Response<B> {
    if let Some(fields) = fields {
        for (name, value) in *fields {
            response.headers_mut().insert(name, value);
        }
    }
    response
}

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
        Inner { #[pin] future: F, fields: AddedFields },
        Answer { response: Option<Box<Response<Full<Bytes>>>> },
        Boxed { future: BoxFuture<'static, Result<Response<LimitBody<B>>, E>> },
    }
}

impl<F, B, E> ResponseFuture<F, B, E> {
    pub(super) fn inner(future: F, fields: AddedFields) -> Self {
        ResponseFuture {
            state: State::Inner { future, fields },
        }
    }

    pub(super) fn answer(response: Box<Response<Full<Bytes>>>) -> Self {
        ResponseFuture {
            state: State::Answer {
                response: Some(response),
            },
        }
    }

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

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProj::Inner { future, fields } => {
                let response = std::task::ready!(future.poll(cx))?;
                Poll::Ready(Ok(with_fields(response.map(Either::Left), fields.take())))
            }
            StateProj::Answer { response } => Poll::Ready(Ok((*response
                .take()
                .expect("a ResponseFuture polled after it completed"))
            .map(Either::Right))),
            StateProj::Boxed { future } => future.as_mut().poll(cx),
        }
    }
}
