//! Gateway errors and the one place that turns them into responses.
//!
//! Every phase returns a [`GatewayError`]; [`GatewayError::reply`] maps each variant to a status, a
//! wire body in the shape of the surface the client called, and a bounded metric label. Pingora's
//! own errors (a supplier unreachable, a timeout, a malformed answer) become a [`GatewayError`]
//! through [`GatewayError::from_pingora`]. Neither match has a wildcard arm: a new variant does not
//! compile until someone decides its answer.

use bytes::Bytes;
use serde_json::json;
pub use translate::Family;

/// What the client is speaking, which decides the shape of error bodies: a supplier API family
/// (a client surface speaks a family's formats, `translate::Family`), or the admin routes.
///
/// - `Client(OpenAi)`: OpenAI-style routes under `/compat/v1`.
/// - `Client(Anthropic)`: the Messages surface (`/v1/messages`, `/v1/models`):
///   `{"type":"error","error":{"type","message"}}`.
/// - `Client(Gemini)`: the native surface (`/v1beta/models/…`):
///   `{"error":{"code","message","status"}}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    Client(Family),
    /// Routes forwarded to admin-api: the partner/billing envelope.
    Admin,
}

/// Everything the gateway itself can answer instead of the supplier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GatewayError {
    /// No credential reached the service.
    #[error("no API key was sent")]
    MissingKey,
    /// A credential was sent but is not a usable customer key of this environment.
    #[error("invalid API key")]
    InvalidKey,
    /// The key may not use this surface.
    #[error("the key may not use this API surface")]
    PermissionDenied,
    /// No such route.
    #[error("unknown route {method} {path}")]
    UnknownRoute { method: String, path: String },
    /// The request body is larger than `server.max_body_bytes`.
    #[error("request body exceeds {limit} bytes")]
    BodyTooLarge { limit: usize },
    /// The client stopped sending its request body for `server.request_body_timeout_ms`.
    #[error("the request body was not received in time")]
    RequestTimeout,
    /// A body over 64 KiB without `Content-Length` (see docs/ARCHITECTURE.md, body handling).
    #[error("request bodies over 64 KiB need a Content-Length header")]
    LengthRequired,
    /// The body is not what the route accepts.
    #[error("invalid request body: {message}")]
    InvalidBody {
        message: String,
        param: Option<&'static str>,
    },
    /// A field of the body, named by its path as the client spelled it (`images[3].file_id`,
    /// `generationConfig.imageConfig.aspectRatio`), is refused; the message names it too.
    #[error("{message}")]
    InvalidField { message: String, param: String },
    /// The body asks for something the account's wire format cannot express (or is malformed in
    /// a way only the translation sees); `param` names the field as the client spelled it.
    #[error("{message}")]
    Untranslatable {
        message: String,
        param: Option<String>,
    },
    /// The model does not exist or is not exposed to this key.
    #[error("model {0:?} does not exist or is not available to this key")]
    UnknownModel(String),
    /// The model exists but no configured account serves it.
    #[error("no upstream account can serve model {0:?}")]
    NoAccount(String),
    /// The organization's available balance does not cover the call's worst case.
    #[error("insufficient balance: this call may cost up to {needed}, {available} is available")]
    InsufficientBalance {
        needed: money::NanoUsd,
        available: money::NanoUsd,
    },
    /// Every account that serves the model is cooling after its supplier's usage limit.
    #[error(
        "every account serving this model reached its usage limit; retry in {resets_in_seconds} s"
    )]
    UsageLimitReached { resets_in_seconds: u64 },
    /// The hold would take the caller's key past its spend budget for the period.
    #[error(
        "this API key reached its spend budget for the period; it resets in {resets_in_seconds} s"
    )]
    BudgetExceeded { resets_in_seconds: u64 },
    /// Every account serving the model is cooling after failures (server errors, no connection),
    /// none after a usage limit: candidates were planned but none is serving.
    #[error("no account serving this model is available right now; retry in {retry_after_secs} s")]
    AccountsFailing { retry_after_secs: u64 },
    /// Every account is at capacity and the wait queue is full, or the wait ran out.
    #[error("all capacity for this model is in use; retry shortly")]
    CapacityQueueFull,
    /// A batch line (issue 46) found its accounts above `[batches] yield_above` of their
    /// capacity: batch work never waits in the queue, it yields to interactive calls.
    #[error("batch work yields to interactive calls: the accounts are busy; retry shortly")]
    BatchYield,
    /// A batch line sent again while its first sending is still being served.
    #[error("this batch line is still being served; retry shortly")]
    BatchLineInProgress,
    /// A batch line asked to be held for the supplier's own batch API (issue 46) whose call no
    /// account with the `batch` capability serves in the client's own format: the runner sends
    /// it as a call instead.
    #[error("no account of this call runs the supplier's batch API; send the line as a call")]
    BatchOffloadUnavailable,
    /// A supplier's batch answer booked for a batch line that was never held (or whose hold
    /// lapsed and was settled from its description).
    #[error("this batch line is not held for the supplier's batch API")]
    BatchLineNotHeld,
    /// A batch line whose answer was cut after it started (what was served is charged as for any
    /// cut call): kept as its answer, so sending it again does not serve it twice.
    #[error("the supplier's answer to this batch line was cut before it ended")]
    BatchLineInterrupted,
    /// The organization's wallet is not in the operational store (lost, not yet rebuilt).
    #[error("the organization's balance is being reconciled; retry shortly")]
    WalletUnavailable,
    /// The call cannot be priced (no price for the model, or none for the key's group).
    #[error("this model cannot be priced for this key")]
    PriceUnavailable,
    /// The operational store did not answer; the gateway fails closed.
    #[error("the gateway's state store is unavailable")]
    StoreUnavailable,
    /// No supplier account could be connected to.
    #[error("the model supplier could not be reached")]
    UpstreamUnreachable,
    /// The supplier stopped answering within the configured timeout.
    #[error("the model supplier did not answer in time")]
    UpstreamTimeout,
    /// The supplier answered with something that is not HTTP.
    #[error("the model supplier sent an invalid response")]
    UpstreamProtocol,
    /// A hosted media URL that is unknown, expired or wrongly signed.
    #[error("no such media, or its URL expired")]
    MediaNotFound,
    /// The key's group does not have the `video` feature.
    #[error("this API key is not permitted to use the video routes")]
    VideoNotPermitted,
    /// No video task of this id belongs to the caller's organization (another organization's
    /// task is answered exactly like a missing one).
    #[error("no video task {0:?}")]
    VideoNotFound(String),
    /// The task has no content yet (or failed).
    #[error("video task {0:?} has no content: it is {1}")]
    VideoNotReady(String, &'static str),
    /// A content URL that is expired, tampered with or not signed.
    #[error("this video URL is invalid or expired; poll the task for a fresh one")]
    VideoUrlInvalid,
    /// The task record could not be read or written (the ledger database did not answer).
    #[error("video tasks are unavailable right now; retry shortly")]
    TasksUnavailable,
    /// A key's ledger read (`GET {compat_base}/key`, `…/generations/{id}`) could not be forwarded:
    /// admin-api is not configured or did not answer (issue 45: the gateway's shape, 503).
    #[error("the ledger cannot be read right now; retry shortly")]
    LedgerUnavailable,
    /// A bug or an impossible state; details are in the log, not the body.
    #[error("internal gateway error")]
    Internal,
}

