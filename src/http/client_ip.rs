//! Who the client is: the peer address, or, only when the peer is a
//! trusted proxy, the right-most address of `X-Forwarded-For` or
//! `Forwarded` that is not a trusted proxy; grouped by prefix (an IPv6 /64
//! is one client).
//!
//! Why right-most, and what is never read: the guide's
//! [HTTP](crate::guide::http#behind-proxies) chapter. The invariants: only a
//! trusted peer's forwarding fields are read; the walk goes right to left
//! and stops at the first untrusted address, so nothing the client wrote is
//! parsed; an unreadable entry before it means no client (the missing-key
//! outcome), never a guess.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

use http::HeaderMap;

use crate::values::error::BuildError;

/// How many entries of a forwarding header are read at most, from the
/// right, looking for the first that is not a trusted proxy: a chain of
/// trusted proxies is short, and more trusted entries than this are a
/// client's invention (no client). Entries left of the client's are never
/// read, however many there are.
pub const MAX_HOPS: usize = 32;

/// An address block, `10.0.0.0/8` or `2001:db8::/32` (an address alone is
/// its own /32 or /128).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// The block of `addr` masked to `prefix` bits.
    ///
    /// # Errors
    /// [`BuildError::AddressBlock`] when `prefix` exceeds the address'
    /// width.
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Cidr, BuildError> {
        if prefix > width(addr) {
            return Err(BuildError::AddressBlock {
                input: format!("{addr}/{prefix}"),
            });
        }
        Ok(Cidr {
            addr: mask(addr, prefix),
            prefix,
        })
    }

    /// Whether `ip` is in the block (an IPv4-mapped IPv6 address counts as
    /// its IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        ip.is_ipv4() == self.addr.is_ipv4() && mask(ip, self.prefix) == self.addr
    }
}

impl FromStr for Cidr {
    type Err = BuildError;

