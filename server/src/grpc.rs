//! The RLS over gRPC: `envoy.service.ratelimit.v3.RateLimitService /
//! ShouldRateLimit`, from envoy-types' generated service. A request the
//! service cannot answer is `UNKNOWN` with envoyproxy/ratelimit's message
//! (as its Go server sends it), or `INVALID_ARGUMENT` for a descriptor's
//! limit in no unit (where envoyproxy/ratelimit's process panics).

use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::{Request, Response, Status};

use crate::service::Service;

/// The service, as tonic serves it.
pub struct Rls(pub Arc<Service>);

#[tonic::async_trait]
impl RateLimitService for Rls {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let started = std::time::Instant::now();
        let answer = match self.0.should_rate_limit(request.get_ref()).await {
            Ok(answer) => Ok(Response::new(answer)),
            Err(f) if f.invalid => Err(Status::invalid_argument(f.message)),
            Err(f) => Err(Status::unknown(f.message)),
        };
        self.0.stats().call(started.elapsed());
        answer
    }
}
