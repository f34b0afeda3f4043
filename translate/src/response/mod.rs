//! Responses: a supplier's body (JSON, or SSE fed chunk by chunk) into the client's format.
//!
//! Supplier bytes → `decode` (one decoder per supplier format) → [`ir::Event`]s → `encode`
//! (one encoder per client format) → client bytes. A stream is read by `sse` and each event
//! leaves, translated, from the [`Translator::feed`] call that completed it; a non-streaming body
//! is buffered and goes through the very same decoder and encoder at [`Translator::finish`]. So
//! each format is written once, whatever the pair and the mode.
//!
//! What this module promises the gateway: it never panics and never blocks on input it does not
//! understand (unknown events are skipped); a stream it writes is well formed for the client's
//! official SDK from the first byte to the last, including when the supplier's stream is cut
//! (then it ends in the client's error event, never in a made-up success); usage counts pass
//! exactly (the last cumulative value, never a sum). It does no I/O and reads no clock.
//!
//! [`ir::Event`]: crate::ir::Event

mod decode;
mod encode;
mod errors;
mod sse;
#[cfg(test)]
mod tests;

pub use errors::error_body;

use crate::Format;
use crate::ir::Event;
use decode::Decoder;
use encode::Encoder;

/// The largest non-streaming body read; a larger one is answered as invalid.
const BODY_CAP: usize = 8 << 20;

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

/// Translates one response body from the supplier's format to the client's.
pub struct Translator {
    stream: bool,
    decoder: Decoder,
    encoder: Encoder,
    /// Stream: the reader of the supplier's SSE.
    reader: sse::Reader,
    /// Body: the supplier's JSON so far.
    body: Vec<u8>,
    /// Body: it outgrew [`BODY_CAP`].
    oversized: bool,
    finished: bool,
}

impl Translator {
    /// A translator for a successful (2xx) response. `stream`: the body is SSE (the client asked
    /// for a stream, and the supplier was asked for one).
    pub fn new(supplier: Format, client: Format, stream: bool, context: Context) -> Translator {
        Translator {
            stream,
            decoder: Decoder::new(supplier, &context.request_id),
            encoder: Encoder::new(client, stream, &context),
            reader: sse::Reader::default(),
            body: Vec::new(),
            oversized: false,
            finished: false,
        }
    }

    /// The `Content-Type` of the translated body.
    pub fn content_type(&self) -> &'static str {
        if self.stream {
            "text/event-stream"
        } else {
            "application/json"
        }
    }

    /// Feeds the next chunk of the supplier's body; returns the client bytes ready to send now
    /// (possibly empty). Stream: every supplier event completed by this chunk is in the result.
    /// Body: always empty (the body is written at [`Translator::finish`]).
    pub fn feed(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        if self.stream {
            let mut events = Vec::new();
            self.reader.push(chunk, &mut events);
            self.translate(&events, &mut out);
        } else if self.body.len() + chunk.len() > BODY_CAP {
            self.oversized = true;
            self.body = Vec::new();
        } else if !self.oversized {
            self.body.extend_from_slice(chunk);
        }
        out
    }

    /// The supplier's body ended (complete, or cut): returns the remaining client bytes. Stream:
    /// the terminal frames, or the client's error event when the supplier never finished. Body:
    /// the whole translated body, or the client's error body when the supplier's was not a
    /// response. Later calls return nothing.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.finished {
            return out;
        }
        self.finished = true;
        if self.stream {
            let mut events = Vec::new();
            self.reader.finish(&mut events);
            self.translate(&events, &mut out);
            self.encoder.finish(&mut out);
            return out;
        }
        let body = std::mem::take(&mut self.body);
        let mut events = Vec::new();
        let decoded = !self.oversized
            && serde_json::from_slice(&body)
                .is_ok_and(|value| self.decoder.body(&value, &mut events));
        if !decoded {
            self.encoder.invalid(encode::INVALID, &mut out);
            return out;
        }
        self.encoder.events(events, &mut out);
        self.encoder.finish(&mut out);
        out
    }

    fn translate(&mut self, events: &[sse::Sse], out: &mut Vec<u8>) {
        for event in events {
            let mut decoded: Vec<Event> = Vec::new();
            self.decoder.sse(event, &mut decoded);
            self.encoder.events(decoded, out);
            if self.decoder.settled() {
                self.encoder.complete(out);
            }
        }
    }
}
