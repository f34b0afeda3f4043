//! Image calls on the compat surface (`/images/generations`, `/images/edits`): the body read and
//! checked once, whatever the model's profile; the rules of each profile are applied once the
//! model is known (`wire::images`).
//!
//! Accepted fields (SPEC "Image generation"): `model`, `prompt`, `size`, `response_format`
//! (`b64_json` | `url`), `quality`, `background`, `moderation`, `output_compression`,
//! `output_format`, `style`, `user`, and `n` (1 to 10 images). Edits also take the reference
//! images (1 to 14): multipart `image[]` (or `image`) file parts, or JSON `images[].image_url`
//! data URLs; and `input_fidelity`. Refused with 400 naming the field: `stream: true`,
//! `partial_images`, `async`, `mask`, file-id references (`images[i].file_id`), the native
//! format's `aspect_ratio` and `image_config`, and any other field. Everything is checked before
//! a supplier is contacted.

use super::form;
use crate::errors::GatewayError;
use base64::Engine as _;
use serde_json::{Map, Value};

pub(crate) use crate::wire::image_call::{ImageCall, MAX_IMAGES, MAX_REFERENCES, Reference, sniff};

/// The fields a generation accepts.
const GENERATION_FIELDS: [&str; 13] = [
    "model",
    "prompt",
    "n",
    "size",
    "response_format",
    "quality",
    "background",
    "moderation",
    "output_compression",
    "output_format",
    "style",
    "user",
    "stream",
];

/// Reads a JSON image call (a generation, or an edit with `images[].image_url` data URLs).
pub(crate) fn json_call(body: &[u8], edit: bool) -> Result<ImageCall, GatewayError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| GatewayError::invalid(format!("the body is not valid JSON: {e}"), None))?;
    let Value::Object(mut fields) = value else {
        return Err(GatewayError::invalid(
            "the body must be a JSON object",
            None,
        ));
    };
    let mut references = Vec::new();
    if edit && let Some(images) = fields.remove("images") {
        references = json_references(&images)?;
    }
    call(fields, references, edit)
}

/// Reads a multipart image edit: text fields and `image[]` / `image` file parts.
pub(crate) fn form_call(
    body: &[u8],
    content_type: Option<&str>,
) -> Result<ImageCall, GatewayError> {
    let boundary = form::boundary(content_type).ok_or_else(|| {
        GatewayError::invalid(
            "this route takes a JSON body or a multipart/form-data body with a boundary",
            None,
        )
    })?;
    let mut fields = Map::new();
    let mut references = Vec::new();
    for part in form::parts(body, boundary)? {
        let value = body.get(part.content.clone()).unwrap_or_default();
        match part.name.as_str() {
            "image" | "image[]" => {
                if references.len() == MAX_REFERENCES {
                    return Err(too_many());
                }
                references.push(file_reference(value, part.content_type.as_deref())?);
            }
            name => {
                let text = std::str::from_utf8(value)
                    .map_err(|_| GatewayError::field(format!("'{name}' must be text"), name))?;
                let value = match name {
                    "n" | "output_compression" | "partial_images" => {
                        let n: i64 = text.trim().parse().map_err(|_| {
                            GatewayError::field(format!("'{name}' must be an integer"), name)
                        })?;
                        Value::from(n)
                    }
                    "stream" => match text.trim() {
                        "true" => Value::Bool(true),
                        "false" => Value::Bool(false),
                        _ => {
                            return Err(GatewayError::field(
                                "'stream' must be true or false",
                                "stream",
                            ));
                        }
                    },
                    _ => Value::String(text.to_string()),
                };
                if fields.insert(name.to_string(), value).is_some() {
                    return Err(GatewayError::field(
                        format!("'{name}' may appear once"),
                        name,
                    ));
                }
            }
        }
    }
    call(fields, references, true)
}

fn too_many() -> GatewayError {
    GatewayError::field(
        format!("an edit takes 1 to {MAX_REFERENCES} reference images"),
        "image",
    )
}

