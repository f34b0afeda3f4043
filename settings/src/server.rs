//! `[server]`: the gateway's listener, public URL, environment, limits and timeouts, and the
//! files of its lifecycle (pid file, upgrade socket, usage spool).

use crate::error::{ConfigError, err};
use crate::values::socket_addr;
use serde::Deserialize;
use std::net::SocketAddr;
use url::Url;

/// The section as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawServer {
    pub listen: String,
    pub public_base_url: Option<String>,
    pub environment: Option<String>,
    pub max_body_bytes: Option<u64>,
    pub threads: Option<usize>,
    pub upstream_connect_timeout_ms: Option<u64>,
    pub upstream_read_timeout_ms: Option<u64>,
    pub request_body_timeout_ms: Option<u64>,
    pub usage_spool_dir: Option<String>,
    pub pid_file: Option<String>,
    pub shutdown_grace_ms: Option<u64>,
    pub upgrade_sock: Option<String>,
    pub server_timing: Option<bool>,
    pub trusted_proxies: Option<Vec<String>>,
}

/// Which keys this deployment accepts. A production gateway refuses development keys and the
/// other way round: a key only works in the environment it was minted for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Environment {
    Production,
    Development,
}

#[derive(Debug, Clone)]
pub struct Server {
    pub listen: SocketAddr,
    pub public_base_url: Url,
    /// Whether `public_base_url` was configured (else it is `http://{listen}`, and URLs the
    /// gateway hands out are built from the request's `Host`).
    pub public_base_url_configured: bool,
    pub environment: Environment,
    /// Largest request body the gateway reads; larger bodies answer 413.
    pub max_body_bytes: usize,
    /// Pingora worker threads.
    pub threads: usize,
    pub upstream_connect_timeout_ms: u64,
    /// Longest silence between two reads from a supplier (an SSE gap must be shorter).
    pub upstream_read_timeout_ms: u64,
    /// Longest silence between two reads of a client's request body (a stalled upload answers
    /// 408 and releases everything).
    pub request_body_timeout_ms: u64,
    /// Where the gateway keeps its recent usage events on disk (append-only files), so that they
    /// are re-sent after a restart; `None`: in memory only.
    pub usage_spool_dir: Option<std::path::PathBuf>,
    /// Where the running proxy writes its process id (`proxy --reload` signals it); default
    /// `{temp dir}/tollgate-proxy-{listen port}.pid`.
    pub pid_file: std::path::PathBuf,
    /// After `SIGTERM` (or the old process of an upgrade), how long calls in flight may take to
    /// finish before the process exits anyway; it exits as soon as none is left.
    pub shutdown_grace_ms: u64,
    /// The Unix socket over which `proxy --upgrade` receives the running proxy's listening
    /// sockets; default `{temp dir}/tollgate-upgrade-{listen port}.sock`.
    pub upgrade_sock: std::path::PathBuf,
    /// Whether gateway answers carry `Server-Timing: gateway;dur=…, upstream;dur=…` (default on).
    pub server_timing: bool,
    /// Networks whose connections are proxies in front of this service (CIDR list, default
    /// empty): from them, the client is the right-most `X-Forwarded-For` entry outside these
    /// networks (DESIGN §6c). admin-api also takes the gateway's client header from them (and
    /// from loopback).
    pub trusted_proxies: Vec<ipnet::IpNet>,
}

impl Server {
    /// Whether `ip` is one of [`Server::trusted_proxies`].
    pub fn is_trusted_proxy(&self, ip: std::net::IpAddr) -> bool {
        let ip = canonical(ip);
        self.trusted_proxies.iter().any(|n| n.contains(&ip))
    }

