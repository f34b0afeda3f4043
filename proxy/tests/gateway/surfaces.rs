//! The Anthropic Messages and Gemini native surfaces: pass-through cells to Anthropic- and
//! Gemini-format accounts (what reached the supplier, what was charged), each surface's key
//! forms, permissions, error shapes and model lists.

use super::*;

/// Adds `claude-x` (anthropic account `anth`), `gemini-x` (gemini account `gem`) on the first
/// mock's root, group 5 exposing them with `gpt-4o-mini`, group 6 the same with `google_alias`,
/// group 7 with `codex`.
pub(crate) fn surfaces(text: String) -> String {
    let root = mock_root(&text, "id = \"mock\"");
    let accounts = mock_account("anth", "anthropic", &root, "claude-x")
        + &mock_account("gem", "gemini", &root, "gemini-x");
    format!(
        r#"{text}
[[models]]
id = "claude-x"
family = "claude"
kind = "text"
author = "anthropic"
input_per_mtok = 3
output_per_mtok = 15
cached_input_per_mtok = 0.3
cache_write_per_mtok = 3.75

[[models]]
id = "gemini-x"
family = "gemini"
kind = "text"
input_per_mtok = 1.25
output_per_mtok = 10
cached_input_per_mtok = 0.125

{accounts}
[[groups]]
id = 5
name = "Surfaces"
product_code = "surfaces"
models = ["claude-x", "gemini-x", "gpt-4o-mini"]
wholesale_rate_multiplier = 1

[[groups]]
id = 6
name = "Alias"
product_code = "alias"
models = ["claude-x", "gemini-x", "gpt-4o-mini"]
wholesale_rate_multiplier = 1
features = ["google_alias"]

[[groups]]
id = 7
name = "Codex"
product_code = "codex"
models = ["claude-x", "gemini-x", "gpt-4o-mini"]
wholesale_rate_multiplier = 1
features = ["codex"]
"#
    )
}

async fn start() -> (Harness, String) {
    let h = Harness::start_with_config(surfaces).await;
    let key = h.add_key(5, KeyPermissions::default()).await;
    (h, key)
}

fn messages(model: &str, stream: bool) -> Value {
    json!({"model": model, "max_tokens": 256, "stream": stream,
           "messages": [{"role": "user", "content": "Say hello"}]})
}

fn contents() -> Value {
    json!({"contents": [{"role": "user", "parts": [{"text": "Say hello"}]}]})
}

impl Harness {
    /// A Messages call the way the Anthropic SDK sends it (`x-api-key`, `anthropic-version`).
    fn anthropic(&self, key: &str, path: &str, body: &Value) -> reqwest::RequestBuilder {
        self.http
            .post(self.url(path))
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01")
            .header("content-type", "application/json")
            .body(body.to_string())
    }

    /// `GET path` with the key in `header`: status and JSON body.
    async fn get_json(&self, path: &str, header: &str, key: &str) -> (u16, Value) {
        json_of(
            self.http
                .get(self.url(path))
                .header(header, key)
                .send()
                .await
                .unwrap(),
        )
        .await
    }

    /// A native call the way google-genai sends it (`x-goog-api-key`).
    fn native(&self, key: &str, path: &str, body: &Value) -> reqwest::RequestBuilder {
        self.http
            .post(self.url(path))
            .header("x-goog-api-key", key)
            .header("content-type", "application/json")
            .body(body.to_string())
    }
}

/// Nano-USD of a claude-x call: 3 / 0.3 (cache reads) / 3.75 (cache writes) / 15 USD per
/// million tokens.
fn claude_cost(input: u64, cached: u64, written: u64, output: u64) -> NanoUsd {
    nano(
        ((input - cached - written) * 3_000 + cached * 300 + written * 3_750 + output * 15_000)
            as i64,
    )
}

/// Nano-USD of a gemini-x call: 1.25 / 0.125 (cached) / 10 USD per million tokens.
fn gemini_cost(input: u64, cached: u64, output: u64) -> NanoUsd {
    nano(((input - cached) * 1_250 + cached * 125 + output * 10_000) as i64)
}

/// The SSE data objects of a body.
fn sse_data(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .map(|d| d.trim())
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[tokio::test]
async fn messages_pass_through_to_anthropic_accounts_and_are_charged_exactly() {
    let (h, key) = start().await;
    for stream in [false, true] {
        h.mock.clear_requests();
        let resp = h
            .anthropic(&key, "/v1/messages", &messages("claude-x", stream))
            .header(
                "x-mock-usage",
                "prompt=1000,completion=200,cached=300,cache_creation=100",
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "stream={stream}");
        let text = resp.text().await.unwrap();
        if stream {
            let events = sse_data(&text);
            assert_eq!(events.first().unwrap()["type"], "message_start");
            assert_eq!(events.last().unwrap()["type"], "message_stop");
        } else {
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["type"], "message");
            assert!(
                v["content"][0]["text"]
                    .as_str()
                    .unwrap()
                    .starts_with("mock reply")
            );
        }
        let sent = h.mock.requests().pop().unwrap();
        assert_eq!(sent.path, "/v1/messages");
        assert_eq!(sent.header("x-api-key"), Some("sk-mock-supplier"));
        assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(sent.header("authorization"), None);
        assert_eq!(sent.json().unwrap()["model"], "claude-x");
        let e = h.usage_event().await;
        assert_eq!(
            (
                e.input_tokens,
                e.cached_tokens,
                e.cache_write_tokens,
                e.output_tokens
            ),
            (1000, 300, 100, 200),
            "cache reads and writes are input; the cumulative message_delta is not added"
        );
        assert_eq!(e.measurement, opstate::Measurement::Exact);
        assert_eq!(e.route, "messages");
        // Cache writes at their own price (3.75), reads at theirs (0.3), the rest at 3.
        assert_eq!(e.cost_nanos, claude_cost(1000, 300, 100, 200));
        assert_eq!(e.charged_nanos, e.cost_nanos);
    }
    assert_eq!(h.wallet().await.reserved, NanoUsd::ZERO);
}

