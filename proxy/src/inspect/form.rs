//! Multipart form bodies (the audio-transcription route; the image-edit route reads its forms
//! with [`parts`] too): the few fields the gateway needs, read
//! from the buffered body once, and the audio duration the admission hold is computed from.
//!
//! Only what routing and billing need is read: `model` (required, a string), `file` (required, the
//! audio), `stream` (optional, `true`/`false`). Every other part is forwarded untouched; the body
//! is forwarded byte for byte unless the model id must change, in which case only the bytes of the
//! `model` value are replaced.
//!
//! Duration bound (the hold, and the charge when the supplier reports no duration): a WAV file's
//! header names its exact duration (data bytes / byte rate); any other format is bounded by
//! assuming at least [`FLOOR_BYTES_PER_SECOND`] of audio per second (16 kbit/s, the low end of
//! speech codecs in MP3, AAC, M4A and WebM files). A file encoded below that rate is longer than
//! the bound; its excess over the hold is settled under the excess policy like any other usage.

use crate::errors::GatewayError;
use bytes::{Bytes, BytesMut};
use memchr::memmem;
use std::ops::Range;

/// Bytes per second of audio assumed when the format's header does not tell (16 kbit/s).
pub const FLOOR_BYTES_PER_SECOND: u64 = 2_000;
/// Most parts a form may have.
pub const MAX_PARTS: usize = 64;

/// What an audio-transcription form asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AudioForm {
    /// The model id as sent.
    pub model: String,
    /// Byte range of the `model` value in the body.
    model_at: Range<usize>,
    pub stream: bool,
    /// Byte range of the audio file in the body.
    file_at: Range<usize>,
}

/// The boundary of a `multipart/form-data` content type.
pub(crate) fn boundary(content_type: Option<&str>) -> Option<&str> {
    let ct = content_type?;
    let (essence, params) = ct.split_once(';').unwrap_or((ct, ""));
    if !essence.trim().eq_ignore_ascii_case("multipart/form-data") {
        return None;
    }
    params.split(';').find_map(|p| {
        let (k, v) = p.split_once('=')?;
        if !k.trim().eq_ignore_ascii_case("boundary") {
            return None;
        }
        let v = v.trim();
        let v = v
            .strip_prefix('"')
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or(v);
        (!v.is_empty() && v.len() <= 70).then_some(v)
    })
}

/// One part: its form name, its own `Content-Type` (if any) and the byte range of its content.
pub(crate) struct Part {
    pub name: String,
    pub content_type: Option<String>,
    pub content: Range<usize>,
}

/// The parts of a multipart body, in order.
pub(crate) fn parts(body: &[u8], boundary: &str) -> Result<Vec<Part>, GatewayError> {
    let malformed = |what: &str| {
        GatewayError::invalid(format!("the multipart body is malformed: {what}"), None)
    };
    let dash = format!("--{boundary}");
    let delimiter = format!("\r\n--{boundary}");
    let first = memmem::find(body, dash.as_bytes()).ok_or_else(|| malformed("no boundary"))?;
    let finder = memmem::Finder::new(delimiter.as_bytes());
    let mut at = first + dash.len();
    let mut out = Vec::new();
    loop {
        let rest = body.get(at..).unwrap_or_default();
        if rest.starts_with(b"--") {
            return Ok(out);
        }
        if !rest.starts_with(b"\r\n") {
            return Err(malformed("a boundary is not followed by a line break"));
        }
        let head_start = at + 2;
        let head_len = memmem::find(body.get(head_start..).unwrap_or_default(), b"\r\n\r\n")
            .ok_or_else(|| malformed("a part has no end of headers"))?;
        let head = body
            .get(head_start..head_start + head_len)
            .unwrap_or_default();
        let content_start = head_start + head_len + 4;
        let content_len = finder
            .find(body.get(content_start..).unwrap_or_default())
            .ok_or_else(|| malformed("the closing boundary is missing"))?;
        if out.len() == MAX_PARTS {
            return Err(GatewayError::invalid(
                format!("a form may have at most {MAX_PARTS} parts"),
                None,
            ));
        }
        let name = part_name(head).ok_or_else(|| malformed("a part has no form-data name"))?;
        out.push(Part {
            name,
            content_type: part_content_type(head),
            content: content_start..content_start + content_len,
        });
        at = content_start + content_len + delimiter.len();
    }
}

