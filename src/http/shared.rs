//! The layer's state, shared by every clone of [`LimitLayer`] and every
//! service it makes: the limiter behind one interface, the configuration
//! `builder.rs` checked, the counts; and what the layer writes itself:
//! a refusal (status, `Retry-After`, the `RateLimit` fields, a body by the
//! request's `Accept`), the answer to a request without a key, and the
//! fields of an admitted response. How a request is decided is
//! `layer.rs`'.
//!
//! [`LimitLayer`]: super::LimitLayer

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use bytes::Bytes;
use http::header::RETRY_AFTER;
use http::{HeaderMap, Response, StatusCode};

use super::accept;
use super::client_ip::{Cidr, Forwarding};
use super::fields;
use super::future::{AddedFields, BoxFuture};
use super::json::{response, Json};
use super::terms::{Answered, Body, ClientKey, CostFn, Fields, KeySource, MissingKey, Mode};
use crate::all::book_in_turn;
use crate::limiter::take::{AsyncTake, Booked, Error, Taken, Within};
use crate::tokio::AsyncKeyedLimiter;
use crate::values::limit::Limit;

/// The limiter requests take from, whatever its kind: the take interface
/// with its futures boxed, so that the layer holds any limiter behind one
/// pointer. Implemented for every [`AsyncTake<ClientKey>`].
pub(super) trait Limiter: Send + Sync + 'static {
    /// A try decided without awaiting, when the limiter decides in process.
    fn try_now(&self, key: &ClientKey, cost: u64) -> Option<Result<Taken, Error>>;
    /// [`try_now`](Self::try_now) for the answer alone, when nothing
    /// reports what the take found: the same call, inlined here so that
    /// the state is never built, and a small answer returned through the
    /// pointer.
    fn try_now_bare(&self, key: &ClientKey, cost: u64) -> Option<Result<(), Error>>;
    /// Takes `cost` from `key`'s limit as `mode` says: waiting up to its
    /// bound, or a try.
    fn take<'a>(
        &'a self,
        key: &'a ClientKey,
        cost: u64,
        mode: Mode,
    ) -> BoxFuture<'a, Result<Taken, Error>>;
    /// The limit `key` is held to.
    fn limit_for(&self, key: &ClientKey) -> Option<Limit>;
    /// Books `cost` on `key`, waiting as `within` allows, for a request
    /// that several limits decide all or nothing.
    fn book<'a>(
        &'a self,
        key: &'a ClientKey,
        cost: u64,
        within: Within,
    ) -> BoxFuture<'a, Result<Booked, Error>>;
    /// Settles a booking: at 0, the give-back of a request another limit
    /// refused.
    fn settle<'a>(
        &'a self,
        key: &'a ClientKey,
        booked: Booked,
        actual: u64,
    ) -> BoxFuture<'a, Result<(), Error>>;
}

impl<L: AsyncTake<ClientKey> + 'static> Limiter for L {
    fn try_now(&self, key: &ClientKey, cost: u64) -> Option<Result<Taken, Error>> {
        self.try_take_n_now(key, cost)
    }

    fn try_now_bare(&self, key: &ClientKey, cost: u64) -> Option<Result<(), Error>> {
        self.try_take_n_now(key, cost).map(|taken| taken.map(drop))
    }

    fn take<'a>(
        &'a self,
        key: &'a ClientKey,
        cost: u64,
        mode: Mode,
    ) -> BoxFuture<'a, Result<Taken, Error>> {
        match mode {
            Mode::Wait(max) => Box::pin(self.take_n_timeout(key, cost, max)),
            _ => Box::pin(self.try_take_n(key, cost)),
        }
    }

    fn limit_for(&self, key: &ClientKey) -> Option<Limit> {
        AsyncTake::limit_for(self, key)
    }

    fn book<'a>(
        &'a self,
        key: &'a ClientKey,
        cost: u64,
        within: Within,
    ) -> BoxFuture<'a, Result<Booked, Error>> {
        Box::pin(AsyncTake::book(self, key, cost, within))
    }

    fn settle<'a>(
        &'a self,
        key: &'a ClientKey,
        booked: Booked,
        actual: u64,
    ) -> BoxFuture<'a, Result<(), Error>> {
        Box::pin(AsyncTake::settle(self, key, booked, actual))
    }
}

/// What every clone of a layer, and every service it makes, shares.
pub(super) struct Shared {
    pub(super) limiter: Box<dyn Limiter>,
    /// The limits a request must pass beside `limiter`, all or nothing,
    /// each announced under its own name
    /// ([`and_limiter`](super::LimitBuilder::and_limiter)).
    pub(super) also: Vec<(String, Box<dyn Limiter>)>,
    /// The keyed limiter the builder made as `limiter`, if it made one
    /// ([`LimitLayer::keyed_limiter`](super::LimitLayer::keyed_limiter)).
    pub(super) made: Option<AsyncKeyedLimiter<ClientKey>>,
    pub(super) settings: Settings,
    pub(super) trusted: Vec<Cidr>,
    pub(super) refused: AtomicU64,
    pub(super) would_refuse: AtomicU64,
    pub(super) missing_key: AtomicU64,
}