#[tokio::test]
async fn native_calls_pass_through_to_gemini_accounts_with_the_default_cap() {
    let (h, key) = start().await;
    for (path, stream) in [
        ("/v1beta/models/gemini-x:generateContent", false),
        (
            "/v1beta/models/gemini-x:streamGenerateContent?alt=sse",
            true,
        ),
    ] {
        h.mock.clear_requests();
        let resp = h
            .native(&key, path, &contents())
            .header(
                "x-mock-usage",
                "prompt=400,completion=50,cached=100,thoughts=20",
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path}");
        let text = resp.text().await.unwrap();
        let last = if stream {
            sse_data(&text).pop().unwrap()
        } else {
            serde_json::from_str(&text).unwrap()
        };
        assert_eq!(last["candidates"][0]["finishReason"], "STOP");
        let sent = h.mock.requests().pop().unwrap();
        assert_eq!(sent.path, path, "the same action, the same alt");
        assert_eq!(sent.header("x-goog-api-key"), Some("sk-mock-supplier"));
        assert_eq!(sent.header("authorization"), None);
        assert_eq!(
            sent.json().unwrap()["generationConfig"]["maxOutputTokens"],
            1024,
            "SPEC: maxOutputTokens defaults to 1024"
        );
        let e = h.usage_event().await;
        assert_eq!(
            (e.input_tokens, e.cached_tokens, e.output_tokens),
            (400, 100, 50),
            "thoughts are output; running chunk usage is never summed"
        );
        assert_eq!(e.cost_nanos, gemini_cost(400, 100, 50));
    }
    // The key as a query parameter, and the v1 root google-genai may use.
    let resp = h
        .http
        .post(h.url(&format!("/v1/models/gemini-x:generateContent?key={key}")))
        .header("content-type", "application/json")
        .body(contents().to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let sent = h.mock.requests().pop().unwrap();
    assert!(
        !sent.path.contains(&key),
        "the customer key never reaches a supplier"
    );
    h.usage_event().await;
}

#[tokio::test]
async fn token_counts_are_free_and_reach_only_accounts_that_count() {
    let (h, key) = start().await;
    let (status, v) = json_of(
        h.anthropic(
            &key,
            "/v1/messages/count_tokens",
            &messages("claude-x", false),
        )
        .header("x-mock-usage", "prompt=77")
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!((status, v["input_tokens"].as_u64()), (200, Some(77)));
    assert_eq!(
        h.mock.requests().pop().unwrap().path,
        "/v1/messages/count_tokens"
    );
    let (status, v) = json_of(
        h.native(&key, "/v1beta/models/gemini-x:countTokens", &contents())
            .header("x-mock-usage", "prompt=55")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, v["totalTokens"].as_u64()), (200, Some(55)));
    // A model no Anthropic-format account serves is estimated, never sent as a generation.
    h.mock.clear_requests();
    let (status, v) = json_of(
        h.anthropic(
            &key,
            "/v1/messages/count_tokens",
            &messages("gpt-4o-mini", false),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert!(v["input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(h.mock.request_count(), 0);
    // Nothing was held or charged.
    let w = h.wallet().await;
    assert_eq!(w.reserved, NanoUsd::ZERO);
    assert_eq!(w.balance, nano(1_000 * NANOS));
}

#[tokio::test]
async fn each_surface_answers_errors_in_its_own_shape() {
    let (h, key) = start().await;
    let anthropic_shape = |v: &Value, kind: &str| {
        assert_eq!(v["type"], "error", "{v}");
        assert_eq!(v["error"]["type"], kind, "{v}");
        assert!(v["error"]["message"].is_string(), "{v}");
    };
    let google_shape = |v: &Value, code: u16, status: &str| {
        assert_eq!(v["error"]["code"], code, "{v}");
        assert_eq!(v["error"]["status"], status, "{v}");
        assert!(v["error"]["message"].is_string(), "{v}");
    };
    // 401 without a key: SPEC's body on every surface (`error` a string, `message`).
    for (path, body) in [
        ("/v1/messages", messages("claude-x", false)),
        ("/v1beta/models/gemini-x:generateContent", contents()),
    ] {
        let resp = h.http.post(h.url(path)).body(body.to_string()).send();
        let (s, v) = json_of(resp.await.unwrap()).await;
        assert_eq!(s, 401, "{path}");
        assert!(
            v["error"].is_string() && v["message"].is_string(),
            "{path}: {v}"
        );
    }
    // 401 with a wrong key: each surface's own shape.
    let (s, v) = json_of(
        h.http
            .post(h.url("/v1/messages"))
            .header("x-api-key", "tgk_dev_wrong")
            .body(messages("claude-x", false).to_string())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 401);
    anthropic_shape(&v, "authentication_error");
    let (s, v) = json_of(
        h.native(
            "nope",
            "/v1beta/models/gemini-x:generateContent",
            &contents(),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(s, 401);
    google_shape(&v, 401, "UNAUTHENTICATED");
    // 403: the key lacks the surface's permission (each flag guards its own surface).
    let no_anthropic = h
        .add_key(
            5,
            KeyPermissions {
                anthropic: false,
                ..KeyPermissions::default()
            },
        )
        .await;
    let (s, v) = json_of(
        h.anthropic(&no_anthropic, "/v1/messages", &messages("claude-x", false))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 403);
    anthropic_shape(&v, "permission_denied");
    assert_eq!(v["error"]["code"], "permission_denied");
    let (s, _) = json_of(
        h.native(
            &no_anthropic,
            "/v1beta/models/gemini-x:generateContent",
            &contents(),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(s, 200, "the same key may use the native surface");
    h.usage_event().await;
    let no_gemini = h
        .add_key(
            5,
            KeyPermissions {
                gemini: false,
                ..KeyPermissions::default()
            },
        )
        .await;
    let (s, v) = json_of(
        h.native(
            &no_gemini,
            "/v1beta/models/gemini-x:generateContent",
            &contents(),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    // SPEC's permission row names its `code`, which wins over Google's number.
    assert_eq!(s, 403);
    assert_eq!(v["error"]["status"], "PERMISSION_DENIED", "{v}");
    assert_eq!(v["error"]["code"], "permission_denied", "{v}");
    assert_eq!(v["error"]["type"], "permission_denied", "{v}");
    // 404: unknown model; a model with no serving cell on the native surface.
    let (s, v) = json_of(
        h.anthropic(&key, "/v1/messages", &messages("nope", false))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 404);
    anthropic_shape(&v, "not_found_error");
    for model in ["nope", "claude-x", "gpt-4o-mini"] {
        let path = format!("/v1beta/models/{model}:generateContent");
        let (s, v) = json_of(h.native(&key, &path, &contents()).send().await.unwrap()).await;
        assert_eq!(s, 404, "{model}");
        google_shape(&v, 404, "NOT_FOUND");
    }
    // 400: malformed or protocol-incompatible parameters.
    let mut no_cap = messages("claude-x", false);
    no_cap.as_object_mut().unwrap().remove("max_tokens");
    let (s, v) = json_of(
        h.anthropic(&key, "/v1/messages", &no_cap)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 400);
    anthropic_shape(&v, "invalid_request_error");
    assert_eq!(v["error"]["param"], "max_tokens");
    let mut thinking = contents();
    thinking["thinking"] = json!({"type": "enabled", "budget_tokens": 2048});
    let (s, v) = json_of(
        h.native(&key, "/v1beta/models/gemini-x:generateContent", &thinking)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 400);
    google_shape(&v, 400, "INVALID_ARGUMENT");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["param"], "thinking");
    // Unknown paths of each surface.
    let (s, v) = json_of(
        h.native(&key, "/v1beta/models/gemini-x:predict", &contents())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 404);
    google_shape(&v, 404, "NOT_FOUND");
    // Nothing above reached a supplier except the one allowed call.
    assert_eq!(
        h.mock
            .requests()
            .iter()
            .filter(|r| r.path.contains("generateContent"))
            .count(),
        1
    );
}

#[tokio::test]
async fn google_alias_only_with_the_group_feature() {
    let (h, key) = start().await;
    let aliased = h.add_key(6, KeyPermissions::default()).await;
    let path = "/v1beta/models/google/gemini-x:generateContent";
    let (s, _) = json_of(h.native(&aliased, path, &contents()).send().await.unwrap()).await;
    assert_eq!(s, 200);
    let sent = h.mock.requests().pop().unwrap();
    assert_eq!(
        sent.path, "/v1beta/models/gemini-x:generateContent",
        "the supplier gets its bare id"
    );
    let e = h.usage_event().await;
    assert_eq!(
        (e.model_requested.as_str(), e.model_served.as_str()),
        ("google/gemini-x", "gemini-x")
    );
    let (s, v) = json_of(h.native(&key, path, &contents()).send().await.unwrap()).await;
    assert_eq!(s, 404, "{v}");
}

#[tokio::test]
async fn model_lists_in_each_shape() {
    let (h, key) = start().await;
    let (s, v) = h.get_json("/v1/models", "x-api-key", &key).await;
    assert_eq!(s, 200);
    let ids: Vec<&str> = v["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["claude-x", "gemini-x", "gpt-4o-mini"]);
    assert_eq!(v["data"][0]["type"], "model");
    assert_eq!(v["has_more"], false);
    let (s, v) = h.get_json("/v1beta/models", "x-goog-api-key", &key).await;
    assert_eq!(s, 200);
    let names: Vec<&str> = v["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["models/gemini-x"],
        "only models with a native serving cell"
    );
    let (s, v) = h
        .get_json("/v1beta/models/gemini-x", "x-goog-api-key", &key)
        .await;
    assert_eq!((s, v["name"].as_str()), (200, Some("models/gemini-x")));
    let (s, _) = h
        .get_json("/v1beta/models/claude-x", "x-goog-api-key", &key)
        .await;
    assert_eq!(s, 404);
    // One model in Anthropic's shape; an unlisted one is a 404 in that shape.
    let (s, v) = h.get_json("/v1/models/claude-x", "x-api-key", &key).await;
    assert_eq!(
        (s, &v["id"], &v["type"]),
        (200, &json!("claude-x"), &json!("model"))
    );
    let (s, v) = h.get_json("/v1/models/nope", "x-api-key", &key).await;
    assert_eq!(
        (s, &v["type"], &v["error"]["type"]),
        (404, &json!("error"), &json!("not_found_error")),
        "{v}"
    );
    // google-genai's default API version is v1: /v1/models from a Google client is the native list.
    let (s, v) = h.get_json("/v1/models", "x-goog-api-key", &key).await;
    assert_eq!(
        (s, &v["models"][0]["name"]),
        (200, &json!("models/gemini-x")),
        "{v}"
    );
    assert_eq!(v["models"].as_array().unwrap().len(), 1);
    let (s, v) = h
        .get_json("/v1/models/gemini-x", "x-goog-api-key", &key)
        .await;
    assert_eq!((s, v["name"].as_str()), (200, Some("models/gemini-x")));
    let (s, v) = h
        .get_json("/v1/models/claude-x", "x-goog-api-key", &key)
        .await;
    assert_eq!(
        (s, v["error"]["status"].as_str()),
        (404, Some("NOT_FOUND")),
        "{v}"
    );
}

#[tokio::test]
async fn anthropic_rate_limits_cool_until_the_reset_time() {
    let (h, key) = start().await;
    let (s, v) = json_of(
        h.anthropic(&key, "/v1/messages", &messages("claude-x", false))
            .header("x-mock-fault", "status=429;reset_header=120")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 429);
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "usage_limit_reached");
    let resets = v["error"]["resets_in_seconds"].as_u64().unwrap();
    assert!(
        (100..=120).contains(&resets),
        "cooled until the RFC 3339 reset: {resets}"
    );
    h.usage_event().await;
    // The account cools: the next call is refused without reaching it.
    h.mock.clear_requests();
    let (s, _) = json_of(
        h.anthropic(&key, "/v1/messages", &messages("claude-x", false))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 429);
    assert_eq!(h.mock.request_count(), 0);
}

/// The translated cells: a client format served by an account of another format, streaming and
/// not, answered in the client's shape and charged exactly at the served model's price.
#[tokio::test]
async fn translated_cells_answer_in_the_clients_format_and_charge_exactly() {
    let (h, key) = start().await;
    let usage = "prompt=1000,completion=200,cached=300";
    // (client path, model, supplier path, price of 1000 in (300 cached) / 200 out)
    let cells = [
        (
            "/compat/v1/chat/completions",
            "claude-x",
            "/v1/messages",
            claude_cost(1000, 300, 0, 200),
        ),
        (
            "/compat/v1/responses",
            "claude-x",
            "/v1/messages",
            claude_cost(1000, 300, 0, 200),
        ),
        (
            "/compat/v1/chat/completions",
            "gemini-x",
            "/v1beta/models/gemini-x:",
            gemini_cost(1000, 300, 200),
        ),
        (
            "/compat/v1/responses",
            "gemini-x",
            "/v1beta/models/gemini-x:",
            gemini_cost(1000, 300, 200),
        ),
        (
            "/v1/messages",
            "gpt-4o-mini",
            "/v1/chat/completions",
            nano(700 * 150 + 300 * 150 + 200 * 600),
        ),
        (
            "/v1/messages",
            "gemini-x",
            "/v1beta/models/gemini-x:",
            gemini_cost(1000, 300, 200),
        ),
    ];
    for (path, model, supplier, cost) in cells {
        for stream in [false, true] {
            let body = match path {
                "/v1/messages" => messages(model, stream),
                "/compat/v1/responses" => {
                    json!({"model": model, "input": "Say hello", "stream": stream})
                }
                _ => chat(model, stream),
            };
            h.mock.clear_requests();
            let resp = h
                .http
                .post(h.url(path))
                .bearer_auth(&key)
                .header("content-type", "application/json")
                .body(body.to_string())
                .header("x-mock-usage", usage)
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            let content_type = resp.headers()["content-type"].to_str().unwrap().to_string();
            let text = resp.text().await.unwrap();
            assert_eq!(status, 200, "{path} {model} stream={stream}: {text}");
            let sent = h.mock.requests().pop().unwrap();
            assert!(
                sent.path.contains(supplier),
                "{path} {model}: sent to {}",
                sent.path
            );
            if stream {
                assert!(
                    content_type.starts_with("text/event-stream"),
                    "{content_type}"
                );
                let events = sse_data(&text);
                assert!(!events.is_empty());
                let streamed: String = events
                    .iter()
                    .filter_map(|e| {
                        e["choices"][0]["delta"]["content"]
                            .as_str()
                            .or(e["delta"]["text"].as_str())
                            .or(e["delta"].as_str())
                    })
                    .collect();
                assert!(streamed.contains("w1"), "{path} {model}: {text}");
            } else {
                let v: Value = serde_json::from_str(&text).unwrap();
                let reply = match path {
                    "/v1/messages" => v["content"][0]["text"].as_str(),
                    "/compat/v1/responses" => v["output"][0]["content"][0]["text"].as_str(),
                    _ => v["choices"][0]["message"]["content"].as_str(),
                };
                assert!(
                    reply.unwrap().starts_with("mock reply"),
                    "{path} {model}: {v}"
                );
            }
            let e = h.usage_event().await;
            assert_eq!(
                (e.input_tokens, e.cached_tokens, e.output_tokens),
                (1000, 300, 200),
                "{path} {model} stream={stream}"
            );
            assert_eq!(e.cost_nanos, cost, "{path} {model} stream={stream}");
            assert_eq!(e.charged_nanos, cost);
            assert_eq!(e.model_served, model);
        }
    }
    assert_eq!(h.wallet().await.reserved, NanoUsd::ZERO);
}

/// The edges of translated cells: a field the target cannot express is refused before any
/// supplier (nothing held or charged); the stateless rule of responses on a gemini-served model;
/// a supplier's error in the client's shape, charged nothing; a translated stream the supplier
/// cut ends with the client's error event and is charged the estimate, never zero.
#[tokio::test]
async fn translated_cells_at_their_edges() {
    let (h, key) = start().await;
    let before = h.wallet().await;
    let post = |path: &str, body: Value| {
        h.http
            .post(h.url(path))
            .bearer_auth(&key)
            .header("content-type", "application/json")
            .body(body.to_string())
    };
    let mut two = chat("claude-x", false);
    two["n"] = json!(2);
    let (s, v) = json_of(
        post("/compat/v1/chat/completions", two)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 400, "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["param"], "n");
    for field in ["previous_response_id", "conversation", "prompt"] {
        let body = json!({"model": "gemini-x", "input": "hi", field: "x"});
        let (s, v) = json_of(post("/compat/v1/responses", body).send().await.unwrap()).await;
        assert_eq!((s, v["error"]["param"].as_str()), (400, Some(field)), "{v}");
    }
    let body = json!({"model": "gemini-x", "input": "hi", "store": true});
    let (s, v) = json_of(post("/compat/v1/responses", body).send().await.unwrap()).await;
    assert_eq!(
        (s, v["error"]["param"].as_str()),
        (400, Some("store")),
        "{v}"
    );
    assert_eq!(h.mock.request_count(), 0, "refused before any supplier");
    h.no_usage_event().await;
    assert_eq!(h.wallet().await, before);

    // An Anthropic-format refusal reaches a chat client in the OpenAI shape.
    let (s, v) = json_of(
        post("/compat/v1/chat/completions", chat("claude-x", false))
            .header("x-mock-fault", "status=400")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 400);
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");
    assert!(v["error"]["message"].is_string());
    assert_eq!(h.usage_event().await.cost_nanos, NanoUsd::ZERO);

    // A cut translated stream: the client's error event, the estimate charged.
    let resp = post("/compat/v1/chat/completions", chat("claude-x", true))
        .header("x-mock-fault", "cut_after=4")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // The supplier's cut reaches the client as a cut (the body may not complete).
    let text = resp.text().await.unwrap_or_default();
    let e = h.usage_event().await;
    assert_eq!(e.measurement, opstate::Measurement::Estimated, "{text}");
    assert!(e.cost_nanos.is_positive(), "a cut stream is never free");
    assert_eq!(e.charged_nanos, e.cost_nanos);
}

/// [`surfaces`] plus a second account of each provider on the second mock: `anth-b` (claude-x),
/// `gem-b` (gemini-x). Account indexes: mock 0, dead 1, mock-b 2, anth 3, gem 4, anth-b 5, gem-b 6.
fn two_of_each(text: String) -> String {
    let root = mock_root(&text, "id = \"mock-b\"");
    surfaces(text)
        + &mock_account("anth-b", "anthropic", &root, "claude-x")
        + &mock_account("gem-b", "gemini", &root, "gemini-x")
}

/// The root (`http://ADDR`, without `/v1`) of the `base_url` of the account that `marker` starts.
pub(super) fn mock_root(text: &str, marker: &str) -> String {
    let at = text.find(marker).unwrap();
    let start = at + text[at..].find("base_url = \"").unwrap() + "base_url = \"".len();
    let url = &text[start..start + text[start..].find('"').unwrap()];
    url.strip_suffix("/v1").unwrap().to_string()
}

/// An `[[accounts]]` entry of `provider` at a mock's `root` serving `model`, steerable through the
/// mock's control headers.
fn mock_account(id: &str, provider: &str, root: &str, model: &str) -> String {
    format!(
        r#"
[[accounts]]
id = "{id}"
provider = "{provider}"
base_url = "{root}"
api_key = "sk-mock-supplier"
models = ["{model}"]
forward_headers = ["x-mock-usage", "x-mock-events", "x-mock-fault", "x-mock-delay-ms"]
"#
    )
}

/// A session id whose rendezvous order over `candidates` puts `first` first.
fn session_preferring_account(candidates: &[usize], first: usize) -> String {
    let ids = ["mock", "dead", "mock-b", "anth", "gem", "anth-b", "gem-b"];
    (0..1000)
        .map(|i| format!("s{i}"))
        .find(|sid| proxy::rendezvous_order(candidates, &ids, &format!("42:{sid}"))[0] == first)
        .unwrap()
}

/// Failover, cooldown and 503 on accounts of the Anthropic and Gemini formats: a server error
/// moves the call to the other account of the model (charged once, at the served account), the
/// failed account cools and is skipped; with every account cooling after failures each surface
/// answers 503 in its own shape.
#[tokio::test]
async fn anthropic_and_gemini_accounts_fail_over_cool_and_answer_503_in_each_shape() {
    let h = Harness::start_with_config(two_of_each).await;
    let key = h.add_key(5, KeyPermissions::default()).await;
    let claude_sid = session_preferring_account(&[3, 5], 3);
    let gemini_sid = session_preferring_account(&[4, 6], 4);

    // Messages → claude-x: `anth` (first mock) fails with a 500, `anth-b` serves.
    h.mock.set_fault(Some("status=500".parse().unwrap()));
    for (i, stream) in [false, true].into_iter().enumerate() {
        let resp = h
            .anthropic(&key, "/v1/messages", &messages("claude-x", stream))
            .header("x-session-id", &claude_sid)
            .header("x-mock-usage", "prompt=100,completion=10")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "stream={stream}");
        resp.bytes().await.unwrap();
        assert_eq!(
            (h.mock.request_count(), h.mock_b.request_count()),
            (1, i + 1),
            "the failed account cools: tried once, then skipped"
        );
        let e = h.usage_event().await;
        assert_eq!((e.account_id.as_str(), e.status), ("anth-b", 200));
        assert_eq!(e.cost_nanos, claude_cost(100, 0, 0, 10), "charged once");
        assert_eq!(e.charged_nanos, e.cost_nanos);
    }
    assert_eq!(h.mock.requests()[0].path, "/v1/messages");
    assert_eq!(h.mock_b.requests()[0].path, "/v1/messages");

    // Native → gemini-x: `gem` (first mock) fails with a 500, `gem-b` serves.
    h.mock.clear_requests();
    let resp = h
        .native(&key, "/v1beta/models/gemini-x:generateContent", &contents())
        .header("x-session-id", &gemini_sid)
        .header("x-mock-usage", "prompt=50,completion=5")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.bytes().await.unwrap();
    assert_eq!(
        h.mock.requests()[0].path,
        "/v1beta/models/gemini-x:generateContent"
    );
    let e = h.usage_event().await;
    assert_eq!(e.account_id, "gem-b");
    assert_eq!(e.cost_nanos, gemini_cost(50, 0, 5));

    // Both accounts of each model cooling: 503 in each surface's shape, no supplier contacted.
    h.mock_b.set_fault(Some("status=503".parse().unwrap()));
    for path in ["/v1/messages", "/v1beta/models/gemini-x:generateContent"] {
        // The second account fails too (its own 503) and cools.
        let req = if path == "/v1/messages" {
            h.anthropic(&key, path, &messages("claude-x", false))
        } else {
            h.native(&key, path, &contents())
        };
        let (s, _) = json_of(req.send().await.unwrap()).await;
        assert_eq!(s, 503, "{path}");
        h.usage_event().await;
    }
    let before = (h.mock.request_count(), h.mock_b.request_count());
    let (s, v) = json_of(
        h.anthropic(&key, "/v1/messages", &messages("claude-x", false))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 503, "{v}");
    assert_eq!(
        (&v["type"], &v["error"]["type"]),
        (&json!("error"), &json!("overloaded_error")),
        "{v}"
    );
    assert!(v["error"]["message"].is_string());
    let (s, v) = json_of(
        h.native(
            &key,
            "/v1beta/models/gemini-x:streamGenerateContent?alt=sse",
            &contents(),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(s, 503, "{v}");
    assert_eq!(
        (&v["error"]["code"], &v["error"]["status"]),
        (&json!(503), &json!("UNAVAILABLE")),
        "{v}"
    );
    // A chat client of claude-x (translated cell) gets the OpenAI shape.
    let (s, v) = json_of(
        h.http
            .post(h.url("/compat/v1/chat/completions"))
            .bearer_auth(&key)
            .body(
                json!({"model": "claude-x", "messages": [{"role": "user", "content": "hi"}]})
                    .to_string(),
            )
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 503, "{v}");
    assert_eq!(v["error"]["code"], "upstream_unavailable", "{v}");
    assert_eq!(
        (h.mock.request_count(), h.mock_b.request_count()),
        before,
        "no supplier contacted while every account cools"
    );
    h.no_usage_event().await;
}

/// A Gemini 429 on the last account: the client gets 429 `usage_limit_reached` in Google's shape
/// and the account cools until the `RetryInfo` delay of the refusal's body (on a failover the body
/// is not read and the default applies: docs/ARCHITECTURE.md "Reset hints in bodies").
#[tokio::test]
async fn gemini_retry_info_cools_the_account_until_its_delay() {
    let (h, key) = start().await;
    let (s, v) = json_of(
        h.native(&key, "/v1beta/models/gemini-x:generateContent", &contents())
            .header("x-mock-fault", "status=429;reset_body=90")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 429, "{v}");
    assert_eq!(
        (&v["error"]["code"], &v["error"]["status"]),
        (&json!(429), &json!("RESOURCE_EXHAUSTED")),
        "{v}"
    );
    assert_eq!(v["error"]["type"], "usage_limit_reached", "{v}");
    h.usage_event().await;
    let cooling = h.stores.cooldowns.remaining(&["gem"]).await.unwrap();
    let left = cooling[0].as_ref().expect("gem cools").left.as_secs();
    assert!(
        (80..=90).contains(&left),
        "cooled for the RetryInfo delay: {left}"
    );
    h.mock.clear_requests();
    let (s, v) = json_of(
        h.native(&key, "/v1beta/models/gemini-x:generateContent", &contents())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 429, "{v}");
    assert_eq!(h.mock.request_count(), 0, "refused while cooling");
}

/// A Codex-style responses payload: freeform `custom` and `local_shell` tools, a hosted tool,
/// and the history items they leave.
fn codex_payload(model: &str, history: bool) -> Value {
    let mut input = vec![json!({"type": "message", "role": "developer",
        "content": [{"type": "input_text", "text": "You are in a sandbox."}]})];
    input.push(json!({"type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "Fix the bug."}]}));
    input.push(
        json!({"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"}),
    );
    if history {
        input.extend([
            json!({"type": "custom_tool_call", "call_id": "call_p", "name": "apply_patch",
                   "input": "*** Begin Patch\n*** End Patch"}),
            json!({"type": "custom_tool_call_output", "call_id": "call_p", "output": "Success."}),
            json!({"type": "local_shell_call", "call_id": "call_s", "status": "completed",
                   "action": {"type": "exec", "command": ["cargo", "test"], "env": {}}}),
            json!({"type": "function_call_output", "call_id": "call_s", "output": "ok"}),
            json!({"type": "web_search_call", "id": "ws_1", "status": "completed"}),
        ]);
    }
    json!({
        "model": model, "instructions": "You are Codex.", "input": input, "stream": false,
        "store": false, "include": ["reasoning.encrypted_content"], "prompt_cache_key": "conv-1",
        "parallel_tool_calls": false, "tool_choice": "auto",
        "reasoning": {"effort": "medium", "summary": "auto"},
        "tools": [
            {"type": "custom", "name": "apply_patch", "description": "Edits files.",
             "format": {"type": "grammar", "syntax": "lark", "definition": "start: begin_patch"}},
            {"type": "local_shell"},
            {"type": "web_search"},
            {"type": "function", "name": "view_image", "strict": false,
             "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}},
        ],
    })
}

/// The `codex` group feature: a Codex-style payload served by an Anthropic account is adapted
/// (custom and local_shell tools become function tools, hosted ones are dropped, their history
/// becomes tool calls and results) and the calls come back in Codex's kinds; without the feature
/// the same payload is refused naming the field; to an OpenAI account it passes as it is.
#[tokio::test]
async fn codex_payloads_are_adapted_only_with_the_group_feature() {
    let (h, plain_key) = start().await;
    let key = h.add_key(7, KeyPermissions::default()).await;
    let responses = |key: &str, body: &Value| {
        h.http
            .post(h.url("/compat/v1/responses"))
            .bearer_auth(key)
            .header("x-mock-usage", "prompt=40,completion=4")
            .body(body.to_string())
            .send()
    };
    // Without the feature: translated as it is, the freeform tool is refused.
    let (s, v) = json_of(
        responses(&plain_key, &codex_payload("claude-x", false))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 400, "{v}");
    assert_eq!(v["error"]["param"], "tools[0].type", "{v}");
    assert_eq!(h.mock.request_count(), 0);

    // With it: the model's call of the custom tool comes back as a custom_tool_call.
    let (s, v) = json_of(
        responses(&key, &codex_payload("claude-x", false))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let item = &v["output"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["type"] != "message")
        .unwrap()
        .clone();
    assert_eq!(
        (&item["type"], &item["name"]),
        (&json!("custom_tool_call"), &json!("apply_patch")),
        "{v}"
    );
    assert!(item["input"].is_string(), "{item}");
    let sent = h.mock.requests().pop().unwrap();
    assert_eq!(sent.path, "/v1/messages");
    let body = sent.json().unwrap();
    let tools: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        tools,
        ["apply_patch", "local_shell", "view_image"],
        "the hosted tool is dropped"
    );
    assert_eq!(
        body["tools"][0]["input_schema"]["required"],
        json!(["input"])
    );
    assert!(
        body["tools"][0]["description"]
            .as_str()
            .unwrap()
            .contains("start: begin_patch")
    );
    let system = body["system"].to_string();
    assert!(
        system.contains("You are Codex.") && system.contains("sandbox"),
        "{system}"
    );
    let e = h.usage_event().await;
    assert_eq!(e.cost_nanos, claude_cost(40, 0, 0, 4));

    // The history of Codex's own tools reaches the supplier as tool calls and results.
    let (s, v) = json_of(
        responses(&key, &codex_payload("claude-x", true))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["output"][0]["type"], "message",
        "a tool result ends the history: text"
    );
    let body = h.mock.requests().pop().unwrap().json().unwrap();
    let blocks: Vec<Value> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .collect();
    let used: Vec<(&str, &str)> = blocks
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .map(|b| (b["id"].as_str().unwrap(), b["name"].as_str().unwrap()))
        .collect();
    assert_eq!(used, [("call_p", "apply_patch"), ("call_s", "local_shell")]);
    assert_eq!(
        blocks.iter().find(|b| b["id"] == "call_p").unwrap()["input"],
        json!({"input": "*** Begin Patch\n*** End Patch"})
    );
    assert_eq!(
        blocks.iter().find(|b| b["id"] == "call_s").unwrap()["input"],
        json!({"command": ["cargo", "test"]})
    );
    let results: Vec<&str> = blocks
        .iter()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| b["tool_use_id"].as_str().unwrap())
        .collect();
    assert_eq!(results, ["call_p", "call_s"]);
    h.usage_event().await;

    // To an OpenAI-format account (the Responses API Codex speaks) it passes as it is.
    h.mock.clear_requests();
    let payload = codex_payload("gpt-4o-mini", true);
    let (s, _) = json_of(responses(&key, &payload).await.unwrap()).await;
    assert_eq!(s, 200);
    let sent = h.mock.requests().pop().unwrap();
    assert_eq!(sent.path, "/v1/responses");
    assert_eq!(sent.json().unwrap()["tools"], payload["tools"]);
    assert_eq!(sent.json().unwrap()["input"], payload["input"]);
    h.usage_event().await;
}

/// SPEC's capacity-queue-full body (`error.code: "capacity_queue_full"`) on the native and
/// Messages surfaces too, each in its own shape around it.
#[tokio::test]
async fn capacity_queue_full_keeps_its_code_on_every_surface() {
    let (h, _) = start().await;
    let one = opstate::KeyLimits {
        max_concurrency: Some(1),
        requests_per_minute: None,
    };
    let key = super::limits::limited_key(&h, 777, 5, one).await;
    let h = Arc::new(h);
    let mut slow = JoinSet::new();
    {
        let (h, key) = (h.clone(), key.clone());
        slow.spawn(async move {
            let resp = h
                .native(
                    &key,
                    "/v1beta/models/gemini-x:streamGenerateContent?alt=sse",
                    &contents(),
                )
                .header("x-mock-delay-ms", "500")
                .header("x-mock-events", "4")
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            resp.bytes().await.unwrap();
            status
        });
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while h.stores.slots.in_use(&["gem"]).await.unwrap()[0] < 1 {
        assert!(Instant::now() < deadline, "the slow call never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (s, v) = json_of(
        h.native(&key, "/v1beta/models/gemini-x:generateContent", &contents())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 429, "{v}");
    assert_eq!(v["error"]["code"], "capacity_queue_full", "{v}");
    assert_eq!(v["error"]["status"], "RESOURCE_EXHAUSTED", "{v}");
    assert!(v["error"]["message"].is_string());
    let (s, v) = json_of(
        h.anthropic(&key, "/v1/messages", &messages("gemini-x", false))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 429, "{v}");
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["code"], "capacity_queue_full", "{v}");
    assert!(v["error"]["message"].is_string());
    assert_eq!(slow.join_next().await.unwrap().unwrap(), 200);
}

/// Cached-content requests need the native route (SPEC): a `cachedContent` reference reaches the
/// Gemini account unchanged there, and is refused with 400 naming the field on chat completions,
/// responses and Messages (never dropped silently), before any supplier or hold.
#[tokio::test]
async fn cached_content_is_served_on_the_native_route_only() {
    let (h, key) = start().await;
    let mut native = contents();
    native["cachedContent"] = json!("cachedContents/abc123");
    let resp = h
        .native(&key, "/v1beta/models/gemini-x:generateContent", &native)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.bytes().await.unwrap();
    let sent = h.mock.requests().into_iter().last().unwrap();
    assert_eq!(
        sent.json().unwrap()["cachedContent"],
        "cachedContents/abc123"
    );
    let before = h.mock.request_count();
    let with = |mut v: Value| {
        v["cachedContent"] = json!("cachedContents/abc123");
        v
    };
    for (path, body) in [
        ("/compat/v1/chat/completions", with(chat("gemini-x", false))),
        (
            "/compat/v1/responses",
            with(json!({"model": "gemini-x", "input": "hi"})),
        ),
    ] {
        let (s, v) = json_of(
            h.http
                .post(h.url(path))
                .bearer_auth(&key)
                .body(body.to_string())
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(s, 400, "{path}: {v}");
        assert_eq!(v["error"]["param"], "cachedContent", "{path}");
        assert_eq!(v["error"]["type"], "invalid_request_error");
    }
    let (s, v) = json_of(
        h.anthropic(&key, "/v1/messages", &with(messages("gemini-x", false)))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(s, 400, "{v}");
    assert_eq!(v["error"]["param"], "cachedContent");
    assert_eq!(
        h.mock.request_count(),
        before,
        "no refused call reached a supplier"
    );
    assert_eq!(h.wallet().await.reserved, NanoUsd::ZERO);
}