    /// Parses `10.0.0.0/8`, `2001:db8::/32`, or an address alone.
    ///
    /// # Errors
    /// [`BuildError::AddressBlock`], naming the text.
    fn from_str(s: &str) -> Result<Cidr, BuildError> {
        let bad = || BuildError::AddressBlock {
            input: s.to_owned(),
        };
        let (addr, prefix) = s.split_once('/').map_or((s, None), |(a, p)| (a, Some(p)));
        let addr: IpAddr = addr.parse().map_err(|_| bad())?;
        let prefix = prefix
            .map_or(Ok(width(addr)), str::parse)
            .map_err(|_| bad())?;
        Cidr::new(addr, prefix).map_err(|_| bad())
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// How many bits `addr` has.
fn width(addr: IpAddr) -> u8 {
    if addr.is_ipv4() {
        32
    } else {
        128
    }
}

/// Which forwarding header names the client, when the peer is trusted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Forwarding {
    /// `X-Forwarded-For: client, proxy1, proxy2` (every field line, in
    /// order, as one list). The default.
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client, for="[2001:db8::1]:4711"`.
    Forwarded,
}

/// Whether `ip` is in one of the `trusted` blocks.
#[inline]
pub(crate) fn trusts(trusted: &[Cidr], ip: IpAddr) -> bool {
    trusted.iter().any(|c| c.contains(ip))
}

/// The client's address when the connection's `peer` (canonical, as
/// [`canonical`] gives it) is a trusted proxy: the right-most entry of the
/// `forwarding` header not in `trusted`. `None` when an entry right of it
/// (or it) cannot be read, or more than [`MAX_HOPS`] entries from the right
/// are all trusted. Nothing left of that entry is read: whatever the client
/// wrote there (bytes that are not text, garbage, any number of entries)
/// changes nothing. (A peer not in `trusted` is the client itself: the
/// layer's `decide` checks that first, with [`trusts`].) Out of line (the
/// walk is long) but not cold: behind a load balancer it is every
/// request's.
#[inline(never)]
pub(crate) fn behind_proxies(
    peer: IpAddr,
    headers: &HeaderMap,
    trusted: &[Cidr],
    forwarding: Forwarding,
) -> Option<IpAddr> {
    // The header, and how one of its entries names an address.
    let (name, hop): (_, fn(&str) -> Option<IpAddr>) = match forwarding {
        Forwarding::XForwardedFor => ("x-forwarded-for", |entry| node(entry.trim())),
        Forwarding::Forwarded => ("forwarded", forwarded_for),
    };
    // Right to left: the last field line first (the lines are one list, in
    // order), each line's entries from its end. Bytes, not text: a line is
    // read only as far as the walk goes.
    let entries = headers
        .get_all(name)
        .iter()
        .rev()
        .flat_map(|line| line.as_bytes().rsplit(|&b| b == b','));
    // Every entry trusted (internal traffic): the left-most is our own
    // proxies' word; with no entry at all, the peer.
    let mut client = peer;
    for (read, entry) in entries.enumerate() {
        if read == MAX_HOPS {
            return None;
        }
        // An entry that is not text, or not an address, ends the walk.
        let ip = canonical(hop(std::str::from_utf8(entry).ok()?)?);
        if !trusts(trusted, ip) {
            return Some(ip);
        }
        client = ip;
    }
    Some(client)
}

/// The `for=` node of one `Forwarded` element, as an address.
fn forwarded_for(element: &str) -> Option<IpAddr> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then(|| node(value.trim().trim_matches('"')))?
    })
}

/// An address from `1.2.3.4`, `1.2.3.4:80`, `[2001:db8::1]`,
/// `[2001:db8::1]:443` or a bare `2001:db8::1`.
fn node(s: &str) -> Option<IpAddr> {
    if let Some(rest) = s.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        if !(after.is_empty() || after.starts_with(':')) {
            return None;
        }
        return v6.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip);
    }
    // `1.2.3.4:port`: only IPv4 has a port without brackets.
    let (v4, port) = s.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    v4.parse::<Ipv4Addr>().ok().map(IpAddr::V4)
}

/// An IPv4-mapped IPv6 address (`::ffff:1.2.3.4`, as a dual-stack
/// listener reports IPv4 peers) as its IPv4 address.
#[inline]
pub(crate) fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// `ip` with all but its first `prefix` bits cleared.
#[inline]
pub(crate) fn mask(ip: IpAddr, prefix: u8) -> IpAddr {
    // The first `prefix` of an address' `width` bits: shifted by the
    // whole width (a prefix of 0), none.
    let kept = |width: u32| {
        u128::MAX
            .checked_shl(width - u32::from(prefix).min(width))
            .unwrap_or(0)
    };
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from_bits(v4.to_bits() & kept(32) as u32)),
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from_bits(v6.to_bits() & kept(128))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// The client's address as the layer's `decide` finds it: the peer,
    /// canonical, unless it is trusted; then the walk.
    fn client_ip(
        peer: IpAddr,
        headers: &HeaderMap,
        trusted: &[Cidr],
        forwarding: Forwarding,
    ) -> Option<IpAddr> {
        let peer = canonical(peer);
        if !trusts(trusted, peer) {
            return Some(peer);
        }
        behind_proxies(peer, headers, trusted, forwarding)
    }

    fn headers(name: &str, lines: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for line in lines {
            h.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(line).unwrap(),
            );
        }
        h
    }

    fn trusted(list: &[&str]) -> Vec<Cidr> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_forwards() {
        let h = headers("x-forwarded-for", &["9.9.9.9"]);
        let t = trusted(&["10.0.0.0/8"]);
        assert_eq!(
            client_ip(ip("127.0.0.5"), &h, &t, Forwarding::XForwardedFor),
            Some(ip("127.0.0.5"))
        );
    }

    #[test]
    fn behind_trusted_proxies_the_right_most_untrusted_entry_is_the_client() {
        let t = trusted(&["10.0.0.0/8", "127.0.0.1"]);
        let cases: &[(&[&str], Option<&str>)] = &[
            (&["1.1.1.1, 2.2.2.2"], Some("2.2.2.2")),
            (&["spoof-garbage, 3.3.3.3, 10.1.2.3"], Some("3.3.3.3")),
            (&["6.6.6.6, 3.3.3.3:8080, 10.1.2.3"], Some("3.3.3.3")),
            // Two field lines are one list, in order.
            (&["7.7.7.7", "4.4.4.4, 10.0.0.9"], Some("4.4.4.4")),
            // All trusted: the left-most, which our proxies wrote.
            (&["10.0.0.1, 10.0.0.2"], Some("10.0.0.1")),
            // Unreadable before any untrusted entry: no client.
            (&["1.1.1.1, unknown, 10.0.0.2"], None),
            (&["[2001:db8::1]:443"], Some("2001:db8::1")),
            (&["::ffff:5.5.5.5"], Some("5.5.5.5")),
        ];
        for (lines, expected) in cases {
            let h = headers("x-forwarded-for", lines);
            assert_eq!(
                client_ip(ip("127.0.0.1"), &h, &t, Forwarding::XForwardedFor),
                expected.map(ip),
                "{lines:?}"
            );
        }
        // No header at all: the peer.
        assert_eq!(
            client_ip(
                ip("127.0.0.1"),
                &HeaderMap::new(),
                &t,
                Forwarding::XForwardedFor
            ),
            Some(ip("127.0.0.1"))
        );
    }

    #[test]
    fn forwarded_elements_are_read_by_their_for_pair() {
        let t = trusted(&["127.0.0.1"]);
        let cases: &[(&str, Option<&str>)] = &[
            (
                "for=192.0.2.60;proto=http;by=203.0.113.43",
                Some("192.0.2.60"),
            ),
            (
                r#"for="[2001:db8:cafe::17]:4711""#,
                Some("2001:db8:cafe::17"),
            ),
            (
                r#"For="192.0.2.43:47011", for=198.51.100.17"#,
                Some("198.51.100.17"),
            ),
            ("for=9.9.9.9, for=unknown", None),
            ("for=_hidden", None),
        ];
        for (line, expected) in cases {
            let h = headers("forwarded", &[line]);
            assert_eq!(
                client_ip(ip("127.0.0.1"), &h, &t, Forwarding::Forwarded),
                expected.map(ip),
                "{line}"
            );
        }
    }

    /// A field line of raw bytes (`HeaderValue::from_str` takes text only).
    fn raw_headers(name: &str, lines: &[&[u8]]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for line in lines {
            h.append(
                http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(line).unwrap(),
            );
        }
        h
    }

    #[test]
    fn nothing_left_of_the_right_most_untrusted_entry_is_read() {
        let t = trusted(&["10.0.0.0/8", "127.0.0.1"]);
        let xff = |lines: &[&[u8]]| {
            let h = raw_headers("x-forwarded-for", lines);
            client_ip(ip("127.0.0.1"), &h, &t, Forwarding::XForwardedFor)
        };
        // A byte that is not text, left of the client: on its line, or on
        // a line of its own before.
        assert_eq!(xff(&[b"\xff\xfe, 3.3.3.3, 10.1.2.3"]), Some(ip("3.3.3.3")));
        assert_eq!(xff(&[b"caf\xc3\xa9", b"3.3.3.3"]), Some(ip("3.3.3.3")));
        // Any number of entries left of the client.
        let long = format!(
            "{}, 3.3.3.3, 10.0.0.9",
            vec!["1.1.1.1"; 10 * MAX_HOPS].join(", ")
        );
        assert_eq!(xff(&[long.as_bytes()]), Some(ip("3.3.3.3")));
        // Forwarded alike.
        let h = raw_headers("forwarded", &[b"for=\xff, for=_x;by=\x80, for=4.4.4.4"]);
        assert_eq!(
            client_ip(ip("127.0.0.1"), &h, &t, Forwarding::Forwarded),
            Some(ip("4.4.4.4"))
        );
        // What is right of the client (or the client) must be readable.
        assert_eq!(xff(&[b"3.3.3.3, \xff, 10.0.0.1"]), None);
        assert_eq!(xff(&[b"3.3.3.3", b"10.0.0.1 \xff"]), None);
        assert_eq!(xff(&[b"1.1.1.1, 3.3.3.3\xff, 10.0.0.1"]), None);
    }

    #[test]
    fn more_trusted_entries_than_max_hops_name_no_client() {
        let t = trusted(&["10.0.0.0/8", "127.0.0.1"]);
        let read = |entries: usize| {
            let list = format!("1.1.1.1, {}", vec!["10.0.0.1"; entries].join(", "));
            let h = headers("x-forwarded-for", &[&list]);
            client_ip(ip("127.0.0.1"), &h, &t, Forwarding::XForwardedFor)
        };
        assert_eq!(read(MAX_HOPS - 1), Some(ip("1.1.1.1")));
        assert_eq!(read(MAX_HOPS), None);
    }

    #[test]
    fn cidrs_parse_contain_and_name_bad_input() {
        let c: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(c.contains(ip("10.1.200.3")));
        assert!(c.contains(ip("::ffff:10.1.0.1")));
        assert!(!c.contains(ip("10.2.0.1")));
        assert!(!c.contains(ip("::1")));
        assert_eq!(c.to_string(), "10.1.0.0/16");
        let v6: Cidr = "2001:db8::/32".parse().unwrap();
        assert!(v6.contains(ip("2001:db8:1::5")));
        for bad in ["10.0.0.0/33", "::/129", "10.0.0/8", "x", "1.2.3.4/"] {
            let e = bad.parse::<Cidr>().unwrap_err();
            assert!(e.to_string().contains(bad), "{e}");
        }
    }

    #[test]
    fn masks_group_addresses_by_prefix() {
        assert_eq!(mask(ip("2001:db8:1:2:3:4:5:6"), 64), ip("2001:db8:1:2::"));
        assert_eq!(mask(ip("2001:db8:1:2:3:4:5:6"), 56), ip("2001:db8:1::"));
        assert_eq!(mask(ip("192.168.7.9"), 24), ip("192.168.7.0"));
        assert_eq!(mask(ip("192.168.7.9"), 32), ip("192.168.7.9"));
        assert_eq!(mask(ip("192.168.7.9"), 0), ip("0.0.0.0"));
        assert_eq!(mask(ip("::1"), 128), ip("::1"));
    }
}
