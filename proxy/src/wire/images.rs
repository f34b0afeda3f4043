//! Image calls, per profile (DESIGN §6b): the body each supplier gets and the answer the client
//! gets back.
//!
//! - **OpenAI-style profile** (the model's accounts are `openai`): the client's JSON goes to
//!   `{base}/images/generations` with the served model id; `size` must be `WIDTHxHEIGHT` with both
//!   sides divisible by 16, aspect ratio within 1:3 to 3:1, sides at most 3840 and 2160 (either
//!   orientation), 655,360 to 8,294,400 pixels; `size=auto` (or none) is sent as `1024x1024`;
//!   `quality` defaults to `medium`; `user` and `stream: false` are not forwarded; everything else
//!   (`background`, `moderation`, `output_compression`, `output_format`, `style`, `n`,
//!   `response_format`) is forwarded as sent. Generation only: edits are refused at routing.
//! - **Native-style profile** (`gemini` accounts): the call becomes a `generateContent` body, one
//!   user turn with the prompt (and the reference images of an edit as `inlineData`),
//!   `generationConfig.responseModalities: ["IMAGE"]` and `imageConfig.aspectRatio` from `size`
//!   (`1024x1024` → `1:1`, `1024x1536` → `2:3`, `1536x1024` → `3:2`; `auto` or none: the
//!   supplier's default, `1:1`). Only those sizes and `n = 1` are accepted; `background:
//!   transparent` and `output_format` other than `png` are refused (the supplier cannot honour
//!   them); `quality`, `style`, `moderation`, `output_compression`, `input_fidelity` and `user`
//!   are dropped. The answer's `inlineData` images come back in the OpenAI images shape.
//! - **Native surface** (`generateContent` on an image model): one user turn of `text` and
//!   `inlineData` parts; `generationConfig.responseModalities` must include `IMAGE`;
//!   `candidateCount` 1; `imageConfig.aspectRatio` one of the model's `image_aspect_ratios`,
//!   `imageSize` one of its `image_sizes`; any other field refused (400 `INVALID_ARGUMENT` naming
//!   it). The body is forwarded as sent (no `maxOutputTokens` default: an image is ~1,300 tokens).
//!
//! `response_format=url`: a URL the supplier returned is passed on; an image returned only as
//! base64 is hosted by the gateway (`crate::media`) and answered as a signed URL.

use crate::errors::GatewayError;
use crate::wire::TopLevel;
use crate::wire::image_call::{ImageCall, MAX_REFERENCES};
use bytes::Bytes;
use serde_json::{Map, Value, json};
use settings::Model;

/// The sizes the native-style profile takes on the compat route, and the aspect ratio each is
/// sent as (`None`: the supplier's default).
const NATIVE_SIZES: [(&str, Option<&str>); 4] = [
    ("auto", None),
    ("1024x1024", Some("1:1")),
    ("1024x1536", Some("2:3")),
    ("1536x1024", Some("3:2")),
];

/// Checks an OpenAI-style `size` (see the module documentation).
pub(crate) fn openai_size(size: &str) -> Result<(), String> {
    let (w, h) = size
        .split_once('x')
        .and_then(|(w, h)| Some((w.parse::<u64>().ok()?, h.parse::<u64>().ok()?)))
        .ok_or_else(|| format!("'size' must be auto or WIDTHxHEIGHT, not {size:?}"))?;
    if w == 0 || h == 0 || w % 16 != 0 || h % 16 != 0 {
        return Err("both sides of 'size' must be positive multiples of 16".into());
    }
    if w.max(h) > 3 * w.min(h) {
        return Err("the aspect ratio of 'size' must be between 1:3 and 3:1".into());
    }
    if w.max(h) > 3840 || w.min(h) > 2160 {
        return Err("'size' may be at most 3840x2160 (or 2160x3840)".into());
    }
    let pixels = w * h;
    if !(655_360..=8_294_400).contains(&pixels) {
        return Err("'size' must have 655,360 to 8,294,400 pixels".into());
    }
    Ok(())
}

