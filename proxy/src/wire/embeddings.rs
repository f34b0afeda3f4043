//! Embedding calls on the wire (issue 46; shapes and sources in docs/WIRE-EMBEDDINGS.md): the body
//! each account format gets, and the answer turned back into the client's shape.
//!
//! | client | `openai` account | `gemini` account |
//! |---|---|---|
//! | `{compat_base}/embeddings` | `/embeddings` (as sent, the model replaced) | `:batchEmbedContents` (translated) |
//! | `:embedContent` | `/embeddings` (translated) | `:embedContent` (as sent, the model replaced) |
//! | `:batchEmbedContents` | `/embeddings` (translated) | `:batchEmbedContents` (as sent, the models replaced) |
//!
//! Translated: `dimensions` ↔ `outputDimensionality`; token-id inputs, `user`, `taskType` and
//! `title` have no counterpart and are refused (400 naming the field). A translated call asks the
//! OpenAI supplier for floats and answers a `base64` client with the floats as little-endian
//! 32-bit values in base64, as OpenAI does. The usage the OpenAI client is shown is the usage
//! billed: the supplier's when it reports one, else the estimate (`EmbeddingCall::estimate`).

use super::embedding_call::{Answering, EmbeddingCall, Input, NativeOptions, Shape};
use crate::errors::GatewayError;
use base64::Engine as _;
use bytes::Bytes;
use serde_json::{Map, Value, json};
use translate::Format;

/// The body for an `openai` account serving `call` with model `served`.
pub(crate) fn openai_body(call: &EmbeddingCall, served: &str) -> Result<Bytes, GatewayError> {
    let mut out = Map::new();
    if call.shape == Shape::OpenAi {
        out.clone_from(&call.fields);
        out.insert("model".into(), json!(served));
        return Ok(Bytes::from(Value::Object(out).to_string()));
    }
    let refuse = |field: &str, i: usize| {
        let param = match call.shape {
            Shape::NativeBatch => format!("requests[{i}].{field}"),
            _ => field.to_string(),
        };
        GatewayError::Untranslatable {
            message: format!(
                "'{param}' has no counterpart at this model's supplier (an OpenAI-format embeddings API)"
            ),
            param: Some(param),
        }
    };
    let mut dimensions = None;
    for (i, options) in call.native.iter().enumerate() {
        if options.task_type.is_some() {
            return Err(refuse("taskType", i));
        }
        if options.title.is_some() {
            return Err(refuse("title", i));
        }
        if i > 0 && options.dimensions != dimensions {
            return Err(refuse("outputDimensionality", i));
        }
        dimensions = options.dimensions;
    }
    let texts: Vec<Value> = call
        .inputs
        .iter()
        .map(|i| match i {
            Input::Text(t) => json!(t),
            Input::Tokens(t) => json!(t),
        })
        .collect();
    out.insert("model".into(), json!(served));
    out.insert(
        "input".into(),
        match call.shape {
            Shape::NativeOne => texts.into_iter().next().unwrap_or(Value::Null),
            _ => Value::Array(texts),
        },
    );
    if let Some(d) = dimensions {
        out.insert("dimensions".into(), json!(d));
    }
    out.insert("encoding_format".into(), json!("float"));
    Ok(Bytes::from(Value::Object(out).to_string()))
}

