//! The Anthropic Messages wire format (`POST /v1/messages`): the request fields the gateway reads,
//! the body rewrite for an Anthropic account, and where usage sits in a response.
//!
//! Usage: `message_start.message.usage` carries the input side (`input_tokens` counts only the
//! tokens after the last cache breakpoint; `cache_read_input_tokens` and
//! `cache_creation_input_tokens` are separate), `message_delta.usage` the output side. Counts are
//! cumulative and newer API versions repeat input fields in `message_delta`: each field takes its
//! last value, nothing is added ([`Partial::merge`]). The gateway's input = `input_tokens` + cache
//! reads + cache writes; cached = cache reads (priced at `cached_input_per_mtok`); cache writes are
//! priced as input.

use super::{CallBody, PLAUSIBLE_MAX, Usage, openai::string_field};
use crate::classify::Route;
use crate::errors::GatewayError;
use crate::wire::json::TopLevel;
use bytes::Bytes;
use serde::Deserialize;

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

/// Usage fields one event or body carried; absent fields keep their earlier value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Partial {
    input_tokens: Option<u64>,
    cache_read: Option<u64>,
    cache_creation: Option<u64>,
    output_tokens: Option<u64>,
    /// Whether the output count is final: a `message_delta` or a whole message carried it
    /// (`message_start`'s `output_tokens` is a placeholder).
    output_final: bool,
}

impl Partial {
    /// Each field of `later` that is present replaces this one's (cumulative counts).
    pub fn merge(self, later: Partial) -> Partial {
        Partial {
            input_tokens: later.input_tokens.or(self.input_tokens),
            cache_read: later.cache_read.or(self.cache_read),
            cache_creation: later.cache_creation.or(self.cache_creation),
            output_tokens: later.output_tokens.or(self.output_tokens),
            output_final: self.output_final || later.output_final,
        }
    }

    /// The usage once both sides are reported: the input (an output count alone is not a
    /// report) and the final output (a stream cut after `message_start` is not exact).
    pub fn usage(self) -> Option<Usage> {
        if !self.output_final {
            return None;
        }
        self.counted()
    }

    /// The input side as reported so far (tokens, cached, written to the cache), even when the
    /// output is not final: a cut stream's estimate starts from it.
    pub fn input(self) -> Option<(u64, u64, u64)> {
        self.counted().map(|u| (u.input, u.cached, u.cache_write))
    }

    fn counted(self) -> Option<Usage> {
        let uncached = self.input_tokens?;
        let cached = self.cache_read.unwrap_or(0);
        let input = uncached
            .checked_add(cached)?
            .checked_add(self.cache_creation.unwrap_or(0))?;
        let output = self.output_tokens.unwrap_or(0);
        (input <= PLAUSIBLE_MAX && output <= PLAUSIBLE_MAX).then_some(Usage {
            input,
            output,
            cached,
            cache_write: self.cache_creation.unwrap_or(0),
        })
    }
}

#[derive(Deserialize)]
struct Carrier {
    #[serde(rename = "type")]
    kind: Option<String>,
    usage: Option<RawUsage>,
    message: Option<MessageCarrier>,
}

#[derive(Deserialize)]
struct MessageCarrier {
    usage: Option<RawUsage>,
}

#[derive(Deserialize)]
struct RawUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
}

/// The usage fields of one JSON document (a whole body, or one SSE event's data).
pub(crate) fn partial(json: &[u8]) -> Option<Partial> {
    let carrier: Carrier = serde_json::from_slice(json).ok()?;
    let output_final = matches!(carrier.kind.as_deref(), Some("message_delta" | "message"));
    let raw = carrier.usage.or(carrier.message.and_then(|m| m.usage))?;
    Some(Partial {
        output_final,
        input_tokens: raw.input_tokens,
        cache_read: raw.cache_read_input_tokens,
        cache_creation: raw.cache_creation_input_tokens,
        output_tokens: raw.output_tokens,
    })
}

/// Whether one SSE event carries generated text (a non-empty `text_delta`).
pub(crate) fn event_has_text(data: &[u8]) -> bool {
    memchr::memmem::find(data, b"\"text_delta\"").is_some()
        && super::openai::has_text(data, b"\"text\":\"")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cumulative_fields_take_the_last_value() {
        let start = partial(br#"{"type":"message_start","message":{"usage":{"input_tokens":9,"cache_read_input_tokens":4,"cache_creation_input_tokens":2,"output_tokens":1}}}"#).unwrap();
        let delta = partial(br#"{"type":"message_delta","usage":{"output_tokens":5}}"#).unwrap();
        let again = partial(br#"{"type":"message_delta","usage":{"input_tokens":9,"cache_read_input_tokens":4,"cache_creation_input_tokens":2,"output_tokens":7}}"#).unwrap();
        let u = start.merge(delta).usage().unwrap();
        assert_eq!((u.input, u.output, u.cached), (15, 5, 4));
        let u = start.merge(delta).merge(again).usage().unwrap();
        assert_eq!((u.input, u.output, u.cached), (15, 7, 4), "never added up");
        assert_eq!(delta.usage(), None, "output alone is not a report");
        assert_eq!(
            start.usage(),
            None,
            "message_start's output count is a placeholder"
        );
        assert_eq!(start.input(), Some((15, 4, 2)));
    }

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
