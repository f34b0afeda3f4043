//! The HTTP side: the accept loop, per-connection serving (hyper HTTP/1 with an
//! axum router) and the single request handler that records the request,
//! applies faults, checks the API key, routes and writes the (possibly
//! streamed, possibly cut) response.
//!
//! # Processing order
//!
//! 1. read the body (up to [`MAX_BODY_BYTES`], else 413) and record the request;
//! 2. pick the fault: header `x-mock-fault` (`none` or empty = no fault; an
//!    invalid spec answers 400), else the instance fault;
//! 3. `stall_ms`; then `close` drops the connection;
//! 4. API key check (401);
//! 5. `status=` fault;
//! 6. routing (404), body validation (400), `x-mock-*` header validation (400);
//! 7. the normal reply, to which `cut_after` / `malformed_sse` apply.
//!
//! Every response carries `x-mock-name: <config.name>`.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::response::Response;
use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_LENGTH, CONTENT_TYPE, HeaderName, HeaderValue};
use http::{HeaderMap, Method, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::MockConfig;
use crate::fault::{Fault, error_type_for};
use crate::record::Recorder;
use crate::reply::{self, DEFAULT_EVENTS, MAX_EVENTS, Reply, Usage};

/// Largest request body accepted (64 MiB).
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
/// Upper bound for `x-mock-delay-ms` (larger values are clamped).
pub const MAX_DELAY_MS: u64 = 60_000;
/// Pause before aborting a cut response, so hyper flushes what was sent.
const CUT_FLUSH_PAUSE: Duration = Duration::from_millis(5);

/// State shared by every connection of one mock instance.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: MockConfig,
    pub(crate) recorder: Recorder,
    pub(crate) fault: Mutex<Option<Fault>>,
}

impl Shared {
    pub(crate) fn new(config: MockConfig) -> Shared {
        Shared {
            config,
            recorder: Recorder::default(),
            fault: Mutex::new(None),
        }
    }

    fn instance_fault(&self) -> Option<Fault> {
        self.fault
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Per-connection handler state: the shared state and the signal that makes
/// the connection task drop the connection (`close` fault).
#[derive(Clone)]
struct ConnCtx {
    shared: Arc<Shared>,
    close: Arc<Notify>,
}

/// Accepts connections until the owning task is aborted; connection tasks live
/// in a `JoinSet` owned by this loop, so aborting it ends them too.
pub(crate) async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let router: Router<ConnCtx> = Router::new()
        .fallback(handle)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES));
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    let close = Arc::new(Notify::new());
                    let ctx = ConnCtx { shared: Arc::clone(&shared), close: Arc::clone(&close) };
                    conns.spawn(serve_connection(stream, router.clone().with_state(ctx), close));
                }
                // Transient accept errors (e.g. out of file descriptors): back off briefly.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn serve_connection(stream: TcpStream, router: Router, close: Arc<Notify>) {
    // SSE events are small writes; do not let Nagle hold them back.
    let _ = stream.set_nodelay(true);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new());
    let conn = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(router));
    tokio::select! {
        _ = conn => {}
        // Dropping the connection future closes the socket without a response.
        () = close.notified() => {}
    }
}

/// Handle on the recorder entry of the request being answered.
#[derive(Clone)]
struct Rec {
    shared: Arc<Shared>,
    index: usize,
}

impl Rec {
    fn status(&self, status: StatusCode) {
        self.shared.recorder.set_status(self.index, status.as_u16());
    }

    fn append(&self, bytes: &[u8]) {
        self.shared.recorder.append_body(self.index, bytes);
    }
}

/// Extra response headers.
type Extra = Vec<(HeaderName, String)>;