/// `images: [{image_url: "data:…"}]` of a JSON edit.
fn json_references(images: &Value) -> Result<Vec<Reference>, GatewayError> {
    let Value::Array(items) = images else {
        return Err(GatewayError::field("'images' must be an array", "images"));
    };
    if items.len() > MAX_REFERENCES {
        return Err(too_many());
    }
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let Value::Object(item) = item else {
                return Err(GatewayError::field(
                    "each image must be an object with an image_url",
                    format!("images[{i}]"),
                ));
            };
            if item.contains_key("file_id") {
                return Err(GatewayError::field(
                    "file-id references are not available; send the image as a data URL",
                    format!("images[{i}].file_id"),
                ));
            }
            if let Some(other) = item.keys().find(|k| *k != "image_url") {
                return Err(GatewayError::field(
                    format!("unknown field '{other}'"),
                    format!("images[{i}].{other}"),
                ));
            }
            let param = format!("images[{i}].image_url");
            let url = item
                .get("image_url")
                .and_then(Value::as_str)
                .ok_or_else(|| GatewayError::field("'image_url' must be a string", &param))?;
            data_url(url).ok_or_else(|| {
                GatewayError::field(
                    "'image_url' must be a base64 data URL of an image (data:image/png;base64,…)",
                    &param,
                )
            })
        })
        .collect()
}

/// A `data:image/…;base64,…` URL as a reference image.
fn data_url(url: &str) -> Option<Reference> {
    let rest = url.strip_prefix("data:")?;
    let (meta, data) = rest.split_once(',')?;
    let mime = meta.strip_suffix(";base64")?.to_ascii_lowercase();
    let ok = mime.starts_with("image/")
        && !data.is_empty()
        && data
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
    ok.then(|| Reference {
        mime,
        data: data.to_string(),
    })
}

/// An uploaded file part as a reference image: its media type from the part's `Content-Type`
/// when it names an image, else from the file's first bytes (PNG, JPEG, WebP, GIF).
fn file_reference(bytes: &[u8], content_type: Option<&str>) -> Result<Reference, GatewayError> {
    if bytes.is_empty() {
        return Err(GatewayError::field("an image part is empty", "image"));
    }
    let mime = content_type
        .filter(|c| c.starts_with("image/"))
        .map(str::to_string)
        .or_else(|| sniff(bytes).map(str::to_string))
        .ok_or_else(|| {
            GatewayError::field(
                "an image part is not a PNG, JPEG, WebP or GIF image",
                "image",
            )
        })?;
    Ok(Reference {
        mime,
        data: base64::engine::general_purpose::STANDARD.encode(bytes),
    })
}

/// Checks the fields every profile shares and builds the call.
fn call(
    fields: Map<String, Value>,
    references: Vec<Reference>,
    edit: bool,
) -> Result<ImageCall, GatewayError> {
    for (name, value) in &fields {
        allowed(name, value, edit)?;
    }
    let string = |name: &str| string(&fields, name);
    let model = string("model")?
        .filter(|m| !m.trim().is_empty())
        .ok_or_else(|| GatewayError::field("'model' is required", "model"))?
        .trim()
        .to_string();
    let prompt = string("prompt")?
        .filter(|p| !p.trim().is_empty())
        .ok_or_else(|| GatewayError::field("'prompt' is required and must not be empty", "prompt"))?
        .to_string();
    let n = match fields.get("n") {
        None | Some(Value::Null) => 1,
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=MAX_IMAGES).contains(n))
            .ok_or_else(|| {
                GatewayError::field(
                    format!("'n' must be an integer from 1 to {MAX_IMAGES}"),
                    "n",
                )
            })?,
    };
    let size = string("size")?.map(str::to_string);
    let url = output(&fields, edit)?;
    if edit && references.is_empty() {
        return Err(too_many());
    }
    Ok(ImageCall {
        model,
        prompt,
        n,
        size,
        url,
        edit,
        fields,
        references,
    })
}

/// Field `name` as text, if sent.
fn string<'a>(fields: &'a Map<String, Value>, name: &str) -> Result<Option<&'a str>, GatewayError> {
    match fields.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(_) => Err(GatewayError::field(
            format!("'{name}' must be a string"),
            name,
        )),
    }
}

/// Field `name`, if sent, one of `allowed`.
fn one_of(
    fields: &Map<String, Value>,
    name: &str,
    allowed: &[&str],
) -> Result<Option<String>, GatewayError> {
    match string(fields, name)? {
        Some(v) if !allowed.contains(&v) => Err(GatewayError::field(
            format!("'{name}' must be one of {}", allowed.join(", ")),
            name,
        )),
        v => Ok(v.map(str::to_string)),
    }
}