/// The body for an OpenAI-style account (`{base}/images/generations`).
pub(crate) fn openai_body(call: &ImageCall, served: &str) -> Result<Bytes, GatewayError> {
    let mut out = Map::new();
    for (name, value) in &call.fields {
        match name.as_str() {
            "user" | "stream" => continue,
            "model" => {
                out.insert(name.clone(), Value::from(served));
            }
            "size" => {
                let size = value.as_str().unwrap_or("auto");
                if size == "auto" {
                    out.insert(name.clone(), Value::from("1024x1024"));
                } else {
                    openai_size(size).map_err(|m| GatewayError::field(m, "size"))?;
                    out.insert(name.clone(), value.clone());
                }
            }
            _ => {
                out.insert(name.clone(), value.clone());
            }
        }
    }
    out.entry("size")
        .or_insert_with(|| Value::from("1024x1024"));
    out.entry("quality")
        .or_insert_with(|| Value::from("medium"));
    serde_json::to_vec(&out)
        .map(Bytes::from)
        .map_err(|_| GatewayError::Internal)
}

/// The `generateContent` body for a Gemini account (native-style profile).
pub(crate) fn gemini_body(call: &ImageCall) -> Result<Bytes, GatewayError> {
    let ratio = match call.size.as_deref() {
        None => None,
        Some(size) => NATIVE_SIZES
            .iter()
            .find(|(s, _)| *s == size)
            .ok_or_else(|| {
                GatewayError::field(
                    "'size' must be one of auto, 1024x1024, 1024x1536, 1536x1024 for this model",
                    "size",
                )
            })?
            .1,
    };
    if call.n != 1 {
        return Err(GatewayError::field(
            "this model generates one image per call: 'n' must be 1",
            "n",
        ));
    }
    let string = |name: &str| call.fields.get(name).and_then(Value::as_str);
    if string("background") == Some("transparent") {
        return Err(GatewayError::field(
            "transparent backgrounds are not available for this model",
            "background",
        ));
    }
    if string("output_format").is_some_and(|f| f != "png") {
        return Err(GatewayError::field(
            "this model returns PNG images: 'output_format' must be png",
            "output_format",
        ));
    }
    let mut parts = vec![json!({"text": call.prompt})];
    parts.extend(
        call.references
            .iter()
            .map(|r| json!({"inlineData": {"mimeType": r.mime, "data": r.data}})),
    );
    let mut config = json!({"responseModalities": ["IMAGE"]});
    if let Some(ratio) = ratio {
        config["imageConfig"] = json!({"aspectRatio": ratio});
    }
    let body = json!({
        "contents": [{"role": "user", "parts": parts}],
        "generationConfig": config,
    });
    serde_json::to_vec(&body)
        .map(Bytes::from)
        .map_err(|_| GatewayError::Internal)
}

/// Reference images (`inlineData` parts) in a native body's `contents`: a cheap scan, before the
/// model is known (an image model's call with references goes to its edit accounts).
pub(crate) fn native_references(fields: &TopLevel<'_>) -> usize {
    fields.get("contents").map_or(0, |raw| {
        let bytes = raw.get().as_bytes();
        memchr::memmem::find_iter(bytes, b"\"inlineData\"").count()
            + memchr::memmem::find_iter(bytes, b"\"inline_data\"").count()
    })
}

/// Checks a native `generateContent` body for an image model (see the module documentation).
pub(crate) fn check_native(fields: &TopLevel<'_>, model: &Model) -> Result<(), GatewayError> {
    for (name, _) in fields.iter() {
        let known = [
            "contents",
            "generationConfig",
            "generation_config",
            "safetySettings",
            "safety_settings",
            "model",
        ];
        if !known.contains(&name.as_str()) {
            return Err(GatewayError::field(
                format!("{name}: not available for image model {}", model.id),
                name,
            ));
        }
    }
    let parse = |name: &str| -> Result<Option<Value>, GatewayError> {
        fields
            .get(name)
            .map(|raw| serde_json::from_str::<Value>(raw.get()))
            .transpose()
            .map_err(|_| GatewayError::field(format!("{name}: invalid JSON"), name))
    };
    let contents = parse("contents")?.unwrap_or(Value::Null);
    check_contents(&contents)?;
    let config = match parse("generationConfig")?.or(parse("generation_config")?) {
        Some(Value::Object(c)) => c,
        _ => Map::new(),
    };
    check_config(&config, model)
}