    /// The client of a connection from `peer` that carried `forwarded_for` (the
    /// `X-Forwarded-For` values, in order): the peer itself, or, when the peer is a trusted
    /// proxy, the right-most forwarded address that is not (every hop trusted: the left-most).
    /// An entry that is not an IP address stops the walk there: what is left of it was written
    /// by someone untrusted.
    pub fn client_ip<'a>(
        &self,
        peer: std::net::IpAddr,
        forwarded_for: impl Iterator<Item = &'a str>,
    ) -> std::net::IpAddr {
        let peer = canonical(peer);
        if !self.is_trusted_proxy(peer) {
            return peer;
        }
        let hops: Vec<&str> = forwarded_for
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .collect();
        let mut client = peer;
        for hop in hops.iter().rev() {
            match hop.parse::<std::net::IpAddr>() {
                Ok(ip) => {
                    client = canonical(ip);
                    if !self.is_trusted_proxy(client) {
                        return client;
                    }
                }
                Err(_) => return client,
            }
        }
        client
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is.
fn canonical(ip: std::net::IpAddr) -> std::net::IpAddr {
    match ip {
        std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
        v4 => v4,
    }
}

/// Validates `[server]`.
pub(crate) fn validate(s: &RawServer) -> Result<Server, ConfigError> {
    let listen = socket_addr(&s.listen, "server.listen")?;
    let public_base_url = public_base_url(s, listen)?;
    let environment = environment(s)?;
    let max_body_bytes = s.max_body_bytes.unwrap_or(32 * 1024 * 1024);
    if max_body_bytes == 0 || max_body_bytes > 1024 * 1024 * 1024 {
        return Err(err(
            "server.max_body_bytes",
            "must be between 1 and 1073741824",
        ));
    }
    let threads = s.threads.unwrap_or(2);
    if threads == 0 || threads > 256 {
        return Err(err("server.threads", "must be between 1 and 256"));
    }
    let connect = s.upstream_connect_timeout_ms.unwrap_or(5_000);
    let read = s.upstream_read_timeout_ms.unwrap_or(300_000);
    if connect == 0 {
        return Err(err(
            "server.upstream_connect_timeout_ms",
            "must be positive",
        ));
    }
    if read == 0 {
        return Err(err("server.upstream_read_timeout_ms", "must be positive"));
    }
    let body_timeout = s.request_body_timeout_ms.unwrap_or(30_000);
    if body_timeout == 0 {
        return Err(err("server.request_body_timeout_ms", "must be positive"));
    }
    let trusted_proxies = trusted_proxies(s)?;
    Ok(Server {
        trusted_proxies,
        listen,
        public_base_url,
        public_base_url_configured: s.public_base_url.is_some(),
        environment,
        max_body_bytes: usize::try_from(max_body_bytes)
            .map_err(|_| err("server.max_body_bytes", "too large for this machine"))?,
        threads,
        upstream_connect_timeout_ms: connect,
        upstream_read_timeout_ms: read,
        request_body_timeout_ms: body_timeout,
        usage_spool_dir: s
            .usage_spool_dir
            .as_deref()
            .filter(|d| !d.trim().is_empty())
            .map(std::path::PathBuf::from),
        shutdown_grace_ms: match s.shutdown_grace_ms {
            Some(ms) if ms > 3_600_000 => {
                return Err(err(
                    "server.shutdown_grace_ms",
                    "must be at most 3600000 (one hour)",
                ));
            }
            Some(ms) => ms,
            None => 30_000,
        },
        upgrade_sock: match s.upgrade_sock.as_deref().map(str::trim) {
            Some("") => return Err(err("server.upgrade_sock", "must not be empty")),
            Some(path) => std::path::PathBuf::from(path),
            None => std::env::temp_dir().join(format!("tollgate-upgrade-{}.sock", listen.port())),
        },
        server_timing: s.server_timing.unwrap_or(true),
        pid_file: match s.pid_file.as_deref().map(str::trim) {
            Some("") => return Err(err("server.pid_file", "must not be empty")),
            Some(path) => std::path::PathBuf::from(path),
            None => std::env::temp_dir().join(format!("tollgate-proxy-{}.pid", listen.port())),
        },
    })
}

/// `server.public_base_url`, else `http://{listen}`.
fn public_base_url(s: &RawServer, listen: std::net::SocketAddr) -> Result<Url, ConfigError> {
    Ok(match &s.public_base_url {
        Some(u) => {
            let url = Url::parse(u)
                .map_err(|e| err("server.public_base_url", format!("{u:?} is not a URL: {e}")))?;
            if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
                return Err(err(
                    "server.public_base_url",
                    "must be an http:// or https:// URL with a host",
                ));
            }
            url
        }
        None => Url::parse(&format!("http://{listen}"))
            .map_err(|e| err("server.listen", format!("cannot form a base URL: {e}")))?,
    })
}

/// `server.environment`: development (the default) or production.
fn environment(s: &RawServer) -> Result<Environment, ConfigError> {
    Ok(match s.environment.as_deref() {
        None | Some("development") => Environment::Development,
        Some("production") => Environment::Production,
        Some(other) => {
            return Err(err(
                "server.environment",
                format!("{other:?} is not one of \"production\", \"development\""),
            ));
        }
    })
}

/// `server.trusted_proxies`: networks in CIDR form or single addresses.
fn trusted_proxies(s: &RawServer) -> Result<Vec<ipnet::IpNet>, ConfigError> {
    let mut trusted_proxies = Vec::new();
    for (i, text) in s.trusted_proxies.iter().flatten().enumerate() {
        let text = text.trim();
        let net = text
            .parse::<ipnet::IpNet>()
            .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
            .map_err(|_| {
                err(
                    format!("server.trusted_proxies[{i}]"),
                    format!("{text:?} is not a network in CIDR form (e.g. \"10.0.0.0/8\") or an IP address"),
                )
            })?;
        trusted_proxies.push(net.trunc());
    }
    Ok(trusted_proxies)
}