/// What the layer is set to that [`LimitBuilder`](super::LimitBuilder)
/// holds as given and the layer as built.
pub(super) struct Settings {
    pub(super) source: KeySource,
    pub(super) forwarding: Forwarding,
    pub(super) v4_prefix: u8,
    pub(super) v6_prefix: u8,
    pub(super) missing: MissingKey,
    pub(super) cost: Option<Box<CostFn>>,
    pub(super) fields: Fields,
    pub(super) body: Body,
    pub(super) status: StatusCode,
    pub(super) name: String,
    pub(super) mode: Mode,
    /// Costs by path ([`path_cost`](super::LimitBuilder::path_cost)).
    pub(super) costs: Vec<(Box<str>, u64)>,
    /// Refusals as gRPC statuses (only with feature `tonic`).
    pub(super) grpc: bool,
    /// The quota's unit, announced as the policy's `qu`.
    pub(super) unit: Option<String>,
    /// The secret partition keys are digested with, when announced.
    pub(super) partition: Option<Box<[u8]>>,
}

impl Shared {
    /// The answer to a request without a key, refused with `status`.
    #[cold]
    pub(super) fn missing(&self, status: StatusCode) -> Response<Bytes> {
        self.missing_key.fetch_add(1, Relaxed);
        self.refused.fetch_add(1, Relaxed);
        crate::observe::event::debug!(
            status = status.as_u16(),
            "paceline: a request without a key, refused"
        );
        let why = "paceline: no client key for this request (for the client's address: \
             serve with into_make_service_with_connect_info::<SocketAddr>(), or \
             insert the peer's SocketAddr as an extension; behind proxies, check \
             trust_proxies)\n";
        let mut response = match self.settings.grpc {
            #[cfg(feature = "tonic")]
            true => super::grpc::refusal(super::grpc::code_for(status), why.trim_end(), None),
            _ => response(status, "text/plain; charset=utf-8", why),
        };
        response.extensions_mut().insert(Answered::MissingKey);
        response
    }

    /// The answer to a request over the limit (or failed by the limiter's
    /// server, `failure` not a refusal), in the body its `headers` accept
    /// when the layer asks them.
    #[cold]
    pub(super) fn refuse(
        &self,
        key: &ClientKey,
        failure: Error,
        headers: &HeaderMap,
    ) -> Box<Response<Bytes>> {
        self.refuse_by(key, failure, headers, 0)
    }

    /// [`refuse`](Self::refuse), by part `part` of the limits (0 the
    /// layer's limiter, `i` its `also[i - 1]`).
    #[cold]
    pub(super) fn refuse_by(
        &self,
        key: &ClientKey,
        failure: Error,
        headers: &HeaderMap,
        part: usize,
    ) -> Box<Response<Bytes>> {
        let body = match self.settings.body {
            Body::Accept => accept::choose(headers.get_all(http::header::ACCEPT).iter()),
            body => body,
        };
        self.refused.fetch_add(1, Relaxed);
        let server = !failure.is_refusal();
        let (status, wait, why, answered) = if server {
            let why = format!("the limit's server failed: {failure}");
            let wait = Some(Duration::from_secs(1));
            let status = StatusCode::SERVICE_UNAVAILABLE;
            (status, wait, Some(why), Answered::ServerFailed)
        } else {
            // A refusal says why only when no wait admits it.
            let wait = failure.retry_after();
            let why = wait.is_none().then(|| failure.to_string());
            (self.settings.status, wait, why, Answered::Refused)
        };
        crate::observe::event::debug!(
            key = %key,
            status = status.as_u16(),
            retry_after_ms = wait.map(|w| w.as_millis() as u64),
            why = why.as_deref(),
            "paceline: request refused"
        );
        let mut response = match self.settings.grpc {
            #[cfg(feature = "tonic")]
            true => super::grpc::refused(server, why.as_deref(), wait, &self.settings.name),
            _ => self.refusal_body(status, wait, why.as_deref(), body),
        };
        response.extensions_mut().insert(answered);
        let headers = response.headers_mut();
        if let Some(wait) = wait {
            headers.insert(RETRY_AFTER, fields::retry_after(wait));
        }
        // The limits are the limiters' own knowledge: never a round trip.
        let pk = self.partition_key(key);
        let policies = self.policies(key, &pk);
        if let (false, true) = (policies.is_empty(), self.settings.fields != Fields::Off) {
            headers.insert(fields::POLICY, fields::list(policies));
            // `t` equals Retry-After (the draft: never earlier than it).
            // A request no wait admits (a cost above the burst) has no
            // window to announce: the policy alone.
            if let Some(wait) = wait {
                let reset = Duration::from_secs(fields::seconds_up(wait).max(1));
                let state = fields::state(self.name_of(part), 0, reset, pk.as_ref());
                headers.insert(fields::STATE, fields::list([state]));
            }
        }
        Box::new(response)
    }

