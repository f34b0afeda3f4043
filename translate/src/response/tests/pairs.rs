//! Every supplier × client pair, streamed and not, for every scenario: the client sees the same
//! meaning (text, thinking, tool calls, finish, usage) as the supplier sent, in a well-formed
//! stream or body.

use super::clients::{Summary, check_stream, summary};
use super::suppliers::{self, Scenario};
use super::{CLIENTS, REQUEST_ID, SUPPLIERS, events, run, translator};
use crate::Format;

/// What `client` should understand from `scenario` sent by `supplier`, given what each format can
/// carry.
fn expected(scenario: &Scenario, supplier: Format, client: Format) -> Summary {
    let mut usage = scenario.usage;
    if supplier == Format::Messages || client == Format::Messages {
        usage.reasoning = 0;
    }
    if supplier == Format::Gemini || client == Format::Gemini {
        usage.cache_write = 0;
    }
    let signed = supplier == Format::Messages && client == Format::Messages;
    Summary {
        text: scenario.text.concat(),
        thinking: scenario.thinking.concat(),
        signature: scenario
            .signature
            .filter(|_| signed)
            .unwrap_or_default()
            .to_string(),
        calls: scenario
            .calls
            .iter()
            .enumerate()
            .map(|(index, call)| {
                // Gemini's first call carries its thought signature inside the id.
                let id = match supplier {
                    Format::Gemini if index == 0 => crate::signature::signed_id(
                        &format!("call_{REQUEST_ID}_{index}"),
                        suppliers::SIGNATURE,
                    ),
                    Format::Gemini => format!("call_{REQUEST_ID}_{index}"),
                    _ => call.id.to_string(),
                };
                let arguments = serde_json::from_str(&call.fragments.concat()).expect("JSON");
                (id, call.name.to_string(), arguments)
            })
            .collect(),
        finish: Some(scenario.finish),
        usage: Some(usage),
        error: None,
    }
}

#[test]
fn every_pair_streams_every_scenario() {
    for (name, scenario) in suppliers::all() {
        for supplier in SUPPLIERS {
            let stream = suppliers::stream(supplier, &scenario);
            for client in CLIENTS {
                let out = run(supplier, client, true, &events(&stream));
                check_stream(client, &out);
                let got = summary(client, true, &out);
                let want = expected(&scenario, supplier, client);
                assert_eq!(got, want, "{name}: {supplier:?} → {client:?} (stream)");
            }
        }
    }
}

#[test]
fn every_pair_collects_every_scenario() {
    for (name, scenario) in suppliers::all() {
        for supplier in SUPPLIERS {
            let body = suppliers::body(supplier, &scenario);
            let (head, tail) = body.as_bytes().split_at(body.len() / 2);
            for client in CLIENTS {
                let out = run(supplier, client, false, &[head, tail]);
                let got = summary(client, false, &out);
                let want = expected(&scenario, supplier, client);
                assert_eq!(got, want, "{name}: {supplier:?} → {client:?} (body)");
            }
        }
    }
}

#[test]
fn the_first_complete_event_leaves_at_once() {
    for (_, scenario) in suppliers::all() {
        for supplier in SUPPLIERS {
            let stream = suppliers::stream(supplier, &scenario);
            let first = events(&stream)[0];
            let body = std::str::from_utf8(first).expect("UTF-8").trim_end();
            let (head, tail) = first.split_at(body.len());
            // Gemini has no preamble: its first frame is the first content.
            for client in [Format::Chat, Format::Responses, Format::Messages] {
                let mut translator = translator(supplier, client, true);
                assert!(
                    translator.feed(head).is_empty(),
                    "an incomplete event waits"
                );
                assert!(
                    !translator.feed(tail).is_empty(),
                    "{supplier:?} → {client:?}"
                );
            }
        }
    }
}

