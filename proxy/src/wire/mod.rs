//! Wire formats: everything that depends on how a client or a supplier spells a call.
//!
//! One file per format ([`openai`]: chat completions and responses; [`anthropic`]: Messages;
//! [`gemini`]: generateContent). Each owns two things and nothing else:
//! - **read**: the request fields the gateway needs from a body in that format ([`CallBody`]);
//! - **rewrite**: the body of a same-format call for an account (model id, usage options, SPEC
//!   defaults).
//!
//! Where usage and text sit in a format's answers (the meter's reading) is that format's decoder
//! in `translate::response`, which reads each answer once, whether it translates it or not.
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

/// Token counts of one call: the one usage type, the `translate` crate's (whose format decoders
/// read it, for the client and for the bill alike).
pub use translate::Usage;

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
