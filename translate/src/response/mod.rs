//! Responses: a supplier's answer, read once — metered, and translated when the client speaks
//! another format.
//!
//! An [`Answer`] is the one reader of a supplier's body, whatever the pair. It frames a stream
//! once ([`crate::sse::Reader`]) and hands each event to the supplier format's decoder, which is
//! also that format's meter (`decode`):
//! - **translated** ([`Answer::translate`]): the event is decoded into [`ir::Event`]s — the usage
//!   among them is what the meter bills — and `encode` (one encoder per client format) writes them
//!   in the client's format. A stream's event leaves, translated, from the [`Answer::feed`] call
//!   that completed it; a non-streaming body is collected and goes through the very same decoder
//!   and encoder at [`Answer::finish`]. So each format is written once, whatever the pair and the
//!   mode.
//! - **passed through** ([`Answer::pass`]): the bytes reach the client untouched (the caller
//!   forwards them); each event is only scanned — the few that may carry usage are decoded,
//!   typed and borrowed, the others searched for text — so no tree is built.
//!
//! What this module promises the gateway: it never panics and never blocks on input it does not
//! understand (unknown events are skipped); a stream it writes is well formed for the client's
//! official SDK from the first byte to the last, including when the supplier's stream is cut
//! (then it ends in the client's error event, never in a made-up success); usage counts pass
//! exactly (the last cumulative value, never a sum), and the usage billed is the usage the client
//! is shown. It does no I/O, reads no clock, and holds a bounded amount of memory per answer
//! (a body up to [`BODY_CAP`] when translating, [`RAW_CAP`] when passing, skimmed past it; a
//! stream's current line and event up to [`crate::sse::LINE_CAP`], skimmed past it).
//!
//! [`ir::Event`]: crate::ir::Event

mod decode;
mod encode;
mod errors;
#[cfg(test)]
mod tests;

pub use decode::audio_seconds;
pub use errors::error_body;

use crate::ir::{Event, Usage};
use crate::skim::Skim;
use crate::{Format, sse};
use decode::{Decoder, Scanned};
use encode::Encoder;

/// The largest non-streaming body translated; a larger one is answered as invalid (its usage is
/// still read, from its skimmed copy).
pub const BODY_CAP: usize = 8 << 20;
/// The largest passed-through body kept as it is for reading; a larger one is skimmed.
pub const RAW_CAP: usize = 1 << 20;

/// What the client-side encoder needs besides the supplier's events.
#[derive(Debug, Clone)]
pub struct Context {
    /// The model id the client sees in the response.
    pub model: String,
    /// The gateway's request id: the response ids the encoder writes derive from it
    /// (`chatcmpl-…`, `resp_…`, `msg_…`), so they are unique per call.
    pub request_id: String,
    /// Unix seconds for `created` / `created_at`.
    pub created: u64,
    /// Tools a Codex-style request declared in its own kinds (`crate::codex`): their calls go
    /// back to a responses client as `custom_tool_call` / `local_shell_call` items. Empty unless
    /// the request was adapted.
    pub codex: crate::codex::CodexTools,
}

/// One supplier answer, read once: metered, and translated when the client's format differs.
pub struct Answer {
    /// The body is SSE.
    stream: bool,
    decoder: Decoder,
    /// Translating: the client's encoder.
    encoder: Option<Encoder>,
    /// Stream: the one reader of the supplier's SSE.
    reader: sse::Reader,
    /// Stream: the decoded events of the current supplier event (a reused buffer).
    decoded: Vec<Event>,
    /// Body: the supplier's JSON so far, up to the cap.
    body: Vec<u8>,
    /// Body: it outgrew the cap and is skimmed; at the end, its skimmed copy.
    skim: Option<Skim>,
    skimmed: bool,
    /// Stream events that carried generated text.
    text_events: u64,
    /// Body bytes the supplier sent (all of them, also past the caps).
    bytes: u64,
    /// Stream: the supplier sent an error event (Anthropic's `event: error`, or an event whose
    /// data is an `{"error": …}` object: OpenAI's and Gemini's).
    errored: bool,
    finished: bool,
}

impl Answer {
    /// Reads an answer that passes through untouched (the client speaks the supplier's format).
    /// `stream`: the body is SSE.
    pub fn pass(supplier: Format, stream: bool) -> Answer {
        Answer::new(supplier, stream, None, "")
    }

    /// Reads and translates a successful (2xx) answer from the supplier's format to the
    /// client's. `stream`: the body is SSE (the client asked for a stream, and the supplier was
    /// asked for one).
    pub fn translate(supplier: Format, client: Format, stream: bool, context: Context) -> Answer {
        let encoder = Encoder::new(client, stream, &context);
        Answer::new(supplier, stream, Some(encoder), &context.request_id)
    }

    fn new(supplier: Format, stream: bool, encoder: Option<Encoder>, request_id: &str) -> Answer {
        Answer {
            stream,
            decoder: Decoder::new(supplier, request_id),
            encoder,
            reader: sse::Reader::default(),
            decoded: Vec::new(),
            body: Vec::new(),
            skim: None,
            skimmed: false,
            text_events: 0,
            errored: false,
            bytes: 0,
            finished: false,
        }
    }

    /// Whether the answer is translated (the caller sends [`Answer::feed`]'s bytes instead of the
    /// supplier's).
    pub fn translates(&self) -> bool {
        self.encoder.is_some()
    }

