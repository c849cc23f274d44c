//! The layer's vocabulary, shared by the builder (`builder.rs`) and the
//! service (`layer.rs`): a request's key and where it comes from, what a
//! request without one gets, the modes, the fields, the bodies, the counts.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::net::IpAddr;
use std::time::Duration;

use http::header::HeaderName;
use http::request::Parts;
use http::StatusCode;

/// A request's key in the layer's keyed limiter: a client address (masked
/// to its group) or a text (a header's value, a function's answer).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ClientKey {
    /// A client address, masked to the layer's prefix (`2001:db8:1:2::`
    /// for a /64).
    Ip(IpAddr),
    /// A key of text: as the client sent it, up to [`MAX_KEY_BYTES`];
    /// a longer one as its digest (see [`ClientKey::text`]).
    Text(Box<str>),
    /// The one key of a global limit.
    Global,
}

/// One write per address (the derived hash writes the variants' tags and
/// the address in four): the layer hashes a key on every request.
impl Hash for ClientKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        match self {
            ClientKey::Ip(IpAddr::V4(v4)) => state.write_u64(u64::from(v4.to_bits())),
            ClientKey::Ip(IpAddr::V6(v6)) => state.write_u128(v6.to_bits()),
            ClientKey::Text(text) => text.hash(state),
            ClientKey::Global => state.write_u8(0),
        }
    }
}

impl fmt::Display for ClientKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientKey::Ip(ip) => ip.fmt(f),
            ClientKey::Text(text) => f.write_str(text),
            ClientKey::Global => f.write_str("global"),
        }
    }
}

/// The longest text key kept as it is. A client chooses its key's length
/// (a header may be hundreds of kilobytes), so a longer key is kept as its
/// digest (72 bytes): every tracked key then costs bounded memory, whatever
/// the client sends, and is still limited on its own.
pub const MAX_KEY_BYTES: usize = 64;

impl ClientKey {
    /// `text` as a key: as it is, up to [`MAX_KEY_BYTES`] bytes; longer (or
    /// starting with `~sha256:`), as `~sha256:` and the hex of its SHA-256
    /// (72 bytes), the form the remote limiters store such keys in. Two
    /// texts share a key only if they are equal (a text kept whole never
    /// starts with the mark). What the layer does with a header's
    /// value or a key function's answer, and what an override's name goes
    /// through ([`From<&str>`](#impl-From%3C%26str%3E-for-ClientKey)), so
    /// an override names a long key by its text.
    ///
    /// ```
    /// use paceline::http::ClientKey;
    ///
    /// assert_eq!(ClientKey::text("api-key-123").to_string(), "api-key-123");
    /// let jwt = "e".repeat(4096);
    /// let key = ClientKey::text(&jwt);
    /// assert_eq!(key.to_string().len(), 72);
    /// assert!(key.to_string().starts_with("~sha256:"));
    /// let lookalike = key.to_string();
    /// assert_ne!(ClientKey::text(&lookalike), key); // a digest is never a key's text
    /// assert_eq!(key, ClientKey::from(jwt.as_str()));
    /// assert_ne!(key, ClientKey::text(&"e".repeat(4097)));
    /// ```
    pub fn text(text: &str) -> ClientKey {
        use crate::remote::key::{digest, DIGEST_MARK};
        if text.len() <= MAX_KEY_BYTES && !text.starts_with(DIGEST_MARK) {
            return ClientKey::Text(text.into());
        }
        ClientKey::Text(digest(text).into())
    }
}

/// An address reads as [`ClientKey::Ip`], anything else as text
/// ([`ClientKey::text`]): so [`Limits`](crate::Limits) overrides name
/// clients as `"10.0.0.7"` or `"api-key-123"`.
impl From<&str> for ClientKey {
    fn from(s: &str) -> ClientKey {
        s.parse()
            .map(ClientKey::Ip)
            .unwrap_or_else(|_| ClientKey::text(s))
    }
}

