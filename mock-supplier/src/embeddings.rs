//! Embeddings, in OpenAI's and Gemini's shapes (docs/WIRE-EMBEDDINGS.md).
//!
//! * OpenAI `POST /v1/embeddings`: the body must be JSON with string `model` and `input` a
//!   non-empty string, array of strings, array of token ids or array of token-id arrays (1 to
//!   2048 items, none empty); `dimensions` an integer ≥ 1; `encoding_format` `float` or `base64`
//!   (else 400 `Invalid value for 'encoding_format' = X. Supported values: ['float', 'base64']`);
//!   any other field 400. Answer `{object: "list", data: [{object: "embedding", index,
//!   embedding}], model, usage: {prompt_tokens, total_tokens}}`; with `base64` each embedding is
//!   the base64 of its little-endian 32-bit floats. `prompt_tokens`: `x-mock-usage`'s `prompt`
//!   when sent, else ⌈bytes / 4⌉ per text input plus the token ids' count.
//! * Gemini `POST /v1beta/models/{model}:embedContent` (`{content: {parts: [{text}]}, taskType,
//!   title, outputDimensionality}`, answered `{embedding: {values}}`) and
//!   `:batchEmbedContents` (`{requests: [...]}`, 1 to 100 of those, each with `model:
//!   "models/{model}"` of the path; answered `{embeddings: [{values}]}`). `taskType` one of
//!   Gemini's; a `title` only with `RETRIEVAL_DOCUMENT`. No usage, as Gemini's reference
//!   documents none — unless `x-mock-usage` is sent: then `usageMetadata: {promptTokenCount}`.
//!
//! Vectors: [`DEFAULT_DIMENSIONS`] values unless asked otherwise (at most 4096), value k of a
//! text the deterministic `vector(text)[k]` (from FNV-1a of the text), so a test can predict
//! them exactly.

use base64::Engine as _;
use serde_json::{Map, Value, json};

/// Values per vector when the request names no dimensions.
pub const DEFAULT_DIMENSIONS: usize = 8;
const MAX_DIMENSIONS: u64 = 4096;
const TASK_TYPES: [&str; 9] = [
    "TASK_TYPE_UNSPECIFIED",
    "RETRIEVAL_QUERY",
    "RETRIEVAL_DOCUMENT",
    "SEMANTIC_SIMILARITY",
    "CLASSIFICATION",
    "CLUSTERING",
    "QUESTION_ANSWERING",
    "FACT_VERIFICATION",
    "CODE_RETRIEVAL_QUERY",
];

/// The vector of `text` (its bytes; token ids as their decimal list) with `dims` values, each a
/// multiple of 1/256 in [-0.5, 0.5) (exact in 32 bits).
pub fn vector(text: &[u8], dims: usize) -> Vec<f32> {
    let h = crate::reply::fnv1a64(text);
    (0..dims)
        .map(|k| {
            let byte = (h.rotate_left((k as u32 * 8) % 64) & 0xff) as f32;
            byte / 256.0 - 0.5
        })
        .collect()
}

fn dimensions(v: Option<&Value>, name: &str) -> Result<usize, String> {
    match v {
        None | Some(Value::Null) => Ok(DEFAULT_DIMENSIONS),
        Some(d) => d
            .as_u64()
            .filter(|d| (1..=MAX_DIMENSIONS).contains(d))
            .map(|d| d as usize)
            .ok_or_else(|| format!("'{name}' must be an integer from 1 to {MAX_DIMENSIONS}")),
    }
}

