//! The translator's promises one by one, on hand-written supplier streams: cumulative usage,
//! early terminal frames, supplier errors, invalid bodies, and the exact shapes clients parse.

use serde_json::{Value, json};

use super::clients::{check_stream, summary};
use super::{run, translator};
use crate::Format;
use crate::ir::FinishReason;

fn sse(events: &[Value]) -> String {
    events
        .iter()
        .map(|event| format!("data: {event}\n\n"))
        .collect()
}

fn named(events: &[Value]) -> String {
    events
        .iter()
        .map(|event| {
            format!(
                "event: {}\ndata: {event}\n\n",
                event["type"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

fn anthropic_text(deltas: &[Value]) -> String {
    let mut events = vec![
        json!({"type":"message_start","message":{"id":"msg_x","type":"message","role":"assistant","model":"claude","content":[],"stop_reason":null,"stop_sequence":null,
            "usage":{"input_tokens":10,"cache_read_input_tokens":5,"cache_creation_input_tokens":0,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}),
        json!({"type":"content_block_stop","index":0}),
    ];
    events.extend_from_slice(deltas);
    events.push(json!({"type":"message_stop"}));
    named(&events)
}

fn usage_chunk(out: &[u8]) -> Value {
    let frames = check_stream(Format::Chat, out);
    frames
        .iter()
        .find(|(_, data)| data["choices"] == json!([]))
        .expect("a usage chunk")
        .1["usage"]
        .clone()
}

#[test]
fn anthropic_cumulative_usage_is_never_added() {
    let stream = anthropic_text(&[
        json!({"type":"message_delta","delta":{"stop_reason":null,"stop_sequence":null},"usage":{"output_tokens":7}}),
        json!({"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":10,"output_tokens":12}}),
    ]);
    let out = run(Format::Messages, Format::Chat, true, &[stream.as_bytes()]);
    let usage = usage_chunk(&out);
    assert_eq!(usage["prompt_tokens"], 15);
    assert_eq!(
        usage["completion_tokens"], 12,
        "the last cumulative count, not 1 + 7 + 12"
    );
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 5);
}

#[test]
fn gemini_running_usage_last_wins() {
    let chunk = |text: &str, usage: Value, finish: Option<&str>| {
        let mut candidate = json!({"content":{"role":"model","parts":[{"text":text}]},"index":0});
        if let Some(finish) = finish {
            candidate["finishReason"] = json!(finish);
        }
        json!({"candidates":[candidate],"usageMetadata":usage,"modelVersion":"gemini-2.5-pro"})
    };
    let stream = sse(&[
        chunk(
            "a",
            json!({"promptTokenCount":9,"candidatesTokenCount":1,"totalTokenCount":10}),
            None,
        ),
        chunk(
            "b",
            json!({"promptTokenCount":9,"candidatesTokenCount":2,"totalTokenCount":11}),
            None,
        ),
        chunk(
            "c",
            json!({"promptTokenCount":9,"candidatesTokenCount":3,"thoughtsTokenCount":4,"totalTokenCount":16}),
            Some("MAX_TOKENS"),
        ),
    ]);
    let out = run(Format::Gemini, Format::Messages, true, &[stream.as_bytes()]);
    let frames = check_stream(Format::Messages, &out);
    let delta = &frames
        .iter()
        .find(|(e, _)| e.as_deref() == Some("message_delta"))
        .expect("delta")
        .1;
    assert_eq!(
        delta["usage"]["output_tokens"], 7,
        "candidates + thoughts of the last chunk"
    );
    assert_eq!(delta["usage"]["input_tokens"], 9);
    assert_eq!(delta["delta"]["stop_reason"], "max_tokens");
}

#[test]
fn terminal_frames_leave_when_the_supplier_settles() {
    // Chat: the finish chunk, then the usage chunk settles (before [DONE] and before the end).
    let chat = sse(&[
        json!({"id":"c","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}),
        json!({"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}),
        json!({"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}),
    ]);
    let mut translator = translator(Format::Chat, Format::Responses, true);
    let out = translator.feed(chat.as_bytes());
    let frames = check_stream(Format::Responses, &out);
    let (_, last) = frames.last().expect("frames");
    assert_eq!(last["type"], "response.completed");
    assert_eq!(last["response"]["usage"]["total_tokens"], 4);
    assert!(translator.feed(b"data: [DONE]\n\n").is_empty());
    assert!(translator.finish().is_empty());

    // Anthropic: message_delta with its stop reason settles.
    let stream = anthropic_text(&[
        json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}),
    ]);
    let cut = stream.find("event: message_stop").expect("message_stop");
    let mut translator = translator_for(Format::Messages, Format::Chat);
    let out = String::from_utf8(translator.feed(&stream.as_bytes()[..cut])).expect("UTF-8");
    assert!(out.ends_with("data: [DONE]\n\n"), "{out}");
}

fn translator_for(supplier: Format, client: Format) -> crate::response::Answer {
    translator(supplier, client, true)
}

#[test]
fn a_chat_stream_without_usage_ends_cleanly() {
    let chat = sse(&[
        json!({"id":"c","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}),
        json!({"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}),
    ]) + "data: [DONE]\n\n";
    let out = run(Format::Chat, Format::Messages, true, &[chat.as_bytes()]);
    let frames = check_stream(Format::Messages, &out);
    assert_eq!(frames.last().expect("frames").1["type"], "message_stop");
    let mut translator = translator(Format::Chat, Format::Messages, true);
    let early = String::from_utf8(translator.feed(chat.as_bytes())).expect("UTF-8");
    assert!(early.contains("message_stop"), "[DONE] settles the stream");
}

#[test]
fn a_supplier_error_in_the_stream_is_the_clients_error_event() {
    let stream = named(&[
        json!({"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"c","content":[],"usage":{"input_tokens":1,"output_tokens":1}}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}}),
        json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
    ]);
    for client in [Format::Chat, Format::Responses, Format::Gemini] {
        let mut translator = translator(Format::Messages, client, true);
        let mut out = translator.feed(stream.as_bytes());
        let after = translator.finish();
        assert!(after.is_empty(), "nothing follows an error");
        out.extend(after);
        check_stream(client, &out);
        assert_eq!(
            summary(client, true, &out).error.as_deref(),
            Some("Overloaded"),
            "{client:?}"
        );
    }
    let chat = sse(&[json!({"error":{"message":"The server had an error","type":"server_error"}})]);
    let out = run(Format::Chat, Format::Messages, true, &[chat.as_bytes()]);
    let frames = check_stream(Format::Messages, &out);
    assert_eq!(
        frames.last().expect("frames").1["error"]["message"],
        "The server had an error"
    );
}

#[test]
fn an_unusable_body_is_the_clients_error_body() {
    let cases: [(Format, &[u8], &str); 4] = [
        (
            Format::Chat,
            b"<html>502 Bad Gateway</html>",
            "the supplier sent an invalid response",
        ),
        (
            Format::Messages,
            b"{\"id\":\"x\"}",
            "the supplier sent an invalid response",
        ),
        (Format::Gemini, b"", "the supplier sent an invalid response"),
        (
            Format::Messages,
            br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            "Overloaded",
        ),
    ];
    for (supplier, body, message) in cases {
        for client in [
            Format::Chat,
            Format::Responses,
            Format::Messages,
            Format::Gemini,
        ] {
            let out = run(supplier, client, false, &[body]);
            let value: Value = serde_json::from_slice(&out).expect("JSON");
            assert_eq!(
                value["error"]["message"], message,
                "{supplier:?} → {client:?}"
            );
            if client == Format::Messages {
                assert_eq!(value["type"], "error");
                assert_eq!(value["error"]["type"], "api_error");
            }
        }
    }
    let mut translator = translator(Format::Chat, Format::Chat, false);
    assert_eq!(translator.content_type(), "application/json");
    let megabyte = vec![b' '; 1 << 20];
    for _ in 0..9 {
        assert!(translator.feed(&megabyte).is_empty());
    }
    let value: Value = serde_json::from_slice(&translator.finish()).expect("JSON");
    assert_eq!(value["error"]["type"], "server_error");
}

/// A body past the translation cap is answered as invalid, but it is skimmed, not dropped: the
/// usage it reports is still read (and billed), and the reader keeps a bounded copy.
#[test]
fn a_body_past_the_cap_still_reports_its_usage() {
    let mut answer = translator(Format::Chat, Format::Messages, false);
    answer.feed(br#"{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":""#);
    let chunk = vec![b'a'; 1 << 20];
    for _ in 0..9 {
        assert!(answer.feed(&chunk).is_empty());
    }
    answer
        .feed(br#""},"finish_reason":"stop"}],"usage":{"prompt_tokens":7,"completion_tokens":9}}"#);
    let value: Value = serde_json::from_slice(&answer.finish()).expect("JSON");
    assert_eq!(value["type"], "error", "too large to translate");
    let usage = answer.reported().expect("usage read from the skimmed body");
    assert_eq!((usage.input, usage.output), (7, 9));
    assert!(answer.body().len() <= crate::skim::SKIM_CAP);
}

#[test]
fn the_client_shapes_are_exact() {
    let chat = sse(&[
        json!({"id":"up","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}),
    ]);
    let out = run(Format::Chat, Format::Chat, true, &[chat.as_bytes()]);
    let frames = check_stream(Format::Chat, &out);
    assert_eq!(
        frames[0].1,
        json!({"id":"chatcmpl-req-1","object":"chat.completion.chunk","created":1_750_000_000u64,"model":"client-model",
        "choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]})
    );
    assert_eq!(frames[1].1["choices"][0]["delta"], json!({"content":"Hi"}));
    assert_eq!(
        frames[2].1["choices"][0],
        json!({"index":0,"delta":{},"finish_reason":"stop"})
    );
    assert_eq!(frames[3].1["usage"]["total_tokens"], 4);
    assert!(out.ends_with(b"data: [DONE]\n\n"));

    let out = run(Format::Chat, Format::Responses, true, &[chat.as_bytes()]);
    let kinds: Vec<String> = check_stream(Format::Responses, &out)
        .iter()
        .map(|(e, _)| e.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        kinds,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let frames = check_stream(Format::Responses, &out);
    assert_eq!(frames[2].1["item"]["id"], "msg_req-1_0");
    assert_eq!(frames[8].1["response"]["id"], "resp_req-1");
    assert_eq!(
        frames[8].1["response"]["output"][0]["content"][0]["text"],
        "Hi"
    );

    let out = run(Format::Chat, Format::Messages, true, &[chat.as_bytes()]);
    let kinds: Vec<String> = check_stream(Format::Messages, &out)
        .iter()
        .map(|(e, _)| e.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        kinds,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let frames = check_stream(Format::Messages, &out);
    assert_eq!(frames[0].1["message"]["id"], "msg_req-1");
    assert_eq!(frames[0].1["message"]["model"], "client-model");
}

#[test]
fn a_blocked_gemini_prompt_and_a_missing_start() {
    let blocked = sse(&[
        json!({"promptFeedback":{"blockReason":"PROHIBITED_CONTENT"},"usageMetadata":{"promptTokenCount":7,"totalTokenCount":7}}),
    ]);
    let out = run(Format::Gemini, Format::Chat, true, &[blocked.as_bytes()]);
    let got = summary(Format::Chat, true, &out);
    assert_eq!(got.finish, Some(FinishReason::ContentFilter));
    assert_eq!(got.usage.map(|usage| usage.input), Some(7));

    // No message_start: the client's preamble still comes first.
    let headless = named(&[
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}),
        json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}),
    ]);
    let out = run(
        Format::Messages,
        Format::Responses,
        true,
        &[headless.as_bytes()],
    );
    let got = summary(Format::Responses, true, &out);
    assert_eq!(
        (got.text.as_str(), got.finish),
        ("Hi", Some(FinishReason::Stop))
    );
}

#[test]
fn responses_as_a_supplier_never_panics() {
    let stream = named(&[
        json!({"type":"response.created","response":{"id":"resp_x","status":"in_progress"}}),
        json!({"type":"response.output_text.delta","delta":"Hi"}),
    ]);
    for client in [
        Format::Chat,
        Format::Responses,
        Format::Messages,
        Format::Gemini,
    ] {
        let out = run(Format::Responses, client, true, &[stream.as_bytes()]);
        check_stream(client, &out);
        let out = run(
            Format::Responses,
            client,
            false,
            &[br#"{"object":"response","output":[]}"#],
        );
        let _: Value = serde_json::from_slice(&out).expect("JSON");
    }
}

#[test]
fn the_translator_can_live_in_a_shared_request_context() {
    fn shareable<T: Send + Sync>() {}
    shareable::<crate::response::Answer>();
}

#[test]
fn message_start_has_the_input_usage_when_the_first_event_had_it() {
    let stream = sse(&[
        json!({"candidates":[{"content":{"role":"model","parts":[{"text":"Hi"}]},"index":0}],
            "usageMetadata":{"promptTokenCount":40,"cachedContentTokenCount":30,"totalTokenCount":40}}),
        json!({"candidates":[{"content":{"role":"model","parts":[{"text":"!"}]},"finishReason":"STOP","index":0}],
            "usageMetadata":{"promptTokenCount":40,"cachedContentTokenCount":30,"candidatesTokenCount":2,"totalTokenCount":42}}),
    ]);
    let out = run(Format::Gemini, Format::Messages, true, &[stream.as_bytes()]);
    let frames = check_stream(Format::Messages, &out);
    let usage = &frames[0].1["message"]["usage"];
    assert_eq!(usage["input_tokens"], 10);
    assert_eq!(usage["cache_read_input_tokens"], 30);
    assert_eq!(usage["output_tokens"], 0);
    let delta = &frames
        .iter()
        .find(|(e, _)| e.as_deref() == Some("message_delta"))
        .expect("delta")
        .1;
    assert_eq!(delta["usage"]["output_tokens"], 2);
}

#[test]
fn done_without_a_finish_reason_is_an_explicit_end() {
    let chat = sse(&[
        json!({"id":"c","choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}),
    ]) + "data: [DONE]\n\n";
    let out = run(Format::Chat, Format::Responses, true, &[chat.as_bytes()]);
    let got = summary(Format::Responses, true, &out);
    assert_eq!(
        (got.text.as_str(), got.finish, got.error),
        ("Hi", Some(FinishReason::Stop), None)
    );
    // [DONE] alone, with nothing before it, is still a stream that never began.
    let out = run(Format::Chat, Format::Chat, true, &[b"data: [DONE]\n\n"]);
    assert!(summary(Format::Chat, true, &out).error.is_some());
}

/// A Codex-style request's own tool kinds come back as its items: a custom tool's call as a
/// `custom_tool_call` whose input arrives in one delta once complete (no function-call argument
/// deltas), `local_shell` as a `local_shell_call` with an `exec` action; other calls unchanged.
#[test]
fn codex_tool_kinds_come_back_as_codex_items() {
    use super::suppliers::{self, Call, Scenario};
    let scenario = Scenario {
        calls: vec![
            Call {
                id: "call_patch",
                name: "apply_patch",
                fragments: vec!["{\"input\":\"*** Begin", " Patch\\n\"}"],
            },
            Call {
                id: "call_shell",
                name: "local_shell",
                fragments: vec!["{\"command\":[\"ls\",", "\"-a\"]}"],
            },
            Call {
                id: "call_fn",
                name: "get_time",
                fragments: vec!["{}"],
            },
        ],
        ..suppliers::tool()
    };
    let context = super::Context {
        codex: crate::codex::CodexTools {
            custom: vec!["apply_patch".into()],
            local_shell: true,
        },
        ..super::context()
    };
    for supplier in [Format::Chat, Format::Messages, Format::Gemini] {
        for stream in [false, true] {
            let mut t =
                super::Answer::translate(supplier, Format::Responses, stream, context.clone());
            let input = if stream {
                suppliers::stream(supplier, &scenario)
            } else {
                suppliers::body(supplier, &scenario)
            };
            let mut out = t.feed(input.as_bytes());
            out.extend(t.finish());
            let response = if stream {
                let frames = check_stream(Format::Responses, &out);
                let kinds: Vec<&str> = frames.iter().filter_map(|(e, _)| e.as_deref()).collect();
                assert!(
                    kinds.contains(&"response.custom_tool_call_input.done"),
                    "{supplier:?}: {kinds:?}"
                );
                let deltas: Vec<&Value> = frames
                    .iter()
                    .filter(|(e, _)| e.as_deref() == Some("response.function_call_arguments.delta"))
                    .map(|(_, v)| v)
                    .collect();
                assert!(
                    deltas
                        .iter()
                        .all(|d| d["item_id"].as_str().unwrap().starts_with("fc_")),
                    "only the function call streams arguments: {deltas:?}"
                );
                let delta = frames
                    .iter()
                    .find(|(e, _)| e.as_deref() == Some("response.custom_tool_call_input.delta"))
                    .unwrap();
                assert_eq!(delta.1["delta"], "*** Begin Patch\n");
                frames.last().unwrap().1["response"].clone()
            } else {
                serde_json::from_slice::<Value>(&out).unwrap()
            };
            let output = response["output"].as_array().unwrap();
            let of = |kind: &str| output.iter().find(|i| i["type"] == kind).unwrap();
            let custom = of("custom_tool_call");
            assert_eq!(
                (&custom["name"], &custom["input"]),
                (&json!("apply_patch"), &json!("*** Begin Patch\n")),
                "{supplier:?} stream={stream}"
            );
            if supplier != Format::Gemini {
                // Gemini's calls carry no id: the translator makes one.
                assert_eq!(custom["call_id"], "call_patch");
            }
            let shell = of("local_shell_call");
            assert_eq!(shell["action"]["type"], "exec");
            assert_eq!(shell["action"]["command"], json!(["ls", "-a"]));
            assert_eq!(of("function_call")["name"], "get_time");
        }
    }
}

/// A stream's error event is noticed whether passed through or translated (Anthropic's named
/// `error`, an `{"error": …}` data object), and nothing else is taken for one.
#[test]
fn error_events_are_noticed() {
    use crate::response::Answer;
    let anthropic = named(&[
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 5}}}),
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ]);
    let openai = "data: { \"error\": {\"message\": \"boom\", \"type\": \"server_error\"}}\n\n";
    let fine = sse(&[
        json!({"choices": [{"delta": {"content": "error"}}]}),
        json!({"id": "x", "error": null}),
    ]);
    for (supplier, body, errored) in [
        (Format::Messages, anthropic.as_str(), true),
        (Format::Chat, openai, true),
        (Format::Chat, fine.as_str(), false),
    ] {
        let mut passed = Answer::pass(supplier, true);
        passed.feed(body.as_bytes());
        assert_eq!(passed.errored(), errored, "{body}");
        let mut translated = translator(supplier, Format::Responses, true);
        translated.feed(body.as_bytes());
        assert_eq!(translated.errored(), errored, "{body}");
    }
}