    /// Whether the body is read as a stream.
    pub fn stream(&self) -> bool {
        self.stream
    }

    /// The `Content-Type` of the translated body.
    pub fn content_type(&self) -> &'static str {
        if self.stream {
            "text/event-stream"
        } else {
            "application/json"
        }
    }

    /// Feeds the next chunk of the supplier's body. Translating, returns the client bytes ready
    /// to send now (possibly empty): in a stream every supplier event completed by this chunk; a
    /// body is written at [`Answer::finish`]. Passing through, returns nothing.
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        self.bytes = self.bytes.saturating_add(chunk.len() as u64);
        if self.stream {
            let mut reader = std::mem::take(&mut self.reader);
            reader.push(chunk, &mut |event| self.event(event, &mut out));
            self.reader = reader;
        } else {
            self.collect(chunk);
        }
        out
    }

    /// The supplier's body ended (complete, or cut): returns the remaining client bytes when
    /// translating. Stream: the terminal frames, or the client's error event when the supplier
    /// never finished. Body: the whole translated body, or the client's error body when the
    /// supplier's was not a response. Later calls return nothing.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        self.finished = true;
        if self.stream {
            let mut reader = std::mem::take(&mut self.reader);
            reader.finish(&mut |event| self.event(event, &mut out));
            if let Some(encoder) = &mut self.encoder {
                encoder.finish(&mut out);
            }
            return out;
        }
        if let Some(skim) = self.skim.take() {
            self.body = skim.finish().unwrap_or_default();
            self.skimmed = true;
        }
        let Some(encoder) = &mut self.encoder else {
            if !self.body.is_empty() {
                self.decoder.scan_body(&self.body);
            }
            return out;
        };
        let decoded = !self.skimmed
            && serde_json::from_slice(&self.body)
                .is_ok_and(|value| self.decoder.body(&value, &mut self.decoded));
        if !decoded {
            // Too large to translate, or not a response: its usage is still read.
            self.decoder.scan_body(&self.body);
            encoder.invalid(encode::INVALID, &mut out);
            return out;
        }
        encoder.events(&mut self.decoded, &mut out);
        encoder.finish(&mut out);
        out
    }

    /// The usage the supplier reported, complete (`None`: it reported none, or nothing
    /// plausible).
    pub fn reported(&self) -> Option<Usage> {
        self.decoder.reported()
    }

    /// The usage reported so far, complete or not (a stream cut after Anthropic's
    /// `message_start` has its input reported).
    pub fn reported_so_far(&self) -> Option<Usage> {
        self.decoder.reported_so_far()
    }

    /// The stream's events that carried generated text (a cut stream's output estimate).
    pub fn text_events(&self) -> u64 {
        self.text_events
    }

    /// Whether the stream carried an error event (the supplier failed mid-answer).
    pub fn errored(&self) -> bool {
        self.errored
    }

    /// Body bytes the supplier sent.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// A non-streaming body, once finished: the body as read (its skimmed copy past the cap),
    /// for the caller's own readings (image counts, audio durations, rate-limit hints).
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// Past the cap, a body is skimmed instead of kept.
    fn collect(&mut self, chunk: &[u8]) {
        if let Some(skim) = &mut self.skim {
            skim.feed(chunk);
            return;
        }
        let cap = if self.encoder.is_some() {
            BODY_CAP
        } else {
            RAW_CAP
        };
        if self.body.len() + chunk.len() > cap {
            let mut skim = Skim::default();
            skim.feed(&std::mem::take(&mut self.body));
            skim.feed(chunk);
            self.skim = Some(skim);
        } else {
            self.body.extend_from_slice(chunk);
        }
    }

    /// One event of the supplier's stream: scanned when passing through; decoded, counted and
    /// written in the client's format when translating. A skimmed event (one data line past the
    /// cap) is only scanned: its usage counts, its shortened text is not shown.
    fn event(&mut self, event: sse::Event<'_>, out: &mut Vec<u8>) {
        if error_event(&event) {
            self.errored = true;
        }
        let encoder = match &mut self.encoder {
            Some(encoder) if !event.skimmed => encoder,
            _ => {
                if self.decoder.scan(event.data) == Scanned::Text {
                    self.text_events += 1;
                }
                return;
            }
        };
        self.decoder.sse(&event, &mut self.decoded);
        if self
            .decoded
            .iter()
            .any(|e| matches!(e, Event::Text(text) if !text.is_empty()))
        {
            self.text_events += 1;
        }
        encoder.events(&mut self.decoded, out);
        if self.decoder.settled() {
            encoder.complete(out);
        }
    }
}

/// Whether a stream's event is the supplier's error: named `error` (Anthropic), or data that is
/// an object whose first key is `error` and holds an object (OpenAI's and Gemini's mid-stream
/// errors). A few byte comparisons per event, no parse.
fn error_event(event: &sse::Event<'_>) -> bool {
    if event.name == b"error" {
        return true;
    }
    fn after<'a>(data: &'a [u8], token: &[u8]) -> Option<&'a [u8]> {
        data.trim_ascii_start().strip_prefix(token)
    }
    // `{`, `"error"`, `:`, then the error object's own `{`.
    after(event.data, b"{")
        .and_then(|rest| after(rest, b"\"error\""))
        .and_then(|rest| after(rest, b":"))
        .and_then(|rest| after(rest, b"{"))
        .is_some()
}
