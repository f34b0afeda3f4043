//! Encoders: [`Event`]s into the client's format, as a stream of frames or collected into one
//! JSON body.
//!
//! The event logic is written once, in [`Output`] (events → blocks and [`Change`]s) and in this
//! driver: the same encoder folds every event whether it streams or collects, and a format's
//! [`Frames`] says only how a change looks on its wire and what its final body is.
//!
//! Streams: the format's preamble leaves with the first event (whatever it is: a supplier that
//! never sends `Start` still gets one); each change leaves as soon as it happens; the terminal
//! frames (which carry usage in every client format) leave when the decoder reports the supplier
//! settled ([`Encoder::complete`]) and otherwise at the body's end ([`Encoder::finish`]). A body
//! that ends before the finish reason was cut: open blocks are closed and the format's error event
//! is written, never a made-up success. A supplier error inside the stream closes the open block
//! and writes the error event; nothing follows it.

mod chat;
mod gemini;
mod messages;
mod output;
mod responses;

use output::{Change, Output};

use super::Context;
use super::errors::client_error;
use crate::Format;
use crate::ir::{Event, FinishReason, Usage};

/// The error message of a stream that ended before its finish reason.
pub(super) const CUT: &str = "the supplier's stream ended before the response was complete";
/// The error message of a body that is not a response of the supplier's format.
pub(super) const INVALID: &str = "the supplier sent an invalid response";
/// The status whose vocabulary errors about a response use (the supplier failed the gateway).
const UPSTREAM_STATUS: u16 = 502;

/// How one client format writes a response.
trait Frames {
    /// Stream: the frames before any content; `usage` when the supplier's first event had some.
    fn begin(&mut self, usage: Option<&Usage>, out: &mut Vec<u8>);
    /// Stream: the frames of one change (never `Change::Error`).
    fn change(&mut self, output: &Output, change: &Change, out: &mut Vec<u8>);
    /// Stream: the terminal frames of a complete response (the finish reason is known).
    fn end(&mut self, output: &Output, out: &mut Vec<u8>);
    /// Stream: the error event.
    fn fail(&mut self, message: &str, out: &mut Vec<u8>);
    /// Collect: the body of a complete response.
    fn body(&self, output: &Output) -> serde_json::Value;
}

/// The encoder of one client response.
pub(super) struct Encoder {
    client: Format,
    stream: bool,
    frames: Box<dyn Frames + Send + Sync>,
    output: Output,
    changes: Vec<Change>,
    begun: bool,
    done: bool,
}

impl Encoder {
    pub fn new(client: Format, stream: bool, context: &Context) -> Encoder {
        let frames: Box<dyn Frames + Send + Sync> = match client {
            Format::Chat => Box::new(chat::Chat::new(context)),
            Format::Responses => Box::new(responses::Responses::new(context)),
            Format::Messages => Box::new(messages::Messages::new(context)),
            Format::Gemini => Box::new(gemini::Gemini::new(context)),
        };
        Encoder {
            client,
            stream,
            frames,
            output: Output::default(),
            changes: Vec::new(),
            begun: false,
            done: false,
        }
    }

    /// The events of one supplier event (or of a whole body), in order; in a stream, writes their
    /// frames. The stream's preamble leaves with the first batch and may use its usage.
    /// `events` is left empty (its buffer is the caller's, reused from event to event).
    pub fn events(&mut self, events: &mut Vec<Event>, out: &mut Vec<u8>) {
        if self.done || events.is_empty() {
            events.clear();
            return;
        }
        if !self.begun {
            self.begun = true;
            if self.stream {
                let usage = events.iter().find_map(|event| match event {
                    Event::Usage(usage) => Some(*usage),
                    _ => None,
                });
                self.frames.begin(usage.as_ref(), out);
            }
        }
        for event in events.drain(..) {
            if self.done {
                break;
            }
            self.output.apply(event, &mut self.changes);
            self.flush(out);
        }
    }

    /// The supplier settled: a stream whose finish reason is known writes its terminal frames now.
    pub fn complete(&mut self, out: &mut Vec<u8>) {
        if self.stream && !self.done && self.output.finish.is_some() {
            self.frames.end(&self.output, out);
            self.done = true;
        }
    }

    /// The body ended. A stream writes what is left (terminal frames, or the error of a cut
    /// stream); a collected response writes its whole body, or the client's error body.
    pub fn finish(&mut self, out: &mut Vec<u8>) {
        if self.done {
            return;
        }
        self.done = true;
        if !self.stream {
            out.extend(match (&self.output.error, self.output.finish) {
                (Some(message), _) => client_error(self.client, UPSTREAM_STATUS, message),
                (None, None) => client_error(self.client, UPSTREAM_STATUS, INVALID),
                (None, Some(_)) => self.frames.body(&self.output).to_string().into_bytes(),
            });
        } else if self.output.finish.is_some() {
            self.frames.end(&self.output, out);
        } else {
            self.output.close(&mut self.changes);
            self.flush(out);
            self.frames.fail(CUT, out);
        }
    }

    /// A collected response whose body could not be decoded: the client's error body.
    pub fn invalid(&mut self, message: &str, out: &mut Vec<u8>) {
        if !self.done {
            self.done = true;
            out.extend(client_error(self.client, UPSTREAM_STATUS, message));
        }
    }

    fn flush(&mut self, out: &mut Vec<u8>) {
        // The buffer goes back with its capacity: one allocation per stream, not per event.
        let mut changes = std::mem::take(&mut self.changes);
        for change in changes.drain(..) {
            if !self.stream {
                continue;
            }
            match change {
                Change::Error(message) => {
                    self.frames.fail(&message, out);
                    self.done = true;
                }
                change => self.frames.change(&self.output, &change, out),
            }
        }
        self.changes = changes;
    }
}

/// Usage as the OpenAI formats count it: cached inside input, reasoning inside output.
fn total(usage: &Usage) -> u64 {
    usage.input + usage.output
}

/// Chat's `finish_reason` (Anthropic's and Gemini's have their own tables in their encoders).
fn chat_finish(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop | FinishReason::Other => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::ContentFilter => "content_filter",
    }
}

/// A tool call's arguments as a JSON object (Anthropic `input`, Gemini `args`): `{}` when they do
/// not parse as one.
fn arguments_object(arguments: &str) -> serde_json::Value {
    match serde_json::from_str::<serde_json::Value>(arguments) {
        Ok(value) if value.is_object() => value,
        _ => serde_json::Value::Object(serde_json::Map::new()),
    }
}
