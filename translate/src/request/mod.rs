//! Requests: what the gateway reads of a client body ([`Head`]), the body for an account of the
//! client's own format ([`forward`]), and, when the formats differ, the body decoded into
//! [`ir::Request`] and encoded for the supplier ([`translate`]).
//!
//! Each format is one module (`chat`, `responses`, `messages`, `gemini`): its `mod.rs` reads the
//! head and writes the same-format body, `decode.rs` decodes it into the canonical request,
//! `encode.rs` writes the canonical request in that format for a supplier. What they share knows
//! no format: the top-level scan (`top.rs`, [`TopLevel`], borrowed raw values), the field
//! readers of a decoded body (`json.rs`, `decode_shared.rs`) and the turn merging of the
//! encoders (`encode_shared.rs`). This file is the table of contents: it only dispatches.
//!
//! Owns the field-by-field mapping of request bodies between the formats, and the decision, per
//! field, to carry, drop or refuse it. Pure: bytes in, bytes out; it never validates the model id
//! (only that the client sent one) and never contacts anything.
//!
//! A client field the supplier's format cannot carry is **refused** ([`Refusal`], answered 400,
//! `param` naming the field as the client spelled it) when dropping it would change the meaning
//! of the call; harmless hints are **dropped**. Unknown top-level fields are ignored. A wrong JSON
//! type or a missing required field is refused the same way; `null` counts as absent.
//!
//! # Decoding (client side)
//!
//! | client | field | what happens |
//! |---|---|---|
//! | chat | `seed`, `service_tier`, `store`, `metadata`, `stream_options`, `prompt_cache_key`, `safety_identifier`, `verbosity` | dropped (hints, or gateway-side state) |
//! | chat | `frequency_penalty`, `presence_penalty` | dropped (no canonical field; sampling hints) |
//! | chat | message `name`, assistant `refusal` (field and `refusal` parts), `image_url.detail`, tool `strict`, `json_schema.description` | dropped |
//! | chat | `system`/`developer` messages anywhere in `messages` | hoisted, in order, into the system prompt |
//! | chat | `n` > 1, `logprobs: true`, `top_logprobs`, non-empty `logit_bias`, `audio`, `modalities` other than `text`, `prediction`, `web_search_options`, `functions`, `function_call` | refused, naming the field |
//! | chat | non-text parts in `system`/`developer`/`tool` content; `messages[i].role: "function"`, `messages[i].function_call`, `messages[i].audio`, `messages[i].content[j].type` other than `text`/`image_url` (user) or `text`/`refusal` (assistant), `messages[i].tool_calls[k].type` other than `function`, `tools[i].type` other than `function`, `tool_choice.type` other than `function`, `response_format.type` other than `text`/`json_object`/`json_schema` | refused |
//! | responses | `include`, `truncation`, `metadata`, `service_tier`, `prompt_cache_key`, `safety_identifier`, `stream_options`, `max_tool_calls`, `store: false`, `reasoning.summary`, `text.verbosity`, `input_image.detail`, tool `strict`, item `id`/`status` | dropped |
//! | responses | `reasoning` input items, assistant `refusal` parts | dropped (history only another supplier cannot read) |
//! | responses | `store: true`, `background: true`, `previous_response_id`, `conversation`, `prompt` | refused (the gateway is stateless) |
//! | responses | `top_logprobs`; `input[i].type` other than `message`/`function_call`/`function_call_output`/`reasoning`; `input[i].content[j].type` other than `input_text`/`output_text`/`input_image`/`refusal`; `input_image.file_id`; `tools[i].type` other than `function`; `tool_choice.type` other than `function`; `text.format.type` other than `text`/`json_object`/`json_schema` | refused |
//! | messages | `cache_control` (anywhere), `citations`, `service_tier`, `thinking.display`, `redacted_thinking` blocks | dropped |
//! | messages | `container`, `mcp_servers`; non-text `system` blocks; `tool_use` in a user turn or `tool_result` in an assistant turn; `tools[i]` with a `type` other than `custom` (server tools); `messages[i].content[j].type` other than `text`/`image`/`tool_use`/`tool_result`/`thinking`/`redacted_thinking` (documents, search results, server-tool blocks); an image inside a `tool_result`; image `source.type` other than `base64`/`url`; `output_config.format.type` other than `json_schema` | refused |
//! | messages | `max_tokens` missing | refused (`max_tokens`) |
//! | gemini | the whole body | refused: the native Gemini surface passes through untranslated |
//!
//! Mappings worth knowing: chat `reasoning_effort`/responses `reasoning.effort` `none` is
//! reasoning off, `xhigh`/`max` are `high`; chat `max_completion_tokens` and `max_tokens` both
//! given → the smaller; Messages `thinking: adaptive` is an effort (`output_config.effort`, else
//! medium); a tool result's text parts are joined with a newline; tool-call arguments that are
//! an empty string are `{}`.
//!
//! # Encoding (supplier side)
//!
//! | supplier | field | what happens |
//! |---|---|---|
//! | chat | `top_k`; reasoning replayed in history (thinking blocks); reasoning switched off; a tool result's error flag | dropped (chat has no field) |
//! | chat | `stop` with more than 4 sequences | refused (`stop` / `stop_sequences`) |
//! | chat | an image in an assistant turn | refused (the part's path) |
//! | messages | thinking without a signature; blank text; trailing whitespace of a final assistant text; a JSON schema's `name` and `strict` | dropped |
//! | messages | `temperature` > 1 | refused (`temperature`; Anthropic's range is 0–1) |
//! | messages | a thinking budget < 1024 or ≥ the output cap | refused (`thinking.budget_tokens`) |
//! | messages | a reasoning effort | a budget (minimal/low 1024, medium 4096, high 16384) capped to half the output cap, omitted when that is below 1024 |
//! | gemini | `user`; `parallel_tool_calls`; reasoning replayed in history; a JSON schema's `name` and `strict`; tool call ids; empty text | dropped (no field) |
//! | gemini | an image by http(s) URL | refused (the part's path: Gemini takes inline data) |
//! | gemini | a tool result whose call is not in the conversation (no name) | refused (the part's path) |
//! | gemini | `stop` with more than 5 sequences | refused |
//! | gemini | a reasoning effort | `thinkingBudget`: minimal 512 (the smallest every 2.5 model takes; 0 would switch thinking off, which Pro refuses), low 1024, medium 8192, high 24576; reasoning off is 0 |
//! | all | `tool_choice` and `parallel_tool_calls` without tools | dropped (nothing to choose from; OpenAI and Anthropic reject them) |
//! | all | a blank system prompt | dropped |
//! | responses | the whole request | refused: there is no responses encoder |
//!
//! Every encoder merges consecutive turns of one role. Messages and Gemini put a user turn's tool
//! results before its other parts, so the results of parallel calls travel together; chat sends
//! each result as its own `tool` message before the rest of the turn.

