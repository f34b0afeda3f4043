//! Images: OpenAI `POST /v1/images/generations` (and `GET /files/{name}`, the
//! URLs it hands out), and the image answers of Gemini `generateContent`
//! when `generationConfig.responseModalities` includes `IMAGE`.
//!
//! Every image is the same 1x1 PNG ([`PNG`]). How many: the
//! `x-mock-images` header (0 to 16) when sent, else the request's `n`
//! (OpenAI, default 1) or 1 (Gemini).
//!
//! * OpenAI: the body must be JSON with string `model` and non-empty string
//!   `prompt` (else 400); `size`, when sent, must be `auto` or `WxH`
//!   (else 400). Answer: `{"created": 1700000000, "data": [...],
//!   "size", "quality", "output_format", "background" (those sent),
//!   "usage": {"input_tokens", "output_tokens": 1056 × images,
//!   "total_tokens"}}`; items are `{"b64_json": PNG}`, or with
//!   `response_format: "url"` `{"url": "http://HOST/files/img-<hash>-<i>.png"}`
//!   (HOST from the request's `Host`), which `GET /files/…` serves (any name
//!   ending in `.png`, without credentials).
//! * Gemini: `candidates[0].content.parts` = one `inlineData`
//!   (`image/png`, base64 PNG) per image, `finishReason: "STOP"`; with 0
//!   images no content and `finishReason: "IMAGE_SAFETY"`. `usageMetadata`:
//!   `promptTokenCount` = prompt (see `usage`), `candidatesTokenCount` =
//!   1290 × images.

use base64::Engine as _;
use bytes::Bytes;
use serde_json::{Value, json};

/// A valid 1x1 transparent PNG.
pub const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0x00, 0x01, 0x00, 0x00,
    0x05, 0x00, 0x01, 0x0d, 0x0a, 0x2d, 0xb4, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45, 0x4e, 0x44, 0xae,
    0x42, 0x60, 0x82,
];

/// Most images one answer carries.
pub const MAX_IMAGES: u64 = 16;

/// The PNG in base64.
pub fn png_b64() -> String {
    base64::engine::general_purpose::STANDARD.encode(PNG)
}

/// The body of an OpenAI images answer, or what is wrong with the request.
pub fn openai_generation(
    json: &Value,
    count_header: Option<u64>,
    host: &str,
    hash: &str,
) -> Result<Bytes, String> {
    json.get("model")
        .and_then(Value::as_str)
        .ok_or("request body must be a JSON object with a string `model`")?;
    json.get("prompt")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .ok_or("`prompt` is required")?;
    if let Some(size) = json.get("size") {
        let ok = size.as_str().is_some_and(|s| {
            s == "auto"
                || s.split_once('x')
                    .is_some_and(|(w, h)| w.parse::<u32>().is_ok() && h.parse::<u32>().is_ok())
        });
        if !ok {
            return Err(format!("Invalid value for 'size': {size}"));
        }
    }
    let n = json.get("n").and_then(Value::as_u64).unwrap_or(1);
    let count = count_header.unwrap_or(n).min(MAX_IMAGES);
    let url = json.get("response_format").and_then(Value::as_str) == Some("url");
    let data: Vec<Value> = (0..count)
        .map(|i| {
            if url {
                json!({"url": format!("http://{host}/files/img-{hash}-{i}.png")})
            } else {
                json!({"b64_json": png_b64()})
            }
        })
        .collect();
    let mut body = json!({
        "created": 1_700_000_000u64,
        "data": data,
        "usage": {
            "input_tokens": 10,
            "output_tokens": 1056 * count,
            "total_tokens": 10 + 1056 * count,
        },
    });
    for echo in ["size", "quality", "output_format", "background"] {
        if let Some(v) = json.get(echo) {
            body[echo] = v.clone();
        }
    }
    Ok(Bytes::from(body.to_string()))
}

/// Whether a Gemini body asks for images (`responseModalities` includes `IMAGE`).
pub fn gemini_wants_image(json: &Value) -> bool {
    let config = json
        .get("generationConfig")
        .or_else(|| json.get("generation_config"));
    config
        .and_then(|c| {
            c.get("responseModalities")
                .or_else(|| c.get("response_modalities"))
        })
        .and_then(Value::as_array)
        .is_some_and(|m| m.iter().any(|v| v.as_str() == Some("IMAGE")))
}

/// The body of a Gemini image answer with `count` images.
pub fn gemini_image(model: &str, count: u64, prompt_tokens: u64, hash: &str) -> Bytes {
    let parts: Vec<Value> = (0..count)
        .map(|_| json!({"inlineData": {"mimeType": "image/png", "data": png_b64()}}))
        .collect();
    let candidate = if count == 0 {
        json!({"finishReason": "IMAGE_SAFETY", "index": 0})
    } else {
        json!({"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0})
    };
    let body = json!({
        "candidates": [candidate],
        "usageMetadata": {
            "promptTokenCount": prompt_tokens,
            "candidatesTokenCount": 1290 * count,
            "totalTokenCount": prompt_tokens + 1290 * count,
        },
        "modelVersion": model,
        "responseId": hash,
    });
    Bytes::from(body.to_string())
}
