//! Decoders: a supplier's response, in its own format, into [`Event`]s.
//!
//! One decoder per supplier format, each with two entries that share their logic: [`Decoder::sse`]
//! for one event of a stream and [`Decoder::body`] for a whole JSON document, so a body decodes to
//! the same sequence its stream would. Decoders never fail: what they do not understand is
//! skipped. They report through [`Decoder::settled`] when the supplier has said everything that
//! matters (finish reason and final usage), so the client's terminal frames can leave before the
//! body's end. An object's `Usage` is always emitted before its `Finish`.
//!
//! A decoder is also its format's **meter**: the usage it keeps ([`Decoder::reported`]) is what the
//! gateway bills. A translated answer is decoded in full ([`Decoder::sse`], [`Decoder::body`]); a
//! passed-through one is only scanned ([`Decoder::scan`], [`Decoder::scan_body`]): the few bytes
//! that may carry usage are decoded, typed and borrowed, into the same usage the full decoding
//! reads, and the rest is searched for text without building a tree.

mod chat;
mod gemini;
mod messages;

pub use chat::audio_seconds;

use serde_json::Value;

use crate::Format;
use crate::ir::{Event, FinishReason, Usage};
use crate::sse;
use memchr::memmem::Finder;
use std::sync::LazyLock;

/// What the scan of one passed-through event found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scanned {
    /// Usage (the call's usage is now this event's).
    Usage,
    /// Generated text (the unit of a cut stream's estimate).
    Text,
    Nothing,
}

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
    pub fn sse(&mut self, sse: &sse::Event<'_>, out: &mut Vec<Event>) {
        if let Decoder::Chat(chat) = self
            && sse.data.trim_ascii().starts_with(b"[DONE]")
        {
            chat.done(out);
            return;
        }
        if let Decoder::Chat(chat) = self {
            return chat.event(sse.data, out);
        }
        let Ok(value) = serde_json::from_slice::<Value>(sse.data) else {
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

    /// Scans one event of a passed-through stream: its usage, else whether it carries text.
    pub fn scan(&mut self, data: &[u8]) -> Scanned {
        match self {
            Decoder::Chat(chat) => chat.scan(data),
            Decoder::Messages(messages) => messages.scan(data),
            Decoder::Gemini(gemini) => gemini.scan(data),
        }
    }

    /// Scans a whole passed-through body (or a translated body too large to translate, skimmed)
    /// for its usage.
    pub fn scan_body(&mut self, json: &[u8]) {
        match self {
            Decoder::Chat(chat) => {
                chat.scan_body(json);
            }
            Decoder::Messages(messages) => messages.scan_body(json),
            Decoder::Gemini(gemini) => gemini.scan_body(json),
        }
    }

    /// The usage the supplier reported, complete (Anthropic: the input and the final output).
    pub fn reported(&self) -> Option<Usage> {
        match self {
            Decoder::Chat(chat) => chat.reported(),
            Decoder::Messages(messages) => messages.reported(),
            Decoder::Gemini(gemini) => gemini.reported(),
        }
    }

    /// The usage reported so far even when not complete: Anthropic's `message_start` reports
    /// the input before any output (a stream cut after it is billed that input exactly).
    pub fn reported_so_far(&self) -> Option<Usage> {
        match self {
            Decoder::Messages(messages) => messages.reported_so_far(),
            _ => self.reported(),
        }
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

/// What a passed-through event is searched for, each with its finder built once (building a
/// `memmem` finder per search was a measurable share of a stream's cost).
#[derive(Debug, Clone, Copy)]
enum Key {
    /// `"usage"`
    Usage,
    /// `"usageMetadata"`
    UsageMetadata,
    /// `"content":"`
    Content,
    /// `"delta":"`
    Delta,
    /// `"text":"`
    Text,
    /// `"text_delta"`
    TextDelta,
}

impl Key {
    fn finder(self) -> &'static Finder<'static> {
        static FINDERS: LazyLock<[Finder<'static>; 6]> = LazyLock::new(|| {
            [
                Finder::new(b"\"usage\""),
                Finder::new(b"\"usageMetadata\""),
                Finder::new(b"\"content\":\""),
                Finder::new(b"\"delta\":\""),
                Finder::new(b"\"text\":\""),
                Finder::new(b"\"text_delta\""),
            ]
        });
        &FINDERS[self as usize]
    }

    /// Whether `hay` contains the key.
    fn in_(self, hay: &[u8]) -> bool {
        self.finder().find(hay).is_some()
    }
}

/// Whether `key` (a quoted member name) occurs with a value other than `null`: a passed-through
/// event that may carry usage (OpenAI repeats `"usage":null` on every chunk of a stream that asked
/// for usage; only the last one is decoded).
fn mentions(hay: &[u8], key: Key) -> bool {
    let key = key.finder();
    key.find_iter(hay).any(|at| {
        let mut rest = hay[at + key.needle().len()..].trim_ascii_start();
        match rest.split_first() {
            Some((b':', after)) => rest = after.trim_ascii_start(),
            _ => return false,
        }
        !rest.starts_with(b"null")
    })
}

/// Whether `key` (ending in an opening quote) occurs followed by a non-empty string: text in a
/// passed-through event, found without parsing it.
fn has_text(hay: &[u8], key: Key) -> bool {
    let key = key.finder();
    key.find_iter(hay)
        .any(|at| hay.get(at + key.needle().len()).is_some_and(|&b| b != b'"'))
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
