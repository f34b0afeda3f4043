//! One delivery over HTTP(S) under the SSRF rules (`webhooks::address`): the URL is checked again,
//! the host is resolved by this module's resolver, which refuses the whole delivery when any
//! address it resolves to is not public (unless private addresses are allowed), and the
//! connection goes to the addresses it checked (hyper's connector asks this resolver and no one
//! else: no second lookup for a rebinding name to change). No redirect is followed (a 3xx is the
//! receiver's answer, recorded as a failure). Bounded: 5 s to connect, [`TIMEOUT`] in all, the
//! first [`KEPT_BYTES`] of the answer kept and at most [`READ_BYTES`] read.

use super::address::{self, UrlRefused};
use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::dns::Name;
use hyper_util::rt::TokioExecutor;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// A delivery's whole time: connect, send, answer.
pub const TIMEOUT: Duration = Duration::from_secs(10);
/// The answer's first bytes kept in the delivery log.
pub const KEPT_BYTES: usize = 512;
/// The most of an answer read before the connection is dropped.
pub const READ_BYTES: usize = 64 * 1024;

/// What a receiver did with a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// It answered `status` with these first bytes.
    Status { status: u16, first_bytes: String },
    /// No answer: refused address, connection failure or timeout (why).
    Failed(String),
}

impl Answer {
    pub fn succeeded(&self) -> bool {
        matches!(self, Answer::Status { status, .. } if (200..300).contains(status))
    }
}

/// The resolver the connector uses: every address a name resolves to must be public, unless
/// private ones are allowed.
#[derive(Clone)]
struct Checked {
    allow_private: bool,
}

type Resolving =
    Pin<Box<dyn Future<Output = Result<std::vec::IntoIter<SocketAddr>, std::io::Error>> + Send>>;

impl tower::Service<Name> for Checked {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = Resolving;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((name.as_str(), 0)).await?.collect();
            if found.is_empty() {
                return Err(std::io::Error::other("the name resolves to no address"));
            }
            if !allow_private && found.iter().any(|a| !address::is_public(a.ip())) {
                return Err(std::io::Error::other(
                    "the name resolves to a private, loopback or link-local address",
                ));
            }
            Ok(found.into_iter())
        })
    }
}

/// The HTTPS client of webhook deliveries.
pub struct Sender {
    http: Client<hyper_rustls::HttpsConnector<HttpConnector<Checked>>, Full<Bytes>>,
    allow_private: bool,
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sender")
            .field("allow_private", &self.allow_private)
            .finish_non_exhaustive()
    }
}

impl Sender {
    pub fn new(allow_private: bool) -> Result<Sender, String> {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("webhooks: TLS set-up: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let mut tcp = HttpConnector::new_with_resolver(Checked { allow_private });
        tcp.enforce_http(false);
        tcp.set_connect_timeout(Some(Duration::from_secs(5)));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(tcp);
        // No pooled connections: each delivery resolves and checks its address afresh.
        let http = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(0)
            .build(connector);
        Ok(Sender {
            http,
            allow_private,
        })
    }

    /// POSTs `body` to `url` with `headers` (name, value); never follows a redirect.
    pub async fn post(&self, url: &str, headers: &[(&str, String)], body: Bytes) -> Answer {
        let url = match address::check_url(url, self.allow_private) {
            Ok(u) => u,
            Err(UrlRefused::Private) => {
                return Answer::Failed("refused: not a public address".into());
            }
            Err(e) => return Answer::Failed(format!("refused: {e}")),
        };
        let mut request = http::Request::builder()
            .method(http::Method::POST)
            .uri(url.as_str())
            .header("content-type", "application/json")
            .header("user-agent", "Tollgate-Webhooks/1");
        for (name, value) in headers {
            request = request.header(*name, value.as_str());
        }
        let request = match request.body(Full::new(body)) {
            Ok(r) => r,
            Err(e) => return Answer::Failed(format!("refused: {e}")),
        };
        let call = async {
            let resp = self.http.request(request).await.map_err(|e| describe(&e))?;
            let status = resp.status().as_u16();
            let mut first = Vec::new();
            let mut body = Limited::new(resp.into_body(), READ_BYTES);
            while first.len() < KEPT_BYTES {
                match body.frame().await {
                    Some(Ok(frame)) => {
                        if let Some(data) = frame.data_ref() {
                            first.extend_from_slice(data);
                        }
                    }
                    _ => break,
                }
            }
            first.truncate(KEPT_BYTES);
            Ok::<_, String>(Answer::Status {
                status,
                first_bytes: String::from_utf8_lossy(&first).into_owned(),
            })
        };
        match tokio::time::timeout(TIMEOUT, call).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(why)) => Answer::Failed(why),
            Err(_) => Answer::Failed(format!("no answer within {} s", TIMEOUT.as_secs())),
        }
    }
}

/// A connection error with its causes, one line.
fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
