//! Keys as a server stores them. A key comes from a client (an API key
//! header, a user name) and is hostile input: whatever its length or bytes,
//! a limiter that accepts it must limit it. A server cannot hold every key
//! (PostgreSQL's `text` has no NUL, its btree index no entry over ~2.7 KB;
//! Redis holds any key, but a megabyte-long one costs a megabyte while it
//! lives), so each backend stores a key as given when its server can hold
//! it and an operator can read it, and any other key under its digest:
//!
//! ```text
//! ~sha256:<64 lowercase hex digits of SHA-256 of the key's bytes>
//! ```
//!
//! | backend | stored as given | else |
//! |---|---|---|
//! | PostgreSQL | at most [`MAX_PLAIN`] bytes, each printable ASCII (space to `~`), not starting with [`DIGEST_MARK`] | the digest |
//! | Redis | at most [`MAX_PLAIN`] bytes (any bytes: its keys are binary-safe), not starting with [`DIGEST_MARK`] | the digest, after the prefix |
//!
//! No two keys share a stored name: a key stored as given never starts
//! with the mark, every digest does, and two keys share a digest only if
//! they collide under SHA-256. A key's stored name depends on nothing but
//! the key, so every process (and `reset`) finds the same row or key.

use std::borrow::Cow;
use std::fmt::Write;

use sha2::{Digest, Sha256};

/// The longest key stored as given, in bytes. Far under PostgreSQL's
/// btree limit (a third of an 8 KB page, ~2.7 KB, less for a compressible
/// key after its header): a key at the limit always indexes, whatever the
/// page layout. And 512 bytes hold any real identifier (an IPv6 prefix, a
/// UUID, a URL path, an API key), while a longer key costs the server its
/// length on every row or key and every index entry: its 72-byte digest
/// costs less.
pub(crate) const MAX_PLAIN: usize = 512;

/// What every digested key starts with. Printable ASCII, so a digested key
/// is one an operator can read and paste; a key as given never starts with
/// it (such a key is digested too).
pub(crate) const DIGEST_MARK: &str = "~sha256:";

/// Which keys PostgreSQL stores as given: printable ASCII only. `text`
/// cannot hold NUL; the other control bytes would reach an operator's
/// terminal through `psql`; and any byte over 127 would have to pass
/// through the database's encoding, which need not be UTF-8 (a `LATIN1`
/// database fails a key it has no character for).
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn postgres(key: &str) -> Cow<'_, str> {
    stored(key, |b| (b' '..=b'~').contains(&b))
}

/// Which keys Redis stores as given: any bytes (keys are binary-safe), up
/// to [`MAX_PLAIN`].
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) fn redis(key: &str) -> Cow<'_, str> {
    stored(key, |_| true)
}

/// `key` as given if it is at most [`MAX_PLAIN`] bytes of bytes `plain`
/// allows and does not start with the mark; else its digest.
fn stored(key: &str, plain: impl Fn(u8) -> bool) -> Cow<'_, str> {
    let as_given =
        key.len() <= MAX_PLAIN && !key.starts_with(DIGEST_MARK) && key.bytes().all(plain);
    if as_given {
        Cow::Borrowed(key)
    } else {
        Cow::Owned(digest(key))
    }
}

/// [`DIGEST_MARK`] and the hex of SHA-256 of `key`'s bytes.
pub(crate) fn digest(key: &str) -> String {
    let mut out = String::with_capacity(DIGEST_MARK.len() + 64);
    out.push_str(DIGEST_MARK);
    for b in Sha256::digest(key.as_bytes()) {
        // Writing into a String cannot fail.
        let _ = write!(out, "{b:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readable_keys_are_stored_as_given() {
        for key in ["", "user:42", "2001:db8::/56", "{tenant:7}:api", "a b~"] {
            assert_eq!(postgres(key), key);
            assert_eq!(redis(key), key);
        }
        let longest = "k".repeat(MAX_PLAIN);
        assert!(matches!(postgres(&longest), Cow::Borrowed(_)));
        assert!(matches!(redis(&longest), Cow::Borrowed(_)));
        // Redis holds any byte.
        assert_eq!(redis("a\0b"), "a\0b");
        assert_eq!(redis("ключ"), "ключ");
    }

    #[test]
    fn other_keys_are_stored_under_their_digest() {
        // SHA-256 of "abc" (FIPS 180-2, appendix B.1).
        let abc = "~sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        assert_eq!(digest("abc"), abc);
        let long = "k".repeat(MAX_PLAIN + 1);
        for key in ["a\0b", "ключ", "\x1b[31m", "\x7f", long.as_str()] {
            assert_eq!(postgres(key), digest(key), "{key:?}");
        }
        assert_eq!(redis(&long), digest(&long));
        // A key that looks like a digest is digested too: it cannot take
        // the place of the key whose digest it shows.
        assert_eq!(postgres(abc), digest(abc));
        assert_eq!(redis(abc), digest(abc));
        assert_ne!(digest(abc), abc);
        assert_eq!(digest(abc).len(), DIGEST_MARK.len() + 64);
    }
}
