//! What an image call asks for, as the gateway reads it from any surface (`inspect::image` builds
//! it from a JSON body or a form; `wire::images` writes it for the account's provider), and the
//! signature check of an image file.

use serde_json::{Map, Value};

/// Most images one generation may ask for (`n`).
pub const MAX_IMAGES: u64 = 10;
/// Reference images an edit takes: at least one, at most this many.
pub const MAX_REFERENCES: usize = 14;

/// What an image call asks for.
#[derive(Debug, Clone)]
pub(crate) struct ImageCall {
    /// The model id as sent.
    pub model: String,
    pub prompt: String,
    /// Images asked for (`n`, default 1).
    pub n: u64,
    /// `size` as sent, if sent.
    pub size: Option<String>,
    /// `response_format=url`: the client wants URLs, not base64.
    pub url: bool,
    /// An edit (`/images/edits`): `references` holds 1 to 14 images.
    pub edit: bool,
    /// The other fields as sent (checked), in the client's order: what the OpenAI-style profile
    /// forwards (`model`, `prompt`, `n`, `size` included; see `wire::images`).
    pub fields: Map<String, Value>,
    /// Reference images of an edit, as base64 with their media type.
    pub references: Vec<Reference>,
}

/// One reference image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Reference {
    pub mime: String,
    /// Base64 (standard alphabet).
    pub data: String,
}

/// The media type of an image file from its signature.
pub(crate) fn sniff(bytes: &[u8]) -> Option<&'static str> {
    if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if bytes.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if bytes.starts_with(b"RIFF") && bytes.get(8..12) == Some(b"WEBP") {
        Some("image/webp")
    } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
        Some("image/gif")
    } else {
        None
    }
}
