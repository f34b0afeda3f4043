//! The Gemini routes: exact replies, the running usage of streams, the JSON
//! array form, `countTokens`, the model list, validation, auth, error shapes
//! and faults.

use mock_supplier::reply::{body_hash_hex, default_prompt_tokens};
use serde_json::{Value, json};

use crate::common::*;

pub const GEN: &str = r#"{"contents":[{"role":"user","parts":[{"text":"hello"}]},{"role":"model","parts":[{"text":"hi"}]},{"role":"user","parts":[{"text":"again"}]}],"systemInstruction":{"parts":[{"text":"be brief"}]},"generationConfig":{"maxOutputTokens":64}}"#;
pub const GEN_PATH: &str = "/v1beta/models/gemini-2.5-flash:generateContent";
pub const STREAM_PATH: &str = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse";
const USAGE: (&str, &str) = (
    "x-mock-usage",
    "prompt=100,completion=9,cached=40,thoughts=4",
);

#[tokio::test]
async fn generate_content_is_exact() {
    let mock = start().await;
    let (status, headers, body) = post_root_full(&mock, GEN_PATH, GEN, &[USAGE]).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(
        json_of(&body),
        json!({
            "candidates": [{
                "content": {"parts": [{"text": "mock reply w1 w2 w3 w4 w5"}], "role": "model"},
                "finishReason": "STOP",
                "index": 0,
            }],
            "usageMetadata": {
                "promptTokenCount": 100,
                "candidatesTokenCount": 5,
                "thoughtsTokenCount": 4,
                "cachedContentTokenCount": 40,
                "totalTokenCount": 109,
            },
            "modelVersion": "gemini-2.5-flash",
            "responseId": body_hash_hex(GEN.as_bytes()),
        })
    );
    let (_, _, again) = post_root_full(&mock, GEN_PATH, GEN, &[USAGE]).await;
    assert_eq!(body, again);

    // Defaults: no thoughts or cache fields; /v1/models/… works too.
    let (status, _, body) = post_root_full(
        &mock,
        "/v1/models/gemini-2.0-flash:generateContent",
        GEN,
        &[("x-mock-events", "2")],
    )
    .await;
    assert_eq!(status, 200);
    let v = json_of(&body);
    let p = default_prompt_tokens(GEN.len());
    assert_eq!(
        v["usageMetadata"],
        json!({"promptTokenCount": p, "candidatesTokenCount": 2, "totalTokenCount": p + 2})
    );
    assert_eq!(v["modelVersion"], "gemini-2.0-flash");
    assert_eq!(
        v["candidates"][0]["content"]["parts"][0]["text"],
        "mock reply w1 w2"
    );
}

#[tokio::test]
async fn sse_stream_has_running_usage() {
    let mock = start().await;
    let (status, headers, body) =
        post_root_full(&mock, STREAM_PATH, GEN, &[USAGE, ("x-mock-events", "3")]).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/event-stream");
    let text = String::from_utf8(body.clone()).unwrap();
    assert!(!text.contains("event:"));
    assert!(!text.contains("[DONE]"));
    let chunks = gemini_chunks(&body);
    assert_eq!(chunks.len(), 3);
    let hash = body_hash_hex(GEN.as_bytes());
    let mut streamed = String::new();
    for (i, c) in chunks.iter().enumerate() {
        assert_eq!(c["responseId"], hash.as_str());
        assert_eq!(c["modelVersion"], "gemini-2.5-flash");
        assert_eq!(c["candidates"][0]["content"]["role"], "model");
        streamed.push_str(
            c["candidates"][0]["content"]["parts"][0]["text"]
                .as_str()
                .unwrap(),
        );
        assert_eq!(c["usageMetadata"]["promptTokenCount"], 100);
        let last = i == chunks.len() - 1;
        assert_eq!(
            c["candidates"][0].get("finishReason").is_some(),
            last,
            "only the last chunk finishes"
        );
    }
    assert_eq!(streamed, " w1 w2 w3");
    // Running counts: 1, 2, then the final 5 (9 - 4 thoughts).
    let running: Vec<Value> = chunks.iter().map(|c| c["usageMetadata"].clone()).collect();
    assert_eq!(
        running[0],
        json!({"promptTokenCount": 100, "candidatesTokenCount": 1, "thoughtsTokenCount": 4, "cachedContentTokenCount": 40, "totalTokenCount": 105})
    );
    assert_eq!(running[1]["candidatesTokenCount"], 2);
    assert_eq!(
        running[2],
        json!({"promptTokenCount": 100, "candidatesTokenCount": 5, "thoughtsTokenCount": 4, "cachedContentTokenCount": 40, "totalTokenCount": 109})
    );
    assert_eq!(chunks[2]["candidates"][0]["finishReason"], "STOP");
    // Summing across chunks would overcount.
    let summed: u64 = running
        .iter()
        .map(|u| u["candidatesTokenCount"].as_u64().unwrap())
        .sum();
    assert_ne!(summed, 5);

    // Capped: more pieces than candidate tokens.
    let (_, _, body) = post_root_full(
        &mock,
        STREAM_PATH,
        GEN,
        &[("x-mock-usage", "completion=2"), ("x-mock-events", "4")],
    )
    .await;
    let counts: Vec<u64> = gemini_chunks(&body)
        .iter()
        .map(|c| c["usageMetadata"]["candidatesTokenCount"].as_u64().unwrap())
        .collect();
    assert_eq!(counts, [1, 2, 2, 2]);
    assert_eq!(&mock.requests()[1].response_body[..], &body[..]);
}

