//! Embeddings (issue 46): the OpenAI-style route and the native `:embedContent` /
//! `:batchEmbedContents`, on `openai` and `gemini` accounts, passed through or translated; charged
//! per input token from the supplier's usage, estimated from the inputs when it reports none;
//! refusals that reach no supplier and cost nothing; failover like a text call.

use super::*;
use base64::Engine as _;
use mock_supplier::embeddings::vector;

/// 0.02 USD and 0.15 USD per million input tokens (the key's rate is 1).
const OPENAI_PER_MTOK: i64 = 20_000_000;
const GEMINI_PER_MTOK: i64 = 150_000_000;

/// The harness configuration plus `text-embedding-x` (openai accounts `emb-oa` on mock A and
/// `emb-oa-b` on mock B) and `gem-embed` (gemini account `emb-gem` on mock A), in group 9 with
/// `gpt-4o-mini`.
fn embeddings(text: String) -> String {
    let a = super::surfaces::mock_root(&text, "id = \"mock\"");
    let b = super::surfaces::mock_root(&text, "id = \"mock-b\"");
    let account = |id: &str, provider: &str, url: &str, model: &str| {
        format!(
            "\n[[accounts]]\nid = \"{id}\"\nprovider = \"{provider}\"\nbase_url = \"{url}\"\napi_key = \"sk-mock-supplier\"\nmodels = [\"{model}\"]\nforward_headers = [\"x-mock-usage\"]\n"
        )
    };
    format!(
        r#"{text}
[[models]]
id = "text-embedding-x"
family = "embed"
kind = "embedding"
author = "openai"
input_per_mtok = 0.02

[[models]]
id = "gem-embed"
family = "gem-embed"
kind = "embedding"
input_per_mtok = 0.15
{}{}{}
[[groups]]
id = 9
name = "Embeddings"
product_code = "embeddings"
models = ["text-embedding-x", "gem-embed", "gpt-4o-mini"]
wholesale_rate_multiplier = 1
"#,
        account("emb-oa", "openai", &format!("{a}/v1"), "text-embedding-x"),
        account("emb-oa-b", "openai", &format!("{b}/v1"), "text-embedding-x"),
        account("emb-gem", "gemini", &a, "gem-embed"),
    )
}

async fn start() -> (Harness, String) {
    let h = Harness::start_with_config(embeddings).await;
    let key = h.add_key(9, KeyPermissions::default()).await;
    (h, key)
}

impl Harness {
    fn embed(&self, key: &str, path: &str, body: &Value) -> reqwest::RequestBuilder {
        let req = self
            .http
            .post(self.url(path))
            .header("content-type", "application/json")
            .body(body.to_string());
        match path.starts_with("/v1beta/") {
            true => req.header("x-goog-api-key", key),
            false => req.bearer_auth(key),
        }
    }
}

/// ⌈tokens × price per million / 10⁶⌉ nano-USD.
fn cost(tokens: i64, per_mtok: i64) -> NanoUsd {
    nano(nanos(tokens, per_mtok))
}

fn nanos(tokens: i64, per_mtok: i64) -> i64 {
    (tokens * per_mtok + 999_999) / 1_000_000
}

