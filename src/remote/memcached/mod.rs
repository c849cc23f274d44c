//! [`MemcachedLimiter`]: one limit shared by every process that reaches the
//! same memcached (feature `memcached`).
//!
//! memcached has no scripts, but it has what paceline's own design rests
//! on: compare-and-swap. A `MemcachedLimiter` keeps each key's state word
//! as the key's value and runs the atomic store's CAS loop with the server
//! as the word: read the state and its CAS token, run
//! [`schedule::step`](crate::model::schedule::step) here, in the client, and store
//! the grant only if nobody wrote since.
//!
//! ```no_run
//! use paceline::memcached::{FailPolicy, MemcachedLimiter};
//! use paceline::Rate;
//! use paceline::Take;
//!
//! let limiter = MemcachedLimiter::builder("127.0.0.1:11211", Rate::per_second(100))
//!     .slack(10)
//!     .on_error(FailPolicy::Closed) // memcached down: return the error (the default)
//!     .build()?;
//! limiter.take("api")?; // blocks until this process's share of 100/s comes up
//! match limiter.try_take("user:42") {
//!     Ok(_) => { /* go */ }
//!     Err(e) => eprintln!("{e}"), // "rate limited: retry after 9.98ms", or server trouble
//! }
//! # Ok::<(), paceline::memcached::Error>(())
//! ```
//!
//! # The model, in memcached
//!
//! Each key (the prefix, `"paceline:"` by default, then the key a call
//! names; see "Keys") holds `tat` of [`schedule`](crate::model::schedule) as a
//! decimal string, in internal nanoseconds: Unix time on the clients'
//! clocks plus [`ORIGIN`](crate::model::schedule::ORIGIN). A take is the CAS loop
//! of the in-process `AtomicLimiter`, a round trip per step:
//!
//! 1. `mg <key> v c`: the state and its CAS token, or `EN` for an absent
//!    key, which decides as a bucket at rest with its whole slack banked
//!    (as with Redis, a key's first request finds full credit);
//! 2. the step, on this client's clock;
//! 3. a refusal writes nothing, and is the answer; a grant is stored with
//!    `ms <key> C<cas>` (only if nobody wrote since), or `ms <key> ME`
//!    (memcached's `add`: only if still absent) for an absent key;
//! 4. `EX` (written since), `NS` (someone added first) or `NF` (it expired
//!    or was deleted since) is a lost race: another client's write went
//!    through. The call pauses a random moment (up to 50 µs per loss so
//!    far, at most 200 µs, so that the losers do not come back together)
//!    and reads again, at most 256 times and only while its budget (connect
//!    plus response timeout, from its start) leaves room. Then it fails
//!    with [`Error::Script`] naming the contention, which no fail policy
//!    admits: the server answered every time.
//!    [`cas_conflicts`](MemcachedLimiter::cas_conflicts) counts the lost
//!    races.
//!
//! A grant costs two round trips, a refusal one. A hot key grants at most
//! one permit per store round trip across all its clients; past that its
//! clients lose races, and retry. For keys that hot, pick Redis (the step
//! runs in the server, one round trip, no race).
//!
//! Every store sets the key's expiry to its rest time (`tat + tau`, when
//! the key would decide as an absent one; a lease's lender keeps it until
//! at rest at the stated slack, the limit's `keep`), from now, rounded up to whole
//! seconds, plus two: memcached's clock ticks once a second, so an item
//! may expire up to a second early. Idle keys leave by themselves. memcached
//! reads an expiry over 30 days (2,592,000 s) as a Unix time, so a slow
//! limit's (1/day with a burst of 100 rests 100 days after its last grant)
//! is sent as one: this host's wall clock plus the rest time plus a day,
//! which covers a server clock that disagrees with it (an item kept past its
//! rest time decides as an absent one: the day costs only memory). An
//! expiry past 2038, which memcached's 32-bit field cannot hold, is sent as
//! 0: never.
//!
//! [`reset`](MemcachedLimiter::reset) is one `md` (delete).
//!
//! # Time: the clients' clocks decide
//!
//! memcached lends no clock: each client decides on its own, [`UnixClock`](crate::clock::UnixClock)
//! (the host's Unix time) unless the builder sets another. Every client
//! sharing a key must read the same time scale, so clients on one host
//! agree exactly, and clients on different hosts agree as well as their
//! clocks do. What a disagreement costs:
//!
//! - A client whose clock runs `d` ahead of the others sees every state as
//!   if `d` later: it can admit up to `d / T` permits early (`T` the
//!   interval), never more. Over any window `w`, the key grants at most
//!   `S + 1 + (w + d) / T` where the clocks agreeing would grant
//!   `S + 1 + w / T`. With `T = 1 ms` (1000/s), a clock 5 ms ahead admits
//!   up to 5 permits more in any window, and the error does not add up:
//!   the state it writes is the schedule's, which every client reads next,
//!   so the others wait out what it took early.
//! - A client whose clock runs behind admits later than it could: it never
//!   admits early.
//! - A blocking take waits on the local monotonic clock for the wait its
//!   step found, so a wall clock that steps (an NTP correction) during a
//!   wait changes nothing; the next step reads the corrected clock.
//!
//! Keep `d` small with NTP or chrony on every client host (a LAN keeps
//! them within a millisecond or less; `chronyc tracking` reports the
//! offset): `d` is then well under one interval for rates up to hundreds
//! per second, and a few permits at most above that. `tests/memcached.rs`
//! sets a client's clock 50 ms ahead and counts exactly `d / T` early
//! permits, and runs eight clients, one 50 ms ahead, against the bound.
//!
//! # Keys
//!
//! A key comes from a client, so every key is limited, whatever its length
//! or bytes. memcached keys are at most 250 bytes, with no spaces or control
//! bytes. A key whose escape fits after the prefix is stored escaped one to
//! one: each space, control byte, byte over 126 and `%` as `%XX` (`"a b"`
//! as `"a%20b"`), every other byte as given, so an operator reads the usual
//! keys (`user:42`, an IP, an API key) as they are. Any other key (too
//! long once escaped, or one that starts with `~sha256:`) is stored as the
//! prefix, `~sha256:` and the 64 hex digits of the SHA-256 of its bytes
//! (see `src/remote/key.rs`). No two keys share a stored key, and `reset`
//! and every process find the same one.
//!
//! # Eviction and restarts forget
//!
//! memcached is a cache: under memory pressure it **evicts** the least
//! recently used items, a limiter's keys among them, and a restart forgets
//! every key (memcached keeps nothing on disk, unless started with a
//! warm-restart file, `-e`). A key lost either way decides as a bucket at
//! rest: it grants a whole burst of `slack + 1` at once, however recently
//! the limit was spent (`tests/memcached.rs` evicts one under a small
//! `memcached -m` and pins this). What bounds the damage:
//!
//! - memcached's own memory for limits (a server or instance of their own,
//!   sized for `keys × ~100 bytes`), or `memcached -M`, which answers a
//!   store with an error when memory is full instead of evicting: the take
//!   then fails (an [`Error::Script`], which no fail policy admits) rather
//!   than forgetting a limit;
//! - a small slack: each loss grants at most `slack + 1` extra permits per
//!   key;
//! - [`FailPolicy::Closed`] (the default) stops the work while memcached is
//!   down rather than running unpaced.
//!
//! # Failures
//!
//! A server that cannot be reached, a reply that does not come within the
//! response timeout (the connection is then dropped), and nothing else,
//! admit the request under [`FailPolicy::Open`]. A key holding a value
//! that is not a paceline state (another application's, of any size: it is
//! read past, never kept or echoed), a server error line (`SERVER_ERROR
//! out of memory`), a garbled reply, or a call that kept losing races
//! within its budget is an [`Error::Script`], never admitted. No call
//! panics, and none waits on memcached longer than the connect plus
//! response timeouts (a blocking take then also waits for its slot).
//! Connections reconnect by themselves, with a backoff of 10 ms doubling
//! to at most 500 ms while the server is down, during which calls fail at
//! once. A call on an idle connection that finds it dead (the server
//! restarted since) runs once more on a fresh one, if it had stored
//! nothing yet. A call that failed after sending its store may still have
//! taken its permits: failures err on the side of the limit.
//!
//! # The client: paceline's own
//!
//! The limiter speaks memcached's meta protocol (memcached 1.6 or later;
//! `mg`, `ms`, `md`) over std and tokio sockets with code of its own
//! (`proto.rs`, `conn.rs`, `aio.rs` in `src/remote/memcached/`: about 800
//! lines with their docs), rather than through a client crate. The
//! crates on crates.io in 2026 each missed something this needs:
//! `memcache` (rust-memcache) is blocking only, with the meta protocol
//! "experimental"; `memcache-async` has no CAS for the meta protocol and no
//! timeouts or pool of its own; `async-memcached` is Tokio-only, one
//! connection per `&mut` client, with no connect timeout; none gives a CAS
//! store *and* a CAS delete (a give-back must delete only the state it
//! wrote: the text protocol's `delete` has no CAS; the meta `md C<cas>`
//! does). The protocol part is small (three commands, six replies), and
//! written here it shares one CAS machine, one pool and one loop driving
//! them between the blocking and async faces, puts every read under the
//! call's budget, drops a connection whose reply is still on the wire,
//! and adds no dependency (the feature
//! pulls only `sha2`, for long keys, and tokio's `net` with `tokio`). The
//! binary protocol is deprecated by memcached; the meta protocol is its
//! successor and is what mcrouter and memcached's own proxy speak.
//!
//! # Async
//!
//! With the `tokio` feature too, `AsyncMemcachedLimiter::from(limiter)` is
//! a limiter's async face: the same calls as futures, over a pool of at
//! most [`pool_size`](MemcachedBuilder::pool_size) tokio connections.

#[cfg(feature = "tokio")]
mod aio;
mod builder;
mod cas;
mod conn;
mod limiter;
mod proto;
mod shared;
#[cfg(feature = "tokio")]
pub use aio::{AsyncMemcachedBackend, AsyncMemcachedLimiter};
pub use builder::{MemcachedBuilder, MemcachedSettings, DEFAULT_POOL_SIZE, DEFAULT_PREFIX};
pub use conn::DEFAULT_PORT;
pub use limiter::{MemcachedBackend, MemcachedLimiter};

pub use super::{Cause, Error, FailPolicy, DEFAULT_CONNECT_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT};

#[cfg(test)]
mod tests;
