//! The OpenAI routes: `GET /v1/models`, `POST /v1/chat/completions`,
//! `POST /v1/responses`, `POST /v1/audio/transcriptions`, and 404 for every
//! other path of the OpenAI wire format; plus the OpenAI `Authorization:
//! Bearer` check and the OpenAI-shaped status-fault body and headers.

use axum::response::Response;
use bytes::Bytes;
use http::header::HeaderName;
use http::{HeaderMap, Method, StatusCode};
use serde_json::Value;

use crate::fault::error_type_for;
use crate::reply::{self, Reply};
use crate::respond::{
    Extra, Rec, Req, Wire, bad_request, error, full, header_str, json_ok, numeric_header, params,
    sse_ok,
};
use crate::tools::{ToolApi, tool_to_call};

/// Which generation endpoint a request targets.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Api {
    Chat,
    Responses,
}

/// `Authorization: Bearer <key>` exactly, else 401.
pub(crate) fn auth(rec: &Rec, headers: &HeaderMap, key: &str) -> Option<Response> {
    let expected = format!("Bearer {key}");
    if header_str(headers, "authorization") == Some(expected.as_str()) {
        return None;
    }
    let body = reply::error_body(
        "Incorrect API key provided",
        "invalid_request_error",
        Some("invalid_api_key"),
    );
    Some(full(
        rec,
        StatusCode::UNAUTHORIZED,
        "application/json",
        body,
        Vec::new(),
    ))
}

/// The body of a `status=` fault; `reset_header=S` adds
/// `x-ratelimit-reset-requests: Ss`.
pub(crate) fn status_fault(
    status: StatusCode,
    reset_header: Option<u64>,
    reset_body: Option<u64>,
    extra: &mut Extra,
) -> Bytes {
    if let Some(s) = reset_header {
        extra.push((
            HeaderName::from_static("x-ratelimit-reset-requests"),
            format!("{s}s"),
        ));
    }
    let message = match reset_body {
        Some(s) => format!("Rate limit reached. Please try again in {s}s."),
        None => "mock fault".to_owned(),
    };
    reply::error_body(&message, error_type_for(status.as_u16()), None)
}

/// Routes and answers an OpenAI-format request.
pub(crate) fn serve(req: &Req<'_>) -> Response {
    let rec = req.rec;
    let cut = req.cut_after.is_some();
    let api = match (req.method, req.path) {
        (&Method::GET, "/v1/models") => return json_ok(rec, reply::models_body(), cut),
        (&Method::POST, "/v1/chat/completions") => Api::Chat,
        (&Method::POST, "/v1/responses") => Api::Responses,
        (&Method::POST, "/v1/audio/transcriptions") => return transcription(req),
        (&Method::POST, "/v1/images/generations") => return image_generation(req),
        (&Method::POST, "/v1/embeddings") => return embeddings(req),
        (_, p) if p.starts_with("/v1/files") || p.starts_with("/v1/batches") => {
            return crate::openai_batches::serve(req)
                .unwrap_or_else(|| error(rec, Wire::OpenAi, StatusCode::NOT_FOUND, "not found"));
        }
        (_, p) if p.starts_with("/v1/videos") => {
            return crate::videos::serve(req)
                .unwrap_or_else(|| error(rec, Wire::OpenAi, StatusCode::NOT_FOUND, "not found"));
        }
        (&Method::GET, p) if p.starts_with("/files/") && p.ends_with(".png") => {
            return hosted_png(rec);
        }
        _ => return error(rec, Wire::OpenAi, StatusCode::NOT_FOUND, "not found"),
    };

    let json: Value = match serde_json::from_slice(req.body) {
        Ok(v) => v,
        Err(e) => return bad_request(rec, &format!("request body is not valid JSON: {e}")),
    };
    let Some(model) = json.get("model").and_then(Value::as_str) else {
        return bad_request(
            rec,
            "request body must be a JSON object with a string `model`",
        );
    };
    let p = match params(req.headers, req.body.len()) {
        Ok(p) => p,
        Err(msg) => return bad_request(rec, &msg),
    };

    let stream = json.get("stream") == Some(&Value::Bool(true));
    let include_usage = api == Api::Chat
        && json
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            == Some(&Value::Bool(true));
    let tool_api = match api {
        Api::Chat => ToolApi::Chat,
        Api::Responses => ToolApi::Responses,
    };
    let reply = Reply {
        hash: reply::body_hash_hex(req.body),
        model: model.to_owned(),
        n: p.n,
        usage: p.usage,
        include_usage,
        tool: tool_to_call(tool_api, &json),
        pad: p.pad,
    };
    let tool = reply.tool.is_some();
    crate::usage_report::bill(&rec.shared, req.headers, model, p.usage);

    if !stream {
        return json_ok(rec, whole(&reply, api, tool), cut);
    }

    let mut events = match (api, req.malformed, tool) {
        (Api::Chat, true, _) => reply.chat_malformed(),
        (Api::Chat, false, false) => reply.chat_stream(),
        (Api::Chat, false, true) => reply.chat_tool_stream(),
        (Api::Responses, true, _) => reply.response_malformed(),
        (Api::Responses, false, false) => reply.response_stream(),
        (Api::Responses, false, true) => reply.tool_response_stream(),
    };
    req.fault_events(&mut events, false);
    sse_ok(rec, events, p.delay, cut)
}