#[test]
fn a_cut_stream_ends_in_the_clients_error_event() {
    for supplier in SUPPLIERS {
        let stream = suppliers::stream(supplier, &suppliers::tool());
        let pieces = events(&stream);
        // Up to the middle of the first tool call's arguments, before any finish reason.
        let cut = pieces
            .iter()
            .position(|piece| String::from_utf8_lossy(piece).contains("Paris"))
            .unwrap_or(pieces.len() / 2);
        for client in CLIENTS {
            let out = run(supplier, client, true, &pieces[..cut]);
            let frames = check_stream(client, &out);
            let got = summary(client, true, &out);
            assert_eq!(
                got.error.as_deref(),
                Some("the supplier's stream ended before the response was complete"),
                "{supplier:?} → {client:?}"
            );
            let (event, last) = frames.last().expect("frames").clone();
            match client {
                Format::Chat => assert_eq!(last["error"]["type"], "upstream_error"),
                Format::Responses => assert_eq!(event.as_deref(), Some("error")),
                Format::Messages => {
                    assert_eq!(last["error"]["type"], "api_error");
                    let starts = frames
                        .iter()
                        .filter(|(e, _)| e.as_deref() == Some("content_block_start"))
                        .count();
                    let stops = frames
                        .iter()
                        .filter(|(e, _)| e.as_deref() == Some("content_block_stop"))
                        .count();
                    assert_eq!(starts, stops, "open blocks are closed before the error");
                }
                Format::Gemini => assert_eq!(last["error"]["code"], 502),
            }
            assert!(!String::from_utf8_lossy(&out).contains("[DONE]"));
            assert!(!String::from_utf8_lossy(&out).contains("message_stop"));
            assert!(!String::from_utf8_lossy(&out).contains("response.completed"));
        }
    }
}

#[test]
fn stream_and_body_mean_the_same() {
    for (name, scenario) in suppliers::all() {
        for supplier in SUPPLIERS {
            for client in CLIENTS {
                let stream = suppliers::stream(supplier, &scenario);
                let body = suppliers::body(supplier, &scenario);
                let streamed = summary(
                    client,
                    true,
                    &run(supplier, client, true, &[stream.as_bytes()]),
                );
                let collected = summary(
                    client,
                    false,
                    &run(supplier, client, false, &[body.as_bytes()]),
                );
                assert_eq!(streamed, collected, "{name}: {supplier:?} → {client:?}");
            }
        }
    }
}

#[test]
fn usage_counts_map_exactly_between_conventions() {
    let scenario = suppliers::thinking();
    let out = run(
        Format::Chat,
        Format::Messages,
        true,
        &[suppliers::stream(Format::Chat, &scenario).as_bytes()],
    );
    let frames = check_stream(Format::Messages, &out);
    let start = &frames[0].1["message"]["usage"];
    assert_eq!(
        (
            start["input_tokens"].as_u64(),
            start["output_tokens"].as_u64()
        ),
        (Some(0), Some(0))
    );
    let delta = frames
        .iter()
        .find(|(e, _)| e.as_deref() == Some("message_delta"))
        .expect("message_delta");
    let usage = &delta.1["usage"];
    assert_eq!(
        usage["input_tokens"], 100,
        "input minus cache reads and writes"
    );
    assert_eq!(usage["cache_read_input_tokens"], 1000);
    assert_eq!(usage["cache_creation_input_tokens"], 100);
    assert_eq!(usage["output_tokens"], 80);

    let out = run(
        Format::Messages,
        Format::Chat,
        false,
        &[suppliers::body(Format::Messages, &scenario).as_bytes()],
    );
    let body: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
    assert_eq!(
        body["usage"]["prompt_tokens"], 1200,
        "cache reads and writes are part of the prompt"
    );
    assert_eq!(
        body["usage"]["prompt_tokens_details"]["cached_tokens"],
        1000
    );
    assert_eq!(body["usage"]["total_tokens"], 1280);

    let out = run(
        Format::Gemini,
        Format::Responses,
        false,
        &[suppliers::body(Format::Gemini, &scenario).as_bytes()],
    );
    let body: serde_json::Value = serde_json::from_slice(&out).expect("JSON");
    assert_eq!(
        body["usage"]["output_tokens"], 80,
        "thoughts are part of the output"
    );
    assert_eq!(
        body["usage"]["output_tokens_details"]["reasoning_tokens"],
        30
    );
}
