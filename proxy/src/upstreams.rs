//! Supplier accounts as the proxy uses them: parsed endpoints, credentials and a small DNS cache.
//!
//! Pingora's `HttpPeer::new` resolves host names with a blocking lookup, so addresses are resolved
//! here, asynchronously, and cached for [`DNS_TTL`]. IP literals skip resolution.

use settings::Account;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a resolved address is reused.
pub const DNS_TTL: Duration = Duration::from_secs(30);

/// One supplier account, ready to connect to.
pub struct Upstream {
    pub account: Account,
    pub host: String,
    pub port: u16,
    pub tls: bool,
    /// Path of `base_url` without a trailing slash (`/v1`); route suffixes are appended.
    pub base_path: String,
    /// Value of the `Host` header sent upstream.
    pub host_header: String,
    /// Pre-built `Authorization` value, marked sensitive so no `Debug` output (Pingora logs request
    /// headers at debug level) ever shows the supplier credential.
    pub authorization: http::HeaderValue,
    resolved: Mutex<Option<(SocketAddr, Instant)>>,
}

impl Upstream {
    pub fn new(account: &Account) -> Upstream {
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
            authorization: sensitive(&format!("Bearer {}", account.api_key)),
            resolved: Mutex::new(None),
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

/// A header value hidden from `Debug` output. Settings validation guarantees visible ASCII, so the
/// fallback is unreachable in practice; it still never panics.
fn sensitive(value: &str) -> http::HeaderValue {
    let mut v = http::HeaderValue::from_str(value)
        .unwrap_or_else(|_| http::HeaderValue::from_static("invalid"));
    v.set_sensitive(true);
    v
}