#[tokio::test]
async fn stream_without_alt_sse_is_a_json_array() {
    let mock = start().await;
    let headers = [USAGE, ("x-mock-events", "3")];
    let (_, _, sse) = post_root_full(&mock, STREAM_PATH, GEN, &headers).await;
    let (status, h, array) = post_root_full(
        &mock,
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
        GEN,
        &headers,
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(h["content-type"], "application/json");
    assert_eq!(json_of(&array), Value::Array(gemini_chunks(&sse)));
}

#[tokio::test]
async fn count_tokens_and_models() {
    let mock = start().await;
    let path = "/v1beta/models/gemini-2.5-pro:countTokens";
    let body = r#"{"contents":[{"role":"user","parts":[{"text":"count me"}]}]}"#;
    let (status, _, resp) = post_root_full(&mock, path, body, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(
        json_of(&resp),
        json!({"totalTokens": default_prompt_tokens(body.len())})
    );
    let wrapped = format!(
        r#"{{"generateContentRequest":{{"model":"models/gemini-2.5-pro",{}}}"#,
        &body[1..]
    );
    let (status, _, resp) =
        post_root_full(&mock, path, &wrapped, &[("x-mock-usage", "prompt=77")]).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&resp));
    assert_eq!(json_of(&resp), json!({"totalTokens": 77}));
    let (status, _, _) = post_root_full(&mock, path, "{}", &[]).await;
    assert_eq!(status, 400);

    let (status, _, resp) = get_root(&mock, "/v1beta/models", &[]).await;
    assert_eq!(status, 200);
    let v = json_of(&resp);
    let models = v["models"].as_array().unwrap();
    assert!(!models.is_empty());
    for m in models {
        assert!(m["name"].as_str().unwrap().starts_with("models/gemini-"));
        assert!(m["displayName"].is_string());
        assert_eq!(
            m["supportedGenerationMethods"],
            json!(["generateContent", "countTokens"])
        );
    }
    // The OpenAI list stays where it was.
    let (_, _, resp) = get_root(&mock, "/v1/models", &[]).await;
    assert_eq!(json_of(&resp)["object"], "list");
}

