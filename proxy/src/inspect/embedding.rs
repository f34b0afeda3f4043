//! Embedding calls (issue 46): the OpenAI-style `POST {compat_base}/embeddings` and the native
//! `:embedContent` / `:batchEmbedContents`, read and checked once into one [`EmbeddingCall`]
//! whatever the surface; the body each account format gets is made from it (`wire::embeddings`).
//!
//! OpenAI shape (docs/WIRE-EMBEDDINGS.md): `model`, `input` (a string, an array of strings, an
//! array of token ids, or an array of token-id arrays; at most [`MAX_INPUTS`] items, none empty),
//! `dimensions` (a positive integer), `encoding_format` (`float` | `base64`), `user`. Native
//! shape: `content: {parts: [{text}]}` with `taskType`, `title`, `outputDimensionality`, or
//! `requests: [...]` of those (at most [`MAX_NATIVE_REQUESTS`]), each naming the path's model
//! (`models/{model}`). Anything else is refused with 400 naming the field; what a translation
//! cannot express is refused when the bodies are made, before any supplier is contacted.

use crate::errors::GatewayError;
use serde_json::{Map, Value};

pub(crate) use crate::wire::embedding_call::{
    EmbeddingCall, Input, MAX_INPUTS, MAX_NATIVE_REQUESTS, NativeOptions, Shape,
};

fn object(body: &[u8]) -> Result<Map<String, Value>, GatewayError> {
    match serde_json::from_slice(body) {
        Ok(Value::Object(fields)) => Ok(fields),
        Ok(_) => Err(GatewayError::invalid(
            "the body must be a JSON object",
            None,
        )),
        Err(e) => Err(GatewayError::invalid(
            format!("the body is not valid JSON: {e}"),
            None,
        )),
    }
}

/// A positive integer field (`dimensions`, `outputDimensionality`).
fn positive(value: &Value, param: &str) -> Result<u64, GatewayError> {
    value
        .as_u64()
        .filter(|n| (1..=65_536).contains(n))
        .ok_or_else(|| GatewayError::field(format!("'{param}' must be a positive integer"), param))
}

/// Reads `POST {compat_base}/embeddings`.
pub(crate) fn openai(body: &[u8]) -> Result<EmbeddingCall, GatewayError> {
    let fields = object(body)?;
    for key in fields.keys() {
        if !["model", "input", "dimensions", "encoding_format", "user"].contains(&key.as_str()) {
            return Err(GatewayError::field(
                format!("unknown field '{key}' for an embedding"),
                key.as_str(),
            ));
        }
    }
    let model = match fields.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => return Err(GatewayError::invalid("'model' is required", Some("model"))),
    };
    let inputs = openai_inputs(fields.get("input"))?;
    let dimensions = match fields.get("dimensions") {
        None | Some(Value::Null) => None,
        Some(v) => Some(positive(v, "dimensions")?),
    };
    let base64 = match fields.get("encoding_format") {
        None | Some(Value::Null) => false,
        Some(Value::String(f)) if f == "float" => false,
        Some(Value::String(f)) if f == "base64" => true,
        Some(_) => {
            return Err(GatewayError::invalid(
                "'encoding_format' must be \"float\" or \"base64\"",
                Some("encoding_format"),
            ));
        }
    };
    if fields.get("user").is_some_and(|u| !u.is_string()) {
        return Err(GatewayError::invalid(
            "'user' must be a string",
            Some("user"),
        ));
    }
    Ok(EmbeddingCall {
        model,
        shape: Shape::OpenAi,
        inputs,
        dimensions,
        base64,
        fields,
        native: Vec::new(),
    })
}

