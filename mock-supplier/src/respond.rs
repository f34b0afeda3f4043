//! Response plumbing shared by every route: the recorder handle of the
//! request being answered ([`Rec`]), complete and streamed (possibly cut)
//! responses, the per-request view handed to the routes ([`Req`]), the wire
//! format a path belongs to ([`Wire`]) with its error shape, and the parsing
//! of the `x-mock-events` / `x-mock-delay-ms` / `x-mock-usage` headers.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, HeaderName, HeaderValue};
use http::{HeaderMap, Method, StatusCode};

use crate::reply::{DEFAULT_EVENTS, MAX_EVENTS, Usage};
use crate::shared::{MAX_DELAY_MS, Shared};

/// Pause before aborting a cut response, so hyper flushes what was sent.
const CUT_FLUSH_PAUSE: Duration = Duration::from_millis(5);

/// The wire format (and so the error shape and auth header) of a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Wire {
    /// Everything not claimed below: `/v1/models`, `/v1/chat/completions`,
    /// `/v1/responses`, `/v1/audio/transcriptions` and unknown paths.
    OpenAi,
    /// `/v1/messages` and everything under `/v1/messages/`.
    Anthropic,
    /// Everything under `/v1beta/`, and `/v1/models/{model}:ACTION`.
    Gemini,
}

impl Wire {
    /// The wire format of a request path (without the query).
    pub(crate) fn of(path: &str) -> Wire {
        if path == "/v1/messages"
            || path.starts_with("/v1/messages/")
            || path.starts_with("/v1/organizations/")
        {
            Wire::Anthropic
        } else if path == "/v1beta"
            || path.starts_with("/v1beta/")
            || path
                .strip_prefix("/v1/models/")
                .is_some_and(|rest| rest.contains(':'))
        {
            Wire::Gemini
        } else {
            Wire::OpenAi
        }
    }

    /// The error body this wire format answers with for a request the mock
    /// rejects itself (validation, routing, bad `x-mock-*` headers).
    pub(crate) fn error_body(self, status: StatusCode, message: &str) -> Bytes {
        match self {
            Wire::OpenAi => crate::reply::error_body(message, "invalid_request_error", None),
            Wire::Anthropic => crate::anthropic::error_body(status.as_u16(), message),
            Wire::Gemini => crate::gemini::error_body(status.as_u16(), message, None),
        }
    }
}

/// A 400 in the OpenAI wire format.
pub(crate) fn bad_request(rec: &Rec, message: &str) -> Response {
    error(rec, Wire::OpenAi, StatusCode::BAD_REQUEST, message)
}

/// An error response in the request's wire format.
pub(crate) fn error(rec: &Rec, wire: Wire, status: StatusCode, message: &str) -> Response {
    let body = wire.error_body(status, message);
    full(rec, status, "application/json", body, Vec::new())
}

/// What a route needs to know about the request it answers.
pub(crate) struct Req<'a> {
    pub(crate) rec: &'a Rec,
    pub(crate) method: &'a Method,
    /// The path without the query.
    pub(crate) path: &'a str,
    /// The query string, if any.
    pub(crate) query: Option<&'a str>,
    pub(crate) headers: &'a HeaderMap,
    pub(crate) body: &'a Bytes,
    /// `cut_after=N` fault.
    pub(crate) cut_after: Option<usize>,
    /// `error_after=N` fault.
    pub(crate) error_after: Option<usize>,
    /// `malformed_sse` fault.
    pub(crate) malformed: bool,
}

impl Req<'_> {
    /// A stream's events as its fault makes them: the first `cut_after` (then the connection is
    /// cut), or the first `error_after` and the format's error event (`anthropic`: Anthropic's).
    pub(crate) fn fault_events(&self, events: &mut Vec<Bytes>, anthropic: bool) {
        if let Some(keep) = self.cut_after {
            events.truncate(keep);
        }
        if let Some(keep) = self.error_after {
            events.truncate(keep);
            events.push(crate::reply::stream_error(anthropic));
        }
    }
}

impl Req<'_> {
    /// The value of query parameter `name` (not percent-decoded).
    pub(crate) fn query_param(&self, name: &str) -> Option<&str> {
        self.query?
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v)
    }
}

/// Largest `x-mock-pad-bytes`.
pub(crate) const MAX_PAD_BYTES: u64 = 256 * 1024 * 1024;

/// The reply parameters taken from the `x-mock-*` headers.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Params {
    /// Content pieces (`x-mock-events`).
    pub(crate) n: usize,
    /// Pause between stream events (`x-mock-delay-ms`).
    pub(crate) delay: Duration,
    /// Usage to report (defaults plus `x-mock-usage`).
    pub(crate) usage: Usage,
    /// Bytes of padding appended to the reply's text (`x-mock-pad-bytes`).
    pub(crate) pad: usize,
}

