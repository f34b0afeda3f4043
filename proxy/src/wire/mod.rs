//! Wire formats: everything that depends on how a client or a supplier spells a call.
//!
//! One file per format ([`openai`] today). Each owns three things and nothing else:
//! - **read**: the request fields the gateway needs from a body in that format ([`CallBody`]);
//! - **meter**: where usage and generated text sit in its responses, whole or streamed (the
//!   [`Wire`] methods the `meter` calls; the meter itself only frames bytes and adds up);
//! - **translate** (to come with the second supplier format): a request and its response from one
//!   format to another, event by event for streams.
//!
//! The rest of the request path never looks inside a body: it asks the format.

pub(crate) mod openai;

/// Token counts of one call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cached: u64,
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
}

impl Wire {
    /// Usage carried by one JSON document: a whole body, or the data of one SSE event.
    pub fn usage(self, json: &[u8]) -> Option<Usage> {
        match self {
            Wire::OpenAi => openai::usage(json),
        }
    }

    /// A cheap pre-check before [`Wire::usage`] parses an SSE event: whether it may carry usage.
    pub fn may_carry_usage(self, data: &[u8]) -> bool {
        match self {
            Wire::OpenAi => memchr::memmem::find(data, b"\"usage\"").is_some(),
        }
    }

    /// Whether one SSE event carries generated text (the unit of the stream estimate).
    pub fn event_has_text(self, data: &[u8]) -> bool {
        match self {
            Wire::OpenAi => openai::event_has_text(data),
        }
    }

    /// Seconds of audio a transcription body reports.
    pub fn audio_seconds(self, json: &[u8]) -> Option<u64> {
        match self {
            Wire::OpenAi => openai::audio_seconds(json),
        }
    }
}
