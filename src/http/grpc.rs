//! The inbound layer's gRPC face (feature `tonic`): a refusal as a gRPC
//! status rather than an HTTP one, and the peer a tonic server hands each
//! request. Everything else (keys, costs, limiters, modes) is the layer's
//! own: [`LimitBuilder::grpc`](super::LimitBuilder::grpc) only changes how
//! a refusal is written.
//!
//! A refused call is a trailers-only response: HTTP 200, `content-type:
//! application/grpc`, and in its headers `grpc-status: 8`
//! (`RESOURCE_EXHAUSTED`), `grpc-message`, `grpc-status-details-bin` (a
//! `google.rpc.Status` carrying a `google.rpc.RetryInfo` with the wait) and
//! `grpc-retry-pushback-ms` (what a client's gRPC retry policy obeys). An
//! HTTP 429 would reach a gRPC client as `UNAVAILABLE`, which retry
//! policies retry at once.

use std::net::IpAddr;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue};
use http::{Extensions, Response, StatusCode};
use tonic::transport::server::TcpConnectInfo;
use tonic::Code;
use tonic_types::{ErrorDetails, StatusExt};

use super::json::response;

/// The metadata a gRPC client's retry policy reads for how long to wait
/// (gRFC A6); a negative value means "do not retry".
const PUSHBACK: HeaderName = HeaderName::from_static("grpc-retry-pushback-ms");

/// A refused call: `code`, `message`, and the wait until it may go (`None`:
/// no wait admits it, and the pushback says not to retry).
pub(super) fn refusal(code: Code, message: &str, wait: Option<Duration>) -> Response<Bytes> {
    let details = wait.map_or_else(ErrorDetails::new, |_| ErrorDetails::with_retry_info(wait));
    let status = tonic::Status::with_error_details(code, message, details);
    let mut response = response(StatusCode::OK, "application/grpc", Bytes::new());
    let headers = response.headers_mut();
    if status.add_header(headers).is_err() {
        // Only a message that is not a header value fails, and the message
        // is percent-encoded first: the code alone, then.
        headers.insert("grpc-status", HeaderValue::from(code as i32));
    }
    // Rounded up: a client never retries before the slot.
    let pushback = wait.map_or(HeaderValue::from_static("-1"), |wait| {
        HeaderValue::from(u64::try_from(wait.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX))
    });
    headers.insert(PUSHBACK, pushback);
    response
}

/// A call the limit refused (`RESOURCE_EXHAUSTED`), or one its server
/// failed to decide (`server`: `UNAVAILABLE`): `why` it cannot go, or the
/// `wait` until it may, under the policy `name`.
pub(super) fn refused(
    server: bool,
    why: Option<&str>,
    wait: Option<Duration>,
    name: &str,
) -> Response<Bytes> {
    let code = if server {
        Code::Unavailable
    } else {
        Code::ResourceExhausted
    };
    let message = why.map_or_else(
        || {
            let ms = wait.map_or(0, |w| w.as_nanos().div_ceil(1_000_000));
            format!("rate limited by policy {name}: retry in {ms} ms")
        },
        str::to_owned,
    );
    refusal(code, &message, wait)
}

/// The gRPC code for what the HTTP layer would answer with `status` (a
/// request without a key; a limit's server that failed).
pub(super) fn code_for(status: StatusCode) -> Code {
    match status.as_u16() {
        400 => Code::InvalidArgument,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        429 => Code::ResourceExhausted,
        503 => Code::Unavailable,
        500..=599 => Code::Internal,
        _ => Code::Unknown,
    }
}

/// The peer tonic's server put in the request's extensions.
pub(super) fn peer(extensions: &Extensions) -> Option<IpAddr> {
    extensions
        .get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
        .map(|addr| addr.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a client reads back: the code, the RetryInfo's wait, the
    /// pushback, through tonic's own decoding.
    #[test]
    fn a_refusal_carries_the_wait_three_ways() {
        let response = refusal(
            Code::ResourceExhausted,
            "rate limited",
            Some(Duration::from_micros(1_500_100)),
        );
        assert_eq!(response.status(), StatusCode::OK);
        let status = tonic::Status::from_header_map(response.headers()).unwrap();
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert_eq!(status.message(), "rate limited");
        let retry = status.get_details_retry_info().unwrap();
        assert_eq!(retry.retry_delay, Some(Duration::from_micros(1_500_100)));
        assert_eq!(response.headers()[PUSHBACK], "1501");
    }

    #[test]
    fn no_wait_says_do_not_retry() {
        let response = refusal(Code::ResourceExhausted, "too costly", None);
        let status = tonic::Status::from_header_map(response.headers()).unwrap();
        assert!(status.get_details_retry_info().is_none());
        assert_eq!(response.headers()[PUSHBACK], "-1");
    }
}
