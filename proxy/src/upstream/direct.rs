//! The gateway's own calls to a supplier for video tasks (create, poll, content), made from the
//! request filter and the sweeper with Pingora's connector: the same TLS, connection pool and
//! peer options as the proxied calls, but the gateway reads the answer before the client sees
//! anything (a create's task id must be recorded before it is returned).

use crate::upstream::accounts::{self, Upstream};
use bytes::{Bytes, BytesMut};
use pingora::connectors::http::Connector;
use pingora::http::{RequestHeader, ResponseHeader};
use pingora::protocols::http::client::HttpSession;
use pingora::upstreams::peer::HttpPeer;
use settings::Server;
use std::time::Duration;

/// Idle time a pooled supplier connection is kept.
const IDLE: Duration = Duration::from_secs(60);

/// Why a call failed.
#[derive(Debug)]
pub(crate) enum CallError {
    /// Nothing reached the supplier (no connection, or a pooled connection the supplier had
    /// closed): safe to try another account.
    NotSent(String),
    /// The request may have reached the supplier; its answer did not arrive whole.
    Lost(String),
}

impl CallError {
    pub fn message(&self) -> &str {
        match self {
            CallError::NotSent(m) | CallError::Lost(m) => m,
        }
    }
}

/// Makes supplier calls (one per gateway; cheap to share).
pub(crate) struct Client {
    connector: Connector,
}

impl Default for Client {
    fn default() -> Client {
        Client {
            connector: Connector::new(None),
        }
    }
}

/// A supplier's answer whose header has arrived; the body is read from it.
pub(crate) struct Answer {
    session: HttpSession,
    peer: HttpPeer,
}

/// A request to send.
pub(crate) struct Call<'a> {
    pub method: &'static str,
    /// Path under the account's base URL, such as `/videos/abc`.
    pub suffix: &'a str,
    pub body: Option<(&'static str, Bytes)>,
    /// Extra headers to forward (`Range` of a download).
    pub headers: Vec<(http::HeaderName, String)>,
}

impl Client {
    /// Sends `call` to `upstream` and reads the answer's header.
    pub async fn send(
        &self,
        upstream: &Upstream,
        server: &Server,
        call: Call<'_>,
    ) -> Result<Answer, CallError> {
        let addr = upstream
            .address()
            .await
            .map_err(|e| CallError::NotSent(format!("cannot resolve the supplier: {e}")))?;
        let peer = accounts::peer(upstream, addr, server);
        let (mut session, reused) = self
            .connector
            .get_http_session(&peer)
            .await
            .map_err(|e| CallError::NotSent(e.to_string()))?;
        let request = request(upstream, &call).map_err(|e| CallError::NotSent(e.to_string()))?;
        // A pooled connection the supplier closed fails on its first write: nothing was sent.
        let failed = |e: Box<pingora::Error>, written: bool| {
            if reused && !written {
                CallError::NotSent(e.to_string())
            } else {
                CallError::Lost(e.to_string())
            }
        };
        session
            .write_request_header(Box::new(request))
            .await
            .map_err(|e| failed(e, false))?;
        if let Some((_, body)) = call.body {
            session
                .write_request_body(body, true)
                .await
                .map_err(|e| failed(e, true))?;
        }
        session
            .finish_request_body()
            .await
            .map_err(|e| failed(e, true))?;
        session
            .read_response_header()
            .await
            .map_err(|e| failed(e, true))?;
        Ok(Answer { session, peer })
    }

    /// Gives a finished answer's connection back to the pool (or drops it when its body was not
    /// read to the end).
    pub async fn release(&self, mut answer: Answer) {
        if answer.session.response_done() {
            self.connector
                .release_http_session(answer.session, &answer.peer, Some(IDLE))
                .await;
        } else {
            answer.session.shutdown().await;
        }
    }
}

impl Answer {
    pub fn header(&self) -> Option<&ResponseHeader> {
        self.session.response_header()
    }

    pub fn status(&self) -> u16 {
        self.header().map_or(0, |h| h.status.as_u16())
    }

    /// The next piece of the body (`None` at its end).
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, CallError> {
        self.session
            .read_response_body()
            .await
            .map_err(|e| CallError::Lost(e.to_string()))
    }

    /// The whole body, at most `limit` bytes (more is an error: a task object is small).
    pub async fn body(&mut self, limit: usize) -> Result<Bytes, CallError> {
        let mut all = BytesMut::new();
        while let Some(chunk) = self.chunk().await? {
            if all.len() + chunk.len() > limit {
                return Err(CallError::Lost(format!(
                    "the supplier's answer is larger than {limit} bytes"
                )));
            }
            all.extend_from_slice(&chunk);
        }
        Ok(all.freeze())
    }
}

/// The request line and headers of `call` for `upstream`: its path, `Host`, the account's
/// credential and nothing of the client's but what `call.headers` names.
fn request(upstream: &Upstream, call: &Call<'_>) -> pingora::Result<RequestHeader> {
    let path = upstream.path(call.suffix);
    let mut req = RequestHeader::build(call.method, path.as_bytes(), Some(8))?;
    req.insert_header(http::header::HOST, upstream.host_header.as_str())?;
    let (name, value) = &upstream.credential;
    req.insert_header(name.clone(), value.clone())?;
    req.insert_header(http::header::ACCEPT_ENCODING, "identity")?;
    if let Some((content_type, body)) = &call.body {
        req.insert_header(http::header::CONTENT_TYPE, *content_type)?;
        req.insert_header(http::header::CONTENT_LENGTH, body.len().to_string())?;
    }
    for (name, value) in &call.headers {
        req.insert_header(name.clone(), value.as_str())?;
    }
    Ok(req)
}
