//! Phase 5, rewriting the headers: the customer's request header becomes the supplier's, and the
//! supplier's response header is cleaned for the customer.
//!
//! Only an allowlist of the customer's headers is forwarded ([`forwarded`]); the account's
//! credential (its provider's header), `Host` and the body's `Content-Length` are set, and
//! `Accept-Encoding` is forced to `identity` so the meter can read the supplier's answer. The body
//! itself is the wire format's (`wire`): the body for the account's format is substituted on every
//! attempt by [`substitute_body`].

use crate::classify::Route;
use crate::upstream::Upstream;
use crate::wire::cells::{self, Bodies};
use bytes::Bytes;
use pingora::http::RequestHeader;
use translate::Format;

/// The client request headers a supplier account receives: what the body means
/// (`content-type`), what the client accepts (`accept`) and the opt-in features of the API the
/// account speaks (`openai-beta`; `anthropic-version`, `anthropic-beta`), plus the account's own
/// `forward_headers`. Everything else a client sends (its credential, cookies, attribution, SDK
/// telemetry, hop-by-hop and forwarding headers, anything unknown) stays at the gateway; the
/// gateway adds the account's credential, `Host`, `Accept-Encoding` and `Content-Length`.
fn forwarded(target: Option<Format>) -> &'static [&'static str] {
    match target {
        None | Some(Format::Chat | Format::Responses) => &["content-type", "accept", "openai-beta"],
        Some(Format::Messages) => &[
            "content-type",
            "accept",
            "anthropic-version",
            "anthropic-beta",
        ],
        Some(Format::Gemini) => &["content-type", "accept"],
    }
}

/// The Messages API version sent when the client named none (the one the official SDK sends).
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// What the upstream request is for: the client's route, the format spoken to the account, the
/// supplier's model id, whether it streams, and the body's length.
pub(crate) struct Target<'a> {
    pub route: Route,
    pub format: Option<Format>,
    pub model: &'a str,
    pub stream: bool,
    pub body_len: usize,
}

/// Rewrites the request header of a call of `model` (`stream`ed or not) for `upstream` (see
/// [`upstream_request`]) and returns the format spoken to it and the body to send it: the one of
/// `bodies` in that format.
pub(crate) fn for_account(
    req: &mut RequestHeader,
    upstream: &Upstream,
    route: Route,
    (bodies, model, stream): (&Bodies, &str, bool),
) -> pingora::Result<(Option<Format>, Bytes)> {
    let format = cells::target(upstream.account.provider, route);
    let Some(body) = bodies.get(format) else {
        return pingora::Error::e_explain(
            pingora::ErrorType::InternalError,
            "no body for the account's format",
        );
    };
    let target = Target {
        route,
        format,
        model,
        stream,
        body_len: body.len(),
    };
    upstream_request(req, upstream, &target)?;
    Ok((format, body.clone()))
}

/// Rewrites the request header for `upstream`: path, credential, host, framing.
pub(crate) fn upstream_request(
    req: &mut RequestHeader,
    upstream: &Upstream,
    target: &Target<'_>,
) -> pingora::Result<()> {
    let allowed = forwarded(target.format);
    let unwanted: Vec<http::HeaderName> = req
        .headers
        .keys()
        .filter(|name| {
            let name = name.as_str();
            !allowed.contains(&name) && !upstream.account.forward_headers.iter().any(|h| h == name)
        })
        .cloned()
        .collect();
    for name in unwanted {
        req.remove_header(&name);
    }
    let suffix = cells::upstream_path(
        target.route,
        target.format,
        target.model,
        target.stream,
        req.uri.query(),
    );
    let path = upstream.path(&suffix);
    let uri = http::Uri::builder()
        .path_and_query(path.as_str())
        .build()
        .map_err(|e| {
            pingora::Error::because(pingora::ErrorType::InternalError, "upstream uri", e)
        })?;
    req.set_uri(uri);
    let (name, value) = &upstream.credential;
    req.insert_header(name.clone(), value.clone())?;
    if target.format == Some(Format::Messages) && req.headers.get("anthropic-version").is_none() {
        req.insert_header("anthropic-version", ANTHROPIC_VERSION)?;
    }
    if (target.format.is_some() && target.format != target.route.format())
        || target.route == Route::VideoCreate
    {
        // A body the gateway made in another format (a translation, an image call or multipart
        // edit turned into generateContent, a video create in its supplier's API) is JSON
        // whatever the client sent.
        req.insert_header(http::header::CONTENT_TYPE, "application/json")?;
    }
    req.insert_header(http::header::HOST, upstream.host_header.as_str())?;
    req.insert_header(http::header::ACCEPT_ENCODING, "identity")?;
    req.insert_header(http::header::CONTENT_LENGTH, target.body_len.to_string())?;
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

/// The header admin-api reads the client's address from (`admin-api` `console::client_ip`).
pub const CLIENT_ADDRESS: &str = "x-tollgate-client-ip";

/// An admin route's request to admin-api: [`CLIENT_ADDRESS`] set to the client's IP address (a
/// value the client sent in that header is replaced, never passed on): the TCP peer, or, when the
/// peer is one of `[server] trusted_proxies`, the right-most untrusted `X-Forwarded-For` entry.
pub(crate) fn client_address(
    req: &mut RequestHeader,
    client: Option<&pingora::protocols::l4::socket::SocketAddr>,
    server: &settings::Server,
) -> pingora::Result<()> {
    req.remove_header(CLIENT_ADDRESS);
    if let Some(peer) = client.and_then(|a| a.as_inet()).map(|a| a.ip()) {
        let forwarded = req
            .headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok());
        let ip = server.client_ip(peer, forwarded).to_string();
        req.insert_header(CLIENT_ADDRESS, ip)?;
    }
    Ok(())
}
