//! End-to-end tests of the mock supplier over real loopback HTTP: deterministic
//! replies, streaming, usage and delay headers, every fault, instance faults,
//! the API key check and request recording, in the OpenAI, Anthropic and
//! Gemini wire formats, and tool calls in all of them.

// Test helpers outside `#[test]` functions may fail loudly too.
#![allow(clippy::unwrap_used, clippy::panic)]

mod anthropic;
mod common;
mod faults;
mod gemini;
mod openai;
mod tools;