/// The one user turn of a native image call: text and inline-data parts, at most
/// `MAX_REFERENCES` reference images.
fn check_contents(contents: &Value) -> Result<(), GatewayError> {
    let Some([turn]) = contents.as_array().map(Vec::as_slice) else {
        return Err(GatewayError::field(
            "contents: an image model takes exactly one user turn",
            "contents",
        ));
    };
    if turn.get("role").is_some_and(|r| r != "user") {
        return Err(GatewayError::field(
            "contents[0].role: an image model takes one user turn",
            "contents[0].role",
        ));
    }
    let parts = turn.get("parts").and_then(Value::as_array);
    let Some(parts) = parts.filter(|p| !p.is_empty()) else {
        return Err(GatewayError::field(
            "contents[0].parts: at least one part is required",
            "contents[0].parts",
        ));
    };
    let mut references = 0;
    for (i, part) in parts.iter().enumerate() {
        let keys: Vec<&str> = part
            .as_object()
            .map(|o| o.keys().map(String::as_str).collect())
            .unwrap_or_default();
        match keys.as_slice() {
            ["text"] if part["text"].is_string() => {}
            ["inlineData" | "inline_data"] => references += 1,
            _ => {
                let param = format!("contents[0].parts[{i}]");
                return Err(GatewayError::field(
                    format!("{param}: parts of an image call are text or inlineData"),
                    &param,
                ));
            }
        }
    }
    if references > MAX_REFERENCES {
        return Err(GatewayError::field(
            format!("contents[0].parts: at most {MAX_REFERENCES} reference images"),
            "contents[0].parts",
        ));
    }
    Ok(())
}

/// A native image call's `generationConfig`: `IMAGE` among the response modalities, one
/// candidate, an image config the model takes, nothing else.
fn check_config(config: &Map<String, Value>, model: &Model) -> Result<(), GatewayError> {
    let modalities = config
        .get("responseModalities")
        .or(config.get("response_modalities"))
        .and_then(Value::as_array);
    let has_image = modalities.is_some_and(|m| m.iter().any(|v| v.as_str() == Some("IMAGE")));
    if !has_image {
        return Err(GatewayError::field(
            "generationConfig.responseModalities: must include IMAGE for an image model",
            "generationConfig.responseModalities",
        ));
    }
    for (name, value) in config {
        match name.as_str() {
            "responseModalities" | "response_modalities" => {}
            "candidateCount" | "candidate_count" => {
                if value.as_u64() != Some(1) {
                    return Err(GatewayError::field(
                        "generationConfig.candidateCount: must be 1 for an image model",
                        "generationConfig.candidateCount",
                    ));
                }
            }
            "imageConfig" | "image_config" => check_image_config(value, model)?,
            other => {
                let param = format!("generationConfig.{other}");
                return Err(GatewayError::field(
                    format!("{param}: not available for image model {}", model.id),
                    &param,
                ));
            }
        }
    }
    Ok(())
}

