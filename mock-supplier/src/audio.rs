//! `POST /v1/audio/transcriptions`: a multipart form with `model` and `file`, answered with a
//! deterministic transcript and the audio duration.
//!
//! Duration: the `x-mock-audio-seconds` header when sent, else the WAV header's (data bytes / byte
//! rate, rounded up), else one second per 16,000 bytes. `response_format`: `json` (default,
//! `{"text", "usage": {"type": "duration", "seconds"}}`), `verbose_json` (`duration` instead of
//! `usage`), `text` (plain text, no duration).

use serde_json::json;

/// What the mock answers to a transcription form.
#[derive(Debug, Clone, PartialEq)]
pub enum Transcription {
    Json(bytes::Bytes),
    Text(bytes::Bytes),
}

/// The named parts of a `multipart/form-data` body (`None`: not such a body).
pub(crate) fn parts<'a>(content_type: &str, body: &'a [u8]) -> Option<Vec<(String, &'a [u8])>> {
    let boundary = content_type
        .split(';')
        .find_map(|p| p.trim().strip_prefix("boundary="))?
        .trim_matches('"');
    let delimiter = format!("--{boundary}");
    let mut out = Vec::new();
    let mut rest = body;
    loop {
        let at = find(rest, delimiter.as_bytes())?;
        rest = &rest[at + delimiter.len()..];
        if rest.starts_with(b"--") {
            return Some(out);
        }
        rest = rest.strip_prefix(b"\r\n")?;
        let head_end = find(rest, b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&rest[..head_end]).into_owned();
        rest = &rest[head_end + 4..];
        let end = find(rest, format!("\r\n{delimiter}").as_bytes())?;
        let name = head
            .split(';')
            .find_map(|p| p.trim().strip_prefix("name="))
            .map(|n| n.trim_matches('"').to_owned())?;
        out.push((name, &rest[..end]));
        rest = &rest[end + 2..];
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn wav_seconds(file: &[u8]) -> Option<u64> {
    if file.get(..4)? != b"RIFF" {
        return None;
    }
    let rate = u32::from_le_bytes(file.get(28..32)?.try_into().ok()?);
    let size = u32::from_le_bytes(file.get(40..44)?.try_into().ok()?);
    (rate > 0).then(|| u64::from(size).div_ceil(u64::from(rate)))
}

/// Answers a transcription request, or says what is wrong with it.
pub fn transcribe(
    content_type: Option<&str>,
    seconds_header: Option<u64>,
    body: &[u8],
) -> Result<Transcription, String> {
    let parts = content_type
        .and_then(|ct| parts(ct, body))
        .ok_or("the body must be multipart/form-data")?;
    let field = |name: &str| parts.iter().find(|(n, _)| n == name).map(|(_, v)| *v);
    let model = field("model").ok_or("the form has no `model`")?;
    let file = field("file").ok_or("the form has no `file`")?;
    let seconds = seconds_header
        .or_else(|| wav_seconds(file))
        .unwrap_or_else(|| (file.len() as u64).div_ceil(16_000))
        .max(1);
    let text = format!(
        "mock transcript of {} bytes by {}",
        file.len(),
        String::from_utf8_lossy(model)
    );
    let format = field("response_format").map(|f| String::from_utf8_lossy(f).into_owned());
    let to_bytes = |v: serde_json::Value| bytes::Bytes::from(v.to_string());
    match format.as_deref() {
        None | Some("json") => Ok(Transcription::Json(to_bytes(json!({
            "text": text,
            "usage": {"type": "duration", "seconds": seconds},
        })))),
        Some("verbose_json") => Ok(Transcription::Json(to_bytes(json!({
            "task": "transcribe",
            "language": "english",
            "duration": seconds as f64,
            "text": text,
        })))),
        Some("text") => Ok(Transcription::Text(bytes::Bytes::from(text))),
        Some(other) => Err(format!("unsupported response_format {other:?}")),
    }
}
