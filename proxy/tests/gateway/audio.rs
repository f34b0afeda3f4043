//! Audio transcriptions: only accounts with the audio capability serve them, charged by the
//! reported duration or the file's, and bad requests change nothing.

use super::*;
use opstate::Measurement;

/// A WAV file of `seconds` of 8 kHz, 16-bit mono silence (16,000 bytes per second).
fn wav(seconds: u32) -> Vec<u8> {
    let data = 16_000 * seconds;
    let mut w = Vec::new();
    w.extend_from_slice(b"RIFF");
    w.extend_from_slice(&(36 + data).to_le_bytes());
    w.extend_from_slice(b"WAVEfmt ");
    w.extend_from_slice(&16u32.to_le_bytes());
    w.extend_from_slice(&[1, 0, 1, 0]); // PCM, mono
    w.extend_from_slice(&8_000u32.to_le_bytes());
    w.extend_from_slice(&16_000u32.to_le_bytes()); // byte rate
    w.extend_from_slice(&[2, 0, 16, 0]);
    w.extend_from_slice(b"data");
    w.extend_from_slice(&data.to_le_bytes());
    w.resize(w.len() + data as usize, 0);
    w
}

const FORM_TYPE: &str = "multipart/form-data; boundary=tollgate-test-boundary";

/// A transcription form: `fields` in order, then the file.
fn transcription_form(fields: &[(&str, &str)], file: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    for (name, value) in fields {
        b.extend_from_slice(
            format!("--tollgate-test-boundary\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
                .as_bytes(),
        );
    }
    b.extend_from_slice(b"--tollgate-test-boundary\r\nContent-Disposition: form-data; name=\"file\"; filename=\"speech.wav\"\r\nContent-Type: audio/wav\r\n\r\n");
    b.extend_from_slice(file);
    b.extend_from_slice(b"\r\n--tollgate-test-boundary--\r\n");
    b
}

impl Harness {
    async fn transcribe(&self, key: &str, session: &str, body: Vec<u8>) -> reqwest::Response {
        self.http
            .post(self.url("/compat/v1/audio/transcriptions"))
            .bearer_auth(key)
            .header("content-type", FORM_TYPE)
            .header("x-session-id", session)
            .body(body)
            .send()
            .await
            .unwrap()
    }
}

#[tokio::test]
async fn audio_goes_only_to_accounts_with_the_capability() {
    let h = Harness::start().await;
    let key = h.add_key(4, KeyPermissions::default()).await;
    let audio = wav(3);
    let body = transcription_form(&[("model", "openai/whisper-1"), ("language", "en")], &audio);
    // Different sessions would spread over both accounts that list the model; only the capable
    // one is in the pool.
    for i in 0..6 {
        let (status, reply) = json_of(
            h.transcribe(&key, &format!("audio-{i}"), body.clone())
                .await,
        )
        .await;
        assert_eq!(status, 200, "{reply}");
        assert_eq!(
            reply["text"],
            format!("mock transcript of {} bytes by whisper-1", audio.len())
        );
    }
    assert_eq!(
        h.mock.request_count(),
        0,
        "never the account without the capability"
    );
    assert_eq!(h.mock_b.request_count(), 6);
    let sent = &h.mock_b.requests()[0];
    assert_eq!(sent.path, "/v1/audio/transcriptions");
    assert_eq!(
        sent.body.len() + "openai/".len(),
        body.len(),
        "only the model value changed"
    );
    assert!(
        sent.body
            .windows(audio.len())
            .any(|w| w == audio.as_slice()),
        "the audio reached the supplier byte for byte"
    );
    for _ in 0..6 {
        let e = h.usage_event().await;
        assert_eq!(e.route, "audio_transcriptions");
        assert_eq!(
            (e.model_requested.as_str(), e.model_served.as_str()),
            ("openai/whisper-1", "whisper-1")
        );
        assert_eq!((e.audio_seconds, e.measurement), (3, Measurement::Exact));
        // 3 s at 0.006 USD per minute: 0.0003 USD, held exactly (the WAV header names 3 s).
        assert_eq!(
            (e.cost_nanos, e.charged_nanos, e.hold_nanos),
            (nano(300_000), nano(300_000), nano(300_000))
        );
    }
    // The capable account fails: the call fails rather than going to the other account.
    h.mock_b.set_fault(Some("status=500".parse().unwrap()));
    let resp = h.transcribe(&key, "audio-0", body.clone()).await;
    assert_eq!(resp.status(), 500);
    // It cools after a server error, which is not a usage limit: 503, not 429.
    let (status, reply) = json_of(h.transcribe(&key, "audio-1", body.clone()).await).await;
    assert_eq!(status, 503, "the only capable account is cooling: {reply}");
    assert_eq!(reply["error"]["code"], "upstream_unavailable");
    assert_eq!(h.mock.request_count(), 0);
    let e = h.usage_event().await;
    assert_eq!(
        (e.status, e.cost_nanos, e.audio_seconds),
        (500, NanoUsd::ZERO, 0),
        "a failed call costs nothing"
    );
}

#[tokio::test]
async fn audio_without_a_reported_duration_is_charged_by_the_file() {
    let h = Harness::start().await;
    let key = h.add_key(4, KeyPermissions::default()).await;
    // A plain-text answer carries no duration: the WAV header's 2 s are charged, flagged estimated.
    let body = transcription_form(
        &[("model", "whisper-1"), ("response_format", "text")],
        &wav(2),
    );
    let resp = h.transcribe(&key, "t", body).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().starts_with("mock transcript"));
    let e = h.usage_event().await;
    assert_eq!(
        (e.audio_seconds, e.measurement),
        (2, Measurement::Estimated)
    );
    assert_eq!(e.cost_nanos, nano(200_000));
    // A verbose answer's duration is what is charged (the supplier says 61 s, rounded up from
    // the file's 1 s hold: the excess is charged as far as the balance goes).
    let body = transcription_form(
        &[("model", "whisper-1"), ("response_format", "verbose_json")],
        &wav(1),
    );
    let resp = h
        .http
        .post(h.url("/compat/v1/audio/transcriptions"))
        .bearer_auth(&key)
        .header("content-type", FORM_TYPE)
        .header("x-mock-audio-seconds", "61")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let e = h.usage_event().await;
    assert_eq!((e.audio_seconds, e.measurement), (61, Measurement::Exact));
    assert_eq!(
        (e.hold_nanos, e.cost_nanos, e.charged_nanos),
        (nano(100_000), nano(6_100_000), nano(6_100_000))
    );
}