/// A body its format cannot read (`translate::request`): 400 `invalid_body`, naming the field.
impl From<translate::request::Malformed> for GatewayError {
    fn from(m: translate::request::Malformed) -> GatewayError {
        GatewayError::invalid(m.message, m.param)
    }
}

impl GatewayError {
    /// A body the route does not accept, naming the offending parameter when there is one.
    pub fn invalid(message: impl Into<String>, param: Option<&'static str>) -> GatewayError {
        GatewayError::InvalidBody {
            message: message.into(),
            param,
        }
    }

    /// A refused field named by its path (see [`GatewayError::InvalidField`]).
    pub fn field(message: impl Into<String>, param: impl Into<String>) -> GatewayError {
        GatewayError::InvalidField {
            message: message.into(),
            param: param.into(),
        }
    }

    /// The answer to a Pingora error that ended a request before the client saw a response;
    /// `None`: the client is gone (a downstream read or write failed), nothing can be answered.
    pub fn from_pingora(e: &pingora::Error) -> Option<GatewayError> {
        use pingora::{ErrorSource, ErrorType::*};
        match e.etype() {
            ConnectTimedout | ConnectRefused | ConnectNoRoute | TLSWantX509Lookup
            | TLSHandshakeFailure | TLSHandshakeTimedout | InvalidCert | HandshakeError
            | ConnectError | BindError | SocketError | ConnectProxyFailure => {
                Some(GatewayError::UpstreamUnreachable)
            }
            ReadTimedout | WriteTimedout => match e.esource() {
                ErrorSource::Downstream => None,
                _ => Some(GatewayError::UpstreamTimeout),
            },
            InvalidHTTPHeader | H1Error | H2Error | H2Downgrade | InvalidH2 => match e.esource() {
                ErrorSource::Downstream => {
                    Some(GatewayError::invalid("malformed HTTP request", None))
                }
                _ => Some(GatewayError::UpstreamProtocol),
            },
            ReadError | WriteError | ConnectionClosed => match e.esource() {
                ErrorSource::Downstream => None,
                _ => Some(GatewayError::UpstreamUnreachable),
            },
            HTTPStatus(_)
            | AcceptError
            | FileOpenError
            | FileCreateError
            | FileReadError
            | FileWriteError
            | InternalError
            | UnknownError
            | Custom(_)
            | CustomCode(_, _) => Some(GatewayError::Internal),
        }
    }
}