mod chat;
mod decode_shared;
mod encode_shared;
mod gemini;
mod json;
mod messages;
mod origin;
mod responses;
mod top;

#[cfg(test)]
mod tests;

use origin::Origin;
pub use top::{MAX_JSON_DEPTH, Malformed, TopLevel, top_level};

use bytes::Bytes;

use crate::ir;
use crate::{Format, Refusal};

/// What the gateway reads of a generation call's body, whatever its format: enough to route,
/// hold and meter it. Nothing else of the body is parsed on the way to an account of the
/// client's format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// The model id exactly as sent (may carry an `author/` prefix); Gemini's is the path's.
    pub model: String,
    pub stream: bool,
    /// Whether a stream reports usage unasked or already asks for it (chat's
    /// `stream_options.include_usage`; every other format reports it).
    pub include_usage: bool,
    /// The output cap the request sets (`max_tokens`, `max_completion_tokens`,
    /// `max_output_tokens`, Gemini's `generationConfig.maxOutputTokens` or its default 1024), if
    /// any; a count has none.
    pub output_cap: Option<u64>,
}

/// What the path asks of a body; its format says how to read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// A generation; the body says whether it streams.
    Generate,
    /// A generation the path says streams (Gemini's `:streamGenerateContent`).
    Stream,
    /// A token count (Messages' `count_tokens`, Gemini's `:countTokens`): no output cap.
    Count,
}

