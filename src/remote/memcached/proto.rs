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

use std::fmt;
use std::io::{self, Write as _};

use crate::remote::socket::cut;

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
    let len = value.len();
    match cas {
        Some(cas) => line(out, format_args!("ms {key} {len} C{cas} T{exptime}")),
        None => line(out, format_args!("ms {key} {len} T{exptime} ME")),
    }
    let _ = write!(out, "{value}\r\n");
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
    // Writing into a Vec cannot fail.
    let _ = write!(out, "{args}\r\n");
}

/// Why a call failed, and whether its connection is still in step.
#[derive(Debug)]
pub(crate) enum Failure {
    /// No connection could be had (or the reconnect backoff still runs).
    Connect(crate::remote::Error),
    /// The connection failed or timed out: it is dropped.
    Io(io::Error),
    /// The server's reply is not the protocol: the connection is dropped.
    Garbled(String),
    /// The server answered with an error line: the connection is dropped
    /// all the same (what follows it is not certain).
    Server(String),
    /// The key holds a value that is not a state (its length).
    Foreign(usize),
    /// The call lost `conflicts` CAS races and its budget or its retries
    /// ran out; `in_step` is false when a reply was still on the wire.
    Contended { conflicts: u32, in_step: bool },
}

impl Failure {
    /// Whether the connection may serve another call: not after a failed
    /// or garbled link, nor after a server's error line (after a
    /// `CLIENT_ERROR` memcached may read a store's value as a command of
    /// its own, and answer it too).
    pub(crate) fn in_step(&self) -> bool {
        matches!(
            self,
            Failure::Foreign(_) | Failure::Contended { in_step: true, .. }
        )
    }

    /// Whether this is a timeout of the connection.
    pub(crate) fn is_timeout(&self) -> bool {
        matches!(self, Failure::Io(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut))
    }
}

impl From<io::Error> for Failure {
    fn from(e: io::Error) -> Failure {
        Failure::Io(e)
    }
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

/// Parses one reply line, `\r\n` included: a server's error line is
/// [`Failure::Server`], a line that is not the protocol
/// [`Failure::Garbled`].
pub(crate) fn head(line: &[u8]) -> Result<Head, Failure> {
    let text = line
        .strip_suffix(b"\r\n")
        .and_then(|l| std::str::from_utf8(l).ok())
        .ok_or_else(|| Failure::Garbled(format!("a reply line of {} bytes", line.len())))?;
    let mut tokens = text.split(' ');
    let status = tokens.next().unwrap_or("");
    let head = match status {
        "VA" => {
            let garbled = || Failure::Garbled(format!("{text:?}"));
            let len = tokens.next().and_then(|t| t.parse().ok());
            // The last `c` flag's token; every one must parse.
            let mut cas = tokens.filter_map(|flag| flag.strip_prefix('c'));
            let cas = cas.try_fold(None, |_, c| c.parse().map(Some));
            Head::Value {
                len: len.ok_or_else(garbled)?,
                cas: cas.map_err(|_| garbled())?,
            }
        }
        "HD" => Head::Done,
        "EN" => Head::Miss,
        "NS" => Head::NotStored,
        "EX" => Head::Exists,
        "NF" => Head::NotFound,
        "ERROR" | "CLIENT_ERROR" | "SERVER_ERROR" => return Err(Failure::Server(text.to_owned())),
        _ => return Err(Failure::Garbled(format!("{:?}", cut(text)))),
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
        assert!(matches!(
            head(b"VA 19 c42\r\n"),
            Ok(Head::Value {
                len: 19,
                cas: Some(42)
            })
        ));
        assert!(matches!(
            head(b"VA 3\r\n"),
            Ok(Head::Value { len: 3, cas: None })
        ));
        assert!(matches!(head(b"EN\r\n"), Ok(Head::Miss)));
        assert!(matches!(head(b"EX\r\n"), Ok(Head::Exists)));
        assert!(matches!(
            head(b"SERVER_ERROR out of memory\r\n"),
            Err(Failure::Server(_))
        ));
        assert!(matches!(head(b"VA x\r\n"), Err(Failure::Garbled(_))));
        assert!(matches!(head(b"HD"), Err(Failure::Garbled(_))));
        assert_eq!(state(b"4611686018427387904"), Some(1 << 62));
        for foreign in [&b""[..], b"-1", b"1.5", b" 1", b"184467440737095516160"] {
            assert_eq!(state(foreign), None, "{foreign:?}");
        }
    }
}
