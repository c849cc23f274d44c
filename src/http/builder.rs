//! [`LimitBuilder`]: what a [`LimitLayer`] is configured with (keys,
//! proxies, the missing-key outcome, costs, modes, fields, bodies) and the
//! checks that build it; [`layer.rs`](super::layer) serves requests with it.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use http::header::HeaderName;
use http::request::Parts;
use http::StatusCode;

use super::client_ip::{Cidr, Forwarding};
use super::fields;
use super::layer::LimitLayer;
use super::shared::{Limiter, Settings, Shared};
use super::terms::{Body, ClientKey, Fields, KeySource, MissingKey, Mode};
use crate::keyed::{KeyedBuilder, KeyedLimiter, WhenFull};
use crate::limiter::take::AsyncTake;
use crate::tokio::{AsyncKeyedLimiter, AsyncLimiter};
use crate::values::error::BuildError;
use crate::values::rate::Rate;
use crate::values::slack::Slack;

/// Configures a [`LimitLayer`]; made by [`LimitLayer::per_ip`] and its
/// siblings.
#[must_use = "a builder does nothing until .build()"]
pub struct LimitBuilder {
    /// The keyed limiter the layer makes, unless given one or global.
    keyed: KeyedBuilder<ClientKey>,
    limiter: Option<Box<dyn Limiter>>,
    also: Vec<(String, Box<dyn Limiter>)>,
    settings: Settings,
    trusted: Vec<String>,
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

    /// Limits each path to `rate`: for a gRPC service, each method
    /// (`/package.Service/Method`), every client together.
    pub fn per_method(rate: Rate) -> LimitBuilder {
        LimitBuilder::new(rate, KeySource::Path)
    }