fn floats(b64: &Value) -> Vec<f32> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(b64.as_str().unwrap())
        .unwrap();
    bytes
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// The OpenAI route to an OpenAI account: the body as sent (the model the served one), the
/// answer as the supplier made it (base64 when asked, the official SDK's default), charged the
/// supplier's `prompt_tokens` exactly; the hold released to the cent.
#[tokio::test]
async fn openai_route_on_an_openai_account_is_charged_the_suppliers_usage() {
    let (h, key) = start().await;
    let body = json!({"model": "openai/text-embedding-x", "input": ["alpha", "beta"],
                      "encoding_format": "base64", "user": "u-1"});
    let resp = h
        .embed(&key, "/compat/v1/embeddings", &body)
        .header("x-mock-usage", "prompt=1234")
        .send()
        .await
        .unwrap();
    let (status, reply) = json_of(resp).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(floats(&reply["data"][1]["embedding"]), vector(b"beta", 8));
    assert_eq!(reply["usage"]["prompt_tokens"], 1234);
    // Either OpenAI account may serve it (mock A or B).
    let sent = [h.mock.requests(), h.mock_b.requests()]
        .concat()
        .pop()
        .unwrap();
    assert_eq!(sent.path, "/v1/embeddings");
    let sent: Value = serde_json::from_slice(&sent.body).unwrap();
    assert_eq!(
        sent,
        json!({"model": "text-embedding-x", "input": ["alpha", "beta"],
               "encoding_format": "base64", "user": "u-1"})
    );
    let e = h.usage_event().await;
    assert_eq!(e.route, "embeddings");
    assert_eq!((e.input_tokens, e.output_tokens), (1234, 0));
    assert_eq!(e.measurement, opstate::Measurement::Exact);
    assert_eq!(e.charged_nanos, cost(1234, OPENAI_PER_MTOK));
    let held = (body.to_string().len() as i64 + 1) / 2;
    assert_eq!(e.hold_nanos, cost(held, OPENAI_PER_MTOK));
    let w = h.wallet().await;
    assert_eq!(w.reserved, nano(0));
    assert_eq!(
        w.balance,
        nano(1_000 * NANOS - nanos(1234, OPENAI_PER_MTOK))
    );
    // Floats when asked for (or by default), token ids as they are.
    for input in [json!("one"), json!([1, 2, 3]), json!([[1, 2], [3]])] {
        let body = json!({"model": "text-embedding-x", "input": input, "dimensions": 3});
        let (status, reply) = json_of(
            h.embed(&key, "/compat/v1/embeddings", &body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200, "{reply}");
        assert_eq!(reply["data"][0]["embedding"].as_array().unwrap().len(), 3);
        h.usage_event().await;
    }
}

/// The OpenAI route to a Gemini account: one batchEmbedContents request per input, `dimensions`
/// as `outputDimensionality`, the vectors back as base64 floats; no usage from Gemini: the
/// estimate from the inputs (⌈5/4⌉ + ⌈8/4⌉ = 4 tokens) is charged and shown; with usage
/// reported, that.
#[tokio::test]
async fn openai_route_on_a_gemini_account_is_translated_and_estimated() {
    let (h, key) = start().await;
    let body = json!({"model": "gem-embed", "input": ["hello", "world!!!"], "dimensions": 4,
                      "encoding_format": "base64"});
    let (status, reply) = json_of(
        h.embed(&key, "/compat/v1/embeddings", &body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["object"], "list");
    assert_eq!(reply["model"], "gem-embed");
    assert_eq!(floats(&reply["data"][0]["embedding"]), vector(b"hello", 4));
    assert_eq!(
        floats(&reply["data"][1]["embedding"]),
        vector(b"world!!!", 4)
    );
    assert_eq!(reply["data"][1]["index"], 1);
    assert_eq!(
        reply["usage"],
        json!({"prompt_tokens": 4, "total_tokens": 4})
    );
    let sent = h.mock.requests().pop().unwrap();
    assert_eq!(sent.path, "/v1beta/models/gem-embed:batchEmbedContents");
    let sent: Value = serde_json::from_slice(&sent.body).unwrap();
    assert_eq!(
        sent["requests"][1],
        json!({"model": "models/gem-embed",
        "content": {"parts": [{"text": "world!!!"}]}, "outputDimensionality": 4})
    );
    let e = h.usage_event().await;
    assert_eq!(
        (e.input_tokens, e.measurement),
        (4, opstate::Measurement::Estimated)
    );
    assert_eq!(e.charged_nanos, cost(4, GEMINI_PER_MTOK));
    // Floats by default; a Gemini answer with usage is charged exactly that.
    let body = json!({"model": "gem-embed", "input": "hello"});
    let resp = h
        .embed(&key, "/compat/v1/embeddings", &body)
        .header("x-mock-usage", "prompt=77")
        .send()
        .await
        .unwrap();
    let (status, reply) = json_of(resp).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["data"][0]["embedding"], json!(vector(b"hello", 8)));
    assert_eq!(reply["usage"]["prompt_tokens"], 77);
    let e = h.usage_event().await;
    assert_eq!(
        (e.input_tokens, e.measurement),
        (77, opstate::Measurement::Exact)
    );
    assert_eq!(e.charged_nanos, cost(77, GEMINI_PER_MTOK));
}

/// The native surface: a Gemini account gets the call as sent (the model the served one); an
/// OpenAI account gets it translated, and its floats come back in Gemini's shape, charged its
/// usage exactly. The native model list names the embedding methods.
#[tokio::test]
async fn native_routes_pass_through_and_translate() {
    let (h, key) = start().await;
    let one = json!({"content": {"parts": [{"text": "hi"}]}, "taskType": "RETRIEVAL_QUERY",
                     "outputDimensionality": 4});
    let (status, reply) = json_of(
        h.embed(&key, "/v1beta/models/gem-embed:embedContent", &one)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply, json!({"embedding": {"values": vector(b"hi", 4)}}));
    let sent = h.mock.requests().pop().unwrap();
    assert_eq!(sent.path, "/v1beta/models/gem-embed:embedContent");
    assert_eq!(
        serde_json::from_slice::<Value>(&sent.body).unwrap()["taskType"],
        "RETRIEVAL_QUERY"
    );
    let e = h.usage_event().await;
    assert_eq!((e.route.as_str(), e.input_tokens), ("native_embed", 1));
    let batch = json!({"requests": [
        {"model": "models/gem-embed", "content": {"role": "user", "parts": [{"text": "a"}]}},
        {"model": "models/gem-embed", "content": {"parts": [{"text": "b"}]}, "taskType": "RETRIEVAL_DOCUMENT", "title": "t"},
    ]});
    let (status, reply) = json_of(
        h.embed(&key, "/v1beta/models/gem-embed:batchEmbedContents", &batch)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["embeddings"][1]["values"], json!(vector(b"b", 8)));
    assert_eq!(h.usage_event().await.route, "native_batch_embed");

    // Translated to the OpenAI account: floats asked, the answer reshaped, usage exact.
    let batch = json!({"requests": [
        {"model": "models/text-embedding-x", "content": {"parts": [{"text": "a"}]}, "outputDimensionality": 2},
        {"model": "models/text-embedding-x", "content": {"parts": [{"text": "b"}]}, "outputDimensionality": 2},
    ]});
    let resp = h
        .embed(
            &key,
            "/v1beta/models/text-embedding-x:batchEmbedContents",
            &batch,
        )
        .header("x-mock-usage", "prompt=9")
        .send()
        .await
        .unwrap();
    let (status, reply) = json_of(resp).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        reply,
        json!({"embeddings": [{"values": vector(b"a", 2)}, {"values": vector(b"b", 2)}]})
    );
    // Either OpenAI account may have served it (mock A or B).
    let sent = [h.mock.requests(), h.mock_b.requests()]
        .concat()
        .into_iter()
        .find(|r| r.path == "/v1/embeddings")
        .unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&sent.body).unwrap(),
        json!({"model": "text-embedding-x", "input": ["a", "b"], "dimensions": 2, "encoding_format": "float"})
    );
    let e = h.usage_event().await;
    assert_eq!(
        (e.input_tokens, e.measurement),
        (9, opstate::Measurement::Exact)
    );
    assert_eq!(e.charged_nanos, cost(9, OPENAI_PER_MTOK));

    let (status, list) = json_of(
        h.http
            .get(h.url("/v1beta/models"))
            .header("x-goog-api-key", &key)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    let gem = list["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["baseModelId"] == "gem-embed")
        .unwrap();
    assert_eq!(
        gem["supportedGenerationMethods"],
        json!(["embedContent", "batchEmbedContents"])
    );
}

/// Bad bodies and what a translation cannot express: 400 naming the field in the surface's own
/// shape, no supplier contacted, no usage, the wallet untouched.
#[tokio::test]
async fn refusals_reach_no_supplier_and_cost_nothing() {
    let (h, key) = start().await;
    let openai = [
        (
            json!({"model": "text-embedding-x", "input": "a", "encoding_format": "md5"}),
            "encoding_format",
        ),
        (json!({"model": "text-embedding-x", "input": ""}), "input"),
        (json!({"model": "text-embedding-x", "input": []}), "input"),
        (
            json!({"model": "text-embedding-x", "input": "a", "dimensions": 0}),
            "dimensions",
        ),
        (
            json!({"model": "text-embedding-x", "input": "a", "stream": true}),
            "stream",
        ),
        (json!({"model": "text-embedding-x"}), "input"),
        (json!({"model": "gem-embed", "input": [[1, 2]]}), "input"),
        (
            json!({"model": "gem-embed", "input": "a", "user": "u"}),
            "user",
        ),
        (
            json!({"model": "gem-embed", "input": vec!["a"; 101]}),
            "input",
        ),
        (json!({"model": "gpt-4o-mini", "input": "a"}), "model"),
    ];
    for (body, param) in openai {
        let before = h.wallet().await;
        let (status, reply) = json_of(
            h.embed(&key, "/compat/v1/embeddings", &body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 400, "{body}: {reply}");
        assert_eq!(reply["error"]["param"], param, "{body}: {reply}");
        assert_eq!(reply["error"]["type"], "invalid_request_error", "{reply}");
        assert_eq!(
            h.mock.request_count() + h.mock_b.request_count(),
            0,
            "{reply}"
        );
        h.no_usage_event().await;
        assert_eq!(h.wallet().await, before);
    }
    let text = |t: &str| json!({"parts": [{"text": t}]});
    let native = [
        (
            "text-embedding-x:embedContent",
            json!({"content": text("a"), "taskType": "CLUSTERING"}),
            "taskType",
        ),
        (
            "text-embedding-x:embedContent",
            json!({"content": text("a"), "title": "t"}),
            "title",
        ),
        (
            "text-embedding-x:batchEmbedContents",
            json!({"requests": [
                {"model": "models/text-embedding-x", "content": text("a"), "outputDimensionality": 2},
                {"model": "models/text-embedding-x", "content": text("b")}]}),
            "requests[1].outputDimensionality",
        ),
        (
            "gem-embed:embedContent",
            json!({"content": {"parts": []}}),
            "content.parts",
        ),
        (
            "gem-embed:batchEmbedContents",
            json!({"requests": [{"content": text("a")}]}),
            "requests[0].model",
        ),
        (
            "gem-embed:embedContent",
            json!({"content": text("a"), "extra": 1}),
            "extra",
        ),
    ];
    for (path, body, field) in native {
        let before = h.wallet().await;
        let path = format!("/v1beta/models/{path}");
        let (status, reply) = json_of(h.embed(&key, &path, &body).send().await.unwrap()).await;
        assert_eq!(status, 400, "{path} {body}: {reply}");
        assert_eq!(reply["error"]["status"], "INVALID_ARGUMENT", "{reply}");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(message.contains(field), "{field} not in {message}");
        assert_eq!(
            h.mock.request_count() + h.mock_b.request_count(),
            0,
            "{reply}"
        );
        h.no_usage_event().await;
        assert_eq!(h.wallet().await, before);
    }
    // An embedding model is not a chat model.
    let chat = json!({"model": "text-embedding-x", "messages": [{"role": "user", "content": "a"}]});
    let (status, reply) = json_of(
        h.embed(&key, "/compat/v1/chat/completions", &chat)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (status, reply["error"]["param"].as_str()),
        (400, Some("model")),
        "{reply}"
    );
}

/// A supplier error fails over like a text call: the first account answers 500, the second
/// serves; one usage event, the served account's, charged once. A supplier's own 400 reaches
/// the client in the surface's shape and costs nothing.
#[tokio::test]
async fn failover_and_supplier_errors() {
    let (h, key) = start().await;
    h.mock.set_fault(Some("status=500".parse().unwrap()));
    let body = json!({"model": "text-embedding-x", "input": "x"});
    for _ in 0..2 {
        let resp = h
            .embed(&key, "/compat/v1/embeddings", &body)
            .header("x-mock-usage", "prompt=10")
            .send()
            .await
            .unwrap();
        let (status, reply) = json_of(resp).await;
        assert_eq!(status, 200, "{reply}");
        let e = h.usage_event().await;
        assert_eq!((e.account_id.as_str(), e.input_tokens), ("emb-oa-b", 10));
        assert_eq!(e.charged_nanos, cost(10, OPENAI_PER_MTOK));
    }
    h.no_usage_event().await;
    h.mock.set_fault(Some("status=400".parse().unwrap()));
    let (status, reply) = json_of(
        h.embed(
            &key,
            "/v1beta/models/gem-embed:embedContent",
            &json!({"content": {"parts": [{"text": "a"}]}}),
        )
        .send()
        .await
        .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{reply}");
    assert_eq!(reply["error"]["status"], "INVALID_ARGUMENT", "{reply}");
    let e = h.usage_event().await;
    assert_eq!((e.charged_nanos, e.status), (nano(0), 400));
    h.mock.set_fault(None);
}

/// Admission is a text call's: an embedding whose hold (⌈body bytes / 2⌉ tokens at the input
/// price) does not fit the available balance is 402 before any supplier, on both surfaces, and
/// holds nothing; one that fits is served.
#[tokio::test]
async fn an_embedding_that_does_not_fit_the_balance_is_refused_before_the_supplier() {
    let (h, key) = start().await;
    // 60,000 characters hold 30,000+ tokens: 0.0045 USD at 0.15 USD / Mtok; leave 0.001.
    h.stores.wallets.load(42, nano(NANOS / 1000)).await.unwrap();
    let long = "x".repeat(60_000);
    for (path, body) in [
        (
            "/compat/v1/embeddings",
            json!({"model": "gem-embed", "input": long}),
        ),
        (
            "/v1beta/models/gem-embed:embedContent",
            json!({"content": {"parts": [{"text": long}]}}),
        ),
    ] {
        let (status, err) = json_of(h.embed(&key, path, &body).send().await.unwrap()).await;
        assert_eq!(status, 402, "{path}: {err}");
        assert_eq!(
            h.mock.request_count() + h.mock_b.request_count(),
            0,
            "{path}"
        );
        h.no_usage_event().await;
        assert_eq!(h.wallet().await.reserved, NanoUsd::ZERO);
    }
    let short = json!({"model": "gem-embed", "input": "x"});
    let (status, reply) = json_of(
        h.embed(&key, "/compat/v1/embeddings", &short)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(h.usage_event().await.input_tokens, 1);
}
