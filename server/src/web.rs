//! The HTTP side: on `PORT`, `/healthcheck` and `/json`; on `DEBUG_PORT`,
//! an index, `/rlconfig` (the configuration in force), `/stats` (the stats
//! by their statsd names) and `/limits` (paceline's look inside the
//! counters); on `PROMETHEUS_ADDR`, the stats for Prometheus.

use std::fmt::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::body::Bytes;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get};
use axum::Router;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;

use crate::config::Level;
use crate::service::Service;

/// What the handlers share.
#[derive(Clone)]
pub struct Shared {
    /// The service.
    pub service: Arc<Service>,
    /// Serving and not shutting down.
    pub healthy: Arc<AtomicBool>,
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`.
    pub needs_config: bool,
}

/// `/healthcheck` and `/json`.
pub fn main_router(shared: Shared) -> Router {
    let health = shared.clone();
    let json = shared;
    Router::new()
        .route(
            "/healthcheck",
            get(move || {
                let s = health.clone();
                async move {
                    let config_ok = !s.needs_config
                        || s.service.config().is_some_and(|c| !c.domains.is_empty());
                    if s.healthy.load(Ordering::Relaxed) && config_ok {
                        (StatusCode::OK, "OK").into_response()
                    } else {
                        StatusCode::INTERNAL_SERVER_ERROR.into_response()
                    }
                }
            }),
        )
        .route(
            "/json",
            any(move |body: Bytes| {
                let s = json.clone();
                async move { json_answer(&s.service, &body).await }
            }),
        )
}

/// `/json`: 200, or 429 when over the limit; 400 for bad JSON or a request
/// the service refuses; 500 for an answer with no code.
async fn json_answer(service: &Service, body: &[u8]) -> Response {
    let request = match crate::json::request(body) {
        Ok(r) => r,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("Bad Request: {e}\n")).into_response(),
    };
    match service.should_rate_limit(&request).await {
        Ok(answer) => {
            let status = match answer.overall_code {
                c if c == Code::OverLimit as i32 => StatusCode::TOO_MANY_REQUESTS,
                c if c == Code::Ok as i32 => StatusCode::OK,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            let text = crate::json::response(&answer);
            (status, [(header::CONTENT_TYPE, "application/json")], text).into_response()
        }
        Err(f) => (
            StatusCode::BAD_REQUEST,
            format!("Bad Request: {}\n", f.message),
        )
            .into_response(),
    }
}

/// The debug port's pages.
pub fn debug_router(service: Arc<Service>) -> Router {
    let mut inspect = paceline::http::Inspect::new();
    for (unit, limiter) in service.counts().limiters() {
        inspect = inspect.keyed(unit.name().to_ascii_lowercase(), limiter);
    }
    let config = Arc::clone(&service);
    let stats = Arc::clone(&service);
    Router::new()
        .route(
            "/",
            get(|| async {
                "paceline-server\n  /rlconfig  the configuration in force\n  /stats     the stats, by their statsd names\n  /limits    the counters, a look inside\n"
            }),
        )
        .route(
            "/rlconfig",
            get(move || {
                let s = Arc::clone(&config);
                async move { dump(&s) }
            }),
        )
        .route(
            "/stats",
            get(move || {
                let s = Arc::clone(&stats);
                async move { s.stats().statsd() }
            }),
        )
        .nest_service("/limits", inspect.service())
}

/// The configuration in force, one limit per line, as `/rlconfig` shows
/// it.
fn dump(service: &Service) -> String {
    let mut out = String::new();
    let Some(config) = service.config() else {
        return "no configuration loaded\n".into();
    };
    for (file, domain) in &config.files {
        let _ = writeln!(out, "# {file}: domain {domain}");
    }
    let mut domains: Vec<_> = config.domains.iter().collect();
    domains.sort_by(|a, b| a.0.cmp(b.0));
    for (_, level) in domains {
        dump_level(level, &mut out);
    }
    out
}

fn dump_level(level: &Level, out: &mut String) {
    let mut nodes: Vec<_> = level.nodes.values().collect();
    nodes.sort_by(|a, b| a.full_key.cmp(&b.full_key));
    for node in nodes {
        match &node.rule {
            Some(r) if r.unlimited => {
                let _ = writeln!(out, "{}: unlimited", node.full_key);
            }
            Some(r) => {
                let unit = r.unit.map_or("", |u| u.name());
                let _ = writeln!(
                    out,
                    "{}: requests_per_unit={}, unit={unit}, shadow_mode={}, counting={:?}",
                    node.full_key, r.requests_per_unit, node.shadow_mode, r.counting
                );
            }
            None => {}
        }
        dump_level(&node.children, out);
    }
}

/// Prometheus text at `path`.
pub fn prometheus_router(service: Arc<Service>, path: &str) -> Router {
    Router::new().route(
        path,
        get(move || {
            let s = Arc::clone(&service);
            async move {
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    s.stats().prometheus(),
                )
            }
        }),
    )
}
