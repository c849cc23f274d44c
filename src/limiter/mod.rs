//! The limiter and its interface: [`Pacer`]
//! over a [`store`](crate::store) (named
//! [`AtomicLimiter`](crate::AtomicLimiter),
//! [`MutexLimiter`](crate::MutexLimiter),
//! [`WarmUpLimiter`](crate::WarmUpLimiter)) with its builder, calls and
//! limit changes; [`Unlimited`](crate::Unlimited); the take interface every
//! kind answers ([`take`]: [`Take`](crate::Take),
//! [`AsyncTake`](crate::AsyncTake), what a take found) and the direct
//! limiters' answers to it.

pub(crate) mod answers;
pub(crate) mod booked;
pub(crate) mod builder;
pub(crate) mod forward;
pub(crate) mod found;
pub(crate) mod pacer;
pub mod take;
pub(crate) mod unlimited;

pub use pacer::Pacer;