#[tokio::test]
async fn validation_errors_are_google_shaped() {
    let mock = start().await;
    let (status, _, body) = post_root_full(
        &mock,
        GEN_PATH,
        r#"{"contents":[{"role":"assistant","parts":[{"text":"x"}]}]}"#,
        &[],
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        json_of(&body),
        json!({"error": {"code": 400, "message": "Please use a valid role: user, model.", "status": "INVALID_ARGUMENT"}})
    );
    for body in [
        "{not json",
        r#"{"contents":[]}"#,
        r#"{"contents":[{"role":"user","parts":[]}]}"#,
        r#"{"contents":[{"role":"user","parts":[{"text":"x"}]}],"messages":[]}"#,
        r#"{"model":"gemini-2.5-flash","messages":[{"role":"user","content":"x"}]}"#,
    ] {
        let (status, _, resp) = post_root_full(&mock, GEN_PATH, body, &[]).await;
        assert_eq!(status, 400, "{body}");
        let v = json_of(&resp);
        assert_eq!(v["error"]["code"], 400);
        assert_eq!(v["error"]["status"], "INVALID_ARGUMENT");
    }
    let (status, _, body) = post_root_full(
        &mock,
        "/v1beta/models/gemini-2.5-flash:rawPredict",
        GEN,
        &[],
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(json_of(&body)["error"]["status"], "NOT_FOUND");
}

#[tokio::test]
async fn api_key_by_header_or_query() {
    let mock = start_keyed("AIza-mock").await;
    let (status, _, body) =
        post_root_full(&mock, GEN_PATH, GEN, &[("x-goog-api-key", "wrong")]).await;
    assert_eq!(status, 401);
    assert_eq!(
        json_of(&body),
        json!({"error": {"code": 401, "message": "API key not valid. Please pass a valid API key.", "status": "UNAUTHENTICATED"}})
    );
    let (status, _, _) = post_root_full(&mock, &format!("{GEN_PATH}?key=wrong"), GEN, &[]).await;
    assert_eq!(status, 401);
    let (status, _, body) = post_root_full(
        &mock,
        GEN_PATH,
        GEN,
        &[("authorization", "Bearer AIza-mock")],
    )
    .await;
    assert_eq!(status, 403);
    assert_eq!(json_of(&body)["error"]["status"], "PERMISSION_DENIED");

    let (status, _, _) =
        post_root_full(&mock, GEN_PATH, GEN, &[("x-goog-api-key", "AIza-mock")]).await;
    assert_eq!(status, 200);
    let (status, _, _) =
        post_root_full(&mock, &format!("{GEN_PATH}?key=AIza-mock"), GEN, &[]).await;
    assert_eq!(status, 200);
    let (status, _, body) = post_root_full(
        &mock,
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse&key=AIza-mock",
        GEN,
        &[],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(gemini_chunks(&body).len(), 5);
    let (status, _, _) =
        get_root(&mock, "/v1beta/models", &[("x-goog-api-key", "AIza-mock")]).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn status_faults_are_google_shaped() {
    let mock = start().await;
    let (status, headers, body) = post_root_full(
        &mock,
        GEN_PATH,
        GEN,
        &[("x-mock-fault", "status=429;reset_body=7")],
    )
    .await;
    assert_eq!(status, 429);
    assert!(headers.get("retry-after").is_none());
    assert_eq!(
        json_of(&body),
        json!({"error": {"code": 429, "message": "mock fault", "status": "RESOURCE_EXHAUSTED", "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "7s"}]}})
    );
    let (status, headers, body) = post_root_full(
        &mock,
        STREAM_PATH,
        GEN,
        &[("x-mock-fault", "status=429;retry_after=3;reset_header=9")],
    )
    .await;
    assert_eq!(status, 429);
    assert_eq!(headers["retry-after"], "3");
    assert!(headers.get("x-ratelimit-reset-requests").is_none());
    assert!(headers.get("anthropic-ratelimit-requests-reset").is_none());
    assert!(json_of(&body)["error"].get("details").is_none());
    for (code, s) in [
        (500, "INTERNAL"),
        (503, "UNAVAILABLE"),
        (504, "DEADLINE_EXCEEDED"),
        (403, "PERMISSION_DENIED"),
    ] {
        let fault = format!("status={code}");
        let (status, _, body) =
            post_root_full(&mock, GEN_PATH, GEN, &[("x-mock-fault", &fault)]).await;
        assert_eq!(status, code);
        assert_eq!(
            json_of(&body),
            json!({"error": {"code": code, "message": "mock fault", "status": s}})
        );
    }
}

#[tokio::test]
async fn cut_after_and_malformed_on_a_stream() {
    let mock = start().await;
    let resp = post_root(&mock, STREAM_PATH, GEN, &[("x-mock-fault", "cut_after=2")]).await;
    assert_eq!(resp.status(), 200);
    let (received, errored) = read_stream(resp).await;
    assert!(errored, "a cut stream must end in an error");
    let chunks = gemini_chunks(&received);
    assert_eq!(chunks.len(), 2);
    assert!(
        chunks
            .iter()
            .all(|c| c["candidates"][0].get("finishReason").is_none())
    );
    assert_eq!(&mock.requests()[0].response_body[..], &received[..]);

    let (status, _, body) = post_root_full(
        &mock,
        STREAM_PATH,
        GEN,
        &[("x-mock-fault", "malformed_sse")],
    )
    .await;
    assert_eq!(status, 200);
    let text = String::from_utf8(body).unwrap();
    let blocks: Vec<&str> = text.split_terminator("\r\n\r\n").collect();
    assert_eq!(blocks.len(), 4);
    assert!(blocks[0].starts_with("data: {") && blocks[0].contains("\" w1\""));
    assert_eq!(blocks[1], "data: {not json");
    assert_eq!(blocks[2], "garbage line");
    assert!(blocks[3].contains("\" w2\""));
    assert!(!text.contains("STOP"));

    // The JSON-array form is cut like any plain body.
    let resp = post_root(
        &mock,
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
        GEN,
        &[("x-mock-fault", "cut_after=1")],
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert!(resp.bytes().await.is_err());
}
