//! The CPU one supplier answer costs the gateway's reader, without the network or Pingora: a
//! chat stream of 20 content events (as the benchmark's mock supplier sends it, one chunk per
//! event) read passed through, and translated for a Messages and a responses client.
//!
//!     cargo run --release -p translate --example answer_cost [ROUNDS]
//!
//! Prints nanoseconds per answer (the median of 5 runs of ROUNDS answers each). A companion to
//! `scripts/bench`, which measures the whole gateway: this tells how much of a translated
//! stream's cost is the translation itself.

use std::io::Write;
use std::time::Instant;
use translate::Format;
use translate::response::{Answer, Context};

fn chunk(delta: &str, finish: &str, usage: &str) -> Vec<u8> {
    format!(
        "data: {{\"id\":\"chatcmpl-mock-1\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\
         \"model\":\"gpt-4o-mini\",\"system_fingerprint\":\"fp_mock\",\"choices\":[{{\"index\":0,\
         \"delta\":{delta},\"finish_reason\":{finish}}}]{usage}}}\n\n"
    )
    .into_bytes()
}

fn stream() -> Vec<Vec<u8>> {
    let mut events = vec![chunk(
        "{\"role\":\"assistant\",\"content\":\"\"}",
        "null",
        ",\"usage\":null",
    )];
    for i in 0..20 {
        events.push(chunk(
            &format!("{{\"content\":\" w{i}\"}}"),
            "null",
            ",\"usage\":null",
        ));
    }
    events.push(chunk("{}", "\"stop\"", ",\"usage\":null"));
    events.push(
        b"data: {\"id\":\"chatcmpl-mock-1\",\"object\":\"chat.completion.chunk\",\"created\":1750000000,\
          \"model\":\"gpt-4o-mini\",\"choices\":[],\"usage\":{\"prompt_tokens\":12,\
          \"completion_tokens\":20,\"total_tokens\":32}}\n\n"
            .to_vec(),
    );
    events.push(b"data: [DONE]\n\n".to_vec());
    events
}

fn run(events: &[Vec<u8>], client: Option<Format>, rounds: u32) -> f64 {
    let mut runs = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        let mut bytes = 0usize;
        for _ in 0..rounds {
            let mut answer = match client {
                None => Answer::pass(Format::Chat, true),
                Some(client) => Answer::translate(
                    Format::Chat,
                    client,
                    true,
                    Context {
                        model: "gpt-4o-mini".into(),
                        request_id: "0190b7c4a3f17c1d9a2b3c4d5e6f7a8b".into(),
                        created: 1_750_000_000,
                        codex: Default::default(),
                    },
                ),
            };
            for event in events {
                bytes += answer.feed(event).len();
            }
            bytes += answer.finish().len();
            assert!(answer.reported().is_some());
        }
        std::hint::black_box(bytes);
        runs.push(start.elapsed().as_nanos() as f64 / f64::from(rounds));
    }
    runs.sort_by(f64::total_cmp);
    runs[2]
}

fn main() -> std::io::Result<()> {
    let rounds = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000);
    let events = stream();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "one chat stream of 20 content events, ns per answer (median of 5 × {rounds})"
    )?;
    writeln!(
        out,
        "passed through:           {:>8.0}",
        run(&events, None, rounds)
    )?;
    for (name, client) in [
        ("translated for Messages:", Format::Messages),
        ("translated for responses:", Format::Responses),
        ("translated for Gemini:", Format::Gemini),
    ] {
        writeln!(out, "{name:<26}{:>8.0}", run(&events, Some(client), rounds))?;
    }
    Ok(())
}