/// What happens to a request whose key cannot be found (no peer address
/// in its extensions, an unreadable forwarding chain, a missing header, a
/// key function's `None`). Never a silent pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MissingKey {
    /// Answer with this status and a text body saying why (default: 400).
    Refuse(StatusCode),
    /// Take from this one shared key instead: every such request shares
    /// one bucket.
    Shared(String),
}

impl Default for MissingKey {
    fn default() -> Self {
        MissingKey::Refuse(StatusCode::BAD_REQUEST)
    }
}

/// Why the layer answered a request itself: in the extensions of every
/// response it writes (`response.extensions().get::<Answered>()`), so that
/// middleware outside it (metrics, logs) can tell its answers from the
/// inner service's, a 429 of its own from one passed through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Answered {
    /// Over the limit: 429 (or the status set), or `RESOURCE_EXHAUSTED`.
    Refused,
    /// The limit's server failed to decide, under a policy that fails
    /// closed: 503, or `UNAVAILABLE`.
    ServerFailed,
    /// No key for the request, under [`MissingKey::Refuse`].
    MissingKey,
}

/// What the layer does with a request over the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// Refuse it at once (the default).
    #[default]
    Refuse,
    /// Hold it until its slot if that is at most this far away, then
    /// forward it; refuse it otherwise (`take_timeout`). A held request
    /// books its slot only once it is within 10 ms, so a client that goes
    /// away while held gives its place back, whatever the order clients
    /// leave in (on an in-process limiter; a remote one books at once, and
    /// gives back only the newest booking).
    Wait(Duration),
    /// Forward it anyway, counting it in [`LayerStats::would_refuse`]: to
    /// try a limit on live traffic before enforcing it.
    DryRun,
}

/// When the `RateLimit-Policy` and `RateLimit` fields are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Fields {
    /// On refusals only (the default): nothing is written on the admitted
    /// path.
    #[default]
    OnRefusal,
    /// On every response. An admitted one's fields come from what its
    /// take found (the limit applied, what is left): no second look at the
    /// key, no second round trip to a remote limiter; the cost is writing
    /// two header values.
    Always,
    /// Never (`Retry-After` is still sent on a refusal).
    Off,
}

/// The body of a refusal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Body {
    /// `text/plain`: `Too Many Requests: retry in 2 s` (the default).
    #[default]
    Text,
    /// `application/json`: `{"error":"rate_limited","retry_after":2,"policy":"name"}`.
    Json,
    /// `application/problem+json` (RFC 9457) with the draft's problem type
    /// `https://iana.org/assignments/http-problem-types#quota-exceeded`
    /// and `violated-policies`.
    Problem,
    /// Whichever of the three the request's `Accept` prefers (its highest
    /// `q`; ties go to problem+json, then JSON); text when it sends none
    /// or accepts none of them. For an API whose clients ask for JSON
    /// while browsers and `curl` read text.
    Accept,
}

/// What the layer counted since it was built: what it did on its own.
/// (Admitted requests are the limiter's to count: a keyed limiter of your
/// own built with `.stats(true)`, handed in with
/// [`limiter`](super::LimitBuilder::limiter), counts them at no cost to others.)
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LayerStats {
    /// Requests refused (429, or 503 for a failure of the limiter's server).
    pub refused: u64,
    /// Requests over the limit that [`Mode::DryRun`] forwarded.
    pub would_refuse: u64,
    /// Requests without a key (counted whatever [`MissingKey`] did).
    pub missing_key: u64,
}

/// Picks a request's key from its head.
pub(super) type KeyFn = dyn Fn(&Parts) -> Option<String> + Send + Sync;

/// Picks a request's cost from its head.
pub(super) type CostFn = dyn Fn(&Parts) -> u64 + Send + Sync;

/// Where the key comes from.
pub(super) enum KeySource {
    /// The client address (see the `client_ip` module).
    Ip,
    Header(HeaderName),
    Global,
    Function(Box<KeyFn>),
    /// The request's path: a gRPC call's `/package.Service/Method`.
    Path,
}
