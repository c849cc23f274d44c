//! [`LimitBuilder`]: what a [`LimitLayer`] is configured with (keys,
//! proxies, the missing-key outcome, costs, modes, fields, bodies) and the
//! checks that build it; [`layer.rs`](super::layer) serves requests with it.

use std::fmt;
use std::net::IpAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use http::header::HeaderName;
use http::request::Parts;
use http::StatusCode;

use super::client_ip::{Cidr, CidrError, Forwarding};
use super::fields;
use super::layer::{CostFn, KeySource, LimitLayer, Limiter, Shared};
use crate::error::BuildError;
use crate::keyed::{KeyedLimiter, WhenFull};
use crate::rate::Rate;
use crate::slack::Slack;
use crate::take::AsyncTake;
use crate::tokio::{AsyncKeyedLimiter, AsyncLimiter};

/// A request's key in the layer's keyed limiter: a client address (masked
/// to its group) or a text (a header's value, a function's answer).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
}

/// What the layer counted since it was built: what it did on its own.
/// (Admitted requests are the limiter's to count: a keyed limiter of your
/// own built with `.stats(true)`, handed in with
/// [`limiter`](LimitBuilder::limiter), counts them at no cost to others.)
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

/// Why a layer could not be built: the bad value, named.
#[derive(Debug)]
#[non_exhaustive]
pub enum LayerError {
    /// A trusted proxy that is not an address block.
    Proxy(CidrError),
    /// A header name that is not one.
    Header(String),
    /// A policy name with a character a Structured Field String cannot hold
    /// (only printable ASCII).
    Name(String),
    /// A prefix longer than the address (IPv4 up to 32, IPv6 up to 128).
    Prefix(u8),
    /// The limit itself.
    Limit(BuildError),
}

