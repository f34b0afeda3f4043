//! The Anthropic routes: `POST /v1/messages`,
//! `POST /v1/messages/count_tokens` and the message batches (`anthropic_batches`; 404 for
//! anything else under `/v1/messages`), the `x-api-key` check, the required `anthropic-version`
//! header, and the Anthropic-shaped status-fault body and headers
//! (`anthropic-ratelimit-{requests,tokens}-reset`). Bodies and events: the
//! `anthropic` module.

use axum::response::Response;
use bytes::Bytes;
use http::header::HeaderName;
use http::{HeaderMap, Method, StatusCode};
use serde_json::{Value, json};

use crate::anthropic;
use crate::anthropic_check::{self, Endpoint};
use crate::clock;
use crate::reply::{self, Reply};
use crate::respond::{Extra, Rec, Req, Wire, error, header_str, json_ok, params, sse_ok};
use crate::tools::{ToolApi, tool_to_call};

fn bad_request(rec: &Rec, message: &str) -> Response {
    error(rec, Wire::Anthropic, StatusCode::BAD_REQUEST, message)
}

/// `x-api-key: <key>` exactly, else 401 `authentication_error`.
pub(crate) fn auth(rec: &Rec, headers: &HeaderMap, key: &str) -> Option<Response> {
    if header_str(headers, "x-api-key") == Some(key) {
        return None;
    }
    Some(error(
        rec,
        Wire::Anthropic,
        StatusCode::UNAUTHORIZED,
        "invalid x-api-key",
    ))
}

/// The body of a `status=` fault; `reset_header=S` adds
/// `anthropic-ratelimit-requests-reset` and `anthropic-ratelimit-tokens-reset`
/// set to the RFC 3339 UTC time S seconds from now.
pub(crate) fn status_fault(
    status: StatusCode,
    reset_header: Option<u64>,
    reset_body: Option<u64>,
    extra: &mut Extra,
) -> Bytes {
    if let Some(s) = reset_header {
        let at = clock::rfc3339_in(s);
        for name in [
            "anthropic-ratelimit-requests-reset",
            "anthropic-ratelimit-tokens-reset",
        ] {
            extra.push((HeaderName::from_static(name), at.clone()));
        }
    }
    let message = match reset_body {
        Some(s) => format!("Rate limit reached. Please try again in {s}s."),
        None => "mock fault".to_owned(),
    };
    anthropic::error_body(status.as_u16(), &message)
}

/// Routes and answers an Anthropic-format request.
pub(crate) fn serve(req: &Req<'_>) -> Response {
    let rec = req.rec;
    if req.path.starts_with("/v1/messages/batches") {
        return crate::anthropic_batches::serve(req)
            .unwrap_or_else(|| error(rec, Wire::Anthropic, StatusCode::NOT_FOUND, "not found"));
    }
    let endpoint = match (req.method, req.path) {
        (&Method::POST, "/v1/messages") => Endpoint::Messages,
        (&Method::POST, "/v1/messages/count_tokens") => Endpoint::CountTokens,
        _ => {
            return error(
                rec,
                Wire::Anthropic,
                StatusCode::NOT_FOUND,
                &format!("{} {}: not found", req.method, req.path),
            );
        }
    };
    if header_str(req.headers, "anthropic-version").is_none() {
        return bad_request(rec, "anthropic-version: header is required");
    }
    let json: Value = match serde_json::from_slice(req.body) {
        Ok(v) => v,
        Err(e) => return bad_request(rec, &format!("request body is not valid JSON: {e}")),
    };
    let model = match anthropic_check::validate(&json, endpoint) {
        Ok(m) => m,
        Err(msg) => return bad_request(rec, &msg),
    };
    let p = match params(req.headers, req.body.len()) {
        Ok(p) => p,
        Err(msg) => return bad_request(rec, &msg),
    };
    let cut = req.cut_after.is_some();
    if endpoint == Endpoint::CountTokens {
        let body = reply::to_bytes(&json!({"input_tokens": p.usage.prompt}));
        return json_ok(rec, body, cut);
    }

    let reply = Reply {
        hash: reply::body_hash_hex(req.body),
        model: model.to_owned(),
        n: p.n,
        usage: p.usage,
        include_usage: false,
        tool: tool_to_call(ToolApi::Anthropic, &json),
        pad: 0,
    };
    crate::usage_report::bill(&rec.shared, req.headers, model, p.usage);
    if json.get("stream") != Some(&Value::Bool(true)) {
        return json_ok(rec, reply.anthropic_message(), cut);
    }
    let mut events = if req.malformed {
        reply.anthropic_malformed()
    } else {
        reply.anthropic_stream()
    };
    req.fault_events(&mut events, true);
    sse_ok(rec, events, p.delay, cut)
}