/// The body for a `gemini` account serving `call` with model `served` (sent to `:embedContent`
/// for a native single call, else `:batchEmbedContents`: `cells::upstream_path`).
pub(crate) fn gemini_body(call: &EmbeddingCall, served: &str) -> Result<Bytes, GatewayError> {
    let name = format!("models/{served}");
    let request = |text: &str, options: Option<&NativeOptions>| {
        let mut r = Map::new();
        r.insert("model".into(), json!(name));
        match options {
            Some(o) if !o.content.is_null() => r.insert("content".into(), o.content.clone()),
            _ => r.insert("content".into(), json!({"parts": [{"text": text}]})),
        };
        if let Some(o) = options {
            if let Some(t) = &o.task_type {
                r.insert("taskType".into(), json!(t));
            }
            if let Some(t) = &o.title {
                r.insert("title".into(), json!(t));
            }
            if let Some(d) = o.dimensions {
                r.insert("outputDimensionality".into(), json!(d));
            }
        }
        Value::Object(r)
    };
    let body = match call.shape {
        Shape::OpenAi => {
            if call.fields.contains_key("user") {
                return Err(untranslatable(
                    "user",
                    "has no counterpart at this model's supplier (Gemini's embeddings API)",
                ));
            }
            let mut requests = Vec::with_capacity(call.inputs.len());
            for input in &call.inputs {
                let text = text(input).ok_or_else(|| {
                    untranslatable("input", "token ids cannot be sent to this model's supplier (Gemini's embeddings API takes text)")
                })?;
                let mut r = request(text, None);
                if let (Some(d), Value::Object(o)) = (call.dimensions, &mut r) {
                    o.insert("outputDimensionality".into(), json!(d));
                }
                requests.push(r);
            }
            if requests.len() > super::embedding_call::MAX_NATIVE_REQUESTS {
                return Err(untranslatable(
                    "input",
                    &format!(
                        "may hold at most {} items for this model (its supplier's limit)",
                        super::embedding_call::MAX_NATIVE_REQUESTS
                    ),
                ));
            }
            json!({ "requests": requests })
        }
        Shape::NativeOne => {
            let first = call.inputs.first().and_then(text).unwrap_or_default();
            let mut r = request(first, call.native.first());
            if let Value::Object(o) = &mut r {
                o.remove("model");
            }
            r
        }
        Shape::NativeBatch => {
            let requests: Vec<Value> = call
                .inputs
                .iter()
                .zip(&call.native)
                .map(|(i, o)| request(text(i).unwrap_or_default(), Some(o)))
                .collect();
            json!({ "requests": requests })
        }
    };
    Ok(Bytes::from(body.to_string()))
}

/// The text of an input (`None`: token ids).
fn text(input: &Input) -> Option<&str> {
    match input {
        Input::Text(t) => Some(t.as_str()),
        Input::Tokens(_) => None,
    }
}

fn untranslatable(param: &str, what: &str) -> GatewayError {
    GatewayError::Untranslatable {
        message: format!("'{param}' {what}"),
        param: Some(param.to_string()),
    }
}

/// The input tokens an answer of `supplier` reports: OpenAI's `usage.prompt_tokens`; Gemini's
/// `usageMetadata.promptTokenCount` when it sends one (its embeddings API documents none, so a
/// Gemini-served embedding is estimated).
pub(crate) fn reported_tokens(supplier: Format, json: &[u8]) -> Option<u64> {
    let v: Value = serde_json::from_slice(json).ok()?;
    let n = match supplier {
        Format::Gemini => v.get("usageMetadata")?.get("promptTokenCount")?.as_u64()?,
        Format::Chat | Format::Responses | Format::Messages => {
            v.get("usage")?.get("prompt_tokens")?.as_u64()?
        }
    };
    // Implausible counts are not trusted (as for text usage).
    (n < 100_000_000).then_some(n)
}

/// An embedding answer on its way back in another format than the supplier's.
pub(crate) struct EmbeddingAnswer {
    /// The supplier speaks Gemini (else OpenAI).
    gemini: bool,
    shape: Shape,
    base64: bool,
    model: String,
    /// The tokens billed when the supplier reports none.
    estimate: u64,
    whole: super::Whole,
}

impl EmbeddingAnswer {
    /// The rewrite of a successful answer from a `gemini` (else OpenAI) supplier to a call
    /// answered as `plan` says (whose client sees `model`); `None` when supplier and client
    /// speak the same format.
    pub fn new(gemini: bool, plan: Answering, model: &str) -> Option<EmbeddingAnswer> {
        if gemini == (plan.shape != Shape::OpenAi) {
            return None;
        }
        Some(EmbeddingAnswer {
            gemini,
            shape: plan.shape,
            base64: plan.base64,
            model: model.to_string(),
            estimate: plan.estimate,
            whole: super::Whole::default(),
        })
    }

    /// Collects the supplier's body; at its end, replaces it by the client's answer.
    pub fn body(&mut self, body: &mut Option<Bytes>, end_of_stream: bool) {
        self.whole.take(body);
        if end_of_stream {
            *body = Some(Bytes::from(self.answer()));
        }
    }

