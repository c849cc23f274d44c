//! What the blocking and async backends of one memcached limiter share:
//! its settings and counts, the key a ping reads, and how a call's failure
//! becomes the caller's [`Error`].

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::proto::Failure;
use crate::remote::{Done, Error};

/// What the blocking and async backends of one limiter share.
pub(super) struct Shared<C> {
    pub(super) prefix: String,
    pub(super) clock: C,
    /// The async face's most connections at once.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(super) pool_size: usize,
    /// CAS races lost, both faces together.
    pub(super) conflicts: AtomicU64,
}

impl<C> Shared<C> {
    /// Counts a call's lost races, and maps its failure to the error.
    pub(super) fn settle(
        &self,
        stored: &str,
        conflicts: u32,
        result: Result<Done, Failure>,
    ) -> Result<Done, Error> {
        if conflicts > 0 {
            self.conflicts.fetch_add(u64::from(conflicts), Relaxed);
        }
        result.map_err(|f| error(f, stored))
    }
}

/// The key a limiter's `ping` reads (after the prefix).
pub(super) const PING_KEY: &str = "~ping";

/// The error a caller sees for a call's failure on `stored` (or for a
/// connection's failure to open, as [`Failure::Io`]).
pub(super) fn error(f: Failure, stored: &str) -> Error {
    let said = |s: String| Error::script(s);
    match f {
        f if f.is_timeout() => Error::Timeout,
        Failure::Connect(e) => e,
        Failure::Io(e) => Error::unavailable(e),
        Failure::Garbled(s) => said(format!("memcached's reply is not the meta protocol: {s}")),
        Failure::Server(s) => said(format!("memcached answered {s:?} on key {stored:?}")),
        Failure::Foreign(len) => said(format!(
            "key {stored:?} holds a value of {len} bytes that is not a paceline state"
        )),
        Failure::Contended { conflicts, .. } => said(format!(
            "key {stored:?}: {conflicts} CAS races lost within the call's budget \
             (more clients write it at once than its round trips can serve)"
        )),
    }
}