/// What to send for an error.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub body: Bytes,
    /// Bounded label for metrics and logs.
    pub label: &'static str,
}

impl GatewayError {
    /// The `Retry-After` seconds this answer carries, when waiting is the remedy.
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            GatewayError::UsageLimitReached { resets_in_seconds }
            | GatewayError::BudgetExceeded { resets_in_seconds } => Some(*resets_in_seconds),
            GatewayError::AccountsFailing { retry_after_secs } => Some(*retry_after_secs),
            GatewayError::BatchYield | GatewayError::BatchLineInProgress => Some(1),
            _ => None,
        }
    }

    /// This error's row of the gateway's error table (SPEC "Gateway errors"): one line a variant,
    /// its status, metric label, and the `type`, `code` and `param` of its OpenAI-shaped body
    /// (`None`: the body has no such field). No wildcard arm: a new variant has a row or does not
    /// compile.
    #[rustfmt::skip]
    fn row(&self) -> Row<'_> {
        use GatewayError::*;
        let r = |status, label, kind, code, param| Row { status, label, kind, code, param };
        const BAD: Option<&str> = Some("invalid_request_error");
        const DOWN: Option<&str> = Some("service_unavailable");
        const UPSTREAM: Option<&str> = Some("upstream_error");
        const DENIED: Option<&str> = Some("permission_denied");
        match self {
            MissingKey => r(401, "missing_key", None, None, None),
            InvalidKey => r(401, "invalid_key", Some("authentication_error"), None, None),
            PermissionDenied => r(403, "permission_denied", DENIED, DENIED, None),
            UnknownRoute { .. } => r(404, "unknown_route", BAD, Some("unknown_route"), None),
            BodyTooLarge { .. } => r(413, "body_too_large", BAD, Some("request_too_large"), None),
            RequestTimeout => r(408, "request_timeout", BAD, Some("request_timeout"), None),
            LengthRequired => r(411, "length_required", BAD, Some("length_required"), None),
            InvalidBody { param, .. } => r(400, "invalid_body", BAD, None, *param),
            InvalidField { param, .. } => r(400, "invalid_body", BAD, None, Some(param)),
            Untranslatable { param, .. } => r(400, "untranslatable", BAD, None, param.as_deref()),
            UnknownModel(_) => r(404, "unknown_model", BAD, Some("model_not_found"), Some("model")),
            NoAccount(_) => r(503, "no_account", DOWN, Some("no_account_available"), None),
            InsufficientBalance { .. } => r(402, "insufficient_balance", Some("insufficient_quota"), Some("insufficient_balance"), None),
            UsageLimitReached { .. } => r(429, "usage_limit_reached", Some("usage_limit_reached"), None, None),
            BudgetExceeded { .. } => r(429, "budget_exceeded", Some("budget_exceeded"), None, None),
            AccountsFailing { .. } => r(503, "accounts_failing", DOWN, Some("upstream_unavailable"), None),
            CapacityQueueFull => r(429, "capacity_queue_full", None, Some("capacity_queue_full"), None),
            BatchYield => r(429, "batch_yield", None, Some("batch_capacity_yielded"), None),
            BatchLineInProgress => r(409, "batch_line_in_progress", BAD, Some("batch_line_in_progress"), None),
            BatchOffloadUnavailable => r(409, "batch_offload_unavailable", BAD, Some("batch_offload_unavailable"), None),
            BatchLineNotHeld => r(409, "batch_line_not_held", BAD, Some("batch_line_not_held"), None),
            BatchLineInterrupted => r(502, "batch_line_interrupted", UPSTREAM, Some("batch_line_interrupted"), None),
            WalletUnavailable => r(503, "wallet_unavailable", DOWN, Some("wallet_unavailable"), None),
            PriceUnavailable => r(503, "price_unavailable", DOWN, Some("price_unavailable"), None),
            StoreUnavailable => r(503, "store_unavailable", DOWN, Some("store_unavailable"), None),
            UpstreamUnreachable => r(502, "upstream_unreachable", UPSTREAM, Some("upstream_unreachable"), None),
            UpstreamTimeout => r(504, "upstream_timeout", UPSTREAM, Some("upstream_timeout"), None),
            UpstreamProtocol => r(502, "upstream_protocol", UPSTREAM, Some("upstream_invalid_response"), None),
            MediaNotFound => r(404, "media_not_found", BAD, Some("media_not_found"), None),
            VideoNotPermitted => r(403, "video_not_permitted", DENIED, DENIED, None),
            VideoNotFound(_) => r(404, "video_not_found", BAD, Some("video_not_found"), None),
            VideoNotReady(..) => r(409, "video_not_ready", BAD, Some("video_not_ready"), None),
            VideoUrlInvalid => r(403, "video_url_invalid", DENIED, Some("invalid_signature"), None),
            TasksUnavailable => r(503, "tasks_unavailable", DOWN, Some("store_unavailable"), None),
            LedgerUnavailable => r(503, "ledger_unavailable", DOWN, Some("service_unavailable"), None),
            Internal => r(500, "internal", Some("server_error"), Some("internal_error"), None),
        }
    }

    /// Status, body and label of this error on `surface`: its row's OpenAI-shaped body, written
    /// again in the surface's shape.
    pub fn reply(&self, surface: Surface) -> Reply {
        let row = self.row();
        let (status, label) = (row.status, row.label);
        let body = match self {
            // SPEC's no-key body is the same on every gateway route (the official SDKs raise
            // their authentication error by status).
            GatewayError::MissingKey => {
                json!({"error": "missing_api_key", "message": "No API key was provided. Send it as 'Authorization: Bearer KEY', 'x-api-key' or 'x-alt-api-key'."})
            }
            GatewayError::InvalidKey => openai("Invalid API key.", &row),
            GatewayError::PermissionDenied => openai(
                "This API key is not permitted to use this API surface.",
                &row,
            ),
            GatewayError::UsageLimitReached { resets_in_seconds }
            | GatewayError::BudgetExceeded { resets_in_seconds } => {
                let mut body = openai(&self.to_string(), &row);
                body["error"]["resets_in_seconds"] = json!(resets_in_seconds);
                body
            }
            _ => openai(&self.to_string(), &row),
        };
        match surface {
            Surface::Client(_) if matches!(self, GatewayError::MissingKey) => Reply {
                status,
                body: Bytes::from(body.to_string()),
                label,
            },
            Surface::Client(Family::OpenAi) => Reply {
                status,
                body: Bytes::from(body.to_string()),
                label,
            },
            Surface::Client(Family::Anthropic) => Reply {
                status,
                body: Bytes::from(anthropic(status, &body).to_string()),
                label,
            },
            Surface::Client(Family::Gemini) => Reply {
                status,
                body: Bytes::from(google(status, &body).to_string()),
                label,
            },
            // Only forwarding failures reach the client on admin routes (admin-api authenticates
            // itself): the partner API's envelope of a server-side failure, never an auth error.
            // The gateway's failures concern admin-api, not a model supplier: 503, retry later.
            Surface::Admin => Reply {
                status: 503,
                body: Bytes::from(
                    json!({
                        "code": 503,
                        "reason": "SERVICE_UNAVAILABLE",
                        "message": "the admin API is unavailable; retry later",
                        "metadata": {},
                    })
                    .to_string(),
                ),
                label,
            },
        }
    }
}