/// The `Content-Type` header of a part, lowercased, without parameters.
fn part_content_type(head: &[u8]) -> Option<String> {
    let head = std::str::from_utf8(head).ok()?;
    head.split("\r\n").find_map(|line| {
        let (field, value) = line.split_once(':')?;
        field.trim().eq_ignore_ascii_case("content-type").then(|| {
            value
                .split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
    })
}

/// The `name` parameter of a part's `Content-Disposition: form-data` header.
fn part_name(head: &[u8]) -> Option<String> {
    let head = std::str::from_utf8(head).ok()?;
    head.split("\r\n").find_map(|line| {
        let (field, value) = line.split_once(':')?;
        if !field.trim().eq_ignore_ascii_case("content-disposition") {
            return None;
        }
        let mut params = value.split(';');
        if !params.next()?.trim().eq_ignore_ascii_case("form-data") {
            return None;
        }
        params.find_map(|p| {
            let (k, v) = p.split_once('=')?;
            k.trim().eq_ignore_ascii_case("name").then(|| {
                let v = v.trim();
                v.strip_prefix('"')
                    .and_then(|v| v.strip_suffix('"'))
                    .unwrap_or(v)
                    .to_string()
            })
        })
    })
}

/// Reads an audio-transcription form.
pub(crate) fn audio_form(
    body: &[u8],
    content_type: Option<&str>,
) -> Result<AudioForm, GatewayError> {
    let boundary = boundary(content_type).ok_or_else(|| {
        GatewayError::invalid(
            "this route takes a multipart/form-data body with a boundary",
            None,
        )
    })?;
    let mut model = None;
    let mut file = None;
    let mut stream = false;
    for part in parts(body, boundary)? {
        let value = body.get(part.content.clone()).unwrap_or_default();
        match part.name.as_str() {
            "model" => {
                if model.is_some() {
                    return Err(GatewayError::invalid(
                        "'model' may appear once",
                        Some("model"),
                    ));
                }
                let text = std::str::from_utf8(value)
                    .map_err(|_| GatewayError::invalid("'model' must be text", Some("model")))?;
                if text.trim().is_empty() {
                    return Err(GatewayError::invalid(
                        "'model' must not be empty",
                        Some("model"),
                    ));
                }
                model = Some((text.trim().to_string(), part.content));
            }
            "file" => {
                if file.is_some() {
                    return Err(GatewayError::invalid(
                        "'file' may appear once",
                        Some("file"),
                    ));
                }
                if value.is_empty() {
                    return Err(GatewayError::invalid(
                        "'file' must not be empty",
                        Some("file"),
                    ));
                }
                file = Some(part.content);
            }
            "stream" => {
                stream = match value {
                    b"true" => true,
                    b"false" => false,
                    _ => {
                        return Err(GatewayError::invalid(
                            "'stream' must be true or false",
                            Some("stream"),
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    let (model, model_at) =
        model.ok_or_else(|| GatewayError::invalid("'model' is required", Some("model")))?;
    let file_at = file.ok_or_else(|| GatewayError::invalid("'file' is required", Some("file")))?;
    Ok(AudioForm {
        model,
        model_at,
        stream,
        file_at,
    })
}

impl AudioForm {
    /// The audio file's bytes in `body`.
    pub fn file<'a>(&self, body: &'a [u8]) -> &'a [u8] {
        body.get(self.file_at.clone()).unwrap_or_default()
    }

    /// The body to forward: the original, or a copy whose `model` value is `model`.
    pub fn forward_body(&self, body: &Bytes, model: &str) -> Bytes {
        if self.model == model {
            return body.clone();
        }
        let mut out = BytesMut::with_capacity(body.len() + model.len());
        out.extend_from_slice(body.get(..self.model_at.start).unwrap_or_default());
        out.extend_from_slice(model.as_bytes());
        out.extend_from_slice(body.get(self.model_at.end..).unwrap_or_default());
        out.freeze()
    }
}

/// The duration of an audio file in whole seconds (at least 1), and whether it is exact (read
/// from the format's header) or the bound described in the module documentation.
pub(crate) fn audio_seconds(file: &[u8]) -> (u64, bool) {
    if let Some(seconds) = wav_seconds(file) {
        return (seconds.max(1), true);
    }
    let bound = (file.len() as u64).div_ceil(FLOOR_BYTES_PER_SECOND);
    (bound.max(1), false)
}

/// A RIFF/WAVE file's duration from its `fmt ` byte rate and `data` size, rounded up.
fn wav_seconds(file: &[u8]) -> Option<u64> {
    if file.get(0..4)? != b"RIFF" || file.get(8..12)? != b"WAVE" {
        return None;
    }
    let u32_at = |at: usize| -> Option<u32> {
        Some(u32::from_le_bytes(file.get(at..at + 4)?.try_into().ok()?))
    };
    let mut at = 12;
    let mut byte_rate = None;
    while let Some(id) = file.get(at..at + 4) {
        let size = u32_at(at + 4)? as usize;
        let data = at + 8;
        match id {
            b"fmt " => byte_rate = Some(u32_at(data + 8)?),
            b"data" => {
                let rate = u64::from(byte_rate.filter(|&r| r > 0)?);
                // A streamed WAV may leave the size unset (0 or 0xFFFFFFFF): count what is there.
                let present = file.len().saturating_sub(data);
                let bytes = if size == 0 || size == u32::MAX as usize {
                    present
                } else {
                    size.min(present)
                };
                return Some((bytes as u64).div_ceil(rate));
            }
            _ => {}
        }
        at = data.checked_add(size)?.checked_add(size % 2)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const CT: &str = "multipart/form-data; boundary=XyZ";

    fn form(parts: &[(&str, &[u8])]) -> Vec<u8> {
        let mut b = Vec::new();
        for (name, value) in parts {
            b.extend_from_slice(b"--XyZ\r\n");
            if *name == "file" {
                b.extend_from_slice(
                    b"Content-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\nContent-Type: audio/wav\r\n\r\n",
                );
            } else {
                b.extend_from_slice(
                    format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes(),
                );
            }
            b.extend_from_slice(value);
            b.extend_from_slice(b"\r\n");
        }
        b.extend_from_slice(b"--XyZ--\r\n");
        b
    }

    /// A WAV file of `seconds` of 8 kHz, 16-bit mono silence (16,000 bytes per second).
    pub fn wav(seconds: u32) -> Vec<u8> {
        let data = 16_000 * seconds;
        let mut w = Vec::new();
        w.extend_from_slice(b"RIFF");
        w.extend_from_slice(&(36 + data).to_le_bytes());
        w.extend_from_slice(b"WAVEfmt ");
        w.extend_from_slice(&16u32.to_le_bytes());
        w.extend_from_slice(&1u16.to_le_bytes()); // PCM
        w.extend_from_slice(&1u16.to_le_bytes()); // mono
        w.extend_from_slice(&8_000u32.to_le_bytes());
        w.extend_from_slice(&16_000u32.to_le_bytes()); // byte rate
        w.extend_from_slice(&2u16.to_le_bytes());
        w.extend_from_slice(&16u16.to_le_bytes());
        w.extend_from_slice(b"data");
        w.extend_from_slice(&data.to_le_bytes());
        w.resize(w.len() + data as usize, 0);
        w
    }

    #[test]
    fn reads_the_fields_it_needs() {
        let audio = wav(3);
        let body = form(&[
            ("model", b"openai/whisper-1"),
            ("language", b"en"),
            ("file", &audio),
        ]);
        let f = audio_form(&body, Some(CT)).unwrap();
        assert_eq!(f.model, "openai/whisper-1");
        assert!(!f.stream);
        assert_eq!(f.file(&body), audio.as_slice());
        assert_eq!(audio_seconds(f.file(&body)), (3, true));
        let renamed = f.forward_body(&Bytes::from(body.clone()), "whisper-1");
        let g = audio_form(&renamed, Some(CT)).unwrap();
        assert_eq!(g.model, "whisper-1");
        assert_eq!(g.file(&renamed), audio.as_slice());
        assert_eq!(renamed.len() + "openai/".len(), body.len());
        let same = f.forward_body(&Bytes::from(body.clone()), "openai/whisper-1");
        assert_eq!(same.as_ref(), body.as_slice());
        // A quoted boundary, other parameters, case.
        let quoted = "Multipart/Form-Data; charset=utf-8; boundary=\"XyZ\"";
        assert!(audio_form(&body, Some(quoted)).is_ok());
    }

    #[test]
    fn refuses_bad_forms() {
        let audio = wav(1);
        for (body, ct, param) in [
            (form(&[("file", &audio)]), CT, Some("model")),
            (form(&[("model", b"w")]), CT, Some("file")),
            (
                form(&[("model", b" "), ("file", &audio)]),
                CT,
                Some("model"),
            ),
            (form(&[("model", b"w"), ("file", b"")]), CT, Some("file")),
            (
                form(&[("model", b"w"), ("model", b"w"), ("file", &audio)]),
                CT,
                Some("model"),
            ),
            (
                form(&[("model", b"w"), ("file", &audio), ("stream", b"yes")]),
                CT,
                Some("stream"),
            ),
            (
                form(&[("model", b"w"), ("file", &audio)]),
                "application/json",
                None,
            ),
            (
                form(&[("model", b"w"), ("file", &audio)]),
                "multipart/form-data",
                None,
            ),
            (b"--XyZ\r\nno headers end".to_vec(), CT, None),
            (
                b"--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nw".to_vec(),
                CT,
                None,
            ),
            (b"nothing here".to_vec(), CT, None),
        ] {
            match audio_form(&body, Some(ct)) {
                Err(GatewayError::InvalidBody { param: p, .. }) => {
                    assert_eq!(p, param, "{}", String::from_utf8_lossy(&body))
                }
                other => panic!("{}: {other:?}", String::from_utf8_lossy(&body)),
            }
        }
        let many: Vec<(&str, &[u8])> = (0..=MAX_PARTS).map(|_| ("x", b"1".as_slice())).collect();
        assert!(audio_form(&form(&many), Some(CT)).is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(audio_seconds(&wav(7)), (7, true));
        // A WAV cut short counts the bytes that are there.
        let mut cut = wav(4);
        cut.truncate(44 + 16_000 * 2 + 1);
        assert_eq!(audio_seconds(&cut), (3, true));
        // Anything else: the 16 kbit/s bound, at least one second.
        assert_eq!(audio_seconds(&[0u8; 20_001]), (11, false));
        assert_eq!(audio_seconds(b"ID3"), (1, false));
        // A header without a byte rate is not trusted.
        let mut broken = wav(2);
        broken[28..32].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(audio_seconds(&broken), (17, false));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            /// Arbitrary bodies never panic the form reader, and a truncated valid form is a clear
            /// error or a form, never a panic; the audio duration reader likewise.
            #[test]
            fn arbitrary_and_truncated_forms(
                bytes in proptest::collection::vec(any::<u8>(), 0..2000),
                cut in 0usize..400,
            ) {
                let _ = audio_form(&bytes, Some(CT));
                let valid = form(&[("model", b"whisper-1"), ("file", &wav(1))]);
                let cut = cut.min(valid.len());
                let _ = audio_form(&valid[..cut], Some(CT));
                let _ = audio_seconds(&bytes);
            }
        }
    }
}
