//! Phase 5, rewriting the headers: the customer's request header becomes the supplier's, and the
//! supplier's response header is cleaned for the customer.
//!
//! Only an allowlist of the customer's headers is forwarded ([`FORWARD_REQUEST`]); the account's
//! credential, `Host` and the body's `Content-Length` are set, and `Accept-Encoding` is forced to
//! `identity` so the meter can read the supplier's answer. The body itself is the wire format's
//! (`wire`): the rewritten body is substituted on every attempt by [`substitute_body`].

use crate::classify::Route;
use crate::upstream::Upstream;
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};

/// The client request headers a supplier account receives (OpenAI wire format): what the body
/// means (`content-type`), what the client accepts (`accept`) and the API's opt-in features
/// (`openai-beta`), plus the account's own `forward_headers`. Everything else a client sends (its credential, cookies, attribution, SDK
/// telemetry, hop-by-hop and forwarding headers, anything unknown) stays at the gateway; the
/// gateway adds the account's credential, `Host`, `Accept-Encoding` and `Content-Length`.
const FORWARD_REQUEST: [&str; 3] = ["content-type", "accept", "openai-beta"];

/// Supplier response headers never shown to customers (they identify the supplier account).
const STRIP_RESPONSE: [&str; 3] = ["openai-organization", "openai-project", "set-cookie"];

/// Rewrites the request header for `upstream`: path, credential, host, framing.
pub(crate) fn upstream_request(
    req: &mut RequestHeader,
    upstream: &Upstream,
    route: Route,
    body_len: usize,
) -> pingora::Result<()> {
    let unwanted: Vec<http::HeaderName> = req
        .headers
        .keys()
        .filter(|name| {
            let name = name.as_str();
            !FORWARD_REQUEST.contains(&name)
                && !upstream.account.forward_headers.iter().any(|h| h == name)
        })
        .cloned()
        .collect();
    for name in unwanted {
        req.remove_header(&name);
    }
    let path = upstream.path(route.upstream_suffix());
    let uri = http::Uri::builder()
        .path_and_query(path.as_str())
        .build()
        .map_err(|e| {
            pingora::Error::because(pingora::ErrorType::InternalError, "upstream uri", e)
        })?;
    req.set_uri(uri);
    req.insert_header(http::header::AUTHORIZATION, upstream.authorization.clone())?;
    req.insert_header(http::header::HOST, upstream.host_header.as_str())?;
    req.insert_header(http::header::ACCEPT_ENCODING, "identity")?;
    req.insert_header(http::header::CONTENT_LENGTH, body_len.to_string())?;
    Ok(())
}

/// Cleans the supplier's response header before it reaches the client and tags it with the
/// gateway's request id.
pub(crate) fn downstream_response(
    resp: &mut ResponseHeader,
    request_id: &str,
) -> pingora::Result<()> {
    for name in STRIP_RESPONSE {
        resp.remove_header(name);
    }
    resp.insert_header("x-request-id", request_id)?;
    Ok(())
}

/// Substitutes the full body on each upstream attempt. Pingora replays its retry buffer (the
/// body's tail) as one chunk with `end_of_stream = true`; anything else is dropped.
pub(crate) fn substitute_body(body: &mut Option<Bytes>, end_of_stream: bool, full: &Bytes) {
    *body = if end_of_stream {
        Some(full.clone())
    } else {
        Some(Bytes::new())
    };
}