/// The Anthropic shape of an answer first written in the OpenAI shape: `{"type":"error","error":
/// {"type","message"}}`, keeping `code`, `param` and `resets_in_seconds`. The error type is
/// Anthropic's for the status (`translate::vocabulary`, the one table), except where SPEC names
/// one (`authentication_error`, `permission_denied`, `usage_limit_reached`, and DESIGN §6d's
/// `budget_exceeded`), so those shapes still hold on this surface.
fn anthropic(status: u16, openai: &serde_json::Value) -> serde_json::Value {
    let (message, code, param, error) = parts(openai);
    let kind = match error.get("type").and_then(|t| t.as_str()) {
        Some(
            spec @ ("authentication_error"
            | "permission_denied"
            | "usage_limit_reached"
            | "budget_exceeded"),
        ) => spec,
        _ => translate::vocabulary::anthropic_type(status),
    };
    let mut out = json!({"type": kind, "message": message});
    extend(&mut out, code, param, error);
    json!({"type": "error", "error": out})
}

/// The Google shape of an answer first written in the OpenAI shape: `{"error":{"code","message",
/// "status"}}` with the google.rpc status of the HTTP status (`translate::vocabulary`), keeping
/// SPEC's `type` (the native surface's 400 is `invalid_request_error`), `code` as `reason`,
/// `param` and `resets_in_seconds`.
fn google(status: u16, openai: &serde_json::Value) -> serde_json::Value {
    let (message, code, param, error) = parts(openai);
    let rpc = translate::vocabulary::google_status(status);
    let mut out = json!({"code": status, "message": message, "status": rpc});
    if let Some(kind) = error.get("type").and_then(|t| t.as_str()) {
        out["type"] = json!(kind);
    }
    if let Some(code) = code {
        // The rows of SPEC's gateway table name their `code`; it wins over Google's number.
        if code.as_str().is_some_and(|c| SPEC_CODES.contains(&c)) {
            out["code"] = code.clone();
        }
        out["reason"] = json!(code);
    }
    extend(&mut out, None, param, error);
    json!({ "error": out })
}

