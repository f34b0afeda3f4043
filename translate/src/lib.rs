//! Translation between the wire formats the gateway speaks: OpenAI chat completions
//! ([`Format::Chat`]), OpenAI responses ([`Format::Responses`]), Anthropic Messages
//! ([`Format::Messages`]) and Gemini `generateContent` ([`Format::Gemini`]).
//!
//! Pure code: bytes in, bytes out, no I/O, no clock, no randomness except what the caller passes.
//! Everything goes through one canonical form ([`ir`]) so that N formats need N decoders and N
//! encoders, not N² translators:
//!
//! - **requests** ([`request`]): a client body is decoded into [`ir::Request`] (refusing, with the
//!   offending field named, what the target cannot express), then encoded for the supplier;
//! - **responses** ([`response`]): a supplier body — one JSON document, or an SSE stream fed chunk
//!   by chunk as it arrives — is decoded into [`ir::Event`]s and encoded for the client, event by
//!   event (a stream is never buffered: what one supplier event means leaves with the next
//!   [`response::Answer::feed`]); a non-streaming body is collected and written at the end;
//! - **errors** ([`response::error_body`]): a supplier's error body in the client's error shape.
//!
//! The gateway only translates when the client's format and the account's differ; same format in
//! and out passes through untouched and never enters this crate.

pub mod codex;
pub mod ir;
pub mod request;
pub mod response;
pub mod signature;
pub mod skim;
pub mod sse;
pub mod vocabulary;

pub use ir::Usage;

/// A wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Format {
    /// OpenAI `POST /v1/chat/completions`.
    Chat,
    /// OpenAI `POST /v1/responses`.
    Responses,
    /// Anthropic `POST /v1/messages`.
    Messages,
    /// Gemini `POST /v1beta/models/{model}:generateContent` (and `:streamGenerateContent?alt=sse`).
    Gemini,
}

/// A supplier's API family. What an account speaks is a family (`settings::Provider` is this
/// type; the route picks the format within it: an OpenAI account is sent chat or responses), and
/// so is what a client surface speaks (the gateway's `Surface::Client`). A [`Format`] is one
/// wire format of a family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Family {
    OpenAi,
    Anthropic,
    Gemini,
}

impl Format {
    /// The family the format belongs to.
    pub fn family(self) -> Family {
        match self {
            Format::Chat | Format::Responses => Family::OpenAi,
            Format::Messages => Family::Anthropic,
            Format::Gemini => Family::Gemini,
        }
    }

    /// Bounded label for logs and metrics.
    pub fn label(self) -> &'static str {
        match self {
            Format::Chat => "chat",
            Format::Responses => "responses",
            Format::Messages => "messages",
            Format::Gemini => "gemini",
        }
    }
}

/// A request the target format cannot carry, or that is malformed: answered with 400 naming the
/// field, before any supplier is contacted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub message: String,
    /// The offending field, as the client spelled it (`messages[2].content`, `tools[0]`, `stop`).
    pub param: Option<String>,
}

impl Refusal {
    pub fn new(message: impl Into<String>, param: impl Into<String>) -> Refusal {
        Refusal {
            message: message.into(),
            param: Some(param.into()),
        }
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refusal {}
