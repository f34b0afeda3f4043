//! The OpenAI wire format (chat completions, responses, audio transcriptions): the request fields
//! the gateway reads, the body rewrite for an account, and where usage sits in a response.
//!
//! Rewrite: the model id becomes the supplier's bare id, and a chat stream is asked to report
//! usage (`stream_options.include_usage = true`) so it can be metered exactly. Every other byte of
//! the body is forwarded as received; when nothing must change the original buffer is reused.
//! Decision (docs/ARCHITECTURE.md): when the gateway adds `include_usage`, the client sees the
//! supplier's final usage chunk (`choices: []`) too. OpenAI clients accept it, and streams stay
//! byte-for-byte what the supplier sent.

use super::CallBody;
use crate::classify::Route;
use crate::errors::GatewayError;
use crate::wire::json::TopLevel;
use bytes::Bytes;
use serde::Deserialize;

/// What a generation call asks for, read from its body.

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

/// The required, non-empty string field `model`.
pub(crate) fn string_field(
    fields: &TopLevel<'_>,
    name: &'static str,
) -> Result<String, GatewayError> {
    let value = match fields.get(name) {
        None => {
            return Err(GatewayError::invalid(
                format!("'{name}' is required"),
                Some(name),
            ));
        }
        Some(raw) => serde_json::from_str::<String>(raw.get())
            .map_err(|_| GatewayError::invalid(format!("'{name}' must be a string"), Some(name)))?,
    };
    if value.is_empty() {
        return Err(GatewayError::invalid(
            format!("'{name}' must not be empty"),
            Some(name),
        ));
    }
    Ok(value)
}

/// An optional boolean field (absent or `null`: false).
pub(crate) fn bool_field(fields: &TopLevel<'_>, name: &'static str) -> Result<bool, GatewayError> {
    match fields.get(name).map(|raw| raw.get()) {
        None | Some("false" | "null") => Ok(false),
        Some("true") => Ok(true),
        Some(_) => Err(GatewayError::invalid(
            format!("'{name}' must be a boolean"),
            Some(name),
        )),
    }
}

/// A required array field (`messages`, `contents`): 400 naming it when absent or not an array.
pub(crate) fn require_array(fields: &TopLevel<'_>, name: &'static str) -> Result<(), GatewayError> {
    match fields.get(name).map(|r| r.get().trim_start()) {
        Some(v) if v.starts_with('[') => Ok(()),
        Some(_) => Err(GatewayError::invalid(
            format!("'{name}' must be an array"),
            Some(name),
        )),
        None => Err(GatewayError::invalid(
            format!("'{name}' is required"),
            Some(name),
        )),
    }
}

/// Reads the fields the gateway needs from a chat-completions or responses body.
pub(crate) fn call_body(route: Route, fields: &TopLevel<'_>) -> Result<CallBody, GatewayError> {
    let model = string_field(fields, "model")?;
    let stream = bool_field(fields, "stream")?;
    match route {
        Route::ChatCompletions => require_array(fields, "messages")?,
        Route::Responses if !fields.contains_key("input") => {
            return Err(GatewayError::invalid("'input' is required", Some("input")));
        }
        _ => {}
    }
    let include_usage = match fields.get("stream_options") {
        None => false,
        Some(raw) if raw.get() == "null" => false,
        Some(raw) => {
            serde_json::from_str::<StreamOptions>(raw.get())
                .map_err(|_| {
                    GatewayError::invalid(
                        "'stream_options' must be an object",
                        Some("stream_options"),
                    )
                })?
                .include_usage
        }
    };
    let mut output_cap = None;
    for field in ["max_tokens", "max_completion_tokens", "max_output_tokens"] {
        match fields.get(field).map(|r| r.get()) {
            None | Some("null") => {}
            Some(raw) => {
                let n: u64 = raw.parse().map_err(|_| {
                    GatewayError::invalid(format!("'{field}' must be a non-negative integer"), None)
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

/// The body to forward: the original when nothing changes, else a rewritten copy.
pub(crate) fn forward_body(
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
    let model_json = serde_json::to_string(upstream_model).map_err(|_| GatewayError::Internal)?;
    let mut replaced = vec![("model", model_json)];
    if ask_usage {
        let mut options: serde_json::Map<String, serde_json::Value> = fields
            .get("stream_options")
            .and_then(|v| serde_json::from_str(v.get()).ok())
            .unwrap_or_default();
        options.insert("include_usage".into(), serde_json::Value::Bool(true));
        let json = serde_json::to_string(&options).map_err(|_| GatewayError::Internal)?;
        replaced.push(("stream_options", json));
    }
    rewrite_fields(original.len(), fields, &replaced)
}

/// A copy of a JSON object with each `(key, JSON value)` of `replaced` written in place of the
/// original's field of that name (or appended when it had none); every other field's bytes are
/// kept as received, in order.
pub(crate) fn rewrite_fields(
    size_hint: usize,
    fields: &TopLevel<'_>,
    replaced: &[(&str, String)],
) -> Result<Bytes, GatewayError> {
    let mut out = Vec::with_capacity(size_hint + 64);
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
    for (key, value) in fields {
        match replaced.iter().find(|(k, _)| k == key) {
            Some((_, new)) => push(&mut out, key, new)?,
            None => push(&mut out, key, value.get())?,
        }
    }
    for (key, new) in replaced {
        if !fields.contains_key(*key) {
            push(&mut out, key, new)?;
        }
    }
    out.push(b'}');
    Ok(Bytes::from(out))
}

/// A copy of a JSON object with string fields replaced (see [`rewrite_fields`]).
pub(crate) fn replace_fields(
    original: &Bytes,
    fields: &TopLevel<'_>,
    strings: &[(&str, &str)],
) -> Result<Bytes, GatewayError> {
    let replaced = strings
        .iter()
        .map(|(k, v)| {
            Ok((
                *k,
                serde_json::to_string(v).map_err(|_| GatewayError::Internal)?,
            ))
        })
        .collect::<Result<Vec<_>, GatewayError>>()?;
    rewrite_fields(original.len(), fields, &replaced)
}

#[derive(Deserialize)]
struct AudioCarrier {
    usage: Option<AudioUsage>,
    duration: Option<f64>,
}

#[derive(Deserialize)]
struct AudioUsage {
    #[serde(rename = "type")]
    kind: Option<String>,
    seconds: Option<f64>,
}

/// Seconds of audio from a transcription body: `usage: {type: "duration", seconds}` or the
/// `duration` of a verbose answer, rounded up to whole seconds; implausible values are ignored.
pub(crate) fn audio_seconds(json: &[u8]) -> Option<u64> {
    let carrier: AudioCarrier = serde_json::from_slice(json).ok()?;
    let seconds = carrier
        .usage
        .filter(|u| u.kind.as_deref().is_none_or(|k| k == "duration"))
        .and_then(|u| u.seconds)
        .or(carrier.duration)?;
    (seconds.is_finite() && (0.0..=PLAUSIBLE_AUDIO_SECONDS).contains(&seconds))
        .then(|| seconds.ceil() as u64)
}

/// Longest plausible transcription (a week of audio); beyond it the duration is estimated.
const PLAUSIBLE_AUDIO_SECONDS: f64 = 604_800.0;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::json::top_level;

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