    fn answer(&self) -> Vec<u8> {
        let invalid = |why: &str| {
            let message = format!("the supplier's embedding answer {why}");
            match self.gemini {
                // The client speaks OpenAI.
                true => json!({"error": {"message": message, "type": "upstream_error", "code": "upstream_invalid_response"}}),
                false => json!({"error": {"code": 502, "message": message, "status": "UNAVAILABLE"}}),
            }
            .to_string()
            .into_bytes()
        };
        let Some(kept) = self.whole.kept() else {
            return invalid("was too large to translate");
        };
        let Ok(v) = serde_json::from_slice::<Value>(kept) else {
            return invalid("was not valid JSON");
        };
        let out = match self.gemini {
            true => self.to_openai(&v, kept),
            false => self.to_gemini(&v),
        };
        match out {
            Some(out) => out.to_string().into_bytes(),
            None => invalid("did not hold the embeddings"),
        }
    }

    /// Gemini's `{embeddings: [{values}]}` as OpenAI's list, with the tokens billed as usage.
    fn to_openai(&self, v: &Value, kept: &[u8]) -> Option<Value> {
        let vectors = v.get("embeddings")?.as_array()?;
        let mut data = Vec::with_capacity(vectors.len());
        for (index, e) in vectors.iter().enumerate() {
            let values = e.get("values")?.as_array()?;
            let embedding = match self.base64 {
                true => {
                    let mut bytes = Vec::with_capacity(values.len() * 4);
                    for x in values {
                        // OpenAI's base64 encoding: little-endian 32-bit floats.
                        bytes.extend_from_slice(&(x.as_f64()? as f32).to_le_bytes());
                    }
                    json!(base64::engine::general_purpose::STANDARD.encode(bytes))
                }
                false => Value::Array(values.clone()),
            };
            data.push(json!({"object": "embedding", "index": index, "embedding": embedding}));
        }
        let tokens = reported_tokens(Format::Gemini, kept).unwrap_or(self.estimate);
        Some(json!({
            "object": "list",
            "data": data,
            "model": self.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }))
    }

