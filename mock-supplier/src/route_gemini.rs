//! The Gemini routes: `GET /v1beta/models`,
//! `POST /v1beta/models/{model}:generateContent`,
//! `…:streamGenerateContent` (`?alt=sse` for SSE, else a JSON array) and
//! `…:countTokens`, `…:embedContent` and `…:batchEmbedContents` (see `embeddings`; also under
//! `/v1/models/`), 404 for any other Gemini path;
//! the `x-goog-api-key` / `?key=` check and the Google-shaped status-fault
//! body (`RetryInfo` detail for `reset_body`). Bodies and chunks: the
//! `gemini` module.

use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use serde_json::{Value, json};

use crate::gemini::{self, Action};
use crate::reply::{self, Reply};
use crate::respond::{Rec, Req, Wire, error, full, header_str, json_ok, params, sse_ok};
use crate::tools::{ToolApi, tool_to_call};

/// The message of a wrong key.
pub const BAD_KEY: &str = "API key not valid. Please pass a valid API key.";
/// The message of a missing key.
pub const NO_KEY: &str = "Method doesn't allow unregistered callers (callers without established identity). Please use API Key or other form of API consumer identity to call this API.";

fn bad_request(rec: &Rec, message: &str) -> Response {
    error(rec, Wire::Gemini, StatusCode::BAD_REQUEST, message)
}

/// Decodes `%XX` escapes and `+` (a query value); invalid escapes stay as is.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b, hex) {
            (b'%', Some(v)) => {
                out.push(v);
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            _ => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Header `x-goog-api-key: <key>` or query `key=<key>`; a wrong key is 401
/// `UNAUTHENTICATED`, no key at all 403 `PERMISSION_DENIED`.
pub(crate) fn auth(
    rec: &Rec,
    headers: &HeaderMap,
    query: Option<&str>,
    key: &str,
) -> Option<Response> {
    let header = header_str(headers, "x-goog-api-key");
    let from_query = query.and_then(|q| {
        q.split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == "key")
            .map(|(_, v)| percent_decode(v))
    });
    if header == Some(key) || from_query.as_deref() == Some(key) {
        return None;
    }
    let (status, message) = if header.is_none() && from_query.is_none() {
        (StatusCode::FORBIDDEN, NO_KEY)
    } else {
        (StatusCode::UNAUTHORIZED, BAD_KEY)
    };
    let body = gemini::error_body(status.as_u16(), message, None);
    Some(full(rec, status, "application/json", body, Vec::new()))
}

/// The body of a `status=` fault: Google-shaped; `reset_body=S` adds a
/// `google.rpc.RetryInfo` detail with `retryDelay: "Ss"`. `reset_header` has
/// no effect (Gemini sends no rate-limit headers).
pub(crate) fn status_fault(status: StatusCode, reset_body: Option<u64>) -> Bytes {
    gemini::error_body(status.as_u16(), "mock fault", reset_body)
}

/// Routes and answers a Gemini-format request.
pub(crate) fn serve(req: &Req<'_>) -> Response {
    let rec = req.rec;
    let cut = req.cut_after.is_some();
    if req.method == Method::GET && req.path == "/v1beta/models" {
        return json_ok(rec, gemini::models_body(), cut);
    }
    if let Some(resp) = crate::veo::serve(req) {
        return resp;
    }
    let Some((model, action)) = gemini::parse_path(req.path).filter(|_| req.method == Method::POST)
    else {
        return error(
            rec,
            Wire::Gemini,
            StatusCode::NOT_FOUND,
            &format!(
                "Requested entity was not found: {} {}",
                req.method, req.path
            ),
        );
    };
    let json: Value = match serde_json::from_slice(req.body) {
        Ok(v) => v,
        Err(e) => return bad_request(rec, &format!("Invalid JSON payload received. {e}")),
    };
    if matches!(action, Action::Embed | Action::BatchEmbed) {
        return embed(req, &json, model, action == Action::BatchEmbed);
    }
    let checked = match action {
        Action::Embed | Action::BatchEmbed => Ok(()),
        Action::CountTokens => gemini::validate_count(&json).map(|_| ()),
        Action::Generate | Action::Stream => gemini::validate(&json),
    };
    if let Err(msg) = checked {
        return bad_request(rec, &msg);
    }
    let p = match params(req.headers, req.body.len()) {
        Ok(p) => p,
        Err(msg) => return bad_request(rec, &msg),
    };
    if action == Action::CountTokens {
        let body = reply::to_bytes(&json!({"totalTokens": p.usage.prompt}));
        return json_ok(rec, body, cut);
    }
    if action == Action::Generate && crate::images::gemini_wants_image(&json) {
        return image(req, model, p.usage.prompt);
    }
    let reply = Reply {
        hash: reply::body_hash_hex(req.body),
        model: model.to_owned(),
        n: p.n,
        usage: p.usage,
        include_usage: false,
        tool: tool_to_call(ToolApi::Gemini, &json),
        pad: p.pad,
    };
    match action {
        Action::Stream if req.query_param("alt") == Some("sse") => {
            let mut events = if req.malformed {
                reply.gemini_malformed()
            } else {
                reply.gemini_sse()
            };
            if let Some(keep) = req.cut_after {
                events.truncate(keep);
            }
            sse_ok(rec, events, p.delay, cut)
        }
        Action::Stream => json_ok(rec, reply.gemini_array(), cut),
        _ => json_ok(rec, reply.gemini_response(), cut),
    }
}

/// An image `generateContent` (see `images`): `x-mock-images` images (default 1).
fn image(req: &Req<'_>, model: &str, prompt: u64) -> Response {
    let rec = req.rec;
    let count = match crate::respond::numeric_header(
        req.headers,
        "x-mock-images",
        1,
        crate::images::MAX_IMAGES,
    ) {
        Ok(n) => n,
        Err(msg) => return bad_request(rec, &msg),
    };
    let hash = reply::body_hash_hex(req.body);
    let body = crate::images::gemini_image(model, count, prompt, &hash);
    json_ok(rec, body, req.cut_after.is_some())
}

/// `…:embedContent` (`batch` false) and `…:batchEmbedContents` (see `embeddings`).
fn embed(req: &Req<'_>, json: &Value, model: &str, batch: bool) -> Response {
    let prompt = crate::route_openai::mock_prompt(req.headers);
    match crate::embeddings::gemini(json, model, batch, prompt) {
        Ok(body) => json_ok(req.rec, body.into(), req.cut_after.is_some()),
        Err(msg) => bad_request(req.rec, &msg),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_query_values() {
        assert_eq!(percent_decode("a%2Bb+c%zz"), "a+b c%zz");
        assert_eq!(percent_decode("plain"), "plain");
        assert_eq!(percent_decode("%"), "%");
    }
}
