//! The Anthropic Messages wire format (`POST /v1/messages`): the request fields the gateway reads,
//! the body rewrite for an Anthropic account (its answers are read by `translate`'s Messages
//! decoder).

use super::{CallBody, openai::string_field};
use crate::classify::Route;
use crate::errors::GatewayError;
use crate::wire::json::TopLevel;
use bytes::Bytes;

/// Reads the fields the gateway needs from a Messages (or `count_tokens`) body.
pub(crate) fn call_body(route: Route, fields: &TopLevel<'_>) -> Result<CallBody, GatewayError> {
    let model = string_field(fields, "model")?;
    let stream = super::openai::bool_field(fields, "stream")?;
    super::openai::require_array(fields, "messages")?;
    let output_cap = match (route, fields.get("max_tokens").map(|r| r.get())) {
        (Route::MessagesCountTokens, _) => None,
        (_, None | Some("null")) => {
            return Err(GatewayError::invalid(
                "'max_tokens' is required",
                Some("max_tokens"),
            ));
        }
        (_, Some(raw)) => Some(raw.parse::<u64>().map_err(|_| {
            GatewayError::invalid(
                "'max_tokens' must be a non-negative integer",
                Some("max_tokens"),
            )
        })?),
    };
    Ok(CallBody {
        model,
        stream: stream && route == Route::Messages,
        include_usage: true,
        output_cap,
    })
}

/// The body for an Anthropic account: the original when the model id is the supplier's already,
/// else a copy with only `model` replaced.
pub(crate) fn forward_body(
    original: &Bytes,
    fields: &TopLevel<'_>,
    call: &CallBody,
    upstream_model: &str,
) -> Result<Bytes, GatewayError> {
    if call.model == upstream_model {
        return Ok(original.clone());
    }
    super::openai::replace_fields(original, fields, &[("model", upstream_model)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_messages_bodies() {
        let fields = crate::wire::json::top_level(
            br#"{"model":"claude","max_tokens":64,"messages":[],"stream":true}"#,
        )
        .unwrap();
        let c = call_body(Route::Messages, &fields).unwrap();
        assert_eq!(
            (c.model.as_str(), c.stream, c.output_cap),
            ("claude", true, Some(64))
        );
        let fields = crate::wire::json::top_level(br#"{"model":"claude","messages":[]}"#).unwrap();
        assert!(matches!(
            call_body(Route::Messages, &fields),
            Err(GatewayError::InvalidBody {
                param: Some("max_tokens"),
                ..
            })
        ));
        assert!(call_body(Route::MessagesCountTokens, &fields).is_ok());
    }
}
