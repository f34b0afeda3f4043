//! Requests: decode a client body into [`ir::Request`], encode it for a supplier.
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

mod decode_chat;
mod decode_messages;
mod decode_responses;
mod decode_shared;
mod encode_anthropic;
mod encode_chat;
mod encode_gemini;
mod encode_shared;
mod json;
mod origin;

#[cfg(test)]
mod tests;

use origin::Origin;

use crate::ir;
use crate::{Format, Refusal};

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
        Format::Chat => decode_chat::decode(&body),
        Format::Responses => decode_responses::decode(&body),
        Format::Messages => decode_messages::decode(&body),
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
        Format::Chat => encode_chat::encode(request, origin)?,
        Format::Messages => encode_anthropic::encode(request, options, origin)?,
        Format::Gemini => encode_gemini::encode(request, origin)?,
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
