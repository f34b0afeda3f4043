//! The Gemini `generateContent` wire format: path parsing
//! (`/v1beta/models/{model}:ACTION`, `/v1/models/…` too), request validation,
//! Google-shaped error bodies, the `GET /v1beta/models` list and the exact
//! reply bodies and stream chunks (text and `functionCall`).
//!
//! # Streams
//!
//! `streamGenerateContent?alt=sse` sends `data: <GenerateContentResponse>\r\n\r\n`
//! events (no event names, no `[DONE]`); without `alt=sse` the same chunks
//! form one JSON array. Text: chunk `i` (1..=n) holds the part `" wi"` and a
//! RUNNING `usageMetadata` (`candidatesTokenCount = min(i, final)`); the LAST
//! chunk also carries `finishReason: "STOP"` and the final counts (n = 0
//! gives one chunk with an empty text part). Tool call: one chunk with the
//! `functionCall` part, the final usage and `STOP`.
//!
//! # Thought signatures
//!
//! Like Gemini 3, a `functionCall` part comes with a `thoughtSignature` (standard base64 of
//! `mock-thought:<body hash>`), and a request is refused (400 `INVALID_ARGUMENT`, the real
//! message) when a model turn of the current turn (after the latest user text) has a first
//! `functionCall` part without a signature that decodes (standard or URL-safe base64) to bytes
//! starting `mock-thought:`.

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::reply::{GARBAGE_LINE, Reply, to_bytes};

/// The models `GET /v1beta/models` lists, in order: (id, display name).
pub const MODELS: &[(&str, &str)] = &[
    ("gemini-2.5-pro", "Gemini 2.5 Pro"),
    ("gemini-2.5-flash", "Gemini 2.5 Flash"),
    ("gemini-2.0-flash", "Gemini 2.0 Flash"),
];

/// Top-level request fields the mock accepts (camelCase and snake_case, like
/// the real API's protobuf JSON parser); anything else is 400.
const FIELDS: &[&str] = &[
    "contents",
    "model",
    "systemInstruction",
    "system_instruction",
    "generationConfig",
    "generation_config",
    "tools",
    "toolConfig",
    "tool_config",
    "safetySettings",
    "safety_settings",
    "cachedContent",
    "cached_content",
    "labels",
];

/// A Gemini endpoint under `models/{model}:`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    Generate,
    Stream,
    CountTokens,
    Embed,
    BatchEmbed,
}

/// `(model, action)` of a `/v1beta/models/{model}:ACTION` or
/// `/v1/models/{model}:ACTION` path; `None` for anything else.
pub(crate) fn parse_path(path: &str) -> Option<(&str, Action)> {
    let rest = path
        .strip_prefix("/v1beta/models/")
        .or_else(|| path.strip_prefix("/v1/models/"))?;
    let (model, action) = rest.rsplit_once(':')?;
    if model.is_empty() || model.contains('/') {
        return None;
    }
    let action = match action {
        "generateContent" => Action::Generate,
        "streamGenerateContent" => Action::Stream,
        "countTokens" => Action::CountTokens,
        "embedContent" => Action::Embed,
        "batchEmbedContents" => Action::BatchEmbed,
        _ => return None,
    };
    Some((model, action))
}

/// The google.rpc status name for an HTTP status.
pub(crate) fn status_name(code: u16) -> &'static str {
    match code {
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        501 => "UNIMPLEMENTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        500..=599 => "INTERNAL",
        _ => "INVALID_ARGUMENT",
    }
}

/// `{"error":{"code":C,"message":M,"status":S}}`, plus a `RetryInfo` detail
/// with `retryDelay: "<secs>s"` when `retry_delay` is set.
pub(crate) fn error_body(code: u16, message: &str, retry_delay: Option<u64>) -> Bytes {
    let mut error = json!({"code": code, "message": message, "status": status_name(code)});
    if let (Some(secs), Some(obj)) = (retry_delay, error.as_object_mut()) {
        obj.insert(
            "details".into(),
            json!([{
                "@type": "type.googleapis.com/google.rpc.RetryInfo",
                "retryDelay": format!("{secs}s"),
            }]),
        );
    }
    to_bytes(&json!({ "error": error }))
}

/// `GET /v1beta/models` body.
pub(crate) fn models_body() -> Bytes {
    let models: Vec<Value> = MODELS
        .iter()
        .map(|(id, name)| {
            json!({
                "name": format!("models/{id}"),
                "displayName": name,
                "supportedGenerationMethods": ["generateContent", "countTokens"],
            })
        })
        .collect();
    to_bytes(&json!({ "models": models }))
}

/// What every thought signature the mock issues decodes to, at its start.
pub const THOUGHT_PREFIX: &str = "mock-thought:";

