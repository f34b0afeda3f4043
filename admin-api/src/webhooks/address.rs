//! Where a webhook may be delivered (issue 45; `../shared/TESTING.md` S-5): `https` URLs of public
//! addresses only, unless `[webhooks] allow_private_addresses = true` (development and tests),
//! which also allows `http`. A URL is checked when it is registered ([`check_url`]: scheme, no
//! credentials, a host, no IP literal of a private range) and again at every delivery after DNS
//! resolution ([`is_public`] over every address the name resolves to); the delivery then connects
//! to the address it checked (no second lookup), follows no redirect and is bounded in time and
//! size (`webhooks::send`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use url::{Host, Url};

/// Longest URL accepted, in bytes.
pub const MAX_URL_BYTES: usize = 2048;

/// Why a URL is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlRefused {
    #[error("the URL is not a valid absolute URL")]
    Invalid,
    #[error("the URL is longer than {MAX_URL_BYTES} bytes")]
    TooLong,
    #[error("the URL must use https")]
    NotHttps,
    #[error("the URL must not carry a user name or password")]
    Credentials,
    #[error("the URL must name a public host, not a private, loopback or link-local address")]
    Private,
}

/// Whether `ip` is an address anyone on the internet could reach: not loopback, private (RFC
/// 1918), shared (100.64/10), link-local (169.254/16, including cloud metadata; fe80::/10),
/// unique-local (fc00::/7), unspecified, multicast, broadcast, documentation or benchmarking
/// ranges, nor an IPv4-mapped, -compatible or NAT64 IPv6 form of one of those.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => public_v4(v4),
        IpAddr::V6(v6) => public_v6(v6),
    }
}

fn public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || ip.is_documentation()
        || a == 0
        || (a == 100 && (64..128).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 198 && (b == 18 || b == 19))
        || a >= 240)
}

fn public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return public_v4(v4);
    }
    let s = ip.segments();
    // IPv4-compatible (::a.b.c.d, deprecated) and NAT64 (64:ff9b::/96) forms reach IPv4 hosts.
    if s[..6] == [0; 6] || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        let v4 = Ipv4Addr::new(
            (s[6] >> 8) as u8,
            (s[6] & 0xff) as u8,
            (s[7] >> 8) as u8,
            (s[7] & 0xff) as u8,
        );
        return !ip.is_unspecified() && !ip.is_loopback() && public_v4(v4);
    }
    !(ip.is_unspecified()
        || ip.is_loopback()
        || ip.is_multicast()
        || (s[0] & 0xfe00) == 0xfc00
        || (s[0] & 0xffc0) == 0xfe80
        || (s[0] & 0xffc0) == 0xfec0
        || (s[0] == 0x2001 && s[1] == 0x0db8)
        || (s[0] == 0x2001 && s[1] < 0x0200)
        || s[0] == 0x0100 && s[1..4] == [0, 0, 0])
}

/// The URL `text`, if a webhook may be registered for it: `https` (or `http` with
/// `allow_private`), a host, no credentials, and — without `allow_private` — no IP literal outside
/// the public ranges and no `localhost` name. A public name is checked again after resolution at
/// every delivery.
pub fn check_url(text: &str, allow_private: bool) -> Result<Url, UrlRefused> {
    if text.len() > MAX_URL_BYTES {
        return Err(UrlRefused::TooLong);
    }
    let url = Url::parse(text).map_err(|_| UrlRefused::Invalid)?;
    match url.scheme() {
        "https" => {}
        "http" if allow_private => {}
        _ => return Err(UrlRefused::NotHttps),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(UrlRefused::Credentials);
    }
    let host = url.host().ok_or(UrlRefused::Invalid)?;
    if !allow_private {
        let public = match host {
            Host::Ipv4(ip) => public_v4(ip),
            Host::Ipv6(ip) => public_v6(ip),
            Host::Domain(name) => {
                let name = name.trim_end_matches('.').to_ascii_lowercase();
                name != "localhost" && !name.ends_with(".localhost") && name.contains('.')
            }
        };
        if !public {
            return Err(UrlRefused::Private);
        }
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn private_and_special_addresses_are_not_public() {
        for ip in [
            "127.0.0.1",
            "127.1.2.3",
            "10.0.0.1",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "255.255.255.255",
            "192.0.2.1",
            "198.18.0.1",
            "240.0.0.1",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "2001:db8::1",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "93.184.216.34",
            "8.8.8.8",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn urls_are_checked_before_registration() {
        for (url, why) in [
            ("http://hooks.example.com/x", UrlRefused::NotHttps),
            ("file:///etc/passwd", UrlRefused::NotHttps),
            ("gopher://hooks.example.com/", UrlRefused::NotHttps),
            ("https://user@hooks.example.com/", UrlRefused::Credentials),
            (
                "https://user@good.example@127.0.0.1/",
                UrlRefused::Credentials,
            ),
            ("https://127.0.0.1/", UrlRefused::Private),
            ("https://2130706433/", UrlRefused::Private),
            ("https://0x7f.0.0.1/", UrlRefused::Private),
            ("https://127.1/", UrlRefused::Private),
            ("https://[::1]/", UrlRefused::Private),
            ("https://[::ffff:127.0.0.1]/", UrlRefused::Private),
            (
                "https://169.254.169.254/latest/meta-data",
                UrlRefused::Private,
            ),
            ("https://localhost/", UrlRefused::Private),
            ("https://api.localhost/", UrlRefused::Private),
            ("https://intranet/", UrlRefused::Private),
            ("not a url", UrlRefused::Invalid),
        ] {
            assert_eq!(check_url(url, false).err(), Some(why), "{url}");
        }
        assert!(check_url("https://hooks.example.com/tollgate?x=1", false).is_ok());
        assert!(check_url("https://93.184.216.34/", false).is_ok());
        assert!(check_url("http://127.0.0.1:8080/hook", true).is_ok());
        assert_eq!(
            check_url(
                &format!("https://a.example/{}", "x".repeat(MAX_URL_BYTES)),
                false
            )
            .err(),
            Some(UrlRefused::TooLong)
        );
    }

    proptest! {
        /// No loopback, private, link-local or unique-local address is ever public, in any form.
        #[test]
        fn no_private_address_is_public(a in any::<u32>(), tail in any::<u64>()) {
            let v4 = Ipv4Addr::from(a);
            if v4.is_loopback() || v4.is_private() || v4.is_link_local() || v4.is_unspecified() {
                prop_assert!(!is_public(IpAddr::V4(v4)));
                prop_assert!(!is_public(IpAddr::V6(v4.to_ipv6_mapped())));
                prop_assert!(!is_public(IpAddr::V6(v4.to_ipv6_compatible())));
            }
            let ula = Ipv6Addr::from((0xfd00u128 << 112) | u128::from(tail));
            let link = Ipv6Addr::from((0xfe80u128 << 112) | u128::from(tail));
            prop_assert!(!is_public(IpAddr::V6(ula)));
            prop_assert!(!is_public(IpAddr::V6(link)));
        }
    }
}
