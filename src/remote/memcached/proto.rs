//! The part of memcached's meta protocol the limiter speaks: the commands
//! written into a buffer, and the replies parsed from their lines. No I/O:
//! the blocking connection (`conn.rs`) and the async one (`aio.rs`) read
//! and write, and both parse here.
//!
//! | call | command | replies |
//! |---|---|---|
//! | read a state and its CAS token | `mg <key> v c` | `VA <len> c<cas>` + value, `EN` (absent) |
//! | read a state | `mg <key> v` | `VA <len>` + value, `EN` |
//! | store over a CAS token | `ms <key> <len> C<cas> T<exptime>` + value | `HD` stored, `EX` written since, `NF` gone since |
//! | store if absent | `ms <key> <len> T<exptime> ME` + value | `HD` stored, `NS` someone stored first |
//! | delete (over a CAS token) | `md <key> [C<cas>]` | `HD` deleted, `NF` absent, `EX` written since |
//!
//! Every line ends in `\r\n`; a key is at most 250 bytes without spaces or
//! control bytes (`src/remote/key.rs` sees to that). A server error
//! (`CLIENT_ERROR …`, `SERVER_ERROR …`, `ERROR`) is one line: the
//! connection stays in step. Requires memcached 1.6 or later (the meta
//! commands; `ms`'s `<len>` token is the form since 1.6.10).

use std::fmt::{self, Write as _};

/// The longest reply line read (a status, a length and a few flags fit in
/// tens of bytes): a longer one is garbled, and is not read to its end.
pub(crate) const MAX_LINE: u64 = 512;

/// The longest value read into memory: a state is at most 20 decimal
/// digits. A longer value is another application's, and is skipped over
/// (memcached's items are at most a megabyte by default) without being
/// kept.
pub(crate) const MAX_STATE_LEN: usize = 20;

/// `mg <key> v c`: a state and its CAS token.
pub(crate) fn get(out: &mut Vec<u8>, key: &str) {
    line(out, format_args!("mg {key} v c"));
}

/// `mg <key> v`: a state.
pub(crate) fn peek(out: &mut Vec<u8>, key: &str) {
    line(out, format_args!("mg {key} v"));
}

/// `ms`: stores `state` with `exptime`, over `cas` (`Some`) or only if
/// absent (`None`, mode `E`: memcached's `add`).
pub(crate) fn store(out: &mut Vec<u8>, key: &str, state: u64, cas: Option<u64>, exptime: u32) {
    let value = state.to_string();
    match cas {
        Some(cas) => line(
            out,
            format_args!("ms {key} {} C{cas} T{exptime}", value.len()),
        ),
        None => line(out, format_args!("ms {key} {} T{exptime} ME", value.len())),
    }
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// `md <key>`, over `cas` if given.
pub(crate) fn delete(out: &mut Vec<u8>, key: &str, cas: Option<u64>) {
    match cas {
        Some(cas) => line(out, format_args!("md {key} C{cas}")),
        None => line(out, format_args!("md {key}")),
    }
}

fn line(out: &mut Vec<u8>, args: fmt::Arguments<'_>) {
    out.clear();
    let mut s = String::with_capacity(64);
    // Writing into a String cannot fail.
    let _ = s.write_fmt(args);
    out.extend_from_slice(s.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// A reply's first line, parsed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Head {
    /// `VA <len>`: a value of `len` bytes follows, then `\r\n`.
    Value { len: usize, cas: Option<u64> },
    /// `HD`: done (stored, deleted).
    Done,
    /// `EN`: no such key.
    Miss,
    /// `NS`: not stored (an `add` found the key).
    NotStored,
    /// `EX`: the CAS token is stale (written since).
    Exists,
    /// `NF`: no such key (gone since it was read).
    NotFound,
}

/// What a reply line said that is not a [`Head`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Bad {
    /// The server answered with an error line; the connection is in step.
    Server(String),
    /// A line that is not the protocol: the connection is out of step.
    Garbled(String),
}

/// Parses one reply line, `\r\n` included.
pub(crate) fn head(line: &[u8]) -> Result<Head, Bad> {
    let text = line
        .strip_suffix(b"\r\n")
        .and_then(|l| std::str::from_utf8(l).ok())
        .ok_or_else(|| Bad::Garbled(format!("a reply line of {} bytes", line.len())))?;
    let mut tokens = text.split(' ');
    let status = tokens.next().unwrap_or("");
    let head = match status {
        "VA" => {
            let len = tokens
                .next()
                .and_then(|t| t.parse::<usize>().ok())
                .ok_or_else(|| Bad::Garbled(format!("{text:?}")))?;
            let mut cas = None;
            for flag in tokens {
                if let Some(c) = flag.strip_prefix('c') {
                    cas = Some(
                        c.parse::<u64>()
                            .map_err(|_| Bad::Garbled(format!("{text:?}")))?,
                    );
                }
            }
            Head::Value { len, cas }
        }
        "HD" => Head::Done,
        "EN" => Head::Miss,
        "NS" => Head::NotStored,
        "EX" => Head::Exists,
        "NF" => Head::NotFound,
        "ERROR" | "CLIENT_ERROR" | "SERVER_ERROR" => return Err(Bad::Server(text.to_owned())),
        _ => return Err(Bad::Garbled(format!("{:?}", truncate(text)))),
    };
    Ok(head)
}

/// A state as stored: 1 to 20 decimal digits of a `u64`. `None` for any
/// other value (another application's).
pub(crate) fn state(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > MAX_STATE_LEN || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(value).ok()?.parse().ok()
}

fn truncate(s: &str) -> &str {
    match s.char_indices().nth(40) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_meta_lines() {
        let mut out = Vec::new();
        get(&mut out, "p:k");
        assert_eq!(out, b"mg p:k v c\r\n");
        store(&mut out, "p:k", 1234, Some(99), 7);
        assert_eq!(out, b"ms p:k 4 C99 T7\r\n1234\r\n");
        store(&mut out, "p:k", 5, None, 2_000_000_000);
        assert_eq!(out, b"ms p:k 1 T2000000000 ME\r\n5\r\n");
        delete(&mut out, "p:k", Some(3));
        assert_eq!(out, b"md p:k C3\r\n");
    }

    #[test]
    fn replies_parse_and_errors_say_which() {
        assert_eq!(
            head(b"VA 19 c42\r\n"),
            Ok(Head::Value {
                len: 19,
                cas: Some(42)
            })
        );
        assert_eq!(head(b"VA 3\r\n"), Ok(Head::Value { len: 3, cas: None }));
        assert_eq!(head(b"EN\r\n"), Ok(Head::Miss));
        assert_eq!(head(b"EX\r\n"), Ok(Head::Exists));
        assert!(matches!(
            head(b"SERVER_ERROR out of memory\r\n"),
            Err(Bad::Server(_))
        ));
        assert!(matches!(head(b"VA x\r\n"), Err(Bad::Garbled(_))));
        assert!(matches!(head(b"HD"), Err(Bad::Garbled(_))));
        assert_eq!(state(b"4611686018427387904"), Some(1 << 62));
        for foreign in [&b""[..], b"-1", b"1.5", b" 1", b"184467440737095516160"] {
            assert_eq!(state(foreign), None, "{foreign:?}");
        }
    }
}