/// The output options, checked (quality, background, moderation, format, compression, fidelity
/// on an edit); returns whether URLs are asked instead of base64 (`response_format`).
fn output(fields: &Map<String, Value>, edit: bool) -> Result<bool, GatewayError> {
    let url = one_of(fields, "response_format", &["b64_json", "url"])?.as_deref() == Some("url");
    one_of(
        fields,
        "quality",
        &["auto", "low", "medium", "high", "standard", "hd"],
    )?;
    let background = one_of(fields, "background", &["auto", "opaque", "transparent"])?;
    one_of(fields, "moderation", &["auto", "low"])?;
    let format = one_of(fields, "output_format", &["png", "jpeg", "webp"])?;
    if edit {
        one_of(fields, "input_fidelity", &["low", "high"])?;
    }
    string(fields, "style")?;
    string(fields, "user")?;
    if let Some(v) = fields.get("output_compression").filter(|v| !v.is_null()) {
        v.as_u64().filter(|c| *c <= 100).ok_or_else(|| {
            GatewayError::field(
                "'output_compression' must be an integer from 0 to 100",
                "output_compression",
            )
        })?;
    }
    if background.as_deref() == Some("transparent")
        && !matches!(format.as_deref(), None | Some("png" | "webp"))
    {
        return Err(GatewayError::field(
            "background=transparent needs output_format png or webp",
            "background",
        ));
    }
    Ok(url)
}