#[tokio::test]
async fn bad_transcription_requests_change_nothing() {
    let h = Harness::start().await;
    let key = h.add_key(4, KeyPermissions::default()).await;
    let audio = wav(1);
    let cases: Vec<(&str, Vec<u8>, u16, Value)> = vec![
        (FORM_TYPE, transcription_form(&[], &audio), 400, json!("model")),
        (
            FORM_TYPE,
            b"--tollgate-test-boundary\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1\r\n--tollgate-test-boundary--\r\n".to_vec(),
            400,
            json!("file"),
        ),
        (
            FORM_TYPE,
            transcription_form(&[("model", "whisper-1"), ("stream", "maybe")], &audio),
            400,
            json!("stream"),
        ),
        ("application/json", br#"{"model":"whisper-1"}"#.to_vec(), 400, Value::Null),
        (FORM_TYPE, b"no parts at all".to_vec(), 400, Value::Null),
        // A text model on the audio route, an audio model the key cannot use.
        (FORM_TYPE, transcription_form(&[("model", "gpt-4o-mini")], &audio), 400, json!("model")),
        (FORM_TYPE, transcription_form(&[("model", "whisper-9")], &audio), 404, json!("model")),
    ];
    for (content_type, body, want, param) in cases {
        let resp = h
            .http
            .post(h.url("/compat/v1/audio/transcriptions"))
            .bearer_auth(&key)
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        let (status, reply) = json_of(resp).await;
        assert_eq!(status, want, "{reply}");
        assert_eq!(reply["error"]["type"], "invalid_request_error", "{reply}");
        assert!(reply["error"]["message"].is_string(), "{reply}");
        assert_eq!(reply["error"]["param"], param, "{reply}");
    }
    // An audio model listed only by an account without the audio capability: refused, never sent
    // to that account.
    let resp = h
        .http
        .post(h.url("/compat/v1/audio/transcriptions"))
        .bearer_auth(&key)
        .header("content-type", FORM_TYPE)
        .body(transcription_form(&[("model", "whisper-2")], &audio))
        .send()
        .await
        .unwrap();
    let (status, reply) = json_of(resp).await;
    assert_eq!(status, 503, "{reply}");
    assert_eq!(reply["error"]["type"], "service_unavailable", "{reply}");
    assert_eq!(reply["error"]["code"], "no_account_available", "{reply}");
    assert!(reply["error"]["message"].is_string(), "{reply}");
    // An audio model on a text route.
    let resp = h
        .http
        .post(h.url("/compat/v1/chat/completions"))
        .bearer_auth(&key)
        .body(chat("whisper-1", false).to_string())
        .send()
        .await
        .unwrap();
    let (status, reply) = json_of(resp).await;
    assert_eq!(
        (status, reply["error"]["param"].as_str()),
        (400, Some("model")),
        "{reply}"
    );
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("audio model"),
        "{reply}"
    );
    assert_eq!(h.mock.request_count() + h.mock_b.request_count(), 0);
    h.no_usage_event().await;
    let w = h.wallet().await;
    assert_eq!(w.reserved, NanoUsd::ZERO, "nothing held");
}
