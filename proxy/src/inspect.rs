//! Phase 2, inspection: read the request body once, bounded, and learn what the call asks for.
//!
//! Pingora 0.9 has no supported way to read a body before choosing the upstream and still forward
//! it. We use its retry buffer (64 KiB, hard-coded): the body is read here with the buffer enabled
//! only for its last <= 64 KiB, so the buffer is never truncated and the proxy replays it on every
//! upstream attempt through `request_body_filter`, where the full (possibly rewritten) body is
//! substituted (see `rewrite::substitute_body` and notes/pingora.md §2). Consequences, tested in
//! the integration suite: bodies over 64 KiB need `Content-Length` (else 411); bodies over
//! `server.max_body_bytes` answer 413 before being read.
//!
//! Parsing touches only the top level of the JSON object: values are borrowed raw slices, so a
//! 3 MB conversation is scanned once and never re-encoded unless a field must change.

use crate::errors::GatewayError;
use crate::surface::Route;
use bytes::{Bytes, BytesMut};
use indexmap::IndexMap;
use pingora::proxy::Session;
use serde::Deserialize;
use serde_json::value::RawValue;

/// Pingora's retry buffer size (`BODY_BUF_LIMIT`, not configurable in 0.9.1).
const RETRY_BUFFER_LIMIT: usize = 64 * 1024;

/// Reads the whole request body, at most `max` bytes.
pub async fn read_body(session: &mut Session, max: usize) -> Result<Bytes, GatewayError> {
    let declared = session
        .req_header()
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<usize>().ok());
    if declared.is_some_and(|n| n > max) {
        return Err(GatewayError::BodyTooLarge { limit: max });
    }
    let mut buf = BytesMut::with_capacity(declared.unwrap_or(0).min(max));
    let mut buffering = false;
    loop {
        let remaining = declared.map(|n| n.saturating_sub(buf.len()));
        if !buffering && remaining.is_none_or(|r| r <= RETRY_BUFFER_LIMIT) {
            session.as_mut().enable_retry_buffering();
            buffering = true;
        }
        let chunk = session.read_request_body().await.map_err(|e| {
            tracing::debug!(error = %e, "reading the request body failed");
            GatewayError::InvalidBody {
                message: "the request body could not be read".into(),
                param: None,
            }
        })?;
        match chunk {
            Some(c) => {
                if buf.len() + c.len() > max {
                    return Err(GatewayError::BodyTooLarge { limit: max });
                }
                buf.extend_from_slice(&c);
            }
            None => break,
        }
    }
    if session.as_ref().retry_buffer_truncated() {
        return Err(GatewayError::LengthRequired);
    }
    if !buf.is_empty() && session.as_ref().get_retry_buffer().is_none() {
        tracing::error!(
            "request body read but pingora kept no retry buffer: it would never be forwarded"
        );
        return Err(GatewayError::Internal);
    }
    Ok(buf.freeze())
}

/// Attribution headers: a project and a workflow the client names for reporting. At most 64
/// visible ASCII characters each; anything else is refused (it would be reported as sent).
pub fn attribution(
    req: &pingora::http::RequestHeader,
) -> Result<(Option<String>, Option<String>), GatewayError> {
    let read = |name: &'static str| -> Result<Option<String>, GatewayError> {
        let mut values = req.headers.get_all(name).iter();
        match (values.next(), values.next()) {
            (None, _) => Ok(None),
            (Some(v), None) => {
                let s = v.to_str().unwrap_or_default().trim();
                if s.is_empty() || s.len() > 64 || !s.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
                    return Err(GatewayError::InvalidBody {
                        message: format!("header {name} must be 1 to 64 visible ASCII characters"),
                        param: Some(name),
                    });
                }
                Ok(Some(s.to_string()))
            }
            _ => Err(GatewayError::InvalidBody {
                message: format!("header {name} may appear once"),
                param: Some(name),
            }),
        }
    };
    Ok((read("x-tollgate-project")?, read("x-tollgate-workflow")?))
}

/// The session signal of a call, in this precedence: header `x-session-id`, header `session_id`,
/// body `session_id`, body `conversation_id`, body `prompt_cache_key` (the first present, non-empty
/// string of at most 256 characters). Requests with the same signal prefer the same account.
pub fn session_signal(req: &pingora::http::RequestHeader, fields: &TopLevel<'_>) -> Option<String> {
    let usable = |s: &str| {
        let s = s.trim();
        (!s.is_empty() && s.len() <= 256).then(|| s.to_string())
    };
    for name in ["x-session-id", "session_id"] {
        if let Some(v) = req
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(usable)
        {
            return Some(v);
        }
    }
    for field in ["session_id", "conversation_id", "prompt_cache_key"] {
        if let Some(v) = fields
            .get(field)
            .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
            .and_then(|s| usable(&s))
        {
            return Some(v);
        }
    }
    None
}