/// Whether field `name` may be sent on this route: the generation fields (and `input_fidelity` on
/// an edit), `stream` only as false; a field of another surface or feature is refused by name.
fn allowed(name: &str, value: &Value, edit: bool) -> Result<(), GatewayError> {
    match name {
        "stream" => {
            if value == &Value::Bool(true) {
                return Err(GatewayError::field(
                    "streaming image generation is not available; omit 'stream'",
                    name,
                ));
            }
            if !value.is_boolean() {
                return Err(GatewayError::field("'stream' must be a boolean", name));
            }
        }
        "partial_images" => {
            return Err(GatewayError::field(
                "partial images are not available (image calls do not stream)",
                name,
            ));
        }
        "async" => {
            return Err(GatewayError::field(
                "asynchronous image generation is not available; image calls are synchronous",
                name,
            ));
        }
        "mask" => {
            return Err(GatewayError::field(
                "masks are not available on image edits",
                name,
            ));
        }
        "aspect_ratio" | "image_config" => {
            return Err(GatewayError::field(
                format!(
                    "'{name}' is a native-format field; on this route use 'size' (the native surface takes generationConfig.imageConfig)"
                ),
                name,
            ));
        }
        "input_fidelity" if edit => {}
        _ if GENERATION_FIELDS.contains(&name) => {}
        _ => {
            return Err(GatewayError::field(
                format!("unknown parameter '{name}'"),
                name,
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn param(r: Result<ImageCall, GatewayError>) -> String {
        match r {
            Err(GatewayError::InvalidField { param, .. }) => param,
            Err(e) => panic!("{e:?}"),
            Ok(c) => panic!("accepted {c:?}"),
        }
    }

    fn generation(v: Value) -> Result<ImageCall, GatewayError> {
        json_call(v.to_string().as_bytes(), false)
    }

    #[test]
    fn generations() {
        let c = generation(json!({"model": "openai/img", "prompt": "a cat", "n": 2, "response_format": "url", "user": "u"})).unwrap();
        assert_eq!(
            (c.model.as_str(), c.n, c.url, c.edit),
            ("openai/img", 2, true, false)
        );
        for (body, p) in [
            (json!({"prompt": "x"}), "model"),
            (json!({"model": "m"}), "prompt"),
            (json!({"model": "m", "prompt": " "}), "prompt"),
            (
                json!({"model": "m", "prompt": "x", "stream": true}),
                "stream",
            ),
            (
                json!({"model": "m", "prompt": "x", "partial_images": 2}),
                "partial_images",
            ),
            (json!({"model": "m", "prompt": "x", "async": true}), "async"),
            (
                json!({"model": "m", "prompt": "x", "aspect_ratio": "1:1"}),
                "aspect_ratio",
            ),
            (
                json!({"model": "m", "prompt": "x", "image_config": {}}),
                "image_config",
            ),
            (
                json!({"model": "m", "prompt": "x", "mask": {"file_id": "f"}}),
                "mask",
            ),
            (json!({"model": "m", "prompt": "x", "images": []}), "images"),
            (json!({"model": "m", "prompt": "x", "n": 0}), "n"),
            (json!({"model": "m", "prompt": "x", "n": 11}), "n"),
            (
                json!({"model": "m", "prompt": "x", "response_format": "png"}),
                "response_format",
            ),
            (
                json!({"model": "m", "prompt": "x", "quality": "ultra"}),
                "quality",
            ),
            (
                json!({"model": "m", "prompt": "x", "output_compression": 101}),
                "output_compression",
            ),
            (
                json!({"model": "m", "prompt": "x", "background": "transparent", "output_format": "jpeg"}),
                "background",
            ),
            (
                json!({"model": "m", "prompt": "x", "input_fidelity": "high"}),
                "input_fidelity",
            ),
            (json!({"model": "m", "prompt": "x", "seed": 1}), "seed"),
        ] {
            assert_eq!(param(generation(body.clone())), p, "{body}");
        }
        assert!(generation(json!({"model": "m", "prompt": "x", "stream": false})).is_ok());
        assert!(
            generation(json!({"model": "m", "prompt": "x", "background": "transparent"})).is_ok()
        );
    }

    #[test]
    fn json_edits() {
        let png = "data:image/png;base64,iVBORw0KGgo=";
        let edit = |images: Value| {
            json_call(
                json!({"model": "m", "prompt": "x", "images": images})
                    .to_string()
                    .as_bytes(),
                true,
            )
        };
        let c = edit(json!([{"image_url": png}, {"image_url": png}])).unwrap();
        assert_eq!(c.references.len(), 2);
        assert_eq!(c.references[0].mime, "image/png");
        assert!(!c.fields.contains_key("images"));
        assert_eq!(param(edit(json!([]))), "image");
        let fifteen: Vec<Value> = (0..15).map(|_| json!({"image_url": png})).collect();
        assert_eq!(param(edit(Value::Array(fifteen))), "image");
        assert_eq!(
            param(edit(json!([{"file_id": "file-1"}]))),
            "images[0].file_id"
        );
        assert_eq!(
            param(edit(
                json!([{"image_url": png}, {"image_url": "https://x/y.png"}])
            )),
            "images[1].image_url"
        );
        assert_eq!(
            param(json_call(br#"{"model":"m","prompt":"x"}"#, true)),
            "image"
        );
    }

    #[test]
    fn form_edits() {
        let part = |name: &str, ct: Option<&str>, value: &[u8]| {
            let mut b =
                format!("--B\r\nContent-Disposition: form-data; name=\"{name}\"").into_bytes();
            if ct.is_some() {
                b.extend_from_slice(b"; filename=\"f\"");
            }
            b.extend_from_slice(b"\r\n");
            if let Some(ct) = ct {
                b.extend_from_slice(format!("Content-Type: {ct}\r\n").as_bytes());
            }
            b.extend_from_slice(b"\r\n");
            b.extend_from_slice(value);
            b.extend_from_slice(b"\r\n");
            b
        };
        let png = b"\x89PNG\r\n\x1a\n rest";
        let mut body = Vec::new();
        body.extend(part("model", None, b"m"));
        body.extend(part("prompt", None, b"make it blue"));
        body.extend(part("n", None, b"1"));
        body.extend(part("image[]", Some("application/octet-stream"), png));
        body.extend(part("image[]", Some("image/jpeg"), b"\xff\xd8\xff jpeg"));
        body.extend_from_slice(b"--B--\r\n");
        let c = form_call(&body, Some("multipart/form-data; boundary=B")).unwrap();
        assert_eq!(c.references.len(), 2);
        assert_eq!(c.references[0].mime, "image/png");
        assert_eq!(c.references[1].mime, "image/jpeg");
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(&c.references[0].data)
                .unwrap(),
            png
        );
        assert_eq!(c.fields.get("n"), Some(&json!(1)));
        let mut masked = body.clone();
        masked.truncate(masked.len() - b"--B--\r\n".len());
        masked.extend(part("mask", Some("image/png"), png));
        masked.extend_from_slice(b"--B--\r\n");
        assert_eq!(
            param(form_call(&masked, Some("multipart/form-data; boundary=B"))),
            "mask"
        );
        let mut unknown = Vec::new();
        unknown.extend(part("model", None, b"m"));
        unknown.extend(part("prompt", None, b"p"));
        unknown.extend(part("image", Some("text/plain"), b"not an image"));
        unknown.extend_from_slice(b"--B--\r\n");
        assert_eq!(
            param(form_call(&unknown, Some("multipart/form-data; boundary=B"))),
            "image"
        );
    }
}