/// A hosted image file (fetched without credentials, like a supplier's signed URL).
fn hosted_png(rec: &Rec) -> Response {
    let png = Bytes::from_static(crate::images::PNG);
    full(rec, StatusCode::OK, "image/png", png, Vec::new())
}

/// The whole (not streamed) body of `reply` on `api`, with its tool call when it has one.
fn whole(reply: &Reply, api: Api, tool: bool) -> Bytes {
    debug_assert_eq!(tool, reply.tool.is_some());
    reply.whole(api == Api::Responses)
}

/// `POST /v1/embeddings` (see `embeddings`).
fn embeddings(req: &Req<'_>) -> Response {
    let rec = req.rec;
    let json: Value = match serde_json::from_slice(req.body) {
        Ok(v) => v,
        Err(e) => return bad_request(rec, &format!("request body is not valid JSON: {e}")),
    };
    match crate::embeddings::openai(&json, mock_prompt(req.headers)) {
        Ok(body) => json_ok(rec, body.into(), req.cut_after.is_some()),
        Err(msg) => bad_request(rec, &msg),
    }
}

/// The `prompt` an `x-mock-usage` header names, if one was sent.
pub(crate) fn mock_prompt(headers: &http::HeaderMap) -> Option<u64> {
    let h = header_str(headers, "x-mock-usage")?;
    crate::usage::Usage::defaults(0, 0)
        .with_header(h)
        .ok()
        .map(|u| u.prompt)
}

/// `POST /v1/images/generations` (see `images`).
fn image_generation(req: &Req<'_>) -> Response {
    let rec = req.rec;
    let json: Value = match serde_json::from_slice(req.body) {
        Ok(v) => v,
        Err(e) => return bad_request(rec, &format!("request body is not valid JSON: {e}")),
    };
    let count = match numeric_header(
        req.headers,
        "x-mock-images",
        u64::MAX,
        crate::images::MAX_IMAGES,
    ) {
        Ok(u64::MAX) => None,
        Ok(n) => Some(n),
        Err(msg) => return bad_request(rec, &msg),
    };
    let host = header_str(req.headers, "host").unwrap_or("127.0.0.1");
    let hash = reply::body_hash_hex(req.body);
    match crate::images::openai_generation(&json, count, host, &hash) {
        Ok(body) => json_ok(rec, body, req.cut_after.is_some()),
        Err(msg) => bad_request(rec, &msg),
    }
}

/// `POST /v1/audio/transcriptions` (see `audio`).
fn transcription(req: &Req<'_>) -> Response {
    let rec = req.rec;
    let seconds = match numeric_header(req.headers, "x-mock-audio-seconds", 0, 86_400) {
        Ok(0) => None,
        Ok(s) => Some(s),
        Err(msg) => return bad_request(rec, &msg),
    };
    match crate::audio::transcribe(header_str(req.headers, "content-type"), seconds, req.body) {
        Ok(crate::audio::Transcription::Json(b)) => json_ok(rec, b, req.cut_after.is_some()),
        Ok(crate::audio::Transcription::Text(b)) => {
            full(rec, StatusCode::OK, "text/plain", b, Vec::new())
        }
        Err(msg) => bad_request(rec, &msg),
    }
}
