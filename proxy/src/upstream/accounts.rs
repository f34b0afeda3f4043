//! Supplier accounts as the proxy uses them: parsed endpoints, credentials, a small DNS cache, and
//! the connection options of a peer.
//!
//! Pingora's `HttpPeer::new` resolves host names with a blocking lookup, so addresses are resolved
//! here, asynchronously, and cached for [`DNS_TTL`]. IP literals skip resolution.

use pingora::upstreams::peer::HttpPeer;
use settings::{Account, Provider, Server};
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a resolved address is reused.
pub const DNS_TTL: Duration = Duration::from_secs(30);

/// One supplier account, ready to connect to.
pub(crate) struct Upstream {
    pub account: Account,
    pub host: String,
    pub port: u16,
    pub tls: bool,
    /// Path of `base_url` without a trailing slash (`/v1`); route suffixes are appended.
    pub base_path: String,
    /// Value of the `Host` header sent upstream.
    pub host_header: String,
    /// The credential header of the account's provider (`Authorization: Bearer` for openai,
    /// `x-api-key` for anthropic, `x-goog-api-key` for gemini), its value marked sensitive so no
    /// `Debug` output (Pingora logs request headers at debug level) ever shows it.
    pub credential: (http::HeaderName, http::HeaderValue),
    resolved: Mutex<Option<(SocketAddr, Instant)>>,
    /// This proxy's estimate of the account's capacity (see [`Estimate`]).
    pub estimate: Estimate,
}

/// The capacity of an account as this proxy estimates it from the account's health: its
/// `max_concurrency` while it answers well; halved (at least 1) each time it answers 429 or
/// fails (a 5xx, a connection failure); then one slot back per `routing.health_recovery_ms`
/// without a new cut, up to `max_concurrency` (multiplicative decrease, additive recovery).
/// Each proxy estimates from what it sees; the slots themselves are shared.
pub(crate) struct Estimate {
    max: u32,
    recovery: Duration,
    /// Slots cut, as of the instant of the last cut.
    cut: Mutex<(u32, Instant)>,
}

impl Estimate {
    fn new(max: u32, recovery: Duration) -> Estimate {
        Estimate {
            max,
            recovery: recovery.max(Duration::from_millis(1)),
            cut: Mutex::new((0, Instant::now())),
        }
    }

    /// The estimated capacity now.
    pub fn now(&self) -> u32 {
        let Ok(cut) = self.cut.lock() else {
            return self.max;
        };
        let (slots, at) = *cut;
        if slots == 0 {
            return self.max;
        }
        let recovered = at.elapsed().as_millis() / self.recovery.as_millis().max(1);
        let left = u32::try_from(u128::from(slots).saturating_sub(recovered)).unwrap_or(0);
        self.max.saturating_sub(left).max(1)
    }

    /// Takes over the state of `old` (the same account before a reload): the same estimate now,
    /// at most this account's `max_concurrency`, recovering from here.
    pub fn inherit(&self, old: &Estimate) {
        let now = old.now().min(self.max);
        if now < self.max
            && let Ok(mut cut) = self.cut.lock()
        {
            *cut = (self.max - now, Instant::now());
        }
    }

    /// The account answered 429 or failed: halve the estimate. Returns the new estimate.
    pub fn cut(&self) -> u32 {
        let halved = (self.now() / 2).max(1);
        if let Ok(mut cut) = self.cut.lock() {
            *cut = (self.max.saturating_sub(halved), Instant::now());
        }
        halved
    }
}

impl Upstream {
    /// Account `account`, its capacity recovering one slot per `recovery` after a cut.
    pub fn new(account: &Account, recovery: Duration) -> Upstream {
        let url = &account.base_url;
        let tls = url.scheme() == "https";
        let host = url
            .host_str()
            .unwrap_or_default()
            .trim_matches(['[', ']'])
            .to_string();
        let port = url
            .port_or_known_default()
            .unwrap_or(if tls { 443 } else { 80 });
        let default_port = if tls { 443 } else { 80 };
        let host_header = match url.port() {
            Some(p) if p != default_port => format!("{}:{p}", url.host_str().unwrap_or_default()),
            _ => url.host_str().unwrap_or_default().to_string(),
        };
        Upstream {
            account: account.clone(),
            host,
            port,
            tls,
            base_path: url.path().trim_end_matches('/').to_string(),
            host_header,
            credential: credential(account),
            resolved: Mutex::new(None),
            estimate: Estimate::new(account.max_concurrency, recovery),
        }
    }