    /// OpenAI's list (floats, as the gateway asked) as Gemini's `{embedding}` or `{embeddings}`.
    fn to_gemini(&self, v: &Value) -> Option<Value> {
        let mut items: Vec<&Value> = v.get("data")?.as_array()?.iter().collect();
        items.sort_by_key(|i| i.get("index").and_then(Value::as_u64).unwrap_or(0));
        let mut vectors = Vec::with_capacity(items.len());
        for item in items {
            vectors.push(json!({"values": item.get("embedding")?.as_array()?}));
        }
        Some(match self.shape {
            Shape::NativeOne => json!({"embedding": vectors.into_iter().next()?}),
            Shape::NativeBatch | Shape::OpenAi => json!({"embeddings": vectors}),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::embedding::{native, openai};

    fn run(answer: &mut EmbeddingAnswer, supplier: &[u8]) -> Value {
        let (a, b) = supplier.split_at(supplier.len() / 2);
        let mut first = Some(Bytes::copy_from_slice(a));
        answer.body(&mut first, false);
        assert_eq!(first.as_deref(), Some(&b""[..]));
        let mut last = Some(Bytes::copy_from_slice(b));
        answer.body(&mut last, true);
        serde_json::from_slice(&last.unwrap()).unwrap()
    }

    #[test]
    fn openai_client_to_gemini_and_back() {
        let call = openai(br#"{"model":"e","input":["hello","world!!!"],"dimensions":2,"encoding_format":"base64"}"#).unwrap();
        let sent: Value =
            serde_json::from_slice(&gemini_body(&call, "gem-embed").unwrap()).unwrap();
        assert_eq!(
            sent,
            json!({"requests": [
                {"model": "models/gem-embed", "content": {"parts": [{"text": "hello"}]}, "outputDimensionality": 2},
                {"model": "models/gem-embed", "content": {"parts": [{"text": "world!!!"}]}, "outputDimensionality": 2},
            ]})
        );
        let mut answer = EmbeddingAnswer::new(true, call.answering(), "e").unwrap();
        let out = run(
            &mut answer,
            br#"{"embeddings":[{"values":[0.5,-1.0]},{"values":[0.25,2.0]}]}"#,
        );
        let b64 = out["data"][1]["embedding"].as_str().unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        let floats: Vec<f32> = bytes
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(floats, vec![0.25, 2.0]);
        assert_eq!(out["data"][0]["index"], 0);
        assert_eq!(out["model"], "e");
        // No usage from Gemini: the estimate, ⌈5/4⌉ + ⌈8/4⌉.
        assert_eq!(out["usage"], json!({"prompt_tokens": 4, "total_tokens": 4}));
    }

    #[test]
    fn what_gemini_cannot_take_is_refused_by_name() {
        for (body, param) in [
            (r#"{"model":"e","input":[[1,2]]}"#, "input"),
            (r#"{"model":"e","input":"a","user":"u"}"#, "user"),
        ] {
            let call = openai(body.as_bytes()).unwrap();
            match gemini_body(&call, "g").unwrap_err() {
                GatewayError::Untranslatable { param: p, .. } => {
                    assert_eq!(p.as_deref(), Some(param))
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn native_client_to_openai_and_back() {
        let one = native(
            br#"{"content":{"parts":[{"text":"hi"}]},"outputDimensionality":3}"#,
            "g",
            false,
        )
        .unwrap();
        let sent: Value =
            serde_json::from_slice(&openai_body(&one, "text-embedding-3-small").unwrap()).unwrap();
        assert_eq!(
            sent,
            json!({"model": "text-embedding-3-small", "input": "hi", "dimensions": 3, "encoding_format": "float"})
        );
        let mut answer = EmbeddingAnswer::new(false, one.answering(), "g").unwrap();
        let out = run(&mut answer, br#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1,0.2,0.3]}],"model":"m","usage":{"prompt_tokens":1,"total_tokens":1}}"#);
        assert_eq!(out, json!({"embedding": {"values": [0.1, 0.2, 0.3]}}));
        let batch = native(br#"{"requests":[{"model":"models/g","content":{"parts":[{"text":"a"}]}},{"model":"models/g","content":{"parts":[{"text":"b"}]}}]}"#, "g", true).unwrap();
        let sent: Value = serde_json::from_slice(&openai_body(&batch, "m").unwrap()).unwrap();
        assert_eq!(sent["input"], json!(["a", "b"]));
        let mut answer = EmbeddingAnswer::new(false, batch.answering(), "g").unwrap();
        let out = run(&mut answer, br#"{"data":[{"index":1,"embedding":[2.0]},{"index":0,"embedding":[1.0]}],"usage":{"prompt_tokens":2}}"#);
        assert_eq!(
            out,
            json!({"embeddings": [{"values": [1.0]}, {"values": [2.0]}]})
        );
        let typed = native(
            br#"{"content":{"parts":[{"text":"hi"}]},"taskType":"RETRIEVAL_QUERY"}"#,
            "g",
            false,
        )
        .unwrap();
        assert!(
            matches!(openai_body(&typed, "m"), Err(GatewayError::Untranslatable { param: Some(p), .. }) if p == "taskType")
        );
    }

    #[test]
    fn same_format_bodies_only_change_the_model() {
        let call =
            openai(br#"{"model":"alias","input":"x","encoding_format":"base64","user":"u"}"#)
                .unwrap();
        let sent: Value = serde_json::from_slice(&openai_body(&call, "served").unwrap()).unwrap();
        assert_eq!(
            sent,
            json!({"model":"served","input":"x","encoding_format":"base64","user":"u"})
        );
        assert!(EmbeddingAnswer::new(false, call.answering(), "alias").is_none());
        let batch = native(br#"{"requests":[{"model":"models/alias","content":{"parts":[{"text":"a"}]},"taskType":"CLUSTERING"}]}"#, "alias", true).unwrap();
        let sent: Value = serde_json::from_slice(&gemini_body(&batch, "served").unwrap()).unwrap();
        assert_eq!(sent["requests"][0]["model"], "models/served");
        assert_eq!(sent["requests"][0]["taskType"], "CLUSTERING");
        assert!(EmbeddingAnswer::new(true, batch.answering(), "alias").is_none());
        assert_eq!(
            reported_tokens(
                Format::Chat,
                br#"{"usage":{"prompt_tokens":7,"total_tokens":7}}"#
            ),
            Some(7)
        );
        assert_eq!(
            reported_tokens(Format::Gemini, br#"{"embeddings":[]}"#),
            None
        );
    }
}
