//! Where the pieces of a canonical request came from in the client's body, so that an encoder's
//! refusal names the field as the client spelled it (`messages[3].content[1]`, `stop_sequences`)
//! even though encoders only see [`ir::Request`](crate::ir::Request).
//!
//! Decoders fill it; encoders only ask it for names. When [`super::encode`] is called without a
//! decoder's origin, fields are named canonically (`messages[i].content[j]` by canonical index).

use crate::Format;

/// A canonical field an encoder may refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Field {
    Temperature,
    Stop,
    /// The reasoning control (a budget that the target cannot take).
    Reasoning,
    /// Part `.1` of canonical message `.0`.
    Part(usize, usize),
}

/// The client format and the client path of every canonical part.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Origin {
    pub(crate) client: Option<Format>,
    /// `parts[m][p]`: the client path of part `p` of canonical message `m`.
    pub(crate) parts: Vec<Vec<String>>,
}

impl Origin {
    /// `field` as the client spelled it.
    pub(crate) fn name(&self, field: Field) -> String {
        match field {
            Field::Temperature => "temperature".to_string(),
            Field::Stop => match self.client {
                Some(Format::Messages) => "stop_sequences",
                Some(Format::Gemini) => "generationConfig.stopSequences",
                Some(Format::Chat | Format::Responses) | None => "stop",
            }
            .to_string(),
            Field::Reasoning => match self.client {
                Some(Format::Chat) => "reasoning_effort",
                Some(Format::Responses) => "reasoning.effort",
                Some(Format::Messages) => "thinking.budget_tokens",
                Some(Format::Gemini) => "generationConfig.thinkingConfig",
                None => "reasoning",
            }
            .to_string(),
            Field::Part(message, part) => self
                .parts
                .get(message)
                .and_then(|parts| parts.get(part))
                .cloned()
                .unwrap_or_else(|| format!("messages[{message}].content[{part}]")),
        }
    }
}