impl fmt::Display for LayerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayerError::Proxy(e) => write!(f, "trusted proxy: {e}"),
            LayerError::Header(h) => write!(f, "not a header name: {h:?}"),
            LayerError::Name(n) => {
                write!(f, "policy name {n:?}: only printable ASCII can be sent")
            }
            LayerError::Prefix(p) => write!(f, "prefix /{p} is longer than the address"),
            LayerError::Limit(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for LayerError {}

impl From<BuildError> for LayerError {
    fn from(e: BuildError) -> Self {
        LayerError::Limit(e)
    }
}

/// Configures a [`LimitLayer`]; made by [`LimitLayer::per_ip`] and its
/// siblings.
#[must_use = "a builder does nothing until .build()"]
pub struct LimitBuilder {
    rate: Rate,
    slack: Slack,
    max_keys: Option<usize>,
    when_full: WhenFull,
    limiter: Option<Box<dyn Limiter>>,
    source: KeySource,
    trusted: Vec<String>,
    forwarding: Forwarding,
    v4_prefix: u8,
    v6_prefix: u8,
    missing: MissingKey,
    cost: Option<Box<CostFn>>,
    mode: Mode,
    fields: Fields,
    body: Body,
    status: StatusCode,
    name: String,
    header: Option<String>,
}

impl LimitLayer {
    /// Limits each client address to `rate`: IPv4 addresses one by one,
    /// IPv6 by /64. The address is the connection's peer (axum's
    /// `ConnectInfo<SocketAddr>`, or a `SocketAddr` extension a hyper
    /// accept loop inserts); behind proxies, set
    /// [`trust_proxies`](LimitBuilder::trust_proxies).
    pub fn per_ip(rate: Rate) -> LimitBuilder {
        LimitBuilder::new(rate, KeySource::Ip)
    }

    /// Limits each value of the header `name` (an API key, a tenant) to
    /// `rate`. A request without it gets the [`MissingKey`] outcome.
    pub fn per_header(name: &str, rate: Rate) -> LimitBuilder {
        let mut b = LimitBuilder::new(rate, KeySource::Global);
        b.header = Some(name.to_owned());
        b
    }

    /// Limits all requests together to `rate`.
    pub fn global(rate: Rate) -> LimitBuilder {
        LimitBuilder::new(rate, KeySource::Global)
    }

    /// Limits each key `key(head)` returns to `rate` (`None`: the
    /// [`MissingKey`] outcome). For keys of your own: a user id from a
    /// verified token, a route and a client together.
    pub fn per_key(
        key: impl Fn(&Parts) -> Option<String> + Send + Sync + 'static,
        rate: Rate,
    ) -> LimitBuilder {
        LimitBuilder::new(rate, KeySource::Function(Box::new(key)))
    }
}

impl LimitBuilder {
    fn new(rate: Rate, source: KeySource) -> LimitBuilder {
        LimitBuilder {
            rate,
            slack: Slack::DEFAULT,
            max_keys: None,
            when_full: WhenFull::default(),
            limiter: None,
            source,
            trusted: Vec::new(),
            forwarding: Forwarding::default(),
            v4_prefix: 32,
            v6_prefix: 64,
            missing: MissingKey::default(),
            cost: None,
            mode: Mode::default(),
            fields: Fields::default(),
            body: Body::default(),
            status: StatusCode::TOO_MANY_REQUESTS,
            name: "default".to_owned(),
            header: None,
        }
    }

    /// The slack of each key's bucket (default [`Slack::DEFAULT`]).
    pub fn slack(mut self, slack: impl Into<Slack>) -> Self {
        self.slack = slack.into();
        self
    }

    /// The most keys tracked at once (the keyed limiter's default unless
    /// set): memory stays bounded whatever clients send.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = Some(max_keys);
        self
    }

    /// What a new key does when `max_keys` are busy (default: evict).
    pub fn when_full(mut self, when_full: WhenFull) -> Self {
        self.when_full = when_full;
        self
    }

    /// Takes from `limiter` instead of one the builder makes: any limiter
    /// that answers [`AsyncTake`] for the layer's [`ClientKey`], which is
    /// every paceline kind and a limiter of your own. The builder's rate,
    /// slack and `max_keys` are then unused.
    ///
    /// - a keyed limiter of your own (`AsyncKeyedLimiter<ClientKey>`, with
    ///   overrides, counting, a clock), which
    ///   [`keyed_limiter`](LimitLayer::keyed_limiter) hands back for the
    ///   look inside;
    /// - an `AsyncLimiter`: one limit for every request whatever its key
    ///   (the key is still found: a missing one gets its outcome);
    /// - a remote limiter (`AsyncRedisLimiter`, `AsyncPostgresLimiter`):
    ///   one limit per key shared by every process using the same server,
    ///   keys as text (`"10.0.0.7"`, `"2001:db8:1:2::"`). One round trip a
    ///   request, whose answer also carries the `RateLimit` fields; a
    ///   failure the limiter's fail policy does not admit answers 503.
    pub fn limiter(mut self, limiter: impl AsyncTake<ClientKey> + 'static) -> Self {
        self.limiter = Some(Box::new(limiter));
        self
    }

    /// Reads the client from forwarding headers when the peer is one of
    /// `proxies` (address blocks: `"10.0.0.0/8"`, `"::1"`): the right-most
    /// entry that is not one of them (see [`Forwarding`]). Without it,
    /// forwarding headers are never read.
    pub fn trust_proxies<I, S>(mut self, proxies: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.trusted.extend(proxies.into_iter().map(Into::into));
        self
    }

    /// Which header trusted proxies name the client in (default
    /// `X-Forwarded-For`).
    pub fn forwarding(mut self, forwarding: Forwarding) -> Self {
        self.forwarding = forwarding;
        self
    }

    /// How many leading bits of an IPv6 client address make one client
    /// (default 64: one host or home network owns a /64).
    pub fn ipv6_prefix(mut self, bits: u8) -> Self {
        self.v6_prefix = bits;
        self
    }

    /// How many leading bits of an IPv4 client address make one client
    /// (default 32: each address).
    pub fn ipv4_prefix(mut self, bits: u8) -> Self {
        self.v4_prefix = bits;
        self
    }

    /// What a request without a key gets (default
    /// `MissingKey::Refuse(400)`).
    pub fn on_missing_key(mut self, outcome: MissingKey) -> Self {
        self.missing = outcome;
        self
    }

    /// The cost of a request, from its head (default 1): a costly route
    /// takes more (`|head| if head.uri.path() == "/export" { 10 } else { 1 }`).
    pub fn cost(mut self, cost: impl Fn(&Parts) -> u64 + Send + Sync + 'static) -> Self {
        self.cost = Some(Box::new(cost));
        self
    }

    /// What happens to a request over the limit (default: refuse).
    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    /// When the `RateLimit` fields are sent (default: on refusals).
    pub fn fields(mut self, fields: Fields) -> Self {
        self.fields = fields;
        self
    }

    /// The body of a refusal (default: text).
    pub fn body(mut self, body: Body) -> Self {
        self.body = body;
        self
    }

    /// The status of a refusal (default 429).
    pub fn status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    /// The policy's name in the fields and bodies (default `"default"`).
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// The layer.
    ///
    /// # Errors
    /// [`LayerError`], naming the bad proxy block, header name, policy
    /// name, prefix, or limit.
    pub fn build(self) -> Result<LimitLayer, LayerError> {
        let trusted = self
            .trusted
            .iter()
            .map(|s| s.parse())
            .collect::<Result<Vec<Cidr>, _>>()
            .map_err(LayerError::Proxy)?;
        if !fields::valid_name(&self.name) {
            return Err(LayerError::Name(self.name));
        }
        for (bits, max) in [(self.v4_prefix, 32), (self.v6_prefix, 128)] {
            if bits > max {
                return Err(LayerError::Prefix(bits));
            }
        }
        let source = match self.header {
            Some(name) => KeySource::Header(
                HeaderName::try_from(name.as_str()).map_err(|_| LayerError::Header(name))?,
            ),
            None => self.source,
        };
        let limiter: Box<dyn Limiter> = match self.limiter {
            Some(limiter) => limiter,
            None => match source {
                KeySource::Global => Box::new(
                    AsyncLimiter::builder(self.rate)
                        .slack(self.slack)
                        .full_credit(true)
                        .build()?,
                ),
                _ => {
                    let mut b = KeyedLimiter::<ClientKey>::builder(self.rate)
                        .slack(self.slack)
                        .when_full(self.when_full);
                    if let Some(max) = self.max_keys {
                        b = b.max_keys(max);
                    }
                    Box::new(AsyncKeyedLimiter::from(b.build()?))
                }
            },
        };
        Ok(LimitLayer {
            shared: Arc::new(Shared {
                limiter,
                source,
                trusted,
                forwarding: self.forwarding,
                v4_prefix: self.v4_prefix,
                v6_prefix: self.v6_prefix,
                missing: self.missing,
                cost: self.cost,
                mode: self.mode,
                fields: self.fields,
                body: self.body,
                status: self.status,
                name: self.name,
                refused: AtomicU64::new(0),
                would_refuse: AtomicU64::new(0),
                missing_key: AtomicU64::new(0),
            }),
        })
    }
}
