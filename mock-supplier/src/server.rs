//! The HTTP side: the accept loop, per-connection serving (hyper HTTP/1 with an
//! axum router) and the single request handler that records the request,
//! applies faults, checks the API key, and hands the request to the route
//! module of its wire format (`route_openai`, `route_anthropic`,
//! `route_gemini`), which writes the (possibly streamed, possibly cut)
//! response.
//!
//! # Processing order
//!
//! 1. read the body (up to [`MAX_BODY_BYTES`], else 413) and record the request;
//!    the path decides the wire format ([`Wire`]) and so the shape of every
//!    error below;
//! 2. pick the fault: header `x-mock-fault` (`none` or empty = no fault; an
//!    invalid spec answers 400), else the instance fault;
//! 3. `stall_ms`; then `close` drops the connection;
//! 4. API key check in the wire format's auth header (401);
//! 5. `status=` fault, with the wire format's error body and hint headers;
//! 6. routing (404), required headers and body validation (400), `x-mock-*`
//!    header validation (400);
//! 7. the normal reply, to which `cut_after` / `error_after` / `malformed_sse` apply.
//!
//! Every response carries `x-mock-name: <config.name>`.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::fault::Fault;
use crate::respond::{Extra, Rec, Req, Wire, error, full};
use crate::shared::Shared;
use crate::{route_anthropic, route_gemini, route_openai};

/// Largest request body accepted (64 MiB).
pub const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;
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

/// A status fault's hint settings: `retry_after`, `reset_header`, `reset_body`.
type StatusHints = (Option<u64>, Option<u64>, Option<u64>);

/// The answer of a `status=` fault: that status, the wire format's error body and the hint
/// headers the fault asks for (`hints`: its `retry_after`, `reset_header` and `reset_body`, see
/// [`Fault::Status`]).
fn status_fault(rec: &Rec, wire: Wire, code: u16, hints: StatusHints) -> Response {
    let (retry_after, reset_header, reset_body) = hints;
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut extra: Extra = Vec::new();
    if let Some(s) = retry_after {
        extra.push((http::header::RETRY_AFTER, s.to_string()));
    }
    let body = match wire {
        Wire::OpenAi => route_openai::status_fault(status, reset_header, reset_body, &mut extra),
        Wire::Anthropic => {
            route_anthropic::status_fault(status, reset_header, reset_body, &mut extra)
        }
        Wire::Gemini => route_gemini::status_fault(status, reset_body),
    };
    full(rec, status, "application/json", body, extra)
}

/// Reads the body (up to [`MAX_BODY_BYTES`]; `true`: it was larger or unreadable) and records
/// the request.
async fn record(
    shared: &Arc<Shared>,
    parts: &http::request::Parts,
    body: axum::body::Body,
) -> (Rec, Bytes, bool) {
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
                String::from_utf8_lossy(v.as_bytes()).into(),
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
        shared: Arc::clone(shared),
        index,
    };
    (rec, body, too_large)
}

/// The single handler behind every path.
async fn handle(State(ctx): State<ConnCtx>, req: Request) -> Response {
    let shared = ctx.shared;
    let (parts, body) = req.into_parts();
    let (rec, body, too_large) = record(&shared, &parts, body).await;
    let headers = &parts.headers;
    let wire = Wire::of(parts.uri.path());
    if too_large {
        return error(
            &rec,
            wire,
            StatusCode::PAYLOAD_TOO_LARGE,
            "request body too large or unreadable",
        );
    }

    let fault = match select_fault(headers, &shared) {
        Ok(f) => f,
        Err(msg) => return error(&rec, wire, StatusCode::BAD_REQUEST, &msg),
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

    let query = parts.uri.query();
    // Hosted image files are fetched without credentials, like a supplier's signed URLs.
    let public = parts.uri.path().starts_with("/files/");
    if let Some(key) = shared.config.api_key.as_ref().filter(|_| !public) {
        let denied = match wire {
            Wire::OpenAi => route_openai::auth(&rec, headers, key),
            Wire::Anthropic => route_anthropic::auth(&rec, headers, key),
            Wire::Gemini => route_gemini::auth(&rec, headers, query, key),
        };
        if let Some(resp) = denied {
            return resp;
        }
    }

    if let Some(&Fault::Status {
        code,
        retry_after,
        reset_header,
        reset_body,
    }) = primary
    {
        let hints = (retry_after, reset_header, reset_body);
        return status_fault(&rec, wire, code, hints);
    }

    let req = Req {
        rec: &rec,
        method: &parts.method,
        path: parts.uri.path(),
        query,
        headers,
        body: &body,
        cut_after: primary.and_then(|f| f.cut_after()),
        error_after: primary.and_then(|f| f.error_after()),
        malformed: primary == Some(&Fault::MalformedSse),
    };
    // The usage reports (either format's path), then the format's routes.
    if let Some(report) = crate::usage_report::serve(&req) {
        return report;
    }
    match wire {
        Wire::OpenAi => route_openai::serve(&req),
        Wire::Anthropic => route_anthropic::serve(&req),
        Wire::Gemini => route_gemini::serve(&req),
    }
}
