//! The canonical form every format is decoded into and encoded from.
//!
//! It carries what at least two formats can express; what only one format has is either mapped
//! to the nearest meaning (documented in `docs/ARCHITECTURE.md`, "Translation") or refused by the
//! decoder when it changes the meaning of the call.

use serde_json::Value;

/// A generation request.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Request {
    /// The model id to send upstream (set by the caller, not read from the client's body).
    pub model: String,
    /// System prompt, in order (chat `system`/`developer` messages, responses `instructions`,
    /// Messages `system`, Gemini `systemInstruction`).
    pub system: Vec<String>,
    /// The conversation, oldest first. Consecutive turns of the same role are allowed here;
    /// encoders merge them where the target demands alternation.
    pub messages: Vec<Message>,
    pub tools: Vec<Tool>,
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may call several tools in one turn (`None`: the target's default).
    pub parallel_tool_calls: Option<bool>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u64>,
    pub stop: Vec<String>,
    /// Output cap in tokens (chat `max_completion_tokens`/`max_tokens`, responses
    /// `max_output_tokens`, Messages `max_tokens`, Gemini `generationConfig.maxOutputTokens`).
    pub max_output_tokens: Option<u64>,
    pub reasoning: Option<Reasoning>,
    pub response_format: Option<ResponseFormat>,
    pub stream: bool,
    /// An end-user id the client attached (chat/responses `user`, Messages `metadata.user_id`).
    pub user: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub role: Role,
    pub parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Text(String),
    /// An inline image: its media type (`image/png`) and base64 data.
    Image {
        media_type: String,
        data: String,
    },
    /// An image by URL (http(s)); formats that only take inline data refuse it.
    ImageUrl(String),
    /// A tool call the assistant made. `arguments` is a JSON object.
    ToolCall {
        id: String,
        name: String,
        arguments: Value,
    },
    /// The result of a tool call, sent back by the user side.
    ToolResult {
        /// The id of the call it answers.
        id: String,
        /// The tool's name when the format carries it (Gemini needs it; decoders of formats
        /// without it look it up from the earlier call).
        name: Option<String>,
        content: String,
        is_error: bool,
    },
    /// Reasoning the assistant showed earlier (replayed history). `signature` is the supplier's
    /// opaque proof (Anthropic thinking signature) when the format has one.
    Thinking {
        text: String,
        signature: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct Tool {
    pub name: String,
    pub description: Option<String>,
    /// JSON Schema of the arguments (an object schema).
    pub parameters: Value,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    None,
    /// Some tool must be called.
    Required,
    /// This tool must be called.
    Tool(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Effort {
    Minimal,
    Low,
    Medium,
    High,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reasoning {
    /// A qualitative effort (OpenAI `reasoning_effort`, Gemini `thinkingLevel`).
    Effort(Effort),
    /// A token budget (Anthropic `thinking.budget_tokens`, Gemini `thinkingBudget`).
    Budget(u64),
    /// Thinking switched off.
    Disabled,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ResponseFormat {
    /// Any JSON object.
    JsonObject,
    /// JSON matching `schema`.
    JsonSchema {
        name: String,
        schema: Value,
        strict: Option<bool>,
    },
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// Natural end or a stop sequence.
    Stop,
    /// The output cap.
    Length,
    /// It called tools.
    ToolCalls,
    /// Filtered or refused.
    ContentFilter,
    Other,
}

/// Token counts as the canonical form carries them. `input` includes `cached` and
/// `cache_write` (OpenAI's and Gemini's convention; an Anthropic decoder adds its cache fields
/// to `input_tokens`); `output` includes `reasoning`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub cached: u64,
    pub cache_write: u64,
    /// The part of `cache_write` written for an hour (Anthropic's
    /// `cache_creation.ephemeral_1h_input_tokens`; priced apart from the 5-minute writes).
    pub cache_write_1h: u64,
    pub reasoning: u64,
}

/// Token counts above this are implausible: a decoder ignores such a report (a call is then
/// estimated, never billed from it).
pub const PLAUSIBLE_MAX: u64 = 100_000_000;

impl Usage {
    /// `self` when its counts are plausible: each at most [`PLAUSIBLE_MAX`], and the cache parts
    /// within the input.
    pub fn plausible(self) -> Option<Usage> {
        let within = self.input <= PLAUSIBLE_MAX
            && self.output <= PLAUSIBLE_MAX
            && self.cached.checked_add(self.cache_write)? <= self.input
            && self.cache_write_1h <= self.cache_write;
        within.then_some(self)
    }
}

/// One step of a response, in order. A non-streaming response decodes into the same sequence.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The response began. `id` is the supplier's response id (encoders may derive their own).
    Start { id: String, model: String },
    /// Generated text (appended to the current text block).
    Text(String),
    /// Reasoning text.
    Thinking(String),
    /// The opaque signature of the reasoning just streamed.
    ThinkingSignature(String),
    /// A tool call begins. `index` counts tool calls of this response from 0.
    ToolCallStart {
        index: usize,
        id: String,
        name: String,
    },
    /// A fragment of a tool call's JSON arguments (the fragments concatenate to a JSON object).
    ToolCallArgs { index: usize, fragment: String },
    /// Token counts so far. Cumulative: the last one wins, they are never added.
    Usage(Usage),
    /// The model stopped.
    Finish(FinishReason),
    /// The supplier reported an error inside a stream that had already begun.
    Error { message: String },
}
