//! Decoders: a supplier's response, in its own format, into [`Event`]s.
//!
//! One decoder per supplier format, each with two entries that share their logic: [`Decoder::sse`]
//! for one event of a stream and [`Decoder::body`] for a whole JSON document, so a body decodes to
//! the same sequence its stream would. Decoders never fail: what they do not understand is
//! skipped. They report through [`Decoder::settled`] when the supplier has said everything that
//! matters (finish reason and final usage), so the client's terminal frames can leave before the
//! body's end. An object's `Usage` is always emitted before its `Finish`.

mod chat;
mod gemini;
mod messages;

use serde_json::Value;

use super::sse::Sse;
use crate::Format;
use crate::ir::{Event, FinishReason};

/// The decoder of one supplier response.
#[derive(Debug)]
pub(super) enum Decoder {
    Chat(chat::Chat),
    Messages(messages::Messages),
    Gemini(gemini::Gemini),
}

impl Decoder {
    /// A decoder for `supplier`'s format. `request_id` seeds the ids a format lacks (Gemini
    /// function calls without `id`). `Responses` is decoded as Chat: OpenAI accounts are always
    /// sent Chat when translating, and the Chat decoder skips what it does not know.
    pub fn new(supplier: Format, request_id: &str) -> Decoder {
        match supplier {
            Format::Chat | Format::Responses => Decoder::Chat(chat::Chat::default()),
            Format::Messages => Decoder::Messages(messages::Messages::default()),
            Format::Gemini => Decoder::Gemini(gemini::Gemini::new(request_id)),
        }
    }

    /// Decodes one event of the supplier's stream.
    pub fn sse(&mut self, sse: &Sse, out: &mut Vec<Event>) {
        if let Decoder::Chat(chat) = self
            && sse.data.trim_ascii().starts_with(b"[DONE]")
        {
            chat.done(out);
            return;
        }
        let Ok(value) = serde_json::from_slice::<Value>(&sse.data) else {
            return;
        };
        match self {
            Decoder::Chat(chat) => chat.object(&value, out),
            Decoder::Messages(messages) => messages.event(&value, out),
            Decoder::Gemini(gemini) => gemini.response(&value, out),
        }
    }

    /// Decodes a whole (non-streaming) body. `false`: it is not a response of this format (the
    /// caller answers with an error). A recognised body always ends in `Finish` or `Error`.
    pub fn body(&mut self, body: &Value, out: &mut Vec<Event>) -> bool {
        let recognised = match self {
            Decoder::Chat(chat) => chat.body(body, out),
            Decoder::Messages(messages) => messages.body(body, out),
            Decoder::Gemini(gemini) => gemini.body(body, out),
        };
        if recognised
            && !out
                .iter()
                .any(|event| matches!(event, Event::Finish(_) | Event::Error { .. }))
        {
            out.push(Event::Finish(FinishReason::Other));
        }
        recognised
    }

    /// Whether the supplier has said everything that matters: its finish reason and, where the
    /// format sends it later, its final usage. Later events change nothing the client needs.
    pub fn settled(&self) -> bool {
        match self {
            Decoder::Chat(chat) => chat.settled(),
            Decoder::Messages(messages) => messages.settled(),
            Decoder::Gemini(gemini) => gemini.settled(),
        }
    }
}

/// `value[key]` as a string.
fn text<'v>(value: &'v Value, key: &str) -> Option<&'v str> {
    value.get(key).and_then(Value::as_str)
}

/// `value[key]` as a count.
fn count(value: &Value, key: &str) -> Option<u64> {
    value.get(key).and_then(Value::as_u64)
}

/// Overwrites each running count with `usage[key]` when present (usage that a supplier reports
/// as running totals: the last value of each field wins, nothing is added).
fn overwrite<const N: usize>(usage: &Value, fields: [(&str, &mut u64); N]) {
    for (key, field) in fields {
        if let Some(value) = count(usage, key) {
            *field = value;
        }
    }
}

/// The message of an error object (`{"message": …}`), or the object itself as text.
fn error_message(error: &Value) -> String {
    match error {
        Value::String(message) => message.clone(),
        _ => text(error, "message")
            .map(str::to_string)
            .unwrap_or_else(|| error.to_string()),
    }
}
