//! Wire formats: everything that depends on how a client or a supplier spells a call.
//!
//! One file per format ([`openai`]: chat completions and responses; [`anthropic`]: Messages;
//! [`gemini`]: generateContent). Each owns three things and nothing else:
//! - **read**: the request fields the gateway needs from a body in that format ([`CallBody`]);
//! - **rewrite**: the body of a same-format call for an account (model id, usage options, SPEC
//!   defaults);
//! - **meter**: where usage and generated text sit in its responses, whole or streamed (the
//!   [`Wire`] methods the `meter` calls; the meter itself only frames bytes and adds up).
//!
//! Image calls (both image profiles, and image models on the native surface) are [`images`]'.
//!
//! Translation between formats (a client's format differs from the account's) is the `translate`
//! crate's, wired in by [`cells`]. The rest of the request path never looks inside a body: it asks
//! the format.

pub(crate) mod anthropic;
pub(crate) mod cells;
pub(crate) mod gemini;
pub(crate) mod hints;
pub(crate) mod image_call;
pub(crate) mod images;
pub(crate) mod json;
pub(crate) mod openai;

/// Token counts above this are implausible and ignored (the call is then estimated).
pub(crate) const PLAUSIBLE_MAX: u64 = 100_000_000;

/// Token counts of one call. `cached` (prompt-cache reads) and `cache_write` (tokens written to
/// the supplier's prompt cache, Anthropic's cache creation) are parts of `input`, priced apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cached: u64,
    pub cache_write: u64,
}

/// What a generation call asks for, read from its body.
#[derive(Debug, Clone)]
pub(crate) struct CallBody {
    /// The model id exactly as sent (may carry an `author/` prefix).
    pub model: String,
    pub stream: bool,
    /// Whether a chat stream already asks for usage (`stream_options.include_usage`).
    pub include_usage: bool,
    /// The output cap the request sets (`max_tokens`, `max_completion_tokens`,
    /// `max_output_tokens`), if any.
    pub output_cap: Option<u64>,
}

/// The wire format of a supplier's response, as the meter reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wire {
    OpenAi,
    Anthropic,
    Gemini,
}

impl Wire {
    /// The meter's reading of a supplier speaking `format`.
    pub fn of(format: translate::Format) -> Wire {
        match format {
            translate::Format::Chat | translate::Format::Responses => Wire::OpenAi,
            translate::Format::Messages => Wire::Anthropic,
            translate::Format::Gemini => Wire::Gemini,
        }
    }

    /// Usage carried by one JSON document (a whole body, or the data of one SSE event), given
    /// what earlier documents of the same response carried (`partial`: Anthropic reports its
    /// counts field by field across events; other formats report whole usage objects).
    pub fn usage(self, json: &[u8], partial: &mut anthropic::Partial) -> Option<Usage> {
        match self {
            Wire::OpenAi => openai::usage(json),
            Wire::Anthropic => {
                *partial = partial.merge(anthropic::partial(json)?);
                partial.usage()
            }
            Wire::Gemini => gemini::usage(json),
        }
    }

    /// A cheap pre-check before [`Wire::usage`] parses an SSE event: whether it may carry usage.
    pub fn may_carry_usage(self, data: &[u8]) -> bool {
        let key: &[u8] = match self {
            Wire::OpenAi | Wire::Anthropic => b"\"usage\"",
            Wire::Gemini => b"\"usageMetadata\"",
        };
        memchr::memmem::find(data, key).is_some()
    }

    /// Whether one SSE event carries generated text (the unit of the stream estimate).
    pub fn event_has_text(self, data: &[u8]) -> bool {
        match self {
            Wire::OpenAi => openai::event_has_text(data),
            Wire::Anthropic => anthropic::event_has_text(data),
            Wire::Gemini => gemini::event_has_text(data),
        }
    }

    /// Images an image answer carries (OpenAI `data[]`, Gemini `inlineData` image parts).
    pub fn images(self, json: &[u8]) -> Option<u64> {
        match self {
            Wire::OpenAi => images::openai_count(json),
            Wire::Gemini => images::gemini_count(json),
            Wire::Anthropic => None,
        }
    }

    /// Seconds of audio a transcription body reports.
    pub fn audio_seconds(self, json: &[u8]) -> Option<u64> {
        match self {
            Wire::OpenAi => openai::audio_seconds(json),
            Wire::Anthropic | Wire::Gemini => None,
        }
    }
}
