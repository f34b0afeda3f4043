//! What an embedding call asks for, once read (`inspect::embedding` reads it from each surface's
//! body; `wire::embeddings` makes each account format's body from it and shapes the answer).

use serde_json::{Map, Value};

/// Most inputs an OpenAI-style call may carry (OpenAI's own limit).
pub(crate) const MAX_INPUTS: usize = 2048;
/// Most requests a native `batchEmbedContents` may carry (Gemini's own limit).
pub(crate) const MAX_NATIVE_REQUESTS: usize = 100;

/// The surface an embedding call came in on, which is also the shape its answer takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// `POST {compat_base}/embeddings`.
    OpenAi,
    /// `:embedContent`: one content, answered `{embedding: {values}}`.
    NativeOne,
    /// `:batchEmbedContents`: answered `{embeddings: [{values}]}`.
    NativeBatch,
}

/// One thing to embed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Input {
    Text(String),
    /// Token ids (OpenAI only: no other format takes them).
    Tokens(Vec<u64>),
}

/// One native request's own options (`taskType`, `title`, `outputDimensionality`).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct NativeOptions {
    /// The client's `content` as sent (role and parts): what a Gemini account gets.
    pub content: Value,
    pub task_type: Option<String>,
    pub title: Option<String>,
    pub dimensions: Option<u64>,
}

/// An embedding call as inspection reads it.
#[derive(Debug, Clone)]
pub(crate) struct EmbeddingCall {
    pub model: String,
    pub shape: Shape,
    pub inputs: Vec<Input>,
    /// OpenAI: `dimensions`.
    pub dimensions: Option<u64>,
    /// OpenAI: the client asked for `encoding_format: "base64"` (the official SDK's default).
    pub base64: bool,
    /// OpenAI: the client's own fields (forwarded as sent to an OpenAI-format account, the model
    /// replaced).
    pub fields: Map<String, Value>,
    /// Native: each request's options, in order.
    pub native: Vec<NativeOptions>,
}

/// What the answer of an embedding call needs once the call is routed (`Call::embedding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Answering {
    pub shape: Shape,
    /// The OpenAI client asked for base64.
    pub base64: bool,
    /// The tokens charged when the supplier reports none ([`EmbeddingCall::estimate`]).
    pub estimate: u64,
}

impl EmbeddingCall {
    /// What its answer needs.
    pub fn answering(&self) -> Answering {
        Answering {
            shape: self.shape,
            base64: self.base64,
            estimate: self.estimate(),
        }
    }

    /// The usage estimate when the supplier reports none: ⌈text bytes / 4⌉ per text input, the
    /// exact count for token ids (never above the hold's ⌈body bytes / 2⌉).
    pub fn estimate(&self) -> u64 {
        self.inputs
            .iter()
            .map(|i| match i {
                Input::Text(t) => (t.len() as u64).div_ceil(4),
                Input::Tokens(t) => t.len() as u64,
            })
            .sum()
    }
}
