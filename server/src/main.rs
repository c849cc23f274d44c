//! `paceline-server`: Envoy's rate limit service (RLS v3,
//! `ShouldRateLimit` over gRPC), a drop-in for envoyproxy/ratelimit: its
//! configuration files, its environment variables and its decisions,
//! counted in process by paceline's keyed limiters. See `README.md`.
//!
//! ```text
//! paceline-server --config DIR      # or RUNTIME_ROOT / RUNTIME_SUBDIRECTORY / RUNTIME_APPDIRECTORY
//! ```
#![forbid(unsafe_code)]

mod config;
mod counts;
mod grpc;
mod json;
mod lease;
mod matching;
mod overs;
mod service;
mod settings;
mod stats;
mod store;
mod watch;
mod web;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer;
use tokio::net::TcpListener;
use tokio::sync::watch as signal;

use crate::counts::Counts;
use crate::service::Service;
use crate::settings::Settings;

const USAGE: &str = "\
paceline-server: Envoy's rate limit service (RLS v3), a drop-in for envoyproxy/ratelimit

usage: paceline-server [--config DIR]

The configuration: every *.yaml in DIR, else in
$RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY
(default /srv/runtime_data/current/config), reloaded when it changes.
The rest from the environment, as envoyproxy/ratelimit reads it: PORT (8080:
/healthcheck, /json), GRPC_PORT (8081), DEBUG_PORT (6070: /rlconfig, /stats,
/limits), HOST, GRPC_HOST, DEBUG_HOST, USE_PROMETHEUS, PROMETHEUS_ADDR,
PROMETHEUS_PATH, LOG_LEVEL, LOG_FORMAT, NEAR_LIMIT_RATIO, CACHE_KEY_PREFIX,
SHADOW_MODE, QUOTA_MODE, MERGE_DOMAIN_CONFIG, RUNTIME_WATCH_ROOT (either
value reloads on any change), STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT,
LIMIT_RESPONSE_HEADERS_ENABLED and its header names,
HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED.
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "--help" || a == "-h") {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let settings = match Settings::read(&|name| std::env::var(name).ok(), &args) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("paceline-server: {e}");
            return ExitCode::from(2);
        }
    };
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(settings.log_level)
        .with_writer(std::io::stderr);
    if settings.log_json {
        subscriber.json().init();
    } else {
        subscriber.init();
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("paceline-server: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(settings)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("paceline-server: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn bind(addr: SocketAddr, what: &str) -> Result<TcpListener, String> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr} ({what}): {e}"))?;
    // One line per port, whatever the log level: a port of 0 is the one
    // the system chose, and this says which.
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    eprintln!("paceline-server: {what} on {bound}");
    Ok(listener)
}

async fn run(s: Settings) -> Result<(), String> {
    if s.statsd_asked {
        tracing::warn!(
            "USE_STATSD: paceline-server sends no statsd; its stats are on DEBUG_PORT's /stats, and Prometheus with USE_PROMETHEUS"
        );
    }
    let counts = Counts::new(s.max_keys).map_err(|e| e.to_string())?;
    let store = match &s.backend {
        settings::Backend::Memory => store::Store::local(counts),
        settings::Backend::Redis {
            at,
            per_second,
            jitter_max,
        } => {
            let store =
                store::Store::redis_at(counts, at, s.store_timeout, *jitter_max, s.fail).await?;
            match per_second {
                Some(at) => store.with_per_second(at, s.store_timeout).await?,
                None => store,
            }
        }
        settings::Backend::Postgres { conn } => {
            store::Store::postgres(counts, conn, s.store_timeout, s.fail).await?
        }
        settings::Backend::Memcache {
            addr,
            jitter_max,
            connections,
        } => {
            let client = store::Memcache::new(addr, *connections, s.store_timeout, *jitter_max);
            store::Store::memcache(counts, client, s.fail)
        }
    };
    let store = store.with_leases(lease::Leases::new(s.lease_above));
    let service = Arc::new(Service::new(store, s.decide.clone()));
    let every = Duration::from_millis(s.reload_ms);
    // No port opens before the limits are in.
    let seen = watch::first_load(&service, &s.config_dir, s.merge_domains, every).await;

    let http = bind(s.http, "HOST:PORT, /healthcheck and /json").await?;
    let grpc = bind(s.grpc, "GRPC_HOST:GRPC_PORT, the RLS").await?;
    let debug = bind(s.debug, "DEBUG_HOST:DEBUG_PORT").await?;
    let prometheus = match &s.prometheus {
        Some((addr, path)) => Some((bind(*addr, "PROMETHEUS_ADDR").await?, path.clone())),
        None => None,
    };

    let healthy = Arc::new(AtomicBool::new(true));
    let (stop, stopped) = signal::channel(false);
    let until_stopped = |mut rx: signal::Receiver<bool>| async move {
        let _ = rx.wait_for(|stop| *stop).await;
    };
    tokio::spawn(watch::watch(
        Arc::clone(&service),
        s.config_dir.clone(),
        s.merge_domains,
        every,
        seen,
    ));

    let mut tasks = tokio::task::JoinSet::new();
    let shared = web::Shared {
        service: Arc::clone(&service),
        healthy: Arc::clone(&healthy),
        needs_config: s.healthy_needs_config,
    };
    let mut routers = vec![
        (http, web::main_router(shared), "HTTP"),
        (debug, web::debug_router(Arc::clone(&service)), "debug"),
    ];
    if let Some((listener, path)) = prometheus {
        let app = web::prometheus_router(Arc::clone(&service), &path);
        routers.push((listener, app, "Prometheus"));
    }
    for (listener, app, what) in routers {
        let rx = stopped.clone();
        tasks.spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(until_stopped(rx))
                .await
                .map_err(|e| format!("{what}: {e}"))
        });
    }
    let rls = RateLimitServiceServer::new(grpc::Rls(Arc::clone(&service)));
    // gRPC health: "ratelimit" (envoyproxy/ratelimit's name) and the
    // server as a whole, serving until the stop.
    let (reporter, health) = tonic_health::server::health_reporter();
    for name in ["ratelimit", ""] {
        reporter
            .set_service_status(name, tonic_health::ServingStatus::Serving)
            .await;
    }
    let rx = stopped.clone();
    tasks.spawn(async move {
        tonic::transport::Server::builder()
            .add_service(health)
            .add_service(rls)
            .serve_with_incoming_shutdown(
                // No Nagle: a small answer held for the client's delayed
                // ACK costs 40 ms.
                tonic::transport::server::TcpIncoming::from(grpc).with_nodelay(Some(true)),
                until_stopped(rx),
            )
            .await
            .map_err(|e| format!("gRPC: {e}"))
    });

    // SIGTERM or SIGINT: unhealthy first, then drain and stop.
    let reason = shutdown_signal().await;
    tracing::warn!(reason, "shutting down: /healthcheck now fails, draining");
    healthy.store(false, Ordering::Relaxed);
    for name in ["ratelimit", ""] {
        reporter
            .set_service_status(name, tonic_health::ServingStatus::NotServing)
            .await;
    }
    let _ = stop.send(true);
    let mut result = Ok(());
    while let Some(done) = tasks.join_next().await {
        if let Ok(Err(e)) = done {
            result = Err(e);
        }
    }
    result
}

/// Waits for SIGTERM or SIGINT, and names it.
async fn shutdown_signal() -> &'static str {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = async {
            match term.as_mut() {
                Some(t) => { t.recv().await; }
                None => std::future::pending::<()>().await,
            }
        } => "SIGTERM",
    }
}