    /// `RateLimit-Policy` and `RateLimit` of an admitted request, from the
    /// limit `key` is held to and what its take found: `available` free
    /// now, the bucket whole again [`Taken::reset`] later. None when
    /// nothing limits.
    pub(super) fn fields_for(&self, key: &ClientKey, taken: &Taken) -> AddedFields {
        let (name, limit) = (&self.settings.name, self.limiter.limit_for(key)?);
        let pk = self.partition_key(key);
        let (available, reset) = (taken.available(), taken.reset());
        let policy = fields::policy(name, limit, self.extra(&pk));
        let state = fields::state(name, available, reset, pk.as_ref());
        Some(Box::new([
            (fields::POLICY, fields::list([policy])),
            (fields::STATE, fields::list([state])),
        ]))
    }

    /// The fields of a request every one of several limits admitted, each
    /// part's from what its booking found; none when nothing limits.
    pub(super) fn fields_of_all(&self, key: &ClientKey, booked: &[Booked]) -> AddedFields {
        let pk = self.partition_key(key);
        let policies = self.policies(key, &pk);
        if policies.is_empty() {
            return None;
        }
        let states = booked.iter().enumerate().map(|(part, b)| {
            let taken = b.taken();
            let (available, reset) = (taken.available(), taken.reset());
            fields::state(self.name_of(part), available, reset, pk.as_ref())
        });
        Some(Box::new([
            (fields::POLICY, fields::list(policies)),
            (fields::STATE, fields::list(states)),
        ]))
    }

    /// Every part's policy that limits `key`, in the parts' order.
    fn policies(&self, key: &ClientKey, pk: &Option<fields::PartitionKey>) -> Vec<String> {
        let parts = std::iter::once((&self.settings.name, &self.limiter))
            .chain(self.also.iter().map(|(name, limiter)| (name, limiter)));
        parts
            .filter_map(|(name, limiter)| {
                let limit = limiter.limit_for(key)?;
                Some(fields::policy(name, limit, self.extra(pk)))
            })
            .collect()
    }

    /// The name of part `part`.
    fn name_of(&self, part: usize) -> &str {
        match part {
            0 => &self.settings.name,
            i => self.also.get(i - 1).map_or("", |(name, _)| name),
        }
    }

    /// Takes `cost` on `key` from every limit, in order, all or nothing:
    /// a part that refuses has the parts before it given back (a settle at
    /// 0), and its refusal comes back with its place. One deadline for
    /// every part's wait in [`Mode::Wait`].
    pub(super) async fn take_all<'a>(
        &'a self,
        key: &'a ClientKey,
        cost: u64,
    ) -> Result<Vec<Booked>, (usize, Error)> {
        let parts: Vec<&dyn Limiter> = std::iter::once(&*self.limiter)
            .chain(self.also.iter().map(|(_, l)| &**l))
            .collect();
        let within = match self.settings.mode {
            Mode::Wait(max) => Within::Max(max),
            _ => Within::Now,
        };
        let book = |part: &'a dyn Limiter, cost, within| part.book(key, cost, within);
        let give_back = |part: &'a dyn Limiter, b| part.settle(key, b, 0);
        let costs = std::iter::repeat(cost);
        book_in_turn(&parts, costs, within, book, give_back).await
    }

    /// `key`'s partition key, when the layer announces one.
    fn partition_key(&self, key: &ClientKey) -> Option<fields::PartitionKey> {
        let secret = self.settings.partition.as_deref()?;
        Some(fields::PartitionKey::of(secret, &key.to_string()))
    }

    /// What the policy announces beside its quota.
    fn extra<'a>(&'a self, pk: &'a Option<fields::PartitionKey>) -> fields::Extra<'a> {
        fields::Extra {
            unit: self.settings.unit.as_deref(),
            pk: pk.as_ref(),
        }
    }

    /// The body of a refusal: `wait` until it may go, or `why` it cannot.
    fn refusal_body(
        &self,
        status: StatusCode,
        wait: Option<Duration>,
        why: Option<&str>,
        body: Body,
    ) -> Response<Bytes> {
        let retry = wait.map(|w| fields::seconds_up(w).max(1));
        let detail = match (retry, why) {
            (_, Some(why)) => why.to_owned(),
            (Some(s), None) => format!("retry in {s} s"),
            (None, None) => String::new(),
        };
        let name = Json(&self.settings.name);
        let (content_type, body) = match body {
            Body::Text | Body::Accept => (
                "text/plain; charset=utf-8",
                format!("{}: {detail}\n", status.canonical_reason().unwrap_or("Refused")),
            ),
            Body::Json => (
                "application/json",
                format!(
                    "{{\"error\":\"rate_limited\",\"retry_after\":{},\"policy\":{name},\"detail\":{}}}",
                    retry.map_or("null".to_owned(), |s| s.to_string()),
                    Json(&detail)
                ),
            ),
            Body::Problem => (
                "application/problem+json",
                format!(
                    "{{\"type\":\"https://iana.org/assignments/http-problem-types#quota-exceeded\",\
                     \"title\":\"Request quota exceeded\",\"status\":{},\"detail\":{},\
                     \"violated-policies\":[{name}]}}",
                    status.as_u16(),
                    Json(&detail)
                ),
            ),
        };
        response(status, content_type, body)
    }
}
