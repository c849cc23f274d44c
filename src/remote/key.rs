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
//! | memcached | escaped one to one (`%XX` for a space, a control byte, `%` and any byte over 126), when the prefix and that fit its [`MEMCACHED_MAX_KEY`] bytes, not starting with [`DIGEST_MARK`] | the digest, after the prefix |
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

/// The longest key memcached holds, in bytes (its text and meta protocols
/// also refuse a space or a control byte in one).
#[cfg_attr(not(feature = "memcached"), allow(dead_code))]
pub(crate) const MEMCACHED_MAX_KEY: usize = 250;

/// `key` as memcached stores it, `prefix` (printable ASCII, checked by the
/// builder) first: each byte that memcached's keys cannot hold or an
/// operator could not read (a space, a control byte, any byte over 126)
/// and `%` itself as `%` and two uppercase hex digits, all other bytes as
/// given, when that fits [`MEMCACHED_MAX_KEY`], is not empty, and the key
/// does not start with [`DIGEST_MARK`]; else the digest. The escape is one to one (`%`
/// is escaped too), and no escaped key starts with the mark (its bytes
/// are all kept as given), so no two keys share a stored key.
#[cfg_attr(not(feature = "memcached"), allow(dead_code))]
pub(crate) fn memcached(prefix: &str, key: &str) -> String {
    let mut out = String::with_capacity(prefix.len() + key.len());
    out.push_str(prefix);
    for b in key.bytes() {
        if (b'!'..=b'~').contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            // Writing into a String cannot fail.
            let _ = write!(out, "%{b:02X}");
        }
    }
    // (An empty key under an empty prefix would be no key at all.)
    if out.len() > MEMCACHED_MAX_KEY || out.is_empty() || key.starts_with(DIGEST_MARK) {
        out.truncate(prefix.len());
        out.push_str(&digest(key));
    }
    out
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

    #[test]
    fn memcached_keys_are_escaped_one_to_one_or_digested() {
        assert_eq!(memcached("p:", "user:42"), "p:user:42");
        assert_eq!(memcached("p:", "a b%c\0\r\n"), "p:a%20b%25c%00%0D%0A");
        assert_eq!(memcached("", "ключ"), "%D0%BA%D0%BB%D1%8E%D1%87");
        assert_eq!(memcached("", ""), digest(""));
        // "%20" itself is not a space: escaping is one to one.
        assert_ne!(memcached("", "%20"), memcached("", " "));
        // The longest that fits, and one byte more.
        let fits = "k".repeat(MEMCACHED_MAX_KEY - 2);
        assert_eq!(memcached("p:", &fits).len(), MEMCACHED_MAX_KEY);
        let long = "k".repeat(MEMCACHED_MAX_KEY - 1);
        assert_eq!(memcached("p:", &long), format!("p:{}", digest(&long)));
        // Escapes count at their escaped length.
        let spaces = " ".repeat(83);
        assert_eq!(memcached("p:", &spaces), format!("p:{}", digest(&spaces)));
        let abc = digest("abc");
        assert_eq!(memcached("p:", &abc), format!("p:{}", digest(&abc)));
        for key in ["", "x", " ", "\u{7f}", &long] {
            let stored = memcached("p:", key);
            assert!(stored.len() <= MEMCACHED_MAX_KEY);
            assert!(
                stored.bytes().all(|b| (b'!'..=b'~').contains(&b)),
                "{stored:?}"
            );
        }
    }
}
