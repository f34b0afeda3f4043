//! The Gemini `generateContent` body (the native surface, `/v1beta/models/{model}:…`): what the
//! gateway reads of it and the body for a Gemini account. It is never decoded into the canonical
//! request: the native surface passes through untranslated. Its encoder ([`encode`]) writes a
//! canonical request for a Gemini supplier.
//!
//! The model is in the path, not the body. SPEC rules read here: a top-level `thinking` field is
//! refused (400 `invalid_request_error`: thinking goes in `generationConfig.thinkingConfig`);
//! `generationConfig.maxOutputTokens` is the hard output cap and **defaults to 1024** when omitted
//! — the gateway writes the default into the forwarded body, so the cap it holds for is the cap
//! the supplier applies.

pub(super) mod encode;

use bytes::Bytes;
use serde_json::{Map, Value};

use super::top::{self, Malformed, TopLevel};
use super::{Endpoint, Head};

/// `maxOutputTokens` when the client sets none (SPEC, Limits).
pub(super) const DEFAULT_MAX_OUTPUT_TOKENS: u64 = 1024;

/// What the gateway reads of a native body; `model` comes from the path, and the path says
/// whether it streams (`:streamGenerateContent`).
pub(super) fn head(
    fields: &TopLevel<'_>,
    endpoint: Endpoint,
    model: &str,
) -> Result<Head, Malformed> {
    if model.is_empty() {
        return Err(Malformed::new("the path names no model", Some("model")));
    }
    if fields.contains_key("thinking") {
        return Err(Malformed::new(
            "'thinking' is not a field of this API: set generationConfig.thinkingConfig",
            Some("thinking"),
        ));
    }
    // A count may wrap the whole generation request instead of sending `contents`.
    let wrapped = endpoint == Endpoint::Count && fields.contains_key("generateContentRequest");
    if !wrapped || fields.contains_key("contents") {
        top::require_array(fields, "contents")?;
    }
    let output_cap = match endpoint {
        Endpoint::Count => None,
        Endpoint::Generate | Endpoint::Stream => {
            Some(max_output_tokens(fields)?.unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS))
        }
    };
    Ok(Head {
        model: model.to_string(),
        stream: endpoint == Endpoint::Stream,
        include_usage: true,
        output_cap,
    })
}

/// `generationConfig.maxOutputTokens`, when set.
fn max_output_tokens(fields: &TopLevel<'_>) -> Result<Option<u64>, Malformed> {
    let Some(raw) = fields.get("generationConfig") else {
        return Ok(None);
    };
    let config: Option<Map<String, Value>> = serde_json::from_str(raw.get()).map_err(|_| {
        Malformed::new(
            "'generationConfig' must be an object",
            Some("generationConfig"),
        )
    })?;
    match config.as_ref().and_then(|c| c.get("maxOutputTokens")) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            Malformed::new(
                "'generationConfig.maxOutputTokens' must be a non-negative integer",
                Some("generationConfig.maxOutputTokens"),
            )
        }),
    }
}

/// The body for a Gemini account: the original, unless `maxOutputTokens` must be written (the
/// SPEC default); the model is in the path.
pub(super) fn forward(
    original: &Bytes,
    fields: &TopLevel<'_>,
    endpoint: Endpoint,
) -> Result<Bytes, Malformed> {
    if endpoint == Endpoint::Count || max_output_tokens(fields)?.is_some() {
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
    let json = serde_json::to_string(&config).map_err(top::unwritable)?;
    top::rewrite_fields(original.len(), fields, &[("generationConfig", json)])
}
