//! OpenAI responses (`/v1/responses`): what the gateway reads of a client's body ([`head`]), the
//! body for an account that speaks it too ([`forward`]) and the decoder into the canonical
//! request ([`decode`]). There is no responses encoder: no account is sent a translated
//! responses body.

pub(super) mod decode;

use bytes::Bytes;

use super::top::{self, Malformed, TopLevel};
use super::{Head, decode_shared as shared};

/// What the gateway reads of a responses body (`input` is required).
pub(super) fn head(fields: &TopLevel<'_>) -> Result<Head, Malformed> {
    shared::openai_head(fields, |fields| {
        if fields.contains_key("input") {
            Ok(())
        } else {
            Err(Malformed::new("'input' is required", Some("input")))
        }
    })
}

/// The body for an account that speaks responses too: the original, or a copy with only the
/// model id replaced (a responses stream reports usage in `response.completed` unasked).
pub(super) fn forward(
    original: &Bytes,
    fields: &TopLevel<'_>,
    head: &Head,
    upstream_model: &str,
) -> Result<Bytes, Malformed> {
    if head.model == upstream_model {
        return Ok(original.clone());
    }
    top::rename_model(original, fields, upstream_model)
}
