//! OpenAI chat completions (`/v1/chat/completions`): what the gateway reads of a client's body
//! ([`head`]), the body for an account that speaks it too ([`forward`]), the decoder into the
//! canonical request ([`decode`]) and the encoder for a chat supplier ([`encode`]).

pub(super) mod decode;
pub(super) mod encode;

use bytes::Bytes;
use serde_json::Value;

use super::top::{self, Malformed, TopLevel};
use super::{Head, decode_shared as shared};

/// What the gateway reads of a chat completions body (`messages` must be an array).
pub(super) fn head(fields: &TopLevel<'_>) -> Result<Head, Malformed> {
    shared::openai_head(fields, |fields| top::require_array(fields, "messages"))
}

/// The body for an account that speaks chat completions too: the original when nothing changes,
/// else a copy with the supplier's model id and, for a stream that does not ask for usage
/// already, `stream_options.include_usage = true` (so the stream can be metered exactly; the
/// client then sees the supplier's usage chunk, `choices: []`, which OpenAI clients accept).
/// Every other byte is forwarded as received.
pub(super) fn forward(
    original: &Bytes,
    fields: &TopLevel<'_>,
    head: &Head,
    upstream_model: &str,
) -> Result<Bytes, Malformed> {
    if !head.stream || head.include_usage {
        return top::with_model(original, fields, &head.model, upstream_model);
    }
    let mut options: serde_json::Map<String, Value> = fields
        .get("stream_options")
        .and_then(|v| serde_json::from_str(v.get()).ok())
        .unwrap_or_default();
    options.insert("include_usage".into(), Value::Bool(true));
    let options = serde_json::to_string(&options).map_err(top::unwritable)?;
    let model = top::json_string(upstream_model)?;
    let replaced = [("model", model), ("stream_options", options)];
    top::rewrite_fields(original.len(), fields, &replaced)
}
