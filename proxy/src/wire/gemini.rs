//! The Gemini `generateContent` wire format (the native surface, `/v1beta/models/{model}:…`): the
//! request fields the gateway reads and the body rewrite for a Gemini account (its answers are
//! read by `translate`'s Gemini decoder).
//!
//! The model is in the path, not the body. SPEC rules read here: a top-level `thinking` field is
//! refused (400 `invalid_request_error`: thinking goes in `generationConfig.thinkingConfig`);
//! `generationConfig.maxOutputTokens` is the hard output cap and **defaults to 1024** when omitted
//! — the gateway writes the default into the forwarded body, so the cap it holds for is the cap
//! the supplier applies.
//!
use super::CallBody;
use crate::classify::Route;
use crate::errors::GatewayError;
use crate::wire::json::TopLevel;
use bytes::Bytes;
use serde_json::{Map, Value};

/// `maxOutputTokens` when the client sets none (SPEC, Limits).
pub(crate) const DEFAULT_MAX_OUTPUT_TOKENS: u64 = 1024;

/// Reads the fields the gateway needs from a native body; `model` comes from the path.
pub(crate) fn call_body(
    route: Route,
    model: &str,
    fields: &TopLevel<'_>,
) -> Result<CallBody, GatewayError> {
    if model.is_empty() {
        return Err(GatewayError::invalid(
            "the path names no model",
            Some("model"),
        ));
    }
    if fields.contains_key("thinking") {
        return Err(GatewayError::invalid(
            "'thinking' is not a field of this API: set generationConfig.thinkingConfig",
            Some("thinking"),
        ));
    }
    // A count may wrap the whole generation request instead of sending `contents`.
    let wrapped =
        route == Route::NativeCountTokens && fields.contains_key("generateContentRequest");
    if !wrapped || fields.contains_key("contents") {
        super::openai::require_array(fields, "contents")?;
    }
    let output_cap = match route {
        Route::NativeCountTokens => None,
        _ => Some(max_output_tokens(fields)?.unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS)),
    };
    Ok(CallBody {
        model: model.to_string(),
        stream: route == Route::NativeStream,
        include_usage: true,
        output_cap,
    })
}

/// `generationConfig.maxOutputTokens`, when set.
fn max_output_tokens(fields: &TopLevel<'_>) -> Result<Option<u64>, GatewayError> {
    let Some(raw) = fields.get("generationConfig") else {
        return Ok(None);
    };
    let config: Option<Map<String, Value>> = serde_json::from_str(raw.get()).map_err(|_| {
        GatewayError::invalid(
            "'generationConfig' must be an object",
            Some("generationConfig"),
        )
    })?;
    match config.as_ref().and_then(|c| c.get("maxOutputTokens")) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            GatewayError::invalid(
                "'generationConfig.maxOutputTokens' must be a non-negative integer",
                Some("generationConfig.maxOutputTokens"),
            )
        }),
    }
}

/// The body for a Gemini account: the original, unless `maxOutputTokens` must be written (the
/// SPEC default); the model is in the path.
pub(crate) fn forward_body(
    route: Route,
    original: &Bytes,
    fields: &TopLevel<'_>,
) -> Result<Bytes, GatewayError> {
    if route == Route::NativeCountTokens || max_output_tokens(fields)?.is_some() {
        return Ok(original.clone());
    }
    let mut config: Map<String, Value> = fields
        .get("generationConfig")
        .and_then(|raw| serde_json::from_str::<Option<Map<String, Value>>>(raw.get()).ok())
        .flatten()
        .unwrap_or_default();
    config.insert(
        "maxOutputTokens".into(),
        Value::from(DEFAULT_MAX_OUTPUT_TOKENS),
    );
    let json = serde_json::to_string(&config).map_err(|_| GatewayError::Internal)?;
    super::openai::rewrite_fields(original.len(), fields, &[("generationConfig", json)])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::json::top_level;

    #[test]
    fn reads_native_bodies_and_refuses_thinking() {
        let f = top_level(br#"{"contents":[{"parts":[{"text":"hi"}]}]}"#).unwrap();
        let c = call_body(Route::NativeStream, "g", &f).unwrap();
        assert!(c.stream);
        assert_eq!(c.output_cap, Some(1024));
        let f = top_level(br#"{"contents":[],"generationConfig":{"maxOutputTokens":50}}"#).unwrap();
        assert_eq!(
            call_body(Route::NativeGenerate, "g", &f)
                .unwrap()
                .output_cap,
            Some(50)
        );
        let f = top_level(br#"{"contents":[],"thinking":{"type":"enabled"}}"#).unwrap();
        assert!(matches!(
            call_body(Route::NativeGenerate, "g", &f),
            Err(GatewayError::InvalidBody {
                param: Some("thinking"),
                ..
            })
        ));
        let f = top_level(br#"{"generateContentRequest":{"contents":[]}}"#).unwrap();
        assert!(call_body(Route::NativeCountTokens, "g", &f).is_ok());
        assert!(call_body(Route::NativeGenerate, "g", &f).is_err());
    }

    #[test]
    fn the_default_cap_is_written_into_the_body() {
        let body = Bytes::from_static(br#"{"contents":[],"generationConfig":{"temperature":0.5}}"#);
        let f = top_level(&body).unwrap();
        let out = forward_body(Route::NativeGenerate, &body, &f).unwrap();
        let v: Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["generationConfig"]["maxOutputTokens"], 1024);
        assert_eq!(v["generationConfig"]["temperature"], 0.5);
        let body =
            Bytes::from_static(br#"{"contents":[],"generationConfig":{"maxOutputTokens":7}}"#);
        let f = top_level(&body).unwrap();
        assert_eq!(
            forward_body(Route::NativeGenerate, &body, &f).unwrap(),
            body
        );
    }
}
