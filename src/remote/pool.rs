//! [`Pool`]: the connections to one server that a backend's calls take and
//! give back, once for the Redis and memcached backends (each writes the
//! call that runs on one, `run`, as an inherent impl): the idle ones, the
//! timeouts, and the [`Gate`] that spaces reconnects while the server is
//! down.

use std::time::Duration;

use super::health::Gate;
use super::socket::Budget;
use crate::primitive::Mutex;

/// Connections of kind `C` to `target`: one idle connection per caller
/// that ran at the same time, so threads sharing a limiter do not queue on
/// one socket.
pub(crate) struct Pool<T, C> {
    pub(crate) target: T,
    pub(crate) connect_timeout: Duration,
    pub(crate) response_timeout: Duration,
    pub(crate) idle: Mutex<Vec<C>>,
    pub(crate) gate: Gate,
}

impl<T, C> Pool<T, C> {
    pub(crate) fn new(target: T, connect_timeout: Duration, response_timeout: Duration) -> Self {
        Pool {
            target,
            connect_timeout,
            response_timeout,
            idle: Mutex::new(Vec::new()),
            gate: Gate::default(),
        }
    }

    /// The budget of a call that starts now.
    pub(crate) fn budget(&self) -> Budget {
        Budget::new(self.connect_timeout, self.response_timeout)
    }
}