fn base_response(shared: &Shared, status: StatusCode, content_type: &str, body: Body) -> Response {
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

fn add_headers(resp: &mut Response, extra: Extra) {
    for (name, value) in extra {
        if let Ok(v) = HeaderValue::from_str(&value) {
            resp.headers_mut().append(name, v);
        }
    }
}

/// A complete in-memory response, recorded as sent.
fn full(rec: &Rec, status: StatusCode, content_type: &str, body: Bytes, extra: Extra) -> Response {
    rec.status(status);
    rec.append(&body);
    let mut resp = base_response(&rec.shared, status, content_type, Body::from(body));
    add_headers(&mut resp, extra);
    resp
}

fn json_error(rec: &Rec, status: StatusCode, message: &str) -> Response {
    let body = reply::error_body(message, "invalid_request_error", None);
    full(rec, status, "application/json", body, Vec::new())
}

/// A streamed body: `events` one chunk each, `delay` before every event but the
/// first, and when `cut` is set an error after the last one so hyper aborts the
/// connection without finishing the message.
fn event_body(rec: Rec, events: Vec<Bytes>, delay: Duration, cut: bool) -> Body {
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
fn json_ok(rec: &Rec, body: Bytes, cut: bool) -> Response {
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
fn sse_ok(rec: &Rec, events: Vec<Bytes>, delay: Duration, cut: bool) -> Response {
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

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Parses a numeric `x-mock-*` header, clamping to `max`.
fn numeric_header(headers: &HeaderMap, name: &str, default: u64, max: u64) -> Result<u64, String> {
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

/// The fault for this request: the header wins over the instance fault.
fn select_fault(headers: &HeaderMap, shared: &Shared) -> Result<Option<Fault>, String> {
    match headers.get("x-mock-fault") {
        None => Ok(shared.instance_fault()),
        Some(v) => {
            let spec = v
                .to_str()
                .map_err(|_| "x-mock-fault is not valid text".to_owned())?
                .trim();
            if spec.is_empty() || spec.eq_ignore_ascii_case("none") {
                return Ok(None);
            }
            spec.parse::<Fault>()
                .map(Some)
                .map_err(|e| format!("invalid x-mock-fault: {e}"))
        }
    }
}

fn status_fault(rec: &Rec, fault: &Fault) -> Option<Response> {
    let Fault::Status {
        code,
        retry_after,
        reset_header,
        reset_body,
    } = fault
    else {
        return None;
    };
    let status = StatusCode::from_u16(*code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let message = match reset_body {
        Some(s) => format!("Rate limit reached. Please try again in {s}s."),
        None => "mock fault".to_owned(),
    };
    let body = reply::error_body(&message, error_type_for(status.as_u16()), None);
    let mut extra: Extra = Vec::new();
    if let Some(s) = retry_after {
        extra.push((http::header::RETRY_AFTER, s.to_string()));
    }
    if let Some(s) = reset_header {
        extra.push((
            HeaderName::from_static("x-ratelimit-reset-requests"),
            format!("{s}s"),
        ));
    }
    Some(full(rec, status, "application/json", body, extra))
}

/// Which generation endpoint a request targets.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Api {
    Chat,
    Responses,
}

/// The single handler behind every path.
async fn handle(State(ctx): State<ConnCtx>, req: Request) -> Response {
    let shared = ctx.shared;
    let (parts, body) = req.into_parts();
    let method = parts.method.to_string();
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| parts.uri.path().to_owned());
    let recorded_headers = parts
        .headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_owned(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let (body, too_large) = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(b) => (b, false),
        Err(_) => (Bytes::new(), true),
    };
    let index = shared
        .recorder
        .start(method, path, recorded_headers, body.clone());
    let rec = Rec {
        shared: Arc::clone(&shared),
        index,
    };
    let headers = &parts.headers;
    if too_large {
        return json_error(
            &rec,
            StatusCode::PAYLOAD_TOO_LARGE,
            "request body too large or unreadable",
        );
    }

    let fault = match select_fault(headers, &shared) {
        Ok(f) => f,
        Err(msg) => return json_error(&rec, StatusCode::BAD_REQUEST, &msg),
    };
    let stall = fault.as_ref().map_or(0, Fault::stall_ms);
    if stall > 0 {
        tokio::time::sleep(Duration::from_millis(stall)).await;
    }
    let primary = fault.as_ref().and_then(Fault::primary);
    if primary == Some(&Fault::Close) {
        ctx.close.notify_one();
        return std::future::pending::<Response>().await;
    }

    if let Some(key) = &shared.config.api_key {
        let expected = format!("Bearer {key}");
        if header_str(headers, "authorization") != Some(expected.as_str()) {
            let body = reply::error_body(
                "Incorrect API key provided",
                "invalid_request_error",
                Some("invalid_api_key"),
            );
            return full(
                &rec,
                StatusCode::UNAUTHORIZED,
                "application/json",
                body,
                Vec::new(),
            );
        }
    }

    if let Some(resp) = primary.and_then(|f| status_fault(&rec, f)) {
        return resp;
    }
    let cut_after = match primary {
        Some(Fault::CutAfter { events }) => Some(*events),
        _ => None,
    };
    let malformed = primary == Some(&Fault::MalformedSse);

    let api = match (&parts.method, parts.uri.path()) {
        (&Method::GET, "/v1/models") => {
            return json_ok(&rec, reply::models_body(), cut_after.is_some());
        }
        (&Method::POST, "/v1/chat/completions") => Api::Chat,
        (&Method::POST, "/v1/responses") => Api::Responses,
        (&Method::POST, "/v1/audio/transcriptions") => {
            let seconds = match numeric_header(headers, "x-mock-audio-seconds", 0, 86_400) {
                Ok(0) => None,
                Ok(s) => Some(s),
                Err(msg) => return json_error(&rec, StatusCode::BAD_REQUEST, &msg),
            };
            return match crate::audio::transcribe(
                header_str(headers, "content-type"),
                seconds,
                &body,
            ) {
                Ok(crate::audio::Transcription::Json(b)) => json_ok(&rec, b, cut_after.is_some()),
                Ok(crate::audio::Transcription::Text(b)) => {
                    full(&rec, StatusCode::OK, "text/plain", b, Vec::new())
                }
                Err(msg) => json_error(&rec, StatusCode::BAD_REQUEST, &msg),
            };
        }
        _ => return json_error(&rec, StatusCode::NOT_FOUND, "not found"),
    };

    let json: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return json_error(
                &rec,
                StatusCode::BAD_REQUEST,
                &format!("request body is not valid JSON: {e}"),
            );
        }
    };
    let Some(model) = json.get("model").and_then(Value::as_str) else {
        return json_error(
            &rec,
            StatusCode::BAD_REQUEST,
            "request body must be a JSON object with a string `model`",
        );
    };
    let params = numeric_header(
        headers,
        "x-mock-events",
        DEFAULT_EVENTS as u64,
        MAX_EVENTS as u64,
    )
    .and_then(|n| {
        let delay = numeric_header(headers, "x-mock-delay-ms", 0, MAX_DELAY_MS)?;
        let n = usize::try_from(n).unwrap_or(MAX_EVENTS);
        let mut usage = Usage::defaults(body.len(), n);
        if let Some(h) = headers.get("x-mock-usage") {
            let h = h
                .to_str()
                .map_err(|_| "x-mock-usage is not valid text".to_owned())?;
            usage = usage.with_header(h)?;
        }
        Ok((n, delay, usage))
    });
    let (n, delay_ms, usage) = match params {
        Ok(p) => p,
        Err(msg) => return json_error(&rec, StatusCode::BAD_REQUEST, &msg),
    };

    let stream = json.get("stream") == Some(&Value::Bool(true));
    let include_usage = api == Api::Chat
        && json
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            == Some(&Value::Bool(true));
    let reply = Reply {
        hash: reply::body_hash_hex(&body),
        model: model.to_owned(),
        n,
        usage,
        include_usage,
    };

    if !stream {
        let body = match api {
            Api::Chat => reply.chat_completion(),
            Api::Responses => reply.response(),
        };
        return json_ok(&rec, body, cut_after.is_some());
    }

    let delay = Duration::from_millis(delay_ms);
    let mut events = match (api, malformed) {
        (Api::Chat, false) => reply.chat_stream(),
        (Api::Chat, true) => reply.chat_malformed(),
        (Api::Responses, false) => reply.response_stream(),
        (Api::Responses, true) => reply.response_malformed(),
    };
    if let Some(keep) = cut_after {
        events.truncate(keep);
    }
    sse_ok(&rec, events, delay, cut_after.is_some())
}