/// What a generation call asks for, read from its body.
#[derive(Debug, Clone)]
pub struct CallBody {
    /// The model id exactly as sent (may carry an `author/` prefix).
    pub model: String,
    pub stream: bool,
    /// Whether a chat stream already asks for usage (`stream_options.include_usage`).
    pub include_usage: bool,
    /// The output cap the request sets (`max_tokens`, `max_completion_tokens`,
    /// `max_output_tokens`), if any.
    pub output_cap: Option<u64>,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

fn invalid(message: impl Into<String>, param: Option<&'static str>) -> GatewayError {
    GatewayError::InvalidBody {
        message: message.into(),
        param,
    }
}

/// The top level of a JSON object body, values left raw.
pub type TopLevel<'a> = IndexMap<String, &'a RawValue>;

/// Parses the top level of a JSON object body.
pub fn top_level(body: &[u8]) -> Result<TopLevel<'_>, GatewayError> {
    if body.is_empty() {
        return Err(invalid("a JSON body is required", None));
    }
    serde_json::from_slice::<TopLevel<'_>>(body)
        .map_err(|e| invalid(format!("the body is not a JSON object: {e}"), None))
}

/// Reads the fields the gateway needs from a chat-completions or responses body.
pub fn call_body(route: Route, fields: &TopLevel<'_>) -> Result<CallBody, GatewayError> {
    let model = match fields.get("model") {
        None => return Err(invalid("'model' is required", Some("model"))),
        Some(raw) => serde_json::from_str::<String>(raw.get())
            .map_err(|_| invalid("'model' must be a string", Some("model")))?,
    };
    if model.is_empty() {
        return Err(invalid("'model' must not be empty", Some("model")));
    }
    let stream = match fields.get("stream") {
        None => false,
        Some(raw) => match raw.get() {
            "true" => true,
            "false" | "null" => false,
            _ => return Err(invalid("'stream' must be a boolean", Some("stream"))),
        },
    };
    match route {
        Route::ChatCompletions => match fields.get("messages").map(|r| r.get().trim_start()) {
            Some(v) if v.starts_with('[') => {}
            Some(_) => return Err(invalid("'messages' must be an array", Some("messages"))),
            None => return Err(invalid("'messages' is required", Some("messages"))),
        },
        Route::Responses => {
            if !fields.contains_key("input") {
                return Err(invalid("'input' is required", Some("input")));
            }
        }
        Route::Models | Route::Admin | Route::AudioTranscriptions => {}
    }
    let include_usage = match fields.get("stream_options") {
        None => false,
        Some(raw) if raw.get() == "null" => false,
        Some(raw) => {
            serde_json::from_str::<StreamOptions>(raw.get())
                .map_err(|_| invalid("'stream_options' must be an object", Some("stream_options")))?
                .include_usage
        }
    };
    let mut output_cap = None;
    for field in ["max_tokens", "max_completion_tokens", "max_output_tokens"] {
        match fields.get(field).map(|r| r.get()) {
            None | Some("null") => {}
            Some(raw) => {
                let n: u64 = raw.parse().map_err(|_| {
                    invalid(format!("'{field}' must be a non-negative integer"), None)
                })?;
                output_cap = Some(output_cap.map_or(n, |c: u64| c.min(n)));
            }
        }
    }
    Ok(CallBody {
        model,
        stream,
        include_usage,
        output_cap,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(route: Route, body: &str) -> Result<CallBody, GatewayError> {
        call_body(route, &top_level(body.as_bytes())?)
    }

    #[test]
    fn reads_model_and_stream() {
        let c = parse(
            Route::ChatCompletions,
            r#"{"model":"openai/gpt-4o-mini","messages":[],"stream":true}"#,
        )
        .unwrap();
        assert_eq!(c.model, "openai/gpt-4o-mini");
        assert!(c.stream && !c.include_usage);
        let c = parse(Route::Responses, r#"{"model":"m","input":"hi"}"#).unwrap();
        assert!(!c.stream);
    }

    #[test]
    fn refuses_bad_shapes() {
        for (route, body, param) in [
            (Route::ChatCompletions, r#"{"messages":[]}"#, Some("model")),
            (
                Route::ChatCompletions,
                r#"{"model":1,"messages":[]}"#,
                Some("model"),
            ),
            (
                Route::ChatCompletions,
                r#"{"model":"m","messages":"x"}"#,
                Some("messages"),
            ),
            (Route::ChatCompletions, r#"{"model":"m"}"#, Some("messages")),
            (
                Route::ChatCompletions,
                r#"{"model":"m","messages":[],"stream":"yes"}"#,
                Some("stream"),
            ),
            (Route::Responses, r#"{"model":"m"}"#, Some("input")),
            (Route::Responses, r#"[1,2]"#, None),
            (Route::Responses, r#"{"model":"m""#, None),
            (Route::Responses, "", None),
        ] {
            match parse(route, body) {
                Err(GatewayError::InvalidBody { param: p, .. }) => assert_eq!(p, param, "{body}"),
                other => panic!("{body}: {other:?}"),
            }
        }
    }
}
