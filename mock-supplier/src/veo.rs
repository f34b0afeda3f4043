//! Veo video generation in the Gemini API's shape (long-running operations):
//!
//! * `POST /v1beta/models/{model}:predictLongRunning` with `{"instances": [{"prompt",
//!   "referenceImages"?}], "parameters": {…}?}` answers `{"name":
//!   "models/{model}/operations/{id}"}`. Checked like the real API: exactly one instance, a
//!   non-empty `prompt`, at most [`MAX_REFERENCES`] `referenceImages`, each `{"image":
//!   {"bytesBase64Encoded", "mimeType": "image/…"}, "referenceType": "asset"}` (base64 that
//!   decodes); `parameters` only `durationSeconds` (4, 6 or 8), `aspectRatio` (`16:9` | `9:16`),
//!   `resolution` (`720p` | `1080p` | `4k`), `sampleCount` (1), `negativePrompt`,
//!   `personGeneration`; anything else 400 `INVALID_ARGUMENT`.
//! * `GET /v1beta/models/{model}/operations/{id}`: `{"name"}` while running; once done
//!   `{"name", "done": true, "response": {"@type": …, "generateVideoResponse":
//!   {"generatedSamples": [{"video": {"uri": "https://generativelanguage.googleapis.com/v1beta/files/{file}:download?alt=media"}}]}}}`,
//!   or for a safety failure (`x-mock-video: fail=safety`) `generateVideoResponse:
//!   {"raiMediaFilteredCount": 1, "raiMediaFilteredReasons": […]}` without samples.
//! * `GET /v1beta/files/{file}:download?alt=media`: the content (as the OpenAI video routes
//!   serve it, `Range` included).
//!
//! The uri names Google's host on purpose: a client must take the file id from it and download
//! from its own base URL with its key (what python-genai does), never fetch the uri as given.
//! Timing, size and failure come from the create's `x-mock-video` header (see `videos`).

use crate::respond::{Req, Wire, error, full, header_str};
use crate::video_task::{VideoTask, status};
use crate::videos;
use axum::response::Response;
use bytes::Bytes;
use http::{Method, StatusCode};
use serde_json::{Value, json};

/// Reference images a Veo request takes at most.
pub const MAX_REFERENCES: usize = 3;

/// The Veo routes; `None` when the path is not one of them.
pub(crate) fn serve(req: &Req<'_>) -> Option<Response> {
    let path = req.path;
    if req.method == Method::POST
        && let Some(model) = path
            .strip_prefix("/v1beta/models/")
            .and_then(|rest| rest.strip_suffix(":predictLongRunning"))
    {
        return Some(create(req, model));
    }
    if req.method != Method::GET {
        return None;
    }
    if let Some(file) = path
        .strip_prefix("/v1beta/files/")
        .and_then(|rest| rest.strip_suffix(":download"))
    {
        return Some(download(req, file));
    }
    let rest = path.strip_prefix("/v1beta/models/")?;
    let (model, id) = rest.split_once("/operations/")?;
    Some(operation(req, model, id))
}

fn invalid(req: &Req<'_>, message: &str) -> Response {
    error(req.rec, Wire::Gemini, StatusCode::BAD_REQUEST, message)
}

fn create(req: &Req<'_>, model: &str) -> Response {
    let Ok(body) = serde_json::from_slice::<Value>(req.body) else {
        return invalid(req, "Invalid JSON payload received.");
    };
    if let Some(name) = body.as_object().and_then(|o| {
        o.keys()
            .find(|k| !["instances", "parameters"].contains(&k.as_str()))
    }) {
        return invalid(
            req,
            &format!("Invalid JSON payload received. Unknown name \"{name}\": Cannot find field."),
        );
    }
    let instances = body.get("instances").and_then(Value::as_array);
    let Some([instance]) = instances.map(Vec::as_slice) else {
        return invalid(req, "* instances: exactly one instance is required");
    };
    if instance
        .get("prompt")
        .and_then(Value::as_str)
        .is_none_or(|p| p.trim().is_empty())
    {
        return invalid(req, "* instances[0].prompt: the prompt is required");
    }
    if let Err(message) = check_references(instance.get("referenceImages")) {
        return invalid(req, &message);
    }
    let parameters = body.get("parameters").cloned().unwrap_or(json!({}));
    let mut seconds = 8;
    for (name, value) in parameters.as_object().into_iter().flatten() {
        let ok = match name.as_str() {
            "durationSeconds" => match value.as_u64() {
                Some(s @ (4 | 6 | 8)) => {
                    seconds = s;
                    true
                }
                _ => false,
            },
            "aspectRatio" => matches!(value.as_str(), Some("16:9" | "9:16")),
            "resolution" => matches!(value.as_str(), Some("720p" | "1080p" | "4k")),
            "sampleCount" => value.as_u64() == Some(1),
            "negativePrompt" | "personGeneration" => value.is_string(),
            _ => {
                return invalid(
                    req,
                    &format!(
                        "Invalid JSON payload received. Unknown name \"{name}\" at 'parameters': Cannot find field."
                    ),
                );
            }
        };
        if !ok {
            return invalid(
                req,
                &format!("* parameters.{name}: unsupported value {value}"),
            );
        }
    }
    let header = header_str(req.headers, "x-mock-video");
    let task = match VideoTask::new(model, String::new(), Some(seconds.to_string()), header) {
        Ok(task) => task,
        Err(message) => return invalid(req, &message),
    };
    let Ok(mut tasks) = req.rec.shared.videos.lock() else {
        return error(
            req.rec,
            Wire::Gemini,
            StatusCode::INTERNAL_SERVER_ERROR,
            "lock",
        );
    };
    let id = format!("veo{}", tasks.len() + 1);
    tasks.insert(id.clone(), task);
    drop(tasks);
    answer(
        req,
        &json!({"name": format!("models/{model}/operations/{id}")}),
    )
}

