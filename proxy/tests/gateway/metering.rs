//! Pass-through and metering: chat completions and responses, streamed or not, reach the client
//! byte for byte and are metered exactly from the supplier's usage, or estimated when a stream is
//! cut or malformed; attribution headers reach the usage event.

use super::*;
use futures_util::StreamExt;
use opstate::Measurement;

#[tokio::test]
async fn chat_completion_passes_through_and_is_metered_exactly() {
    let h = Harness::start().await;
    let resp = h
        .post(
            "/compat/v1/chat/completions",
            &chat("openai/gpt-4o-mini", false),
        )
        .header("x-mock-usage", "prompt=11,completion=5,cached=2")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("x-request-id").is_some());
    let received = resp.bytes().await.unwrap();
    let upstream = &h.mock.requests()[0];
    assert_eq!(
        received, upstream.response_body,
        "byte-identical pass-through"
    );
    // The supplier got its own credential, the bare model id and never the customer's key.
    assert_eq!(
        upstream.header("authorization"),
        Some("Bearer sk-mock-supplier")
    );
    assert_eq!(upstream.path, "/v1/chat/completions");
    assert_eq!(upstream.json().unwrap()["model"], "gpt-4o-mini");
    assert!(upstream.headers.iter().all(|(_, v)| !v.contains(&h.key)));
    let e = h.usage_event().await;
    assert_eq!(
        (e.input_tokens, e.output_tokens, e.cached_tokens),
        (11, 5, 2)
    );
    assert_eq!(e.measurement, Measurement::Exact);
    assert_eq!((e.org_id, e.key_id, e.group_id), (42, 101, 1));
    assert_eq!(e.model_requested, "openai/gpt-4o-mini");
    assert_eq!(e.model_served, "gpt-4o-mini");
    assert_eq!(e.account_id, "mock");
    assert_eq!((e.status, e.stream, e.attempts), (200, false, 1));
    assert_eq!(e.route, "chat_completions");
    assert!(e.ttfb_ms.is_some());
}

#[tokio::test]
async fn chat_stream_passes_through_chunk_for_chunk_and_is_metered_exactly() {
    let h = Harness::start().await;
    let started = Instant::now();
    let resp = h
        .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", true))
        .header("x-mock-usage", "prompt=21,completion=8")
        .header("x-mock-delay-ms", "80")
        .header("x-mock-events", "6")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let mut stream = resp.bytes_stream();
    let mut received = Vec::new();
    let mut first_at = None;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        if first_at.is_none() && !chunk.is_empty() {
            first_at = Some(started.elapsed());
        }
        received.extend_from_slice(&chunk);
    }
    let total = started.elapsed();
    let first_at = first_at.unwrap();
    assert!(
        total.saturating_sub(first_at) >= Duration::from_millis(300),
        "events must arrive as produced (first byte at {first_at:?}, end at {total:?})"
    );
    let upstream = &h.mock.requests()[0];
    assert_eq!(
        received,
        upstream.response_body.to_vec(),
        "byte-identical stream"
    );
    assert_eq!(
        upstream.json().unwrap()["stream_options"]["include_usage"],
        true
    );
    assert!(
        String::from_utf8_lossy(&received)
            .trim_end()
            .ends_with("data: [DONE]")
    );
    let e = h.usage_event().await;
    assert_eq!(
        (e.input_tokens, e.output_tokens, e.cached_tokens),
        (21, 8, 0)
    );
    assert_eq!(e.measurement, Measurement::Exact);
    assert!(e.stream);
}

#[tokio::test]
async fn responses_pass_through_and_are_metered_streaming_or_not() {
    let h = Harness::start().await;
    for stream in [false, true] {
        let body = json!({"model": "gpt-4o-mini", "input": "Say hello", "stream": stream});
        let resp = h
            .post("/compat/v1/responses", &body)
            .header("x-mock-usage", "prompt=13,completion=4,cached=3")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let received = resp.bytes().await.unwrap();
        let upstream = h.mock.requests().pop().unwrap();
        assert_eq!(upstream.path, "/v1/responses");
        assert_eq!(received, upstream.response_body, "stream={stream}");
        assert_eq!(
            upstream.body,
            body.to_string().into_bytes(),
            "unchanged body is forwarded as is"
        );
        let e = h.usage_event().await;
        assert_eq!(
            (e.input_tokens, e.output_tokens, e.cached_tokens),
            (13, 4, 3),
            "stream={stream}"
        );
        assert_eq!(e.measurement, Measurement::Exact);
        assert_eq!(e.route, "responses");
        assert_eq!(e.stream, stream);
    }
}

#[tokio::test]
async fn cut_stream_is_settled_from_an_estimate() {
    let h = Harness::start().await;
    h.mock.set_fault(Some("cut_after=3".parse().unwrap()));
    let resp = h
        .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", true))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    let mut received = Vec::new();
    let mut errored = false;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(c) => received.extend_from_slice(&c),
            Err(_) => {
                errored = true;
                break;
            }
        }
    }
    assert!(errored, "the client sees the stream end abnormally");
    assert!(!String::from_utf8_lossy(&received).contains("[DONE]"));
    let e = h.usage_event().await;
    assert_eq!(e.measurement, Measurement::Estimated);
    let request_bytes = h.mock.requests()[0].body.len() as u64;
    assert!(
        e.input_tokens > 0 && e.input_tokens <= request_bytes,
        "{e:?}"
    );
    assert_eq!(e.output_tokens, 2, "two content events reached the client");
}

#[tokio::test]
async fn malformed_sse_passes_through_and_is_estimated() {
    let h = Harness::start().await;
    h.mock.set_fault(Some("malformed_sse".parse().unwrap()));
    let resp = h
        .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", true))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let received = resp.bytes().await.unwrap();
    assert_eq!(
        received,
        h.mock.requests()[0].response_body,
        "passed through as sent"
    );
    let e = h.usage_event().await;
    assert_eq!(e.measurement, Measurement::Estimated);
    assert_eq!(e.output_tokens, 1, "one event carried text");
}

#[tokio::test]
async fn attribution_headers_reach_the_usage_event_not_the_supplier() {
    let h = Harness::start().await;
    let resp = h
        .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
        .header("x-tollgate-project", "checkout")
        .header("x-tollgate-workflow", "summarize")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let e = h.usage_event().await;
    assert_eq!(
        (e.project.as_deref(), e.workflow.as_deref()),
        (Some("checkout"), Some("summarize"))
    );
    assert!(
        h.mock.requests()[0].header("x-tollgate-project").is_none(),
        "internal headers are not forwarded"
    );
    let (status, err) = json_of(
        h.post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
            .header("x-tollgate-project", "x".repeat(65))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(err["error"]["param"], "x-tollgate-project");
}