    /// The address to connect to, resolving (and caching) the host name when needed.
    pub async fn address(&self) -> std::io::Result<SocketAddr> {
        if let Ok(ip) = self.host.parse::<IpAddr>() {
            return Ok(SocketAddr::new(ip, self.port));
        }
        if let Ok(guard) = self.resolved.lock()
            && let Some((addr, at)) = *guard
            && at.elapsed() < DNS_TTL
        {
            return Ok(addr);
        }
        let addr = tokio::net::lookup_host((self.host.as_str(), self.port))
            .await?
            .next()
            .ok_or_else(|| std::io::Error::other(format!("{} has no address", self.host)))?;
        if let Ok(mut guard) = self.resolved.lock() {
            *guard = Some((addr, Instant::now()));
        }
        Ok(addr)
    }

    /// The upstream path for a route suffix such as `/chat/completions`.
    pub fn path(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.base_path)
    }
}

/// Every configured account, in configuration order; requests refer to an account by its index.
pub(crate) struct Accounts {
    list: Vec<Upstream>,
    ids: Vec<String>,
}

impl Accounts {
    /// The accounts, their capacity estimates recovering one slot per `recovery` after a cut.
    pub fn new(accounts: &[Account], recovery: Duration) -> Accounts {
        let list: Vec<Upstream> = accounts
            .iter()
            .map(|a| Upstream::new(a, recovery))
            .collect();
        let ids = list.iter().map(|u| u.account.id.clone()).collect();
        Accounts { list, ids }
    }

    pub fn get(&self, i: usize) -> Option<&Upstream> {
        self.list.get(i)
    }

    pub fn all(&self) -> &[Upstream] {
        &self.list
    }

    /// The id of account `i`.
    pub fn id(&self, i: usize) -> Option<&str> {
        self.ids.get(i).map(String::as_str)
    }

    /// Every account id, indexed like the accounts.
    pub fn ids(&self) -> Vec<&str> {
        self.ids.iter().map(String::as_str).collect()
    }
}

/// The peer for one attempt at `upstream` on `addr`, with the server's timeouts; certificates and
/// host names are always verified.
pub(crate) fn peer(upstream: &Upstream, addr: SocketAddr, server: &Server) -> HttpPeer {
    let mut peer = HttpPeer::new(addr, upstream.tls, upstream.host.clone());
    options(&mut peer, server);
    peer
}

/// The peer for an admin route: admin-api at `addr`, in plain HTTP on loopback or a private link.
pub(crate) fn admin_peer(addr: SocketAddr, server: &Server) -> HttpPeer {
    let mut peer = HttpPeer::new(addr, false, String::new());
    options(&mut peer, server);
    peer
}

/// The connection options every peer gets (suppliers and admin-api alike).
pub(crate) fn options(peer: &mut HttpPeer, server: &Server) {
    peer.options.connection_timeout =
        Some(Duration::from_millis(server.upstream_connect_timeout_ms));
    peer.options.read_timeout = Some(Duration::from_millis(server.upstream_read_timeout_ms));
    peer.options.write_timeout = Some(Duration::from_millis(server.upstream_read_timeout_ms));
    peer.options.verify_cert = true;
    peer.options.verify_hostname = true;
}

/// The credential header an account's provider expects.
fn credential(account: &Account) -> (http::HeaderName, http::HeaderValue) {
    match account.provider {
        Provider::OpenAi => (
            http::header::AUTHORIZATION,
            sensitive(&format!("Bearer {}", account.api_key)),
        ),
        Provider::Anthropic => (
            http::HeaderName::from_static("x-api-key"),
            sensitive(&account.api_key),
        ),
        Provider::Gemini => (
            http::HeaderName::from_static("x-goog-api-key"),
            sensitive(&account.api_key),
        ),
    }
}

/// A header value hidden from `Debug` output. Settings validation guarantees visible ASCII, so the
/// fallback is unreachable in practice; it still never panics.
fn sensitive(value: &str) -> http::HeaderValue {
    let mut v = http::HeaderValue::from_str(value)
        .unwrap_or_else(|_| http::HeaderValue::from_static("invalid"));
    v.set_sensitive(true);
    v
}

#[cfg(test)]
mod estimate_tests {
    use super::Estimate;
    use std::time::Duration;

    #[test]
    fn halves_on_each_cut_and_recovers_one_slot_per_period() {
        let e = Estimate::new(8, Duration::from_millis(40));
        assert_eq!(e.now(), 8);
        assert_eq!(e.cut(), 4);
        assert_eq!(e.cut(), 2);
        assert_eq!(e.cut(), 1);
        assert_eq!(e.cut(), 1, "never below one slot");
        std::thread::sleep(Duration::from_millis(130));
        let recovered = e.now();
        assert!(
            (4..=8).contains(&recovered),
            "{recovered}: three periods, +1 each"
        );
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(e.now(), 8, "back to max_concurrency, never above");
        // A cut while recovering halves what is estimated now.
        let e = Estimate::new(10, Duration::from_secs(3600));
        assert_eq!(e.cut(), 5);
        assert_eq!(e.now(), 5);
        assert_eq!(e.cut(), 2);
    }
}
