//! Anthropic Messages (`/v1/messages`, `/v1/messages/count_tokens`): what the gateway reads of a
//! client's body ([`head`]), the body for an Anthropic account ([`forward`]), the decoder into the
//! canonical request ([`decode`]) and the encoder for an Anthropic supplier ([`encode`]).

pub(super) mod decode;
pub(super) mod encode;

use super::top::{self, Malformed, TopLevel};
use super::{Endpoint, Head};

/// What the gateway reads of a Messages body: `model`, `stream`, `messages` (an array) and
/// `max_tokens`, which a generation requires (SPEC) and a count does not read. A count never
/// streams; Messages always report usage.
pub(super) fn head(fields: &TopLevel<'_>, endpoint: Endpoint) -> Result<Head, Malformed> {
    let model = top::string_field(fields, "model")?;
    let stream = top::bool_field(fields, "stream")?;
    top::require_array(fields, "messages")?;
    let count = endpoint == Endpoint::Count;
    let output_cap = match (count, fields.get("max_tokens").map(|r| r.get())) {
        (true, _) => None,
        (false, None | Some("null")) => {
            return Err(Malformed::new(
                "'max_tokens' is required",
                Some("max_tokens"),
            ));
        }
        (false, Some(raw)) => Some(raw.parse::<u64>().map_err(|_| {
            Malformed::new(
                "'max_tokens' must be a non-negative integer",
                Some("max_tokens"),
            )
        })?),
    };
    Ok(Head {
        model,
        stream: stream && !count,
        include_usage: true,
        output_cap,
    })
}