/// Parses `x-mock-events`, `x-mock-delay-ms` and `x-mock-usage` for a request
/// body of `body_len` bytes.
pub(crate) fn params(headers: &HeaderMap, body_len: usize) -> Result<Params, String> {
    let n = numeric_header(
        headers,
        "x-mock-events",
        DEFAULT_EVENTS as u64,
        MAX_EVENTS as u64,
    )?;
    let delay = numeric_header(headers, "x-mock-delay-ms", 0, MAX_DELAY_MS)?;
    let pad = numeric_header(headers, "x-mock-pad-bytes", 0, MAX_PAD_BYTES)?;
    let n = usize::try_from(n).unwrap_or(MAX_EVENTS);
    let mut usage = Usage::defaults(body_len, n);
    if let Some(h) = headers.get("x-mock-usage") {
        let h = h
            .to_str()
            .map_err(|_| "x-mock-usage is not valid text".to_owned())?;
        usage = usage.with_header(h)?;
    }
    Ok(Params {
        n,
        delay: Duration::from_millis(delay),
        usage,
        pad: usize::try_from(pad).unwrap_or(0),
    })
}

/// Handle on the recorder entry of the request being answered.
#[derive(Clone)]
pub(crate) struct Rec {
    pub(crate) shared: Arc<Shared>,
    pub(crate) index: usize,
}

impl Rec {
    pub(crate) fn status(&self, status: StatusCode) {
        self.shared.recorder.set_status(self.index, status.as_u16());
    }

    pub(crate) fn append(&self, bytes: &[u8]) {
        self.shared.recorder.append_body(self.index, bytes);
    }
}

/// Extra response headers.
pub(crate) type Extra = Vec<(HeaderName, String)>;

pub(crate) fn base_response(
    shared: &Shared,
    status: StatusCode,
    content_type: &str,
    body: Body,
) -> Response {
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(content_type) {
        headers.insert(CONTENT_TYPE, v);
    }
    if let Ok(v) = HeaderValue::from_str(&shared.config.name) {
        headers.insert(HeaderName::from_static("x-mock-name"), v);
    }
    resp
}

pub(crate) fn add_headers(resp: &mut Response, extra: Extra) {
    for (name, value) in extra {
        if let Ok(v) = HeaderValue::from_str(&value) {
            resp.headers_mut().append(name, v);
        }
    }
}

/// A complete in-memory response, recorded as sent.
pub(crate) fn full(
    rec: &Rec,
    status: StatusCode,
    content_type: &str,
    body: Bytes,
    extra: Extra,
) -> Response {
    rec.status(status);
    rec.append(&body);
    let mut resp = base_response(&rec.shared, status, content_type, Body::from(body));
    add_headers(&mut resp, extra);
    resp
}

/// A streamed body: `events` one chunk each, `delay` before every event but the
/// first, and when `cut` is set an error after the last one so hyper aborts the
/// connection without finishing the message.
pub(crate) fn event_body(rec: Rec, events: Vec<Bytes>, delay: Duration, cut: bool) -> Body {
    struct St {
        rec: Rec,
        events: std::vec::IntoIter<Bytes>,
        first: bool,
        delay: Duration,
        cut: bool,
    }
    let st = St {
        rec,
        events: events.into_iter(),
        first: true,
        delay,
        cut,
    };
    let stream = futures_util::stream::unfold(st, |mut st| async move {
        if let Some(event) = st.events.next() {
            if !st.first && !st.delay.is_zero() {
                tokio::time::sleep(st.delay).await;
            }
            st.first = false;
            st.rec.append(&event);
            return Some((Ok::<Bytes, std::io::Error>(event), st));
        }
        if st.cut {
            st.cut = false;
            // Returning Pending once lets hyper flush the bytes already written.
            tokio::time::sleep(CUT_FLUSH_PAUSE).await;
            let err = std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "mock fault: response cut",
            );
            return Some((Err(err), st));
        }
        None
    });
    Body::from_stream(stream)
}

/// A successful non-streaming JSON reply, honouring `cut_after`.
pub(crate) fn json_ok(rec: &Rec, body: Bytes, cut: bool) -> Response {
    if !cut {
        return full(rec, StatusCode::OK, "application/json", body, Vec::new());
    }
    rec.status(StatusCode::OK);
    let total = body.len();
    let half = body.slice(..total / 2);
    let mut resp = base_response(
        &rec.shared,
        StatusCode::OK,
        "application/json",
        event_body(rec.clone(), vec![half], Duration::ZERO, true),
    );
    resp.headers_mut()
        .insert(CONTENT_LENGTH, HeaderValue::from(total));
    resp
}

/// A successful SSE reply.
pub(crate) fn sse_ok(rec: &Rec, events: Vec<Bytes>, delay: Duration, cut: bool) -> Response {
    rec.status(StatusCode::OK);
    let mut resp = base_response(
        &rec.shared,
        StatusCode::OK,
        "text/event-stream",
        event_body(rec.clone(), events, delay, cut),
    );
    resp.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

pub(crate) fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Parses a numeric `x-mock-*` header, clamping to `max`.
pub(crate) fn numeric_header(
    headers: &HeaderMap,
    name: &str,
    default: u64,
    max: u64,
) -> Result<u64, String> {
    match headers.get(name) {
        None => Ok(default),
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map(|n| n.min(max))
            .ok_or_else(|| format!("{name} must be a non-negative integer")),
    }
}