/// `POST /v1/embeddings`: the answer, or the 400 message.
pub fn openai(json: &Value, prompt: Option<u64>) -> Result<Vec<u8>, String> {
    let fields = json.as_object().ok_or("the body must be a JSON object")?;
    for key in fields.keys() {
        if !["model", "input", "dimensions", "encoding_format", "user"].contains(&key.as_str()) {
            return Err(format!("Unrecognized request argument supplied: {key}"));
        }
    }
    let model = fields
        .get("model")
        .and_then(Value::as_str)
        .ok_or("you must provide a model parameter")?;
    let dims = dimensions(fields.get("dimensions"), "dimensions")?;
    let base64 = match fields.get("encoding_format").map(|f| f.as_str()) {
        None | Some(Some("float")) => false,
        Some(Some("base64")) => true,
        Some(other) => {
            return Err(format!(
                "Invalid value for 'encoding_format' = {}. Supported values: ['float', 'base64'].",
                other.unwrap_or("?")
            ));
        }
    };
    let inputs = openai_inputs(fields.get("input"))?;
    let counted: u64 = inputs.iter().map(|(_, tokens)| tokens).sum();
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, (text, _))| {
            let v = vector(text, dims);
            let embedding = match base64 {
                true => {
                    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                    json!(base64::engine::general_purpose::STANDARD.encode(bytes))
                }
                false => json!(v),
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    let tokens = prompt.unwrap_or(counted);
    Ok(json!({
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    })
    .to_string()
    .into_bytes())
}

/// The inputs of an OpenAI body, each as the bytes its vector is made from and its token count.
fn openai_inputs(input: Option<&Value>) -> Result<Vec<(Vec<u8>, u64)>, String> {
    let invalid = || {
        "'$.input' is invalid. Please check the API reference: https://platform.openai.com/docs/api-reference.".to_string()
    };
    let ids = |items: &Vec<Value>| -> Option<(Vec<u8>, u64)> {
        let ids: Option<Vec<u64>> = items.iter().map(Value::as_u64).collect();
        let ids = ids.filter(|i| !i.is_empty())?;
        Some((json!(ids).to_string().into_bytes(), ids.len() as u64))
    };
    let text = |s: &str| (s.as_bytes().to_vec(), (s.len() as u64).div_ceil(4));
    let out = match input {
        Some(Value::String(s)) if !s.is_empty() => vec![text(s)],
        Some(Value::Array(items)) if !items.is_empty() && items.iter().all(Value::is_number) => {
            vec![ids(items).ok_or_else(invalid)?]
        }
        Some(Value::Array(items)) if !items.is_empty() && items.len() <= 2048 => items
            .iter()
            .map(|item| match item {
                Value::String(s) if !s.is_empty() => Ok(text(s)),
                Value::Array(a) => ids(a).ok_or_else(invalid),
                _ => Err(invalid()),
            })
            .collect::<Result<_, _>>()?,
        _ => return Err(invalid()),
    };
    Ok(out)
}

/// One Gemini embed request (`at`: where it sits, `requests[i].` in a batch): its embedding, or
/// the 400 message.
fn gemini_request(r: &Map<String, Value>, at: &str) -> Result<Value, String> {
    let known = [
        "model",
        "content",
        "taskType",
        "title",
        "outputDimensionality",
    ];
    if let Some(key) = r.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(format!(
            "Invalid JSON payload received. Unknown name \"{key}\" at '{at}': Cannot find field."
        ));
    }
    let parts = r
        .get("content")
        .and_then(|c| c.get("parts"))
        .and_then(Value::as_array)
        .filter(|p| !p.is_empty())
        .ok_or_else(|| format!("* {at}content.parts: contents.parts must not be empty."))?;
    let mut texts = Vec::with_capacity(parts.len());
    for p in parts {
        let t = p.get("text").and_then(Value::as_str).ok_or_else(|| {
            format!("* {at}content.parts: only text parts can be embedded by this mock.")
        })?;
        texts.push(t);
    }
    match r.get("taskType").map(|t| t.as_str()) {
        None => {}
        Some(Some(t)) if TASK_TYPES.contains(&t) => {}
        Some(t) => {
            return Err(format!(
                "Invalid value at '{at}task_type' ({})",
                t.unwrap_or("?")
            ));
        }
    }
    let task = r.get("taskType").and_then(Value::as_str);
    if r.contains_key("title") && task != Some("RETRIEVAL_DOCUMENT") {
        return Err("Title is only applicable with task type RETRIEVAL_DOCUMENT.".into());
    }
    let dims = dimensions(r.get("outputDimensionality"), "outputDimensionality")?;
    Ok(json!({"values": vector(texts.join("\n").as_bytes(), dims)}))
}