fn check_image_config(value: &Value, model: &Model) -> Result<(), GatewayError> {
    let Some(config) = value.as_object() else {
        return Err(GatewayError::field(
            "generationConfig.imageConfig: must be an object",
            "generationConfig.imageConfig",
        ));
    };
    for (name, v) in config {
        let (allowed, field) = match name.as_str() {
            "aspectRatio" | "aspect_ratio" => (&model.image_aspect_ratios, "aspectRatio"),
            "imageSize" | "image_size" => (&model.image_sizes, "imageSize"),
            other => {
                let param = format!("generationConfig.imageConfig.{other}");
                return Err(GatewayError::field(
                    format!("{param}: not available"),
                    &param,
                ));
            }
        };
        let param = format!("generationConfig.imageConfig.{field}");
        if !v.as_str().is_some_and(|s| allowed.iter().any(|a| a == s)) {
            return Err(GatewayError::field(
                format!(
                    "{param}: must be one of {} for model {}",
                    allowed.join(", "),
                    model.id
                ),
                &param,
            ));
        }
    }
    Ok(())
}

/// Images in a supplier's answer: OpenAI `data[]` items carrying `b64_json` or `url`.
pub(crate) fn openai_count(json: &[u8]) -> Option<u64> {
    openai_items(&serde_json::from_slice(json).ok()?)
}

fn openai_items(v: &Value) -> Option<u64> {
    let data = v.get("data")?.as_array()?;
    let carries = |d: &&Value, key: &str| d.get(key).is_some_and(Value::is_string);
    Some(
        data.iter()
            .filter(|d| carries(d, "b64_json") || carries(d, "url"))
            .count() as u64,
    )
}

/// Images in a Gemini answer: `inlineData` parts with an `image/` media type, thoughts excluded.
pub(crate) fn gemini_count(json: &[u8]) -> Option<u64> {
    let v: Value = serde_json::from_slice(json).ok()?;
    Some(gemini_images(&v).len() as u64)
}

/// The images (media type, base64) of a Gemini answer's candidates, thoughts excluded.
fn gemini_images(v: &Value) -> Vec<(&str, &str)> {
    let candidates = v.get("candidates").and_then(Value::as_array);
    candidates
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("content")?.get("parts")?.as_array())
        .flatten()
        .filter(|p| p.get("thought") != Some(&Value::Bool(true)))
        .filter_map(|p| {
            let d = p.get("inlineData").or(p.get("inline_data"))?;
            let mime = d.get("mimeType").or(d.get("mime_type"))?.as_str()?;
            let data = d.get("data")?.as_str()?;
            mime.starts_with("image/").then_some((mime, data))
        })
        .collect()
}

/// Where hosted images go (`response_format=url` when the supplier returned base64).
pub(crate) trait Host: Send + Sync {
    /// Keeps `bytes` (of media type `mime`) and returns the URL that serves them.
    fn host(&self, mime: &str, bytes: Vec<u8>) -> String;
}

/// An image answer on its way back: translated from Gemini, or with base64 images hosted.
pub(crate) struct ImageAnswer {
    gemini: bool,
    url: bool,
    status: u16,
    created: u64,
    whole: super::Whole,
    host: std::sync::Arc<dyn Host>,
    /// The images of the whole answer, once it was read (what the call is charged for; the
    /// meter does not parse a rewritten answer a second time).
    images: Option<u64>,
}

impl ImageAnswer {
    /// How the answer of a `gemini` (else OpenAI) supplier comes back to an image call that asked
    /// for URLs (`url`) or not; `None` when the bytes pass through untouched (an OpenAI supplier,
    /// base64 asked, or any error of an OpenAI supplier).
    pub fn new(
        gemini: bool,
        url: bool,
        status: u16,
        created: u64,
        host: std::sync::Arc<dyn Host>,
    ) -> Option<ImageAnswer> {
        if !gemini && (!url || status >= 400) {
            return None;
        }
        Some(ImageAnswer {
            gemini,
            url,
            status,
            created,
            whole: super::Whole::default(),
            host,
            images: None,
        })
    }

    /// The images the answer carried, once it was read whole (`None` before, or when it was cut,
    /// unreadable or over the cap).
    pub fn images(&self) -> Option<u64> {
        self.images
    }

    /// Collects the supplier's body; at its end, replaces it by the client's answer.
    pub fn body(&mut self, body: &mut Option<Bytes>, end_of_stream: bool) {
        self.whole.take(body);
        if end_of_stream {
            *body = Some(Bytes::from(self.answer()));
        }
    }