/// `input`: a string, an array of strings, an array of token ids, an array of token-id arrays.
fn openai_inputs(input: Option<&Value>) -> Result<Vec<Input>, GatewayError> {
    let empty = || GatewayError::invalid("'input' must not be empty", Some("input"));
    let shape = || {
        GatewayError::invalid(
            "'input' must be a string, an array of strings, an array of token ids or an array of token-id arrays",
            Some("input"),
        )
    };
    let tokens =
        |items: &[Value]| -> Option<Vec<u64>> { items.iter().map(Value::as_u64).collect() };
    let inputs = match input {
        None | Some(Value::Null) => {
            return Err(GatewayError::invalid("'input' is required", Some("input")));
        }
        Some(Value::String(s)) => vec![Input::Text(s.clone())],
        Some(Value::Array(items)) if items.is_empty() => return Err(empty()),
        Some(Value::Array(items)) if items.iter().all(Value::is_number) => {
            vec![Input::Tokens(tokens(items).ok_or_else(shape)?)]
        }
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item {
                Value::String(s) => Ok(Input::Text(s.clone())),
                Value::Array(ids) => tokens(ids).map(Input::Tokens).ok_or_else(shape),
                _ => Err(shape()),
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err(shape()),
    };
    if inputs.len() > MAX_INPUTS {
        return Err(GatewayError::invalid(
            format!("'input' may hold at most {MAX_INPUTS} items"),
            Some("input"),
        ));
    }
    let blank = |i: &Input| match i {
        Input::Text(t) => t.is_empty(),
        Input::Tokens(t) => t.is_empty(),
    };
    if inputs.iter().any(blank) {
        return Err(empty());
    }
    Ok(inputs)
}

/// Reads a native `:embedContent` (`batch` false) or `:batchEmbedContents` body for the path's
/// `model`.
pub(crate) fn native(body: &[u8], model: &str, batch: bool) -> Result<EmbeddingCall, GatewayError> {
    let fields = object(body)?;
    let mut inputs = Vec::new();
    let mut native = Vec::new();
    if batch {
        if let Some(key) = fields.keys().find(|k| k.as_str() != "requests") {
            return Err(GatewayError::field(
                format!("unknown field '{key}' for batchEmbedContents"),
                key.as_str(),
            ));
        }
        let requests = match fields.get("requests") {
            Some(Value::Array(r)) if !r.is_empty() => r,
            _ => {
                return Err(GatewayError::invalid(
                    "'requests' must be a non-empty array",
                    Some("requests"),
                ));
            }
        };
        if requests.len() > MAX_NATIVE_REQUESTS {
            return Err(GatewayError::invalid(
                format!("'requests' may hold at most {MAX_NATIVE_REQUESTS} items"),
                Some("requests"),
            ));
        }
        for (i, request) in requests.iter().enumerate() {
            let Value::Object(request) = request else {
                return Err(GatewayError::field(
                    format!("'requests[{i}]' must be an object"),
                    format!("requests[{i}]"),
                ));
            };
            let (text, options) = native_request(request, model, &format!("requests[{i}]."))?;
            inputs.push(Input::Text(text));
            native.push(options);
        }
    } else {
        let (text, options) = native_request(&fields, model, "")?;
        inputs.push(Input::Text(text));
        native.push(options);
    }
    Ok(EmbeddingCall {
        model: model.to_string(),
        shape: if batch {
            Shape::NativeBatch
        } else {
            Shape::NativeOne
        },
        inputs,
        dimensions: None,
        base64: false,
        fields: Map::new(),
        native,
    })
}

/// One native request (`prefix`: where it sits, `requests[i].` in a batch): its text (the text
/// parts of `content`, joined by a newline) and its options.
fn native_request(
    r: &Map<String, Value>,
    model: &str,
    prefix: &str,
) -> Result<(String, NativeOptions), GatewayError> {
    let at = |field: &str| format!("{prefix}{field}");
    for key in r.keys() {
        if ![
            "model",
            "content",
            "taskType",
            "title",
            "outputDimensionality",
        ]
        .contains(&key.as_str())
        {
            return Err(GatewayError::field(
                format!("unknown field '{}' for an embedding request", at(key)),
                at(key),
            ));
        }
    }
    match r.get("model") {
        None if prefix.is_empty() => {}
        Some(Value::String(m)) if m.strip_prefix("models/").unwrap_or(m) == model => {}
        _ => {
            return Err(GatewayError::field(
                format!(
                    "'{}' must name the path's model, \"models/{model}\"",
                    at("model")
                ),
                at("model"),
            ));
        }
    }
    let text = content_text(r, &at)?;
    let string = |field: &str| -> Result<Option<String>, GatewayError> {
        match r.get(field) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(GatewayError::field(
                format!("'{}' must be a string", at(field)),
                at(field),
            )),
        }
    };
    let options = NativeOptions {
        content: r.get("content").cloned().unwrap_or(Value::Null),
        task_type: string("taskType")?,
        title: string("title")?,
        dimensions: match r.get("outputDimensionality") {
            None | Some(Value::Null) => None,
            Some(v) => Some(positive(v, &at("outputDimensionality"))?),
        },
    };
    Ok((text, options))
}

