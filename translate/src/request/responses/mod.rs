//! OpenAI responses (`/v1/responses`): what the gateway reads of a client's body ([`head`]), the
//! body for an account that speaks it too ([`forward`]) and the decoder into the canonical
//! request ([`decode`]). There is no responses encoder: no account is sent a translated
//! responses body.

pub(super) mod decode;

use super::top::{Malformed, TopLevel};
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