/// A 200 JSON answer.
fn answer(req: &Req<'_>, body: &Value) -> Response {
    full(
        req.rec,
        StatusCode::OK,
        "application/json",
        Bytes::from(body.to_string()),
        Vec::new(),
    )
}

/// `referenceImages`: at most [`MAX_REFERENCES`], each an inline image with a reference type.
fn check_references(refs: Option<&Value>) -> Result<(), String> {
    use base64::Engine;
    let Some(refs) = refs else {
        return Ok(());
    };
    let refs = refs
        .as_array()
        .ok_or("* instances[0].referenceImages: must be a list")?;
    if refs.len() > MAX_REFERENCES {
        return Err(format!(
            "* instances[0].referenceImages: at most {MAX_REFERENCES} reference images are supported"
        ));
    }
    for (i, r) in refs.iter().enumerate() {
        let image = r.get("image");
        let data = image
            .and_then(|i| i.get("bytesBase64Encoded"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mime = image
            .and_then(|i| i.get("mimeType"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let decodes = base64::engine::general_purpose::STANDARD
            .decode(data)
            .is_ok_and(|b| !b.is_empty());
        let kind = r.get("referenceType").and_then(Value::as_str);
        if !decodes
            || !mime.starts_with("image/")
            || !kind.is_some_and(|k| k.eq_ignore_ascii_case("asset"))
        {
            return Err(format!(
                "* instances[0].referenceImages[{i}]: an inline image (bytesBase64Encoded, mimeType image/…) with referenceType asset is required"
            ));
        }
    }
    Ok(())
}

fn operation(req: &Req<'_>, model: &str, id: &str) -> Response {
    let task = req
        .rec
        .shared
        .videos
        .lock()
        .ok()
        .and_then(|t| t.get(id).cloned());
    let Some(task) = task else {
        return error(
            req.rec,
            Wire::Gemini,
            StatusCode::NOT_FOUND,
            "Operation not found.",
        );
    };
    let name = format!("models/{model}/operations/{id}");
    let body = match status(&task).0 {
        "completed" => json!({"name": name, "done": true, "response": {
        "@type": "type.googleapis.com/google.ai.generativelanguage.v1beta.PredictLongRunningResponse",
        "generateVideoResponse": {"generatedSamples": [{"video": {
            "uri": format!("https://generativelanguage.googleapis.com/v1beta/files/{id}:download?alt=media")
        }}]}}}),
        "failed" => json!({"name": name, "done": true, "response": {
        "@type": "type.googleapis.com/google.ai.generativelanguage.v1beta.PredictLongRunningResponse",
        "generateVideoResponse": {"raiMediaFilteredCount": 1, "raiMediaFilteredReasons": [
            "Your prompt could not be processed by our safety filters. You have not been charged for this attempt."
        ]}}}),
        _ => json!({"name": name}),
    };
    answer(req, &body)
}

fn download(req: &Req<'_>, file: &str) -> Response {
    let task = req
        .rec
        .shared
        .videos
        .lock()
        .ok()
        .and_then(|t| t.get(file).cloned());
    match task {
        Some(task) if status(&task).0 == "completed" => {
            videos::download(req.rec, task.bytes(), header_str(req.headers, "range"))
        }
        _ => error(
            req.rec,
            Wire::Gemini,
            StatusCode::NOT_FOUND,
            "File not found.",
        ),
    }
}
