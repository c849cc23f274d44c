//! Limits as configuration: read through serde (feature `serde`: `Rate`,
//! `Slack`, `Limit` and `Limits` from any format), from a file watched for
//! changes ([`watch`]), and for a fleet ([`fleet`], feature `fleet`: layers
//! merged key by key, documents kept on the servers the fleet runs).

#[cfg(feature = "fleet")]
pub mod fleet;
#[cfg(feature = "serde")]
mod serde;
pub mod watch;
