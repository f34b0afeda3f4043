//! Video tasks in the OpenAI video API's shape: `POST /v1/videos`, `GET /v1/videos/{id}`,
//! `GET /v1/videos/{id}/content`. Tasks live in the mock's memory (one mock serves every poll).
//!
//! The create body must be JSON with string `model` and non-empty `prompt`; `seconds`, when sent,
//! a string of digits; `size` a `WxH` string. Behaviour comes from the `x-mock-video` header of
//! the create, comma-separated `key=value`:
//! * `delay_ms=N`: the task is `queued` for the first third of N, then `in_progress`, then ends
//!   (default 0: ended at the first poll);
//! * `fail=safety`: it ends `failed` with `error: {code: "moderation_blocked", message: "…safety
//!   review…"}`;
//! * `bytes=N`: the content's size (default 1024; generated as it is sent, never held; byte i is
//!   `i % 251`);
//! * `seconds=N|none`: the `seconds` the completed object reports (default: the request's, else
//!   `"4"`; `none` omits it).
//!
//! The object: `{id: "video_mock_<n>", object: "video", model, status, progress, created_at,
//! seconds, size, error}`. Content: `video/mp4`, `Content-Length`, `Accept-Ranges: bytes`; a
//! `Range: bytes=A-B` (or `A-`) answers 206 with `Content-Range`, an unsatisfiable one 416;
//! content of a task that has not completed is 404.

use crate::respond::{Rec, Req, Wire, bad_request, base_response, error, full, header_str};
use crate::video_task::{VideoTask, status};
use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use serde_json::{Value, json};

fn object(id: &str, task: &VideoTask) -> Value {
    let (status, progress) = status(task);
    let mut o = json!({
        "id": id,
        "object": "video",
        "model": task.model,
        "status": status,
        "progress": progress,
        "created_at": task.created_unix,
        "size": task.size,
    });
    if let Some(s) = &task.seconds {
        o["seconds"] = json!(s);
    }
    if status == "failed" {
        o["error"] = json!({
            "code": "moderation_blocked",
            "message": "Your request was blocked by our safety review.",
        });
    }
    o
}

/// The video routes of the OpenAI wire; `None` when the path is not one of them.
pub(crate) fn serve(req: &Req<'_>) -> Option<Response> {
    let rec = req.rec;
    if req.method == http::Method::POST && req.path == "/v1/videos" {
        return Some(create(req));
    }
    if req.method != http::Method::GET {
        return None;
    }
    let rest = req.path.strip_prefix("/v1/videos/")?;
    let (id, content) = match rest.split_once('/') {
        None => (rest, false),
        Some((id, "content")) => (id, true),
        Some(_) => return None,
    };
    let task = rec.shared.videos.lock().ok()?.get(id).cloned();
    let Some(task) = task else {
        return Some(error(
            rec,
            Wire::OpenAi,
            StatusCode::NOT_FOUND,
            "video not found",
        ));
    };
    if !content {
        let body = Bytes::from(object(id, &task).to_string());
        return Some(full(
            rec,
            StatusCode::OK,
            "application/json",
            body,
            Vec::new(),
        ));
    }
    if status(&task).0 != "completed" {
        return Some(error(
            rec,
            Wire::OpenAi,
            StatusCode::NOT_FOUND,
            "video is not ready",
        ));
    }
    Some(download(rec, task.bytes, header_str(req.headers, "range")))
}

fn create(req: &Req<'_>) -> Response {
    let rec = req.rec;
    let Ok(json) = serde_json::from_slice::<Value>(req.body) else {
        return bad_request(rec, "request body is not valid JSON");
    };
    let Some(model) = json.get("model").and_then(Value::as_str) else {
        return bad_request(rec, "`model` is required");
    };
    if json
        .get("prompt")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return bad_request(rec, "`prompt` is required");
    }
    let asked = match json.get("seconds") {
        None => None,
        Some(Value::String(s)) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            Some(s.clone())
        }
        Some(_) => return bad_request(rec, "`seconds` must be a string of digits"),
    };
    let size = match json.get("size") {
        None => "720x1280".to_string(),
        Some(Value::String(s)) if s.split_once('x').is_some() => s.clone(),
        Some(_) => return bad_request(rec, "`size` must be WxH"),
    };
    let header = header_str(req.headers, "x-mock-video");
    let seconds = Some(asked.unwrap_or_else(|| "4".to_string()));
    let task = match VideoTask::new(model, size, seconds, header) {
        Ok(task) => task,
        Err(message) => return bad_request(rec, &message),
    };
    let Ok(mut videos) = rec.shared.videos.lock() else {
        return error(rec, Wire::OpenAi, StatusCode::INTERNAL_SERVER_ERROR, "lock");
    };
    let id = format!("video_mock_{}", videos.len() + 1);
    let mut answer = object(&id, &task);
    // A new task is queued, whatever its delay.
    answer["status"] = json!("queued");
    answer["progress"] = json!(0);
    videos.insert(id, task);
    drop(videos);
    full(
        rec,
        StatusCode::OK,
        "application/json",
        Bytes::from(answer.to_string()),
        Vec::new(),
    )
}

/// Byte `i` of every mock video.
pub fn content_byte(i: u64) -> u8 {
    (i % 251) as u8
}

/// `bytes` of generated content, or the `Range` asked, streamed in 64 KiB pieces.
pub(crate) fn download(rec: &Rec, bytes: u64, range: Option<&str>) -> Response {
    let (status, start, end) = match range.map(|r| parse_range(r, bytes)) {
        None => (StatusCode::OK, 0, bytes),
        Some(Some((a, b))) => (StatusCode::PARTIAL_CONTENT, a, b),
        Some(None) => {
            let mut resp = full(
                rec,
                StatusCode::RANGE_NOT_SATISFIABLE,
                "text/plain",
                Bytes::new(),
                Vec::new(),
            );
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{bytes}")) {
                resp.headers_mut().insert(http::header::CONTENT_RANGE, v);
            }
            return resp;
        }
    };
    rec.status(status);
    let stream = futures_util::stream::unfold(start, move |at| async move {
        if at >= end {
            return None;
        }
        let next = (at + 64 * 1024).min(end);
        let chunk: Vec<u8> = (at..next).map(content_byte).collect();
        Some((Ok::<Bytes, std::io::Error>(Bytes::from(chunk)), next))
    });
    let mut resp = base_response(&rec.shared, status, "video/mp4", Body::from_stream(stream));
    let headers = resp.headers_mut();
    headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from(end - start));
    headers.insert(
        http::header::ACCEPT_RANGES,
        HeaderValue::from_static("bytes"),
    );
    if status == StatusCode::PARTIAL_CONTENT
        && let Ok(v) = HeaderValue::from_str(&format!("bytes {start}-{}/{bytes}", end - 1))
    {
        headers.insert(http::header::CONTENT_RANGE, v);
    }
    resp
}

/// `bytes=A-B` or `bytes=A-` → `[A, B+1)` within `len`; `None` when unsatisfiable.
fn parse_range(range: &str, len: u64) -> Option<(u64, u64)> {
    let spec = range.trim().strip_prefix("bytes=")?;
    let (a, b) = spec.split_once('-')?;
    let start: u64 = a.trim().parse().ok()?;
    let end = match b.trim() {
        "" => len,
        b => b.parse::<u64>().ok()?.saturating_add(1).min(len),
    };
    (start < end).then_some((start, end))
}
