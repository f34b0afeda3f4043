//! Tests across the whole translator: every supplier × client pair, both modes, against realistic
//! supplier fixtures ([`suppliers`]) read back with per-client checks ([`clients`]).

mod clients;
mod edges;
mod pairs;
mod props;
mod suppliers;

use super::{Answer, Context};
use crate::Format;

pub const REQUEST_ID: &str = "req-1";

pub const SUPPLIERS: [Format; 3] = [Format::Chat, Format::Messages, Format::Gemini];
pub const CLIENTS: [Format; 4] = [
    Format::Chat,
    Format::Responses,
    Format::Messages,
    Format::Gemini,
];

pub fn context() -> Context {
    Context {
        model: "client-model".into(),
        request_id: REQUEST_ID.into(),
        created: 1_750_000_000,
        codex: Default::default(),
    }
}

pub fn translator(supplier: Format, client: Format, stream: bool) -> Answer {
    Answer::translate(supplier, client, stream, context())
}

/// Feeds `chunks` and finishes; returns everything the client received.
pub fn run(supplier: Format, client: Format, stream: bool, chunks: &[&[u8]]) -> Vec<u8> {
    let mut translator = translator(supplier, client, stream);
    let mut out = Vec::new();
    for chunk in chunks {
        let bytes = translator.feed(chunk);
        if !stream {
            assert!(bytes.is_empty(), "a body is written only at the end");
        }
        out.extend(bytes);
    }
    out.extend(translator.finish());
    assert!(translator.finish().is_empty(), "finish is final");
    out
}

/// The supplier stream cut into its SSE events (each with its blank line).
pub fn events(stream: &str) -> Vec<&[u8]> {
    let mut pieces = Vec::new();
    let mut rest = stream;
    while !rest.is_empty() {
        let end = ["\r\n\r\n", "\n\n"]
            .iter()
            .filter_map(|sep| rest.find(sep).map(|at| at + sep.len()))
            .min()
            .unwrap_or(rest.len());
        pieces.push(&rest.as_bytes()[..end]);
        rest = &rest[end..];
    }
    pieces
}