    /// Limits each value of the gRPC metadata key `key` (an API key, a
    /// tenant: `"x-api-key"`) to `rate`. Metadata travels as HTTP/2
    /// headers, so this is [`per_header`](Self::per_header) under its
    /// gRPC name; a call without it gets the [`MissingKey`] outcome.
    pub fn per_metadata(key: &str, rate: Rate) -> LimitBuilder {
        LimitLayer::per_header(key, rate)
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
            keyed: KeyedLimiter::builder(rate),
            limiter: None,
            also: Vec::new(),
            settings: Settings {
                source,
                forwarding: Forwarding::default(),
                v4_prefix: 32,
                v6_prefix: 64,
                missing: MissingKey::default(),
                cost: None,
                fields: Fields::default(),
                body: Body::default(),
                status: StatusCode::TOO_MANY_REQUESTS,
                name: "default".to_owned(),
                mode: Mode::default(),
                costs: Vec::new(),
                grpc: false,
                unit: None,
                partition: None,
            },
            trusted: Vec::new(),
            header: None,
        }
    }

    crate::values::setters! {
        /// The slack of each key's bucket (default [`Slack::DEFAULT`]).
        slack(slack: impl Into<Slack>) => keyed.slack;
        /// What a new key does when `max_keys` are busy (default: evict).
        when_full(when_full: WhenFull) => keyed.when_full;
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
        limiter(limiter: impl AsyncTake<ClientKey> + 'static) =>
            limiter = Some(Box::new(limiter));
        /// The cost of a request, from its head (default 1): a costly route
        /// takes more (`|head| if head.uri.path() == "/export" { 10 } else { 1 }`).
        cost(cost: impl Fn(&Parts) -> u64 + Send + Sync + 'static) =>
            settings.cost = Some(Box::new(cost));
        /// The policy's name in the fields and bodies (default `"default"`).
        name(name: impl Into<String>) => settings.name;
        /// Which header trusted proxies name the client in (default
        /// `X-Forwarded-For`).
        forwarding(forwarding: Forwarding) => settings.forwarding;
        /// How many leading bits of an IPv6 client address make one client
        /// (default 64: one host or home network owns a /64).
        ipv6_prefix(bits: u8) => settings.v6_prefix;
        /// How many leading bits of an IPv4 client address make one client
        /// (default 32: each address).
        ipv4_prefix(bits: u8) => settings.v4_prefix;
        /// What a request without a key gets (default
        /// `MissingKey::Refuse(400)`).
        on_missing_key(outcome: MissingKey) => settings.missing;
        /// What happens to a request over the limit (default: refuse).
        mode(mode: Mode) => settings.mode;
        /// When the `RateLimit` fields are sent (default: on refusals).
        fields(fields: Fields) => settings.fields;
        /// The body of a refusal (default: text).
        body(body: Body) => settings.body;
        /// The status of a refusal (default 429).
        status(status: StatusCode) => settings.status;
    }

    /// The most keys tracked at once (the keyed limiter's default unless
    /// set): memory stays bounded whatever clients send.
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.keyed = self.keyed.max_keys(max_keys);
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

    /// The cost of each request to `path` (a gRPC method,
    /// `"/package.Service/Method"`): `cost` permits, ahead of
    /// [`cost`](Self::cost)'s function, which then prices the other paths
    /// (default 1). Called once per path; a later call for the same path
    /// wins.
    pub fn path_cost(mut self, path: impl Into<String>, cost: u64) -> Self {
        let path: Box<str> = path.into().into();
        self.settings.costs.retain(|(p, _)| *p != path);
        self.settings.costs.push((path, cost));
        self
    }

    /// Another limit every request must pass as well, all or nothing,
    /// announced as its own policy `name` (printable ASCII): a request
    /// goes only if the layer's limiter and each of these admit it, asked
    /// in that order, and one that a later limit refuses is given back to
    /// the earlier ones (a settle at 0, as
    /// [`All`](crate::all::All) gives back). "10/s and 10,000 a day" per
    /// client is a keyed limiter of `10/s` and another of
    /// [`Limit::per_window`](crate::Limit::per_window), the second here.
    /// The fields list every limit's policy, and on an admitted request
    /// each one's `RateLimit` item; a refusal's `RateLimit` is the
    /// refusing limit's, its `Retry-After` that limit's wait (to the next
    /// window's start, for a quota). Such a request is decided as a task
    /// would be, never in place: a little slower than one limit's.
    pub fn and_limiter(
        mut self,
        name: impl Into<String>,
        limiter: impl AsyncTake<ClientKey> + 'static,
    ) -> Self {
        self.also.push((name.into(), Box::new(limiter)));
        self
    }

    /// Announces the quota's unit as the policy's `qu` parameter (the
    /// draft's `"content-bytes"`, `"concurrent-requests"`, or a unit of your
    /// own, `"tokens"`), for a limit whose [`cost`](Self::cost) counts
    /// something other than requests. Printable ASCII.
    pub fn quota_unit(mut self, unit: impl Into<String>) -> Self {
        self.settings.unit = Some(unit.into());
        self
    }

    /// Announces each client's partition key (`pk` on both fields): the
    /// first 12 bytes of a SHA-256 of `secret` and the key, as an SF Byte
    /// Sequence, so a client can tell its quota from a neighbour's behind
    /// one address without the key (an address, an API key) ever going out
    /// in clear. The same secret on every replica gives a client the same
    /// `pk` from each; keep it secret, or a key's digest can be matched
    /// against guesses (an IPv4 address has only 2^32).
    pub fn partition_key(mut self, secret: impl AsRef<[u8]>) -> Self {
        self.settings.partition = Some(secret.as_ref().into());
        self
    }

    /// Answers refusals as gRPC statuses (feature `tonic`), for a tonic
    /// server: a call over the limit gets `RESOURCE_EXHAUSTED` with a
    /// `google.rpc.RetryInfo` of the wait in its details and the
    /// `grpc-retry-pushback-ms` trailer (rounded up; `-1`, "do not retry",
    /// for a cost no wait admits); a call without a key, the code of its
    /// [`MissingKey`] status (400: `INVALID_ARGUMENT`, 401:
    /// `UNAUTHENTICATED`, 403: `PERMISSION_DENIED`); a limit whose server
    /// failed, `UNAVAILABLE` with a second's pushback. The `RateLimit`
    /// fields go along as metadata; [`status`](Self::status) and
    /// [`body`](Self::body) are unused. The peer is read from tonic's
    /// `TcpConnectInfo`. The guide's [gRPC](crate::guide::grpc) chapter.
    #[cfg(feature = "tonic")]
    pub fn grpc(mut self) -> Self {
        self.settings.grpc = true;
        self
    }

    /// The layer.
    ///
    /// # Errors
    /// A [`BuildError`] naming the bad value: a trusted proxy's address
    /// block ([`AddressBlock`](BuildError::AddressBlock)), the key's header
    /// name, the policy name, a prefix, or the limit.
    pub fn build(mut self) -> Result<LimitLayer, BuildError> {
        let trusted = self
            .trusted
            .iter()
            .map(|s| s.parse())
            .collect::<Result<Vec<Cidr>, _>>()?;
        if !fields::valid_name(&self.settings.name) {
            return Err(BuildError::PolicyName {
                name: self.settings.name,
            });
        }
        if let Some((name, _)) = self.also.iter().find(|(n, _)| !fields::valid_name(n)) {
            return Err(BuildError::PolicyName { name: name.clone() });
        }
        if let Some(unit) = self.settings.unit.take() {
            if !fields::valid_name(&unit) {
                return Err(BuildError::PolicyName { name: unit });
            }
            self.settings.unit = Some(unit);
        }
        let settings = &mut self.settings;
        for (bits, max) in [(settings.v4_prefix, 32), (settings.v6_prefix, 128)] {
            if bits > max {
                return Err(BuildError::PrefixTooLong { prefix: bits });
            }
        }
        if let Some(name) = self.header {
            settings.source = KeySource::Header(
                HeaderName::try_from(name.as_str()).map_err(|_| BuildError::HeaderName { name })?,
            );
        }
        // The keyed limiter made here, which the layer hands out again.
        let mut made = None;
        let limiter: Box<dyn Limiter> = match self.limiter {
            Some(limiter) => limiter,
            None => match settings.source {
                KeySource::Global => Box::new(
                    AsyncLimiter::builder(self.keyed.rate)
                        .slack(self.keyed.slack)
                        .full_credit(true)
                        .build()?,
                ),
                _ => {
                    let keyed = AsyncKeyedLimiter::from(self.keyed.build()?);
                    made = Some(keyed.clone());
                    Box::new(keyed)
                }
            },
        };
        Ok(LimitLayer {
            shared: Arc::new(Shared {
                limiter,
                also: self.also,
                made,
                settings: self.settings,
                trusted,
                refused: AtomicU64::new(0),
                would_refuse: AtomicU64::new(0),
                missing_key: AtomicU64::new(0),
            }),
        })
    }
}