/// Gemini 3's rule: in the current turn (the model steps after the latest user content that is
/// not a `functionResponse`), each step's first `functionCall` part carries the signature it came
/// with. `Err`: the real API's message, with the 1-based position of the offending content.
fn check_signatures(contents: &[Value]) -> Result<(), String> {
    use base64::Engine;
    let engines = [
        base64::engine::general_purpose::STANDARD,
        base64::engine::general_purpose::URL_SAFE,
    ];
    let parts = |c: &Value| {
        c.get("parts")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let standard_user = |c: &Value| {
        c.get("role").and_then(Value::as_str) != Some("model")
            && parts(c).iter().any(|p| p.get("functionResponse").is_none())
    };
    let start = contents
        .iter()
        .rposition(standard_user)
        .map_or(0, |i| i + 1);
    for (i, c) in contents.iter().enumerate().skip(start) {
        if c.get("role").and_then(Value::as_str) != Some("model") {
            continue;
        }
        let Some(call) = parts(c)
            .into_iter()
            .find(|p| p.get("functionCall").is_some())
        else {
            continue;
        };
        let signature = call
            .get("thoughtSignature")
            .or_else(|| call.get("thought_signature"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let valid = engines.iter().any(|e| {
            e.decode(signature)
                .is_ok_and(|bytes| bytes.starts_with(THOUGHT_PREFIX.as_bytes()))
        });
        if !valid {
            let name = call["functionCall"]["name"].as_str().unwrap_or_default();
            return Err(format!(
                "Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:{name}` , position {}. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.",
                i + 1
            ));
        }
    }
    Ok(())
}

/// Validates a `generateContent` / `streamGenerateContent` body.
pub(crate) fn validate(body: &Value) -> Result<(), String> {
    let obj = body
        .as_object()
        .ok_or("Invalid JSON payload received. Expected an object.")?;
    if let Some(name) = obj.keys().find(|k| !FIELDS.contains(&k.as_str())) {
        return Err(format!(
            "Invalid JSON payload received. Unknown name \"{name}\": Cannot find field."
        ));
    }
    let contents = obj
        .get("contents")
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty())
        .ok_or("* GenerateContentRequest.contents: contents is not specified")?;
    for (i, c) in contents.iter().enumerate() {
        match c.get("role").map(Value::as_str) {
            None | Some(Some("user" | "model")) => {}
            Some(_) => return Err("Please use a valid role: user, model.".into()),
        }
        let parts = c
            .get("parts")
            .and_then(Value::as_array)
            .filter(|p| !p.is_empty())
            .ok_or_else(|| {
                format!(
                    "* GenerateContentRequest.contents[{i}].parts: contents.parts must not be empty."
                )
            })?;
        if let Some(j) = parts.iter().position(|p| !p.is_object()) {
            return Err(format!(
                "Invalid JSON payload received. contents[{i}].parts[{j}]: Expected an object."
            ));
        }
    }
    check_signatures(contents)
}

/// Validates a `countTokens` body: `{contents}` or
/// `{generateContentRequest: {…}}`; returns the generate request inside.
pub(crate) fn validate_count(body: &Value) -> Result<&Value, String> {
    let inner = body
        .get("generateContentRequest")
        .or_else(|| body.get("generate_content_request"));
    match inner {
        Some(inner) => validate(inner).map(|()| inner),
        None => match body.get("contents") {
            Some(_) => validate(body).map(|()| body),
            None => {
                Err("* CountTokensRequest: contents or generateContentRequest is required".into())
            }
        },
    }
}

/// `data: JSON\r\n\r\n`.
fn sse(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\r\n\r\n"))
}

impl Reply {
    /// One GenerateContentResponse with one part; `finish` adds
    /// `finishReason: "STOP"`.
    fn gemini_object(&self, part: Value, usage: Value, finish: bool) -> Value {
        let mut candidate = Map::new();
        candidate.insert("content".into(), json!({"parts": [part], "role": "model"}));
        if finish {
            candidate.insert("finishReason".into(), Value::from("STOP"));
        }
        candidate.insert("index".into(), Value::from(0));
        json!({
            "candidates": [candidate],
            "usageMetadata": usage,
            "modelVersion": self.model,
            "responseId": self.hash,
        })
    }

    fn function_call_part(&self) -> Option<Value> {
        use base64::Engine;
        let signature = base64::engine::general_purpose::STANDARD
            .encode(format!("{THOUGHT_PREFIX}{}", self.hash));
        self.tool.as_ref().map(|name| {
            json!({"functionCall": {"name": name, "args": {"q": "mock"}}, "thoughtSignature": signature})
        })
    }

    fn final_usage(&self) -> Value {
        self.usage.gemini_json(self.usage.gemini_candidates())
    }

    /// Non-streaming `generateContent` body.
    pub(crate) fn gemini_response(&self) -> Bytes {
        let part = self
            .function_call_part()
            .unwrap_or_else(|| json!({"text": self.text()}));
        to_bytes(&self.gemini_object(part, self.final_usage(), true))
    }

    fn running_chunk(&self, i: usize) -> Value {
        let candidates = (i as u64).min(self.usage.gemini_candidates());
        self.gemini_object(
            json!({"text": format!(" w{i}")}),
            self.usage.gemini_json(candidates),
            false,
        )
    }

    /// The chunks of `streamGenerateContent` (see the module docs).
    pub(crate) fn gemini_chunks(&self) -> Vec<Value> {
        if let Some(part) = self.function_call_part() {
            return vec![self.gemini_object(part, self.final_usage(), true)];
        }
        if self.n == 0 {
            return vec![self.gemini_object(json!({"text": ""}), self.final_usage(), true)];
        }
        let mut chunks: Vec<Value> = (1..self.n).map(|i| self.running_chunk(i)).collect();
        chunks.push(self.gemini_object(
            json!({"text": format!(" w{}", self.n)}),
            self.final_usage(),
            true,
        ));
        chunks
    }

    /// `streamGenerateContent?alt=sse` events.
    pub(crate) fn gemini_sse(&self) -> Vec<Bytes> {
        self.gemini_chunks().iter().map(sse).collect()
    }

    /// `streamGenerateContent` without `alt=sse`: the chunks as a JSON array.
    pub(crate) fn gemini_array(&self) -> Bytes {
        to_bytes(&Value::Array(self.gemini_chunks()))
    }

    /// The `malformed_sse` Gemini stream: chunk 1 (`" w1"`), a
    /// `data: {not json` event, a garbage line, chunk 2 (`" w2"`), then the
    /// end without a `STOP` chunk.
    pub(crate) fn gemini_malformed(&self) -> Vec<Bytes> {
        let garbage = String::from_utf8_lossy(GARBAGE_LINE);
        vec![
            sse(&self.running_chunk(1)),
            Bytes::from_static(b"data: {not json\r\n\r\n"),
            Bytes::from(format!("{}\r\n\r\n", garbage.trim_end())),
            sse(&self.running_chunk(2)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::{Usage, body_hash_hex};

    fn reply(n: usize, usage: &str, tool: Option<&str>) -> Reply {
        Reply {
            hash: body_hash_hex(b"{}"),
            model: "gemini-2.5-flash".into(),
            n,
            usage: Usage::defaults(0, n).with_header(usage).unwrap(),
            include_usage: false,
            tool: tool.map(str::to_owned),
            pad: 0,
        }
    }

    #[test]
    fn paths() {
        assert_eq!(
            parse_path("/v1beta/models/gemini-2.5-flash:generateContent"),
            Some(("gemini-2.5-flash", Action::Generate))
        );
        assert_eq!(
            parse_path("/v1/models/g:streamGenerateContent"),
            Some(("g", Action::Stream))
        );
        assert_eq!(
            parse_path("/v1beta/models/g:countTokens"),
            Some(("g", Action::CountTokens))
        );
        assert_eq!(
            parse_path("/v1beta/models/g:embedContent"),
            Some(("g", Action::Embed))
        );
        assert_eq!(
            parse_path("/v1beta/models/g:batchEmbedContents"),
            Some(("g", Action::BatchEmbed))
        );
        assert_eq!(parse_path("/v1beta/models/g:embedContents"), None);
        assert_eq!(parse_path("/v1beta/models/:generateContent"), None);
        assert_eq!(parse_path("/v1beta/models"), None);
    }

    #[test]
    fn validation() {
        let ok = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "generationConfig": {}});
        assert!(validate(&ok).is_ok());
        assert_eq!(
            validate(&json!({"contents": [{"role": "assistant", "parts": [{"text": "x"}]}]})),
            Err("Please use a valid role: user, model.".into())
        );
        assert!(validate(&json!({"contents": []})).is_err());
        assert!(validate(&json!({"contents": [{"role": "user", "parts": []}]})).is_err());
        assert!(
            validate(
                &json!({"contents": [{"role": "user", "parts": [{"text": "x"}]}], "messages": []})
            )
            .is_err()
        );
        assert!(validate_count(&ok).is_ok());
        assert!(validate_count(&json!({"generateContentRequest": ok})).is_ok());
        assert!(validate_count(&json!({})).is_err());
    }

    #[test]
    fn error_shape() {
        let v: Value = serde_json::from_slice(&error_body(429, "slow down", Some(7))).unwrap();
        assert_eq!(
            v,
            json!({"error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED", "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}]}})
        );
        for (code, s) in [
            (400, "INVALID_ARGUMENT"),
            (401, "UNAUTHENTICATED"),
            (403, "PERMISSION_DENIED"),
            (404, "NOT_FOUND"),
            (500, "INTERNAL"),
            (503, "UNAVAILABLE"),
            (504, "DEADLINE_EXCEEDED"),
        ] {
            assert_eq!(status_name(code), s);
        }
    }

    #[test]
    fn text_reply_and_running_usage() {
        let r = reply(3, "prompt=10,completion=6,thoughts=2,cached=4", None);
        let v: Value = serde_json::from_slice(&r.gemini_response()).unwrap();
        assert_eq!(
            v["candidates"][0]["content"]["parts"][0]["text"],
            "mock reply w1 w2 w3"
        );
        assert_eq!(v["candidates"][0]["finishReason"], "STOP");
        assert_eq!(
            v["usageMetadata"],
            json!({"promptTokenCount": 10, "candidatesTokenCount": 4, "thoughtsTokenCount": 2, "cachedContentTokenCount": 4, "totalTokenCount": 16})
        );
        let chunks = r.gemini_chunks();
        assert_eq!(chunks.len(), 3);
        let cands: Vec<u64> = chunks
            .iter()
            .map(|c| c["usageMetadata"]["candidatesTokenCount"].as_u64().unwrap())
            .collect();
        assert_eq!(cands, [1, 2, 4]);
        assert!(chunks[1]["candidates"][0].get("finishReason").is_none());
        assert_eq!(chunks[2]["candidates"][0]["finishReason"], "STOP");
        assert_eq!(chunks[2]["usageMetadata"], v["usageMetadata"]);
        // capped at the final value
        let capped = reply(4, "completion=2", None).gemini_chunks();
        let cands: Vec<u64> = capped
            .iter()
            .map(|c| c["usageMetadata"]["candidatesTokenCount"].as_u64().unwrap())
            .collect();
        assert_eq!(cands, [1, 2, 2, 2]);
        assert_eq!(reply(0, "", None).gemini_chunks().len(), 1);
        let sse = r.gemini_sse();
        assert!(sse[0].starts_with(b"data: {") && sse[0].ends_with(b"}\r\n\r\n"));
    }

    #[test]
    fn tool_reply() {
        let r = reply(3, "", Some("find"));
        let v: Value = serde_json::from_slice(&r.gemini_response()).unwrap();
        use base64::Engine;
        let signature = base64::engine::general_purpose::STANDARD
            .encode(format!("{THOUGHT_PREFIX}{}", body_hash_hex(b"{}")));
        assert_eq!(
            v["candidates"][0]["content"]["parts"],
            json!([{"functionCall": {"name": "find", "args": {"q": "mock"}}, "thoughtSignature": signature}])
        );
        let chunks = r.gemini_chunks();
        assert_eq!(chunks.len(), 1);
        assert_eq!(chunks[0], v);
    }

    /// The current turn's function calls must come back with their signatures (either base64
    /// alphabet); earlier turns are not checked.
    #[test]
    fn thought_signatures_are_required_in_the_current_turn() {
        use base64::Engine;
        let sig = base64::engine::general_purpose::URL_SAFE.encode(format!("{THOUGHT_PREFIX}x"));
        let call = |signature: Option<&str>| {
            let mut part = json!({"functionCall": {"name": "find", "args": {}}});
            if let Some(s) = signature {
                part["thoughtSignature"] = json!(s);
            }
            json!({"role": "model", "parts": [part, {"functionCall": {"name": "g", "args": {}}}]})
        };
        let answer = json!({"role": "user", "parts": [{"functionResponse": {"name": "find", "response": {}}}]});
        let ask = json!({"role": "user", "parts": [{"text": "hi"}]});
        let body = |contents: Vec<Value>| json!({ "contents": contents });
        assert!(validate(&body(vec![ask.clone(), call(Some(&sig)), answer.clone()])).is_ok());
        let err = validate(&body(vec![ask.clone(), call(None), answer.clone()])).unwrap_err();
        assert!(
            err.contains("missing a thought_signature") && err.contains("position 2"),
            "{err}"
        );
        assert!(
            validate(&body(vec![
                ask.clone(),
                call(Some("bm9wZQ==")),
                answer.clone()
            ]))
            .is_err()
        );
        // An earlier turn (before the latest user text) is not checked.
        assert!(validate(&body(vec![ask.clone(), call(None), answer, ask])).is_ok());
    }
}
