//! What the gateway reads of each format's body ([`head`]) and the body it forwards to an account
//! of the same format ([`forward`]). Moved from the proxy's `wire::{openai,anthropic,gemini}`.

use bytes::Bytes;
use serde_json::Value;

use crate::Format;
use crate::request::{Endpoint, Head, Malformed, forward, head, top_level};

fn parse(format: Format, body: &str) -> Result<Head, Malformed> {
    head(format, Endpoint::Generate, "", &top_level(body.as_bytes())?)
}

#[test]
fn reads_model_and_stream() {
    let c = parse(
        Format::Chat,
        r#"{"model":"openai/gpt-4o-mini","messages":[],"stream":true}"#,
    )
    .unwrap();
    assert_eq!(c.model, "openai/gpt-4o-mini");
    assert!(c.stream && !c.include_usage);
    let c = parse(Format::Responses, r#"{"model":"m","input":"hi"}"#).unwrap();
    assert!(!c.stream);
}

#[test]
fn refuses_bad_shapes() {
    for (format, body, param) in [
        (Format::Chat, r#"{"messages":[]}"#, Some("model")),
        (Format::Chat, r#"{"model":1,"messages":[]}"#, Some("model")),
        (
            Format::Chat,
            r#"{"model":"m","messages":"x"}"#,
            Some("messages"),
        ),
        (Format::Chat, r#"{"model":"m"}"#, Some("messages")),
        (
            Format::Chat,
            r#"{"model":"m","messages":[],"stream":"yes"}"#,
            Some("stream"),
        ),
        (Format::Responses, r#"{"model":"m"}"#, Some("input")),
        (Format::Responses, r#"[1,2]"#, None),
        (Format::Responses, r#"{"model":"m""#, None),
        (Format::Responses, "", None),
    ] {
        match parse(format, body) {
            Err(Malformed { param: p, .. }) => assert_eq!(p, param, "{body}"),
            other => panic!("{body}: {other:?}"),
        }
    }
}

fn rewrite(format: Format, body: &str, upstream_model: &str) -> String {
    let bytes = Bytes::from(body.to_string());
    let fields = top_level(&bytes).unwrap();
    let call = head(format, Endpoint::Generate, "", &fields).unwrap();
    let out = forward(
        format,
        Endpoint::Generate,
        &bytes,
        &fields,
        &call,
        upstream_model,
    )
    .unwrap();
    String::from_utf8(out.to_vec()).unwrap()
}

#[test]
fn untouched_when_nothing_changes() {
    let body = r#"{ "model" : "m", "messages":[{"role":"user","content":"hi"}] }"#;
    assert_eq!(rewrite(Format::Chat, body, "m"), body);
}

#[test]
fn renames_model_keeps_everything_else() {
    let body = r#"{"messages":[{"role":"user","content":"h\u00e9"}],"model":"openai/m","temperature":0.5}"#;
    assert_eq!(
        rewrite(Format::Chat, body, "m"),
        r#"{"messages":[{"role":"user","content":"h\u00e9"}],"model":"m","temperature":0.5}"#
    );
}

#[test]
fn chat_streams_ask_for_usage() {
    let out = rewrite(
        Format::Chat,
        r#"{"model":"m","messages":[],"stream":true}"#,
        "m",
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["stream_options"]["include_usage"], true);
    let out = rewrite(
        Format::Chat,
        r#"{"model":"m","messages":[],"stream":true,"stream_options":{"x":1}}"#,
        "m",
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["stream_options"],
        serde_json::json!({"x":1,"include_usage":true})
    );
    // Responses streams report usage in response.completed already.
    let body = r#"{"model":"m","input":"x","stream":true}"#;
    assert_eq!(rewrite(Format::Responses, body, "m"), body);
}

#[test]
fn reads_messages_bodies() {
    let fields =
        top_level(br#"{"model":"claude","max_tokens":64,"messages":[],"stream":true}"#).unwrap();
    let c = head(Format::Messages, Endpoint::Generate, "", &fields).unwrap();
    assert_eq!(
        (c.model.as_str(), c.stream, c.output_cap),
        ("claude", true, Some(64))
    );
    let fields = top_level(br#"{"model":"claude","messages":[]}"#).unwrap();
    assert!(matches!(
        head(Format::Messages, Endpoint::Generate, "", &fields),
        Err(Malformed {
            param: Some("max_tokens"),
            ..
        })
    ));
    assert!(head(Format::Messages, Endpoint::Count, "", &fields).is_ok());
}

#[test]
fn reads_native_bodies_and_refuses_thinking() {
    let native = |endpoint, body: &[u8]| head(Format::Gemini, endpoint, "g", &top_level(body)?);
    let c = native(
        Endpoint::Stream,
        br#"{"contents":[{"parts":[{"text":"hi"}]}]}"#,
    )
    .unwrap();
    assert!(c.stream);
    assert_eq!(c.output_cap, Some(1024));
    let c = native(
        Endpoint::Generate,
        br#"{"contents":[],"generationConfig":{"maxOutputTokens":50}}"#,
    );
    assert_eq!(c.unwrap().output_cap, Some(50));
    assert!(matches!(
        native(
            Endpoint::Generate,
            br#"{"contents":[],"thinking":{"type":"enabled"}}"#
        ),
        Err(Malformed {
            param: Some("thinking"),
            ..
        })
    ));
    let wrapped = br#"{"generateContentRequest":{"contents":[]}}"#;
    assert!(native(Endpoint::Count, wrapped).is_ok());
    assert!(native(Endpoint::Generate, wrapped).is_err());
}

#[test]
fn the_default_cap_is_written_into_the_body() {
    let gemini = |body: &Bytes| {
        let fields = top_level(body).unwrap();
        let call = head(Format::Gemini, Endpoint::Generate, "g", &fields).unwrap();
        forward(
            Format::Gemini,
            Endpoint::Generate,
            body,
            &fields,
            &call,
            "g",
        )
        .unwrap()
    };
    let body = Bytes::from_static(br#"{"contents":[],"generationConfig":{"temperature":0.5}}"#);
    let v: Value = serde_json::from_slice(&gemini(&body)).unwrap();
    assert_eq!(v["generationConfig"]["maxOutputTokens"], 1024);
    assert_eq!(v["generationConfig"]["temperature"], 0.5);
    let body = Bytes::from_static(br#"{"contents":[],"generationConfig":{"maxOutputTokens":7}}"#);
    assert_eq!(gemini(&body), body);
}