    fn answer(&mut self) -> Vec<u8> {
        let Some(kept) = self.whole.kept() else {
            return error_json("the supplier's image answer was too large to rewrite");
        };
        if self.status >= 400 {
            self.images = Some(0);
            return translate::response::error_body(
                translate::Format::Gemini,
                translate::Format::Chat,
                self.status,
                kept,
            );
        }
        let Ok(v) = serde_json::from_slice::<Value>(kept) else {
            return error_json("the supplier's image answer was not valid JSON");
        };
        let out = if self.gemini {
            let data: Vec<Value> = gemini_images(&v)
                .into_iter()
                .map(|(mime, b64)| self.item(mime, b64))
                .collect();
            self.images = Some(data.len() as u64);
            json!({"created": self.created, "data": data, "output_format": "png"})
        } else {
            let mut v = v;
            self.images = openai_items(&v);
            if let Some(items) = v.get_mut("data").and_then(Value::as_array_mut) {
                for item in items {
                    let b64 = item
                        .get("b64_json")
                        .and_then(Value::as_str)
                        .map(str::to_string);
                    if let (Some(b64), None) = (b64, item.get("url")) {
                        let mime = image_mime(&b64);
                        *item = self.item(mime, &b64);
                    }
                }
            }
            v
        };
        serde_json::to_vec(&out).unwrap_or_default()
    }

    /// One `data[]` item: the base64 as it came, or (`url`) a hosted URL.
    fn item(&self, mime: &str, b64: &str) -> Value {
        use base64::Engine as _;
        if !self.url {
            return json!({"b64_json": b64});
        }
        match base64::engine::general_purpose::STANDARD.decode(b64) {
            Ok(bytes) => json!({"url": self.host.host(mime, bytes)}),
            Err(_) => json!({"b64_json": b64}),
        }
    }
}

/// The media type of a base64 image from its first bytes (PNG when unknown).
fn image_mime(b64: &str) -> &'static str {
    use base64::Engine as _;
    let head: String = b64.chars().take(16).collect();
    base64::engine::general_purpose::STANDARD
        .decode(head.as_bytes())
        .ok()
        .and_then(|b| crate::wire::image_call::sniff(&b))
        .unwrap_or("image/png")
}

fn error_json(message: &str) -> Vec<u8> {
    json!({"error": {"message": message, "type": "upstream_error", "code": "upstream_invalid_response"}})
        .to_string()
        .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_sizes() {
        for ok in [
            "1024x1024",
            "1536x1024",
            "1024x1536",
            "3840x2160",
            "2160x3840",
            "816x816",
            "2880x960",
        ] {
            assert_eq!(openai_size(ok), Ok(()), "{ok}");
        }
        for bad in [
            "1000x1000", // not divisible by 16
            "3072x1008", // beyond 3:1
            "3856x2160", // too wide
            "2176x2176", // shorter side over 2160
            "800x800",   // 640,000 pixels: too few
            "auto",
            "1024",
            "x",
            "0x0",
            "-16x16",
        ] {
            assert!(openai_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn counts() {
        assert_eq!(
            openai_count(br#"{"data":[{"b64_json":"AA"},{"url":"u"}]}"#),
            Some(2)
        );
        assert_eq!(openai_count(br#"{"data":[]}"#), Some(0));
        assert_eq!(openai_count(b"{cut"), None);
        let g = br#"{"candidates":[{"content":{"parts":[{"text":"here"},{"inlineData":{"mimeType":"image/png","data":"AA"}},{"thought":true,"inlineData":{"mimeType":"image/png","data":"BB"}}]}}]}"#;
        assert_eq!(gemini_count(g), Some(1));
        assert_eq!(
            gemini_count(br#"{"candidates":[{"finishReason":"IMAGE_SAFETY"}]}"#),
            Some(0)
        );
    }
}