/// `:embedContent` (`batch` false) or `:batchEmbedContents` of `model`: the answer, or the 400
/// message.
pub fn gemini(
    json: &Value,
    model: &str,
    batch: bool,
    prompt: Option<u64>,
) -> Result<Vec<u8>, String> {
    let mut out = if batch {
        let requests = json
            .get("requests")
            .and_then(Value::as_array)
            .filter(|r| !r.is_empty())
            .ok_or("* BatchEmbedContentsRequest.requests: requests must not be empty.")?;
        if requests.len() > 100 {
            return Err(
                "* BatchEmbedContentsRequest.requests: at most 100 requests can be in one batch."
                    .into(),
            );
        }
        let mut embeddings = Vec::with_capacity(requests.len());
        for (i, r) in requests.iter().enumerate() {
            let r = r.as_object().ok_or("each request must be an object")?;
            let named = r.get("model").and_then(Value::as_str);
            if named != Some(&format!("models/{model}")) {
                return Err(format!(
                    "* BatchEmbedContentsRequest.requests[{i}].model: the model of each request must be the batch's, \"models/{model}\"."
                ));
            }
            embeddings.push(gemini_request(r, &format!("requests[{i}]."))?);
        }
        json!({"embeddings": embeddings})
    } else {
        let r = json.as_object().ok_or("the body must be a JSON object")?;
        json!({"embedding": gemini_request(r, "")?})
    };
    if let Some(p) = prompt {
        out["usageMetadata"] = json!({"promptTokenCount": p, "totalTokenCount": p});
    }
    Ok(out.to_string().into_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_answers_floats_or_base64() {
        let out: Value = serde_json::from_slice(
            &openai(&json!({"model": "m", "input": ["abcde", "x"]}), None).unwrap(),
        )
        .unwrap();
        assert_eq!(out["usage"]["prompt_tokens"], 3);
        assert_eq!(out["data"][1]["embedding"], json!(vector(b"x", 8)));
        let out: Value = serde_json::from_slice(
            &openai(
                &json!({"model": "m", "input": "x", "encoding_format": "base64", "dimensions": 3}),
                Some(9),
            )
            .unwrap(),
        )
        .unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(out["data"][0]["embedding"].as_str().unwrap())
            .unwrap();
        assert_eq!(bytes.len(), 12);
        assert_eq!(out["usage"]["prompt_tokens"], 9);
        for bad in [
            json!({"model": "m", "input": ""}),
            json!({"model": "m", "input": "x", "encoding_format": "md5"}),
            json!({"model": "m", "input": "x", "dimensions": 0}),
            json!({"model": "m", "input": "x", "taskType": "X"}),
        ] {
            assert!(openai(&bad, None).is_err(), "{bad}");
        }
    }

    #[test]
    fn gemini_one_and_batch() {
        let out: Value = serde_json::from_slice(
            &gemini(
                &json!({"content": {"parts": [{"text": "hi"}]}, "outputDimensionality": 4}),
                "g",
                false,
                None,
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(out["embedding"]["values"], json!(vector(b"hi", 4)));
        assert!(out.get("usageMetadata").is_none());
        let body =
            json!({"requests": [{"model": "models/g", "content": {"parts": [{"text": "a"}]}}]});
        let out: Value =
            serde_json::from_slice(&gemini(&body, "g", true, Some(5)).unwrap()).unwrap();
        assert_eq!(out["embeddings"][0]["values"], json!(vector(b"a", 8)));
        assert_eq!(out["usageMetadata"]["promptTokenCount"], 5);
        let wrong =
            json!({"requests": [{"model": "models/h", "content": {"parts": [{"text": "a"}]}}]});
        assert!(gemini(&wrong, "g", true, None).is_err());
        let titled = json!({"content": {"parts": [{"text": "a"}]}, "title": "t"});
        assert!(gemini(&titled, "g", false, None).is_err());
    }
}
