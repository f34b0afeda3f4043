//! Phase 5, rewriting: turn the customer's request into the supplier's.
//!
//! Body: the model id becomes the supplier's bare id, and a chat stream is asked to report usage
//! (`stream_options.include_usage = true`) so it can be metered exactly. Every other byte of the
//! body is forwarded as received; when nothing must change the original buffer is reused.
//!
//! Headers: the customer's credential and every hop-by-hop or internal header are removed, the
//! account's credential, `Host` and the body's `Content-Length` are set, and `Accept-Encoding` is
//! forced to `identity` so the meter can read the supplier's answer.
//!
//! Decision (documented in docs/ARCHITECTURE.md): when the gateway adds `include_usage`, the client
//! sees the supplier's final usage chunk (`choices: []`) too. OpenAI clients accept it, and
//! streams stay byte-for-byte what the supplier sent.

use crate::errors::GatewayError;
use crate::inspect::{CallBody, TopLevel};
use crate::surface::Route;
use crate::upstreams::Upstream;
use bytes::Bytes;
use pingora::http::{RequestHeader, ResponseHeader};

/// Request headers never forwarded to a supplier.
const STRIP_REQUEST: [&str; 20] = [
    "x-tollgate-downgrade",
    "x-tollgate-project",
    "x-tollgate-workflow",
    "authorization",
    "x-api-key",
    "x-alt-api-key",
    "x-organization-billing-token",
    "proxy-authorization",
    "cookie",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
    "x-real-ip",
];

/// Supplier response headers never shown to customers (they identify the supplier account).
const STRIP_RESPONSE: [&str; 3] = ["openai-organization", "openai-project", "set-cookie"];

/// The body to forward: the original when nothing changes, else a rewritten copy.
pub fn forward_body(
    route: Route,
    original: &Bytes,
    fields: &TopLevel<'_>,
    call: &CallBody,
    upstream_model: &str,
) -> Result<Bytes, GatewayError> {
    let rename = call.model != upstream_model;
    let ask_usage = route == Route::ChatCompletions && call.stream && !call.include_usage;
    if !rename && !ask_usage {
        return Ok(original.clone());
    }
    let mut out = Vec::with_capacity(original.len() + 48);
    out.push(b'{');
    let mut first = true;
    let mut push = |out: &mut Vec<u8>, key: &str, value: &str| -> Result<(), GatewayError> {
        if !first {
            out.push(b',');
        }
        first = false;
        serde_json::to_writer(&mut *out, key).map_err(|_| GatewayError::Internal)?;
        out.push(b':');
        out.extend_from_slice(value.as_bytes());
        Ok(())
    };
    let model_json = serde_json::to_string(upstream_model).map_err(|_| GatewayError::Internal)?;
    let mut saw_options = false;
    for (key, value) in fields {
        match key.as_str() {
            "model" => push(&mut out, key, &model_json)?,
            "stream_options" if ask_usage => {
                saw_options = true;
                let mut options: serde_json::Map<String, serde_json::Value> =
                    serde_json::from_str(value.get()).unwrap_or_default();
                options.insert("include_usage".into(), serde_json::Value::Bool(true));
                let json = serde_json::to_string(&options).map_err(|_| GatewayError::Internal)?;
                push(&mut out, key, &json)?;
            }
            _ => push(&mut out, key, value.get())?,
        }
    }
    if ask_usage && !saw_options {
        push(&mut out, "stream_options", r#"{"include_usage":true}"#)?;
    }
    out.push(b'}');
    Ok(Bytes::from(out))
}

/// Rewrites the request header for `upstream`: path, credential, host, framing.
pub fn upstream_request(
    req: &mut RequestHeader,
    upstream: &Upstream,
    route: Route,
    body_len: usize,
) -> pingora::Result<()> {
    for name in STRIP_REQUEST {
        req.remove_header(name);
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
pub fn downstream_response(resp: &mut ResponseHeader, request_id: &str) -> pingora::Result<()> {
    for name in STRIP_RESPONSE {
        resp.remove_header(name);
    }
    resp.insert_header("x-request-id", request_id)?;
    Ok(())
}

/// Substitutes the full body on each upstream attempt. Pingora replays its retry buffer (the
/// body's tail) as one chunk with `end_of_stream = true`; anything else is dropped.
pub fn substitute_body(body: &mut Option<Bytes>, end_of_stream: bool, full: &Bytes) {
    *body = if end_of_stream {
        Some(full.clone())
    } else {
        Some(Bytes::new())
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::{call_body, top_level};

    fn rewrite(route: Route, body: &str, upstream_model: &str) -> String {
        let bytes = Bytes::from(body.to_string());
        let fields = top_level(&bytes).unwrap();
        let call = call_body(route, &fields).unwrap();
        let out = forward_body(route, &bytes, &fields, &call, upstream_model).unwrap();
        String::from_utf8(out.to_vec()).unwrap()
    }

    #[test]
    fn untouched_when_nothing_changes() {
        let body = r#"{ "model" : "m", "messages":[{"role":"user","content":"hi"}] }"#;
        assert_eq!(rewrite(Route::ChatCompletions, body, "m"), body);
    }

    #[test]
    fn renames_model_keeps_everything_else() {
        let body = r#"{"messages":[{"role":"user","content":"h\u00e9"}],"model":"openai/m","temperature":0.5}"#;
        assert_eq!(
            rewrite(Route::ChatCompletions, body, "m"),
            r#"{"messages":[{"role":"user","content":"h\u00e9"}],"model":"m","temperature":0.5}"#
        );
    }

    #[test]
    fn chat_streams_ask_for_usage() {
        let out = rewrite(
            Route::ChatCompletions,
            r#"{"model":"m","messages":[],"stream":true}"#,
            "m",
        );
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["stream_options"]["include_usage"], true);
        let out = rewrite(
            Route::ChatCompletions,
            r#"{"model":"m","messages":[],"stream":true,"stream_options":{"x":1}}"#,
            "m",
        );
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            v["stream_options"],
            serde_json::json!({"x":1,"include_usage":true})
        );
        // Responses streams report usage in response.completed already.
        let body = r#"{"model":"m","input":"x","stream":true}"#;
        assert_eq!(rewrite(Route::Responses, body, "m"), body);
    }
}