/// The error codes SPEC's gateway table names, kept as `code` on every surface.
const SPEC_CODES: &[&str] = &["permission_denied", "capacity_queue_full"];

/// Message, code and param of an OpenAI-shaped answer (SPEC's missing-key body has a string
/// `error` and a top-level `message`), and its error object.
fn parts(
    openai: &serde_json::Value,
) -> (
    String,
    Option<serde_json::Value>,
    Option<serde_json::Value>,
    serde_json::Value,
) {
    let error = match openai.get("error") {
        Some(e @ serde_json::Value::Object(_)) => e.clone(),
        Some(serde_json::Value::String(code)) => {
            json!({"type": "authentication_error", "code": code})
        }
        _ => json!({}),
    };
    let message = error
        .get("message")
        .or_else(|| openai.get("message"))
        .and_then(|m| m.as_str())
        .unwrap_or_default()
        .to_string();
    let code = error.get("code").cloned();
    let param = error.get("param").cloned();
    (message, code, param, error)
}

fn extend(
    out: &mut serde_json::Value,
    code: Option<serde_json::Value>,
    param: Option<serde_json::Value>,
    error: serde_json::Value,
) {
    if let Some(code) = code {
        out["code"] = code;
    }
    if let Some(param) = param {
        out["param"] = param;
    }
    if let Some(resets) = error.get("resets_in_seconds") {
        out["resets_in_seconds"] = resets.clone();
    }
}