/// Reads the [`Head`] of a body in `format` sent to `endpoint`; `path_model` is the model the
/// path names (Gemini's; ignored by the other formats). Refuses a body missing what its format
/// requires, naming the field.
pub fn head(
    format: Format,
    endpoint: Endpoint,
    path_model: &str,
    fields: &TopLevel<'_>,
) -> Result<Head, Malformed> {
    match format {
        Format::Chat => chat::head(fields),
        Format::Responses => responses::head(fields),
        Format::Messages => messages::head(fields, endpoint),
        Format::Gemini => gemini::head(fields, endpoint, path_model),
    }
}

/// The body for an account of the client's own `format`, served by `upstream_model`: the
/// original buffer when nothing must change, else a copy in which only the changed fields are
/// rewritten (see each format's `forward`). Every other byte is forwarded as received.
pub fn forward(
    format: Format,
    endpoint: Endpoint,
    original: &Bytes,
    fields: &TopLevel<'_>,
    head: &Head,
    upstream_model: &str,
) -> Result<Bytes, Malformed> {
    match format {
        Format::Chat => chat::forward(original, fields, head, upstream_model),
        // Only the model id changes: a responses stream reports usage in `response.completed`
        // unasked, and Messages always do.
        Format::Responses | Format::Messages => {
            top::with_model(original, fields, &head.model, upstream_model)
        }
        Format::Gemini => gemini::forward(original, fields, endpoint),
    }
}

/// What an encoder needs besides the request.
#[derive(Debug, Clone)]
pub struct Options {
    /// The output cap to send when the client set none and the target requires one (Anthropic's
    /// `max_tokens` is mandatory).
    pub default_max_tokens: u64,
}

/// Translates a client body in `client` format into a supplier body in `supplier` format, for the
/// upstream model `model`. Refuses what the target cannot express, naming the field as the client
/// spelled it.
pub fn translate(
    client: Format,
    supplier: Format,
    body: &[u8],
    model: &str,
    options: &Options,
) -> Result<Vec<u8>, Refusal> {
    let (request, origin) = decode_with_origin(client, body)?;
    let request = ir::Request {
        model: model.to_string(),
        ..request
    };
    encode_with_origin(supplier, &request, options, &origin)
}

/// Decodes a client body. The result's `model` is empty: the caller sets the upstream model.
pub fn decode(client: Format, body: &[u8]) -> Result<ir::Request, Refusal> {
    decode_with_origin(client, body).map(|(request, _)| request)
}

/// Encodes a request for a supplier. A refusal names canonical fields (`messages[i].content[j]`
/// by canonical index, `stop`, `reasoning`); [`translate`] names them as the client spelled them.
pub fn encode(
    supplier: Format,
    request: &ir::Request,
    options: &Options,
) -> Result<Vec<u8>, Refusal> {
    encode_with_origin(supplier, request, options, &Origin::default())
}

fn decode_with_origin(client: Format, body: &[u8]) -> Result<(ir::Request, Origin), Refusal> {
    let body = json::body(body)?;
    match client {
        Format::Chat => chat::decode::decode(&body),
        Format::Responses => responses::decode::decode(&body),
        Format::Messages => messages::decode::decode(&body),
        Format::Gemini => Err(not_supported("Gemini requests are not translated")),
    }
}

fn encode_with_origin(
    supplier: Format,
    request: &ir::Request,
    options: &Options,
    origin: &Origin,
) -> Result<Vec<u8>, Refusal> {
    let body = match supplier {
        Format::Chat => chat::encode::encode(request, origin)?,
        Format::Messages => messages::encode::encode(request, options, origin)?,
        Format::Gemini => gemini::encode::encode(request, origin)?,
        Format::Responses => {
            return Err(not_supported(
                "requests are not translated into the responses format",
            ));
        }
    };
    serde_json::to_vec(&body)
        .map_err(|error| not_supported(&format!("the request could not be written: {error}")))
}

fn not_supported(message: &str) -> Refusal {
    Refusal {
        message: message.to_string(),
        param: None,
    }
}
