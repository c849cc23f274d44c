//! Events through the `tracing` facade (feature `tracing`), or nothing:
//! `debug!`, `info!` and `warning!` expand to tracing's macros with the
//! feature and to an empty block without it (their arguments are then not
//! evaluated; the feature is read where they are used, in paceline). paceline never prints: what it has to say goes here, or is
//! kept for the caller to read (`watch::Watcher::last_error`).
//!
//! The events, all with target `paceline::…` (the module that sends them):
//!
//! | event | level | sent by |
//! |---|---|---|
//! | a request refused (key, status, wait) | debug | the HTTP and gRPC layer |
//! | a request without a key | debug | the HTTP and gRPC layer |
//! | a far side's 429 / 503 pushing the limiter's next slot out | debug | `reqwest::Pace` |
//! | a far side's rate-limit field that cannot be read (once per header name) | warn | `reqwest::Pace` |
//! | a limiter paced to the far side's budget (quota, window, rate) | debug | `reqwest::Pace::follow_budget` |
//! | a new version of a watched file applied / refused | info / warn | `watch::Watch` |
//! | a remote limiter's server lost / back (its address and the limiter's name) | warn / info | every remote limiter |
//! | a fleet layer's version applied / not applied (layer, version, why) | info / warn | `fleet::Layers` |
//! | a limits document's server lost / back (the document and its server's address) | warn / info | `fleet::Document`'s watcher |
//! | a lease's unspent permits given back (how many) | debug | `lease::Leased` |
//! | a blocking take waiting on a Tokio runtime thread (debug builds, once) | warn | the blocking wait |

macro_rules! debug {
    ($($t:tt)*) => {{
        #[cfg(feature = "tracing")]
        ::tracing::debug!($($t)*);
    }};
}

macro_rules! info {
    ($($t:tt)*) => {{
        #[cfg(feature = "tracing")]
        ::tracing::info!($($t)*);
    }};
}

macro_rules! warning {
    ($($t:tt)*) => {{
        #[cfg(feature = "tracing")]
        ::tracing::warn!($($t)*);
    }};
}

#[allow(unused_imports)]
pub(crate) use {debug, info, warning};