/// The OpenAI-shaped body of `message` with `row`'s `type`, `code` and `param`.
fn openai(message: &str, row: &Row) -> serde_json::Value {
    let mut error = json!({ "message": message });
    for (key, value) in [("type", row.kind), ("code", row.code), ("param", row.param)] {
        if let Some(value) = value {
            error[key] = json!(value);
        }
    }
    json!({ "error": error })
}

/// One row of the gateway's error table (see [`GatewayError::row`]).
struct Row<'a> {
    status: u16,
    label: &'static str,
    kind: Option<&'static str>,
    code: Option<&'static str>,
    param: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(e: GatewayError) -> (u16, serde_json::Value) {
        let r = e.reply(Surface::Client(Family::OpenAi));
        (r.status, serde_json::from_slice(&r.body).unwrap())
    }

    #[test]
    fn spec_shapes() {
        let (s, b) = body(GatewayError::MissingKey);
        assert_eq!(s, 401);
        assert!(b["error"].is_string() && b["message"].is_string());
        let (s, b) = body(GatewayError::InvalidKey);
        assert_eq!(s, 401);
        assert_eq!(b["error"]["type"], "authentication_error");
        assert!(b["error"]["message"].is_string());
        let (s, b) = body(GatewayError::PermissionDenied);
        assert_eq!(s, 403);
        assert_eq!(b["error"]["type"], "permission_denied");
        assert_eq!(b["error"]["code"], "permission_denied");
        let (s, b) = body(GatewayError::UnknownModel("x".into()));
        assert_eq!(s, 404);
        assert_eq!(b["error"]["code"], "model_not_found");
    }

    /// Every row of SPEC's gateway error table holds on every surface.
    #[test]
    fn spec_rows_on_every_surface() {
        for surface in [
            Surface::Client(Family::OpenAi),
            Surface::Client(Family::Anthropic),
            Surface::Client(Family::Gemini),
        ] {
            let on = |e: GatewayError| {
                let r = e.reply(surface);
                let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
                (r.status, v)
            };
            let (s, b) = on(GatewayError::MissingKey);
            assert_eq!(s, 401);
            assert!(
                b["error"].is_string() && b["message"].is_string(),
                "{surface:?} {b}"
            );
            let (s, b) = on(GatewayError::InvalidKey);
            assert_eq!(s, 401);
            assert_eq!(b["error"]["type"], "authentication_error", "{surface:?}");
            assert!(b["error"]["message"].is_string());
            let (s, b) = on(GatewayError::PermissionDenied);
            assert_eq!(s, 403);
            assert_eq!(b["error"]["type"], "permission_denied", "{surface:?}");
            assert_eq!(b["error"]["code"], "permission_denied", "{surface:?}");
            let (s, b) = on(GatewayError::CapacityQueueFull);
            assert_eq!(s, 429);
            assert_eq!(b["error"]["code"], "capacity_queue_full", "{surface:?} {b}");
            assert!(b["error"]["message"].is_string());
            let (s, b) = on(GatewayError::UsageLimitReached {
                resets_in_seconds: 7,
            });
            assert_eq!(s, 429);
            assert_eq!(b["error"]["type"], "usage_limit_reached", "{surface:?}");
            assert_eq!(b["error"]["resets_in_seconds"], 7);
            assert!(b["error"]["message"].is_string());
            // DESIGN §6d: a key over its budget, in the same shape.
            let e = GatewayError::BudgetExceeded {
                resets_in_seconds: 3_600,
            };
            assert_eq!(e.retry_after(), Some(3_600));
            let (s, b) = on(e);
            assert_eq!(s, 429);
            assert_eq!(b["error"]["type"], "budget_exceeded", "{surface:?} {b}");
            assert_eq!(b["error"]["resets_in_seconds"], 3_600);
            assert!(b["error"]["message"].is_string());
        }
    }
}