/// The text of a native request's `content`: its text parts, joined by a newline.
fn content_text(
    r: &Map<String, Value>,
    at: &dyn Fn(&str) -> String,
) -> Result<String, GatewayError> {
    let parts = r
        .get("content")
        .and_then(|c| c.get("parts"))
        .and_then(Value::as_array)
        .filter(|p| !p.is_empty())
        .ok_or_else(|| {
            GatewayError::field(
                format!("'{}' must hold at least one text part", at("content.parts")),
                at("content.parts"),
            )
        })?;
    let mut texts = Vec::with_capacity(parts.len());
    for (j, part) in parts.iter().enumerate() {
        let text = part
            .get("text")
            .and_then(Value::as_str)
            .filter(|_| part.as_object().is_some_and(|o| o.len() == 1))
            .ok_or_else(|| {
                let param = at(&format!("content.parts[{j}]"));
                GatewayError::field(format!("'{param}' must be a text part"), param)
            })?;
        texts.push(text);
    }
    let text = texts.join("\n");
    if text.is_empty() {
        let param = at("content.parts");
        return Err(GatewayError::field(format!("'{param}' is empty"), param));
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn param(e: GatewayError) -> String {
        match e {
            GatewayError::InvalidBody { param, .. } => param.unwrap_or_default().to_string(),
            GatewayError::InvalidField { param, .. } => param,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn openai_inputs_in_every_form() {
        let call = openai(br#"{"model":"e","input":"hello world!"}"#).unwrap();
        assert_eq!(call.inputs, vec![Input::Text("hello world!".into())]);
        assert_eq!(call.estimate(), 3);
        assert!(!call.base64);
        let call = openai(
            br#"{"model":"e","input":["a","bb"],"encoding_format":"base64","dimensions":8}"#,
        )
        .unwrap();
        assert_eq!(call.inputs.len(), 2);
        assert!(call.base64);
        assert_eq!(call.dimensions, Some(8));
        let call = openai(br#"{"model":"e","input":[1,2,3]}"#).unwrap();
        assert_eq!(call.inputs, vec![Input::Tokens(vec![1, 2, 3])]);
        assert_eq!(call.estimate(), 3);
        let call = openai(br#"{"model":"e","input":[[1,2],[3]]}"#).unwrap();
        assert_eq!(call.inputs.len(), 2);
    }

    #[test]
    fn openai_refusals_name_the_field() {
        for (body, want) in [
            (r#"{"input":"a"}"#, "model"),
            (r#"{"model":"e"}"#, "input"),
            (r#"{"model":"e","input":""}"#, "input"),
            (r#"{"model":"e","input":[]}"#, "input"),
            (r#"{"model":"e","input":["a",""]}"#, "input"),
            (r#"{"model":"e","input":[1,"a"]}"#, "input"),
            (r#"{"model":"e","input":{"a":1}}"#, "input"),
            (
                r#"{"model":"e","input":"a","encoding_format":"int8"}"#,
                "encoding_format",
            ),
            (r#"{"model":"e","input":"a","dimensions":0}"#, "dimensions"),
            (
                r#"{"model":"e","input":"a","dimensions":"8"}"#,
                "dimensions",
            ),
            (r#"{"model":"e","input":"a","stream":true}"#, "stream"),
            (r#"{"model":"e","input":"a","user":1}"#, "user"),
        ] {
            assert_eq!(param(openai(body.as_bytes()).unwrap_err()), want, "{body}");
        }
        let many = format!(
            r#"{{"model":"e","input":{}}}"#,
            serde_json::json!(vec!["a"; MAX_INPUTS + 1])
        );
        assert_eq!(param(openai(many.as_bytes()).unwrap_err()), "input");
    }

    #[test]
    fn native_bodies() {
        let one = native(
            br#"{"content":{"parts":[{"text":"a"},{"text":"b"}]},"taskType":"RETRIEVAL_QUERY","outputDimensionality":4}"#,
            "g",
            false,
        )
        .unwrap();
        assert_eq!(one.shape, Shape::NativeOne);
        assert_eq!(one.inputs, vec![Input::Text("a\nb".into())]);
        assert_eq!(one.native[0].task_type.as_deref(), Some("RETRIEVAL_QUERY"));
        assert_eq!(one.native[0].dimensions, Some(4));
        let batch = native(
            br#"{"requests":[{"model":"models/g","content":{"parts":[{"text":"a"}]}},{"model":"g","content":{"parts":[{"text":"b"}]},"title":"t"}]}"#,
            "g",
            true,
        )
        .unwrap();
        assert_eq!(batch.inputs.len(), 2);
        assert_eq!(batch.native[1].title.as_deref(), Some("t"));
        for (body, batch, want) in [
            (r#"{"content":{"parts":[]}}"#, false, "content.parts"),
            (
                r#"{"content":{"parts":[{"inlineData":{}}]}}"#,
                false,
                "content.parts[0]",
            ),
            (r#"{"content":{"parts":[{"text":"a"}]},"x":1}"#, false, "x"),
            (
                r#"{"content":{"parts":[{"text":"a"}]},"model":"models/other"}"#,
                false,
                "model",
            ),
            (r#"{"requests":[]}"#, true, "requests"),
            (
                r#"{"requests":[{"content":{"parts":[{"text":"a"}]}}]}"#,
                true,
                "requests[0].model",
            ),
            (
                r#"{"requests":[{"model":"models/g","content":{"parts":[{"text":"a"}]},"outputDimensionality":-1}]}"#,
                true,
                "requests[0].outputDimensionality",
            ),
        ] {
            assert_eq!(
                param(native(body.as_bytes(), "g", batch).unwrap_err()),
                want,
                "{body}"
            );
        }
    }
}
