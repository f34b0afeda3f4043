//! The gateway's integration suite: the real proxy, in-process on 127.0.0.1:0, in front of the
//! fault-injecting mock supplier, with the in-memory operational store.
//!
//! Every assertion is on parsed JSON or on exact bytes the mock recorded, never on log text.

#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: failing loudly is the point"
)]

use credentials::{Env, KeyHasher, Kind};
use futures_util::StreamExt;
use mock_supplier::{MockConfig, MockHandle, MockSupplier};
use money::{NanoUsd, RateMultiplier};
use opstate::{KeyPermissions, KeyRecord, ManualClock, Measurement, Stores, UsageEvent};
use proxy::{Gateway, Metrics};
use serde_json::{Value, json};
use settings::Settings;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// An amount of nano-USD.
fn nano(nanos: i64) -> NanoUsd {
    NanoUsd::from_nanos(nanos)
}

const PEPPER: &str = "test-pepper-0123456789";
const MAX_BODY: usize = 4 * 1024 * 1024;

struct Harness {
    base: String,
    mock: MockHandle,
    mock_b: MockHandle,
    stores: Stores,
    hasher: KeyHasher,
    metrics: Arc<Metrics>,
    key: String,
    http: reqwest::Client,
    _stop: watch::Sender<bool>,
    _tasks: JoinSet<()>,
}

/// Every log line of this test binary (debug level, Pingora's `log` output included), so tests
/// can check that no credential is ever logged.
fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = buf.clone();
        let _ = tracing_subscriber::fmt()
            .with_env_filter("debug")
            .with_ansi(false)
            .with_writer(move || LogSink(sink.clone()))
            .try_init();
        buf
    })
    .clone()
}

struct LogSink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogSink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn config(mock_url: &str, dead_url: &str) -> String {
    config_with(mock_url, dead_url, mock_url, 300_000)
}

/// Accounts: `mock` (gpt-4o-mini, gpt-4o; lists whisper-1 without the audio capability), `dead`
/// (dead-model, nothing listens), `mock-b` (gpt-4o, whisper-1 with the audio capability).
fn config_with(mock_url: &str, dead_url: &str, mock_b_url: &str, read_timeout_ms: u64) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:1"
environment = "development"
max_body_bytes = {MAX_BODY}
upstream_read_timeout_ms = {read_timeout_ms}

[admin]
embedded = true

[database]
url = "sqlite::memory:"

[security]
key_pepper = "{PEPPER}"

[[models]]
id = "gpt-4o-mini"
family = "gpt-4o"
kind = "text"
author = "openai"
input_per_mtok = 0.15
output_per_mtok = 0.60

[[models]]
id = "gpt-4o"
family = "gpt-4o"
kind = "text"
author = "openai"
input_per_mtok = 2.5
output_per_mtok = 10

[[models]]
id = "o3-mini"
family = "o3"
kind = "text"
input_per_mtok = 1.1
output_per_mtok = 4.4

[[models]]
id = "twin-model"
family = "twin"
kind = "text"
input_per_mtok = 1
output_per_mtok = 1

[[models]]
id = "big-model"
family = "pair"
kind = "text"
input_per_mtok = 10
output_per_mtok = 30
downgrade_to = "small-model"

[[models]]
id = "small-model"
family = "pair"
kind = "text"
input_per_mtok = 1
output_per_mtok = 3

[[models]]
id = "narrow-model"
family = "narrow"
kind = "text"
input_per_mtok = 1
output_per_mtok = 1

[[models]]
id = "whisper-1"
family = "whisper"
kind = "audio"
author = "openai"
per_minute_audio = 0.006

[[models]]
id = "whisper-2"
family = "whisper"
kind = "audio"
per_minute_audio = 0.006

[[models]]
id = "dead-model"
family = "dead"
kind = "text"
input_per_mtok = 1
output_per_mtok = 1

[[accounts]]
id = "mock"
provider = "openai"
base_url = "{mock_url}"
api_key = "sk-mock-supplier"
models = ["gpt-4o-mini", "gpt-4o", "small-model", "twin-model", "whisper-1", "whisper-2"]
max_concurrency = 1000

[[accounts]]
id = "dead"
provider = "openai"
base_url = "{dead_url}"
api_key = "sk-dead"
models = ["dead-model", "twin-model"]

[[accounts]]
id = "mock-b"
provider = "openai"
base_url = "{mock_b_url}"
api_key = "sk-mock-supplier"
models = ["gpt-4o", "narrow-model", "big-model", "whisper-1"]
capabilities = ["audio_transcription"]
max_concurrency = 2

[routing]
queue_depth = 2
queue_wait_ms = 400
downgrade_pressure = 0.5

[[groups]]
id = 1
name = "Standard"
product_code = "std"
models = ["gpt-4o-mini", "o3-mini", "dead-model"]
wholesale_rate_multiplier = 1

[[groups]]
id = 2
name = "Premium"
product_code = "pro"
models = ["gpt-4o", "narrow-model", "big-model"]
wholesale_rate_multiplier = 1

[[groups]]
id = 3
name = "Pair"
product_code = "pair"
models = ["big-model", "small-model", "twin-model"]
wholesale_rate_multiplier = 1

[[groups]]
id = 4
name = "Audio"
product_code = "audio"
models = ["whisper-1", "whisper-2", "gpt-4o-mini"]
wholesale_rate_multiplier = 1
"#
    )
}

/// A loopback address where nothing listens.
async fn closed_port_url() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}/v1")
}

impl Harness {
    async fn start() -> Harness {
        Harness::start_with(300_000).await
    }

    /// A gateway over `stores` exactly as given (nothing loaded, no wallets, no key).
    async fn start_with_stores(stores: Stores) -> Harness {
        Harness::build(300_000, stores, false).await
    }

    /// A gateway whose store runs on a clock that moves only when the test advances it.
    async fn start_with_clock() -> (Harness, Arc<ManualClock>) {
        let clock = ManualClock::new();
        let stores = Stores::memory_with_clock(clock.clone());
        (Harness::build(300_000, stores, true).await, clock)
    }

    async fn start_with(read_timeout_ms: u64) -> Harness {
        Harness::build(read_timeout_ms, Stores::memory(), true).await
    }

    async fn build(read_timeout_ms: u64, stores: Stores, prepare: bool) -> Harness {
        captured_logs();
        let mock = MockSupplier::start(MockConfig {
            api_key: Some("sk-mock-supplier".into()),
            ..MockConfig::default()
        })
        .await
        .unwrap();
        let mock_b = MockSupplier::start(MockConfig {
            api_key: Some("sk-mock-supplier".into()),
            name: "b".into(),
        })
        .await
        .unwrap();
        let text = config_with(
            &mock.base_url(),
            &closed_port_url().await,
            &mock_b.base_url(),
            read_timeout_ms,
        );
        let settings = Arc::new(Settings::parse(&text, &|_| None).unwrap());
        let metrics = Arc::new(Metrics::new().unwrap());
        let gateway = Gateway::new(settings, stores.clone(), metrics.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        tasks.spawn(proxy::serve_listener(listener, gateway, stop_rx));
        let mut h = Harness {
            base,
            mock,
            mock_b,
            stores,
            hasher: KeyHasher::new(PEPPER.as_bytes()),
            metrics,
            key: String::new(),
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
            _stop: stop,
            _tasks: tasks,
        };
        if !prepare {
            h.key = credentials::generate(Kind::CustomerKey, Env::Dev)
                .expose()
                .to_string();
            return h;
        }
        // A complete directory (as admin-api leaves it), and organization 42 holding 1 000 USD.
        h.stores.keys.load(&[]).await.unwrap();
        h.stores
            .wallets
            .load(42, nano(1_000 * 1_000_000_000))
            .await
            .unwrap();
        h.key = h.add_key(1, KeyPermissions::default()).await;
        h
    }

    async fn add_key(&self, group_id: i64, permissions: KeyPermissions) -> String {
        let secret = credentials::generate(Kind::CustomerKey, Env::Dev);
        let record = KeyRecord {
            key_id: 100 + group_id,
            org_id: 42,
            group_id,
            permissions,
            rate: Some(RateMultiplier::ONE),
        };
        self.stores
            .keys
            .publish(&self.hasher.hash(secret.expose()), &record)
            .await
            .unwrap();
        secret.expose().to_string()
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn post(&self, path: &str, body: &Value) -> reqwest::RequestBuilder {
        self.http
            .post(self.url(path))
            .bearer_auth(&self.key)
            .header("content-type", "application/json")
            .body(body.to_string())
    }

    /// Posts `body` to chat completions as a chunked stream (no `Content-Length`).
    async fn post_chunked(&self, body: &str, chunk: usize) -> reqwest::Response {
        let chunks: Vec<Result<Vec<u8>, std::io::Error>> = body
            .as_bytes()
            .chunks(chunk)
            .map(|c| Ok(c.to_vec()))
            .collect();
        self.http
            .post(self.url("/compat/v1/chat/completions"))
            .bearer_auth(&self.key)
            .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
                chunks,
            )))
            .send()
            .await
            .unwrap()
    }

    /// Waits for the usage event of the one request the test made, and returns it.
    async fn usage_event(&self) -> UsageEvent {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let got = self
                .stores
                .usage
                .claim("test", 1, Duration::from_secs(600))
                .await
                .unwrap();
            if let Some(entry) = got.into_iter().next() {
                self.stores.usage.ack(&[entry.id]).await.unwrap();
                return entry.event;
            }
            assert!(Instant::now() < deadline, "no usage event within 5 s");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn no_usage_event(&self) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            self.stores.usage.backlog().await.unwrap(),
            0,
            "no usage event expected"
        );
    }
}

async fn json_of(resp: reqwest::Response) -> (u16, Value) {
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.unwrap();
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&bytes)));
    (status, v)
}

fn chat(model: &str, stream: bool) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "Say hello"}], "stream": stream})
}

fn assert_invalid_key(status: u16, body: &Value) {
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["type"], "authentication_error", "{body}");
    assert!(body["error"]["message"].is_string(), "{body}");
}

#[tokio::test]
async fn each_key_header_authenticates() {
    let h = Harness::start().await;
    for (name, value) in [
        ("authorization", format!("Bearer {}", h.key)),
        ("x-api-key", h.key.clone()),
        ("x-alt-api-key", h.key.clone()),
    ] {
        let resp = h
            .http
            .get(h.url("/compat/v1/models"))
            .header(name, value)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{name}");
    }
    assert_eq!(
        h.mock.request_count(),
        0,
        "the model list is answered locally"
    );
}

#[tokio::test]
async fn missing_key_body() {
    let h = Harness::start().await;
    for resp in [
        h.http.get(h.url("/compat/v1/models")).send().await.unwrap(),
        h.http
            .post(h.url("/compat/v1/chat/completions"))
            .body(chat("gpt-4o-mini", false).to_string())
            .send()
            .await
            .unwrap(),
        h.http
            .get(h.url("/compat/v1/models"))
            .header("authorization", "Basic dXNlcjpwYXNz")
            .send()
            .await
            .unwrap(),
    ] {
        let (status, body) = json_of(resp).await;
        assert_eq!(status, 401);
        assert!(body["error"].is_string(), "{body}");
        assert!(body["message"].is_string(), "{body}");
    }
    assert_eq!(h.mock.request_count(), 0);
    h.no_usage_event().await;
}

#[tokio::test]
async fn invalid_keys_get_the_authentication_error() {
    let h = Harness::start().await;
    let unknown = credentials::generate(Kind::CustomerKey, Env::Dev);
    let partner = credentials::generate(Kind::PartnerToken, Env::Dev);
    let billing = credentials::generate(Kind::BillingToken, Env::Dev);
    let live = credentials::generate(Kind::CustomerKey, Env::Live);
    let mut typo = h.key.clone();
    typo.replace_range(12..13, if &typo[12..13] == "a" { "b" } else { "a" });
    // A production key: well formed, registered, but this gateway runs as development.
    h.stores
        .keys
        .publish(
            &h.hasher.hash(live.expose()),
            &KeyRecord {
                key_id: 9,
                org_id: 42,
                group_id: 1,
                permissions: KeyPermissions::default(),
                rate: Some(RateMultiplier::ONE),
            },
        )
        .await
        .unwrap();
    for key in [
        "sk-not-ours",
        unknown.expose(),
        partner.expose(),
        billing.expose(),
        live.expose(),
        typo.as_str(),
    ] {
        let resp = h
            .http
            .get(h.url("/compat/v1/models"))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        let (status, body) = json_of(resp).await;
        assert_invalid_key(status, &body);
    }
    // Two different keys in two headers are refused, never picked from.
    let resp = h
        .http
        .get(h.url("/compat/v1/models"))
        .bearer_auth(&h.key)
        .header("x-api-key", unknown.expose())
        .send()
        .await
        .unwrap();
    let (status, body) = json_of(resp).await;
    assert_invalid_key(status, &body);
    assert_eq!(h.mock.request_count(), 0);
}

#[tokio::test]
async fn revoked_key_stops_working_at_once() {
    let h = Harness::start().await;
    let resp = h
        .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    h.stores.keys.revoke(&h.hasher.hash(&h.key)).await.unwrap();
    let (status, body) = json_of(
        h.post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_invalid_key(status, &body);
    assert_eq!(h.mock.request_count(), 1);
}

#[tokio::test]
async fn key_without_openai_permission_is_forbidden() {
    let h = Harness::start().await;
    let key = h
        .add_key(
            1,
            KeyPermissions {
                openai: false,
                ..KeyPermissions::default()
            },
        )
        .await;
    for req in [
        h.http.get(h.url("/compat/v1/models")),
        h.http
            .post(h.url("/compat/v1/chat/completions"))
            .body(chat("gpt-4o-mini", false).to_string()),
    ] {
        let (status, body) = json_of(req.bearer_auth(&key).send().await.unwrap()).await;
        assert_eq!(status, 403);
        assert_eq!(body["error"]["type"], "permission_denied");
        assert_eq!(body["error"]["code"], "permission_denied");
        assert!(body["error"]["message"].is_string());
    }
    assert_eq!(h.mock.request_count(), 0);
}

#[tokio::test]
async fn model_list_shows_only_the_keys_group() {
    let h = Harness::start().await;
    let (status, body) = json_of(
        h.http
            .get(h.url("/compat/v1/models"))
            .bearer_auth(&h.key)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["object"], "list");
    let ids: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["gpt-4o-mini", "o3-mini", "dead-model"]);
    assert!(
        body["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["object"] == "model")
    );
    let premium = h.add_key(2, KeyPermissions::default()).await;
    let (_, body) = json_of(
        h.http
            .get(h.url("/compat/v1/models"))
            .bearer_auth(&premium)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        body["data"],
        json!([{"id": "gpt-4o", "object": "model"}, {"id": "narrow-model", "object": "model"}, {"id": "big-model", "object": "model"}])
    );
}

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
    let resp = h
        .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", true))
        .header("x-mock-fault", "cut_after=3")
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
async fn large_body_is_forwarded_intact_and_oversize_is_refused() {
    let h = Harness::start().await;
    let filler = "x".repeat(3 * 1024 * 1024);
    let body = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": filler}]});
    let sent = body.to_string();
    let resp = h
        .post("/compat/v1/chat/completions", &body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(h.mock.requests()[0].body.len(), sent.len());
    assert_eq!(
        h.mock.requests()[0].body,
        sent.as_bytes(),
        "3 MB body arrives byte for byte"
    );

    let too_big = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x".repeat(MAX_BODY)}]});
    let (status, err) = json_of(
        h.post("/compat/v1/chat/completions", &too_big)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 413);
    assert_eq!(err["error"]["code"], "request_too_large");
    assert_eq!(
        h.mock.request_count(),
        1,
        "the oversize body never reached the supplier"
    );
}

#[tokio::test]
async fn chunked_body_over_64k_needs_a_length() {
    let h = Harness::start().await;
    let body = chat(&"m".repeat(100 * 1024), false).to_string();
    let resp = h.post_chunked(&body, 16 * 1024).await;
    let (status, err) = json_of(resp).await;
    assert_eq!(status, 411);
    assert_eq!(err["error"]["code"], "length_required");
    assert_eq!(h.mock.request_count(), 0);
}

#[tokio::test]
async fn small_chunked_body_is_forwarded() {
    let h = Harness::start().await;
    let body = chat("gpt-4o-mini", false).to_string();
    let resp = h.post_chunked(&body, 7).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(h.mock.requests()[0].body, body.as_bytes());
}

#[tokio::test]
async fn unknown_routes_and_models() {
    let h = Harness::start().await;
    // /responses without the compat segment is not a route, with or without a key.
    for path in ["/responses", "/v1/responses", "/compat/v1/nope"] {
        let (status, body) = json_of(
            h.post(path, &json!({"model": "gpt-4o-mini", "input": "x"}))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 404, "{path}");
        assert_eq!(body["error"]["code"], "unknown_route", "{path}");
    }
    let (status, _) = json_of(h.http.post(h.url("/responses")).send().await.unwrap()).await;
    assert_eq!(status, 404);
    // Unknown model, a model outside the key's group, and a wrong author prefix all read as unknown.
    for model in ["gpt-9", "gpt-4o", "anthropic/gpt-4o-mini", "openai/o3-mini"] {
        let (status, body) = json_of(
            h.post("/compat/v1/chat/completions", &chat(model, false))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 404, "{model}");
        assert_eq!(body["error"]["code"], "model_not_found", "{model}");
        assert_eq!(body["error"]["type"], "invalid_request_error");
    }
    // A configured model no account serves.
    let (status, body) = json_of(
        h.post("/compat/v1/chat/completions", &chat("o3-mini", false))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 503);
    assert_eq!(body["error"]["code"], "no_account_available");
    assert_eq!(h.mock.request_count(), 0);
    h.no_usage_event().await;
}

#[tokio::test]
async fn malformed_bodies_are_refused_before_the_supplier() {
    let h = Harness::start().await;
    for (body, param) in [
        ("{not json".to_string(), Value::Null),
        (json!({"messages": []}).to_string(), json!("model")),
        (
            json!({"model": "gpt-4o-mini"}).to_string(),
            json!("messages"),
        ),
        (
            json!({"model": "gpt-4o-mini", "messages": [], "stream": "yes"}).to_string(),
            json!("stream"),
        ),
        (String::new(), Value::Null),
    ] {
        let resp = h
            .http
            .post(h.url("/compat/v1/chat/completions"))
            .bearer_auth(&h.key)
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let (status, err) = json_of(resp).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(err["error"]["type"], "invalid_request_error", "{body}");
        assert_eq!(err["error"]["param"], param, "{body}");
    }
    assert_eq!(h.mock.request_count(), 0);
}

#[tokio::test]
async fn unreachable_supplier_gets_a_json_error() {
    let h = Harness::start().await;
    let (status, body) = json_of(
        h.post("/compat/v1/chat/completions", &chat("dead-model", false))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 502);
    assert_eq!(body["error"]["type"], "upstream_error");
    assert_eq!(body["error"]["code"], "upstream_unreachable");
    let e = h.usage_event().await;
    assert_eq!(
        (e.input_tokens, e.output_tokens),
        (0, 0),
        "nothing was served"
    );
    assert_eq!(e.status, 502);
    assert_eq!(e.account_id, "dead");
}

#[tokio::test]
async fn supplier_errors_pass_through_unchanged() {
    let h = Harness::start().await;
    let resp = h
        .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
        .header("x-mock-fault", "status=400")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let received = resp.bytes().await.unwrap();
    assert_eq!(received, h.mock.requests()[0].response_body);
}

#[tokio::test]
async fn metrics_count_requests_and_tokens() {
    let h = Harness::start().await;
    h.post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
        .header("x-mock-usage", "prompt=11,completion=5")
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let _ = h.usage_event().await;
    let text = h.metrics.render();
    assert!(
        text.contains(r#"tollgate_requests_total{model="gpt-4o-mini",route="chat_completions",status="200"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(
            r#"tollgate_tokens_total{kind="input",measurement="exact",model="gpt-4o-mini"} 11"#
        ),
        "{text}"
    );
    assert!(
        text.contains("tollgate_upstream_latency_seconds_bucket"),
        "{text}"
    );
    assert!(
        text.contains(r#"tollgate_in_flight{route="chat_completions"} 0"#),
        "{text}"
    );
}

fn uuid_like() -> String {
    format!("{}-{:?}", std::process::id(), std::thread::current().id()).replace(['(', ')'], "")
}

#[tokio::test]
async fn stalled_supplier_times_out_with_a_json_error() {
    let h = Harness::start_with(300).await;
    let (status, body) = json_of(
        h.post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
            .header("x-mock-fault", "stall_ms=2000")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 504);
    assert_eq!(body["error"]["code"], "upstream_timeout");
    let e = h.usage_event().await;
    assert_eq!(e.status, 504);
    assert_eq!((e.input_tokens, e.output_tokens), (0, 0));
}

#[tokio::test]
async fn malformed_sse_passes_through_and_is_estimated() {
    let h = Harness::start().await;
    let resp = h
        .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", true))
        .header("x-mock-fault", "malformed_sse")
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
async fn logs_never_contain_credentials() {
    let h = Harness::start().await;
    let partner = credentials::generate(Kind::PartnerToken, Env::Dev);
    for (name, value) in [
        ("authorization", format!("Bearer {}", h.key)),
        ("x-api-key", h.key.clone()),
        ("x-alt-api-key", h.key.clone()),
        ("authorization", format!("Bearer {}", partner.expose())),
    ] {
        let _ = h
            .http
            .post(h.url("/compat/v1/chat/completions"))
            .header(name, value)
            .body(chat("gpt-4o-mini", true).to_string())
            .send()
            .await
            .unwrap()
            .bytes()
            .await;
    }
    let _ = h.usage_event().await;
    let logs = String::from_utf8_lossy(&captured_logs().lock().unwrap()).into_owned();
    assert!(logs.contains("request settled"), "the capture works");
    assert!(!logs.contains(&h.key), "customer key in logs");
    assert!(!logs.contains(partner.expose()), "partner token in logs");
    let leak: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("sk-mock-supplier"))
        .take(3)
        .collect();
    assert!(leak.is_empty(), "supplier key in logs: {leak:?}");
}

const NANOS: i64 = 1_000_000_000;

/// gpt-4o-mini at 0.15 / 0.60 USD per million tokens, rate 1.0.
fn mini_cost(input: u64, output: u64) -> NanoUsd {
    nano(i64::try_from((input * 150_000_000 + output * 600_000_000).div_ceil(1_000_000)).unwrap())
}

#[tokio::test]
async fn calls_are_charged_exactly_and_holds_close() {
    let h = Harness::start().await;
    let before = h.stores.wallets.snapshot(42).await.unwrap().unwrap();
    for stream in [false, true] {
        let resp = h
            .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", stream))
            .header("x-mock-usage", "prompt=1000,completion=500")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp.bytes().await.unwrap();
        let e = h.usage_event().await;
        assert_eq!(e.cost_nanos, mini_cost(1000, 500), "stream={stream}");
        assert_eq!(e.charged_nanos, e.cost_nanos);
        assert_eq!(e.excess_nanos, NanoUsd::ZERO);
        assert!(e.hold_nanos >= e.cost_nanos);
    }
    let after = h.stores.wallets.snapshot(42).await.unwrap().unwrap();
    assert_eq!(
        before.balance.checked_sub(after.balance),
        mini_cost(1000, 500).checked_add(mini_cost(1000, 500))
    );
    assert_eq!(after.reserved, NanoUsd::ZERO, "every hold closed");
    // A call that never reached a supplier costs nothing.
    let (status, _) = json_of(
        h.post("/compat/v1/chat/completions", &chat("dead-model", false))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 502);
    let e = h.usage_event().await;
    assert_eq!(
        (e.cost_nanos, e.charged_nanos),
        (NanoUsd::ZERO, NanoUsd::ZERO)
    );
    assert_eq!(h.stores.wallets.snapshot(42).await.unwrap().unwrap(), after);
}

#[tokio::test]
async fn insufficient_balance_is_refused_before_the_supplier() {
    let h = Harness::start().await;
    // A 100 000-token output cap at 0.60 USD / Mtok needs 0.06 USD; leave 0.01.
    h.stores.wallets.load(42, nano(NANOS / 100)).await.unwrap();
    let mut body = chat("gpt-4o-mini", false);
    body["max_tokens"] = json!(100_000);
    let (status, err) = json_of(
        h.post("/compat/v1/chat/completions", &body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 402, "{err}");
    assert_eq!(err["error"]["type"], "insufficient_quota");
    assert_eq!(err["error"]["code"], "insufficient_balance");
    assert_eq!(h.mock.request_count(), 0, "refused before any supplier");
    h.no_usage_event().await;
    assert_eq!(
        h.stores
            .wallets
            .snapshot(42)
            .await
            .unwrap()
            .unwrap()
            .reserved,
        NanoUsd::ZERO
    );
    // A smaller cap fits.
    body["max_tokens"] = json!(100);
    let resp = h
        .post("/compat/v1/chat/completions", &body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // A non-integer cap is a bad request.
    body["max_tokens"] = json!("lots");
    let (status, err) = json_of(
        h.post("/compat/v1/chat/completions", &body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{err}");
}

#[tokio::test]
async fn missing_wallet_or_price_fails_closed() {
    let h = Harness::start().await;
    // Another organization whose wallet the store does not have.
    let secret = credentials::generate(Kind::CustomerKey, Env::Dev);
    let mut record = KeyRecord {
        key_id: 7,
        org_id: 77,
        group_id: 1,
        permissions: KeyPermissions::default(),
        rate: Some(RateMultiplier::ONE),
    };
    h.stores
        .keys
        .publish(&h.hasher.hash(secret.expose()), &record)
        .await
        .unwrap();
    let call = |key: String| {
        let h = &h;
        async move {
            json_of(
                h.http
                    .post(h.url("/compat/v1/chat/completions"))
                    .bearer_auth(key)
                    .body(chat("gpt-4o-mini", false).to_string())
                    .send()
                    .await
                    .unwrap(),
            )
            .await
        }
    };
    let (status, err) = call(secret.expose().to_string()).await;
    assert_eq!(status, 503, "{err}");
    assert_eq!(err["error"]["code"], "wallet_unavailable");
    // A key without a price for its group is never free.
    record.org_id = 42;
    record.rate = None;
    h.stores
        .keys
        .publish(&h.hasher.hash(secret.expose()), &record)
        .await
        .unwrap();
    let (status, err) = call(secret.expose().to_string()).await;
    assert_eq!(status, 503, "{err}");
    assert_eq!(err["error"]["code"], "price_unavailable");
    assert_eq!(h.mock.request_count(), 0);
}

#[tokio::test]
async fn concurrent_calls_never_overdraw() {
    let h = Arc::new(Harness::start().await);
    // Each call reserves (body ≈ 100 bytes → 50 input tokens) + 1000 output tokens ≈ 0.0006 USD;
    // the balance covers about 20 of them.
    let mut body = chat("gpt-4o-mini", false);
    body["max_tokens"] = json!(1000);
    let (hold, _) = proxy::worst_case(
        &Settings::parse(&config("http://x/v1", "http://y/v1"), &|_| None)
            .unwrap()
            .model("gpt-4o-mini")
            .unwrap()
            .prices,
        Some(RateMultiplier::ONE),
        body.to_string().len(),
        Some(1000),
        4096,
    )
    .unwrap();
    h.stores
        .wallets
        .load(42, nano(hold.nanos() * 20 + hold.nanos() / 2))
        .await
        .unwrap();
    let mut tasks = JoinSet::new();
    for _ in 0..200 {
        let (h, body) = (h.clone(), body.clone());
        tasks.spawn(async move {
            let resp = h
                .post("/compat/v1/chat/completions", &body)
                .header("x-mock-usage", "prompt=50,completion=1000")
                .header("x-mock-delay-ms", "20")
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            resp.bytes().await.unwrap();
            status
        });
    }
    let mut ok = 0;
    let mut refused = 0;
    while let Some(r) = tasks.join_next().await {
        match r.unwrap() {
            200 => ok += 1,
            402 => refused += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!(ok + refused, 200);
    assert!(ok >= 20, "at least the covered calls succeed ({ok})");
    assert_eq!(
        h.mock.request_count(),
        ok,
        "refused calls never reached the supplier"
    );
    let w = settled_wallet(&h.stores, 42).await;
    assert!(!w.balance.is_negative(), "never overdrawn: {w:?}");
    assert_eq!(w.reserved, NanoUsd::ZERO);
}

/// The wallet once every hold has closed (settlement runs after the last byte reached the
/// client), or as it is after 5 s.
async fn settled_wallet(stores: &Stores, org: i64) -> opstate::WalletSnapshot {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let w = stores.wallets.snapshot(org).await.unwrap().unwrap();
        if w.reserved.is_zero() || Instant::now() > deadline {
            return w;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_lost_directory_is_unavailable_not_invalid() {
    let h = Harness::start().await;
    // The store restarted empty: nothing is loaded, every lookup misses.
    let h2 = Harness::start_with_stores(Stores::memory()).await;
    let (status, body) = json_of(
        h2.post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "store_unavailable");
    assert_eq!(h2.mock.request_count(), 0);
    // With a complete directory the same miss is an invalid key.
    let unknown = credentials::generate(Kind::CustomerKey, Env::Dev);
    let (status, body) = json_of(
        h.http
            .get(h.url("/compat/v1/models"))
            .bearer_auth(unknown.expose())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_invalid_key(status, &body);
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

/// A session id whose rendezvous order for gpt-4o puts account `first` (0 = mock, 2 = mock-b)
/// first, for organization 42.
fn session_preferring(first: usize) -> String {
    (0..1000)
        .map(|i| format!("s{i}"))
        .find(|sid| {
            proxy::rendezvous_order(&[0, 2], &["mock", "dead", "mock-b"], &format!("42:{sid}"))[0]
                == first
        })
        .unwrap()
}

async fn premium(h: &Harness, sid: &str, extra: &[(&str, &str)]) -> (u16, Value, Vec<u8>) {
    let key = h.add_key(2, KeyPermissions::default()).await;
    let mut req = h
        .http
        .post(h.url("/compat/v1/chat/completions"))
        .bearer_auth(key)
        .header("x-session-id", sid)
        .body(chat("gpt-4o", false).to_string());
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.unwrap().to_vec();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        bytes,
    )
}

#[tokio::test]
async fn sessions_stick_to_one_account() {
    let h = Harness::start().await;
    for first in [0, 2] {
        let sid = session_preferring(first);
        let (a0, b0) = (h.mock.request_count(), h.mock_b.request_count());
        for _ in 0..4 {
            let (status, _, _) = premium(&h, &sid, &[]).await;
            assert_eq!(status, 200);
        }
        let (a, b) = (h.mock.request_count() - a0, h.mock_b.request_count() - b0);
        assert_eq!(
            if first == 0 { (a, b) } else { (b, a) },
            (4, 0),
            "same session, same account"
        );
    }
}

#[tokio::test]
async fn a_429_fails_over_and_cools_the_account_until_its_reset() {
    let (h, clock) = Harness::start_with_clock().await;
    let sid = session_preferring(0);
    h.mock
        .set_fault(Some("status=429;retry_after=2".parse().unwrap()));
    let big = "y".repeat(300 * 1024);
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": big}]});
    let key = h.add_key(2, KeyPermissions::default()).await;
    let resp = h
        .http
        .post(h.url("/compat/v1/chat/completions"))
        .bearer_auth(&key)
        .header("x-session-id", &sid)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "the client never sees the 429");
    resp.bytes().await.unwrap();
    assert_eq!(h.mock.request_count(), 1);
    assert_eq!(h.mock_b.request_count(), 1);
    assert_eq!(
        h.mock.requests()[0].body,
        h.mock_b.requests()[0].body,
        "the identical body reached the next account"
    );
    assert_eq!(h.mock_b.requests()[0].body.len(), body.to_string().len());
    let e = h.usage_event().await;
    assert_eq!((e.account_id.as_str(), e.attempts), ("mock-b", 2));
    // Cooling: the same session now goes straight to the other account.
    let (status, _, _) = premium(&h, &sid, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(h.mock.request_count(), 1, "a cooling account is skipped");
    let text = h.metrics.render();
    assert!(
        text.contains(r#"tollgate_failovers_total{reason="rate_limited"} 1"#),
        "{text}"
    );
    // After the reset the account serves again (a new conversation that prefers it; the first one
    // stays where it moved).
    h.mock.set_fault(None);
    clock.advance(Duration::from_millis(2_100));
    let fresh = (0..1000)
        .map(|i| format!("fresh-{i}"))
        .find(|sid| {
            proxy::rendezvous_order(&[0, 2], &["mock", "dead", "mock-b"], &format!("42:{sid}"))[0]
                == 0
        })
        .unwrap();
    let (status, _, _) = premium(&h, &fresh, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(h.mock.request_count(), 2, "back after its reset time");
}

#[tokio::test]
async fn when_every_account_cools_the_client_gets_usage_limit_reached() {
    let h = Harness::start().await;
    let sid = session_preferring(0);
    h.mock
        .set_fault(Some("status=429;retry_after=5".parse().unwrap()));
    h.mock_b
        .set_fault(Some("status=429;retry_after=3".parse().unwrap()));
    // Both refuse: the last 429 passes through as the supplier sent it.
    let (status, _, bytes) = premium(&h, &sid, &[]).await;
    assert_eq!(status, 429);
    assert_eq!(bytes, h.mock_b.requests()[0].response_body.to_vec());
    // Now both are cooling: answered at once, no supplier contacted.
    let (status, body, _) = premium(&h, &sid, &[]).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["type"], "usage_limit_reached");
    assert!(body["error"]["message"].is_string());
    let resets = body["error"]["resets_in_seconds"].as_u64().unwrap();
    assert!(
        (1..=3).contains(&resets),
        "the shortest remaining cooldown: {resets}"
    );
    assert_eq!(h.mock.request_count() + h.mock_b.request_count(), 2);
    let e = h.usage_event().await;
    assert_eq!(
        (e.cost_nanos, e.charged_nanos),
        (NanoUsd::ZERO, NanoUsd::ZERO),
        "a refused call costs nothing"
    );
    assert_eq!(
        h.stores
            .wallets
            .snapshot(42)
            .await
            .unwrap()
            .unwrap()
            .reserved,
        NanoUsd::ZERO
    );
}

#[tokio::test]
async fn a_5xx_fails_over_but_a_request_error_does_not() {
    let h = Harness::start().await;
    let sid = session_preferring(0);
    h.mock.set_fault(Some("status=500".parse().unwrap()));
    let (status, _, _) = premium(&h, &sid, &[]).await;
    assert_eq!(status, 200);
    assert_eq!((h.mock.request_count(), h.mock_b.request_count()), (1, 1));
    // A request-shape error is the client's: passed through, never retried elsewhere.
    let other = session_preferring(2);
    let (status, _, _) = premium(&h, &other, &[("x-mock-fault", "status=400")]).await;
    assert_eq!(status, 400);
    assert_eq!(h.mock_b.request_count(), 2);
    assert_eq!(h.mock.request_count(), 1, "no retry on a 400");
}

#[tokio::test]
async fn a_session_stays_where_it_moved_after_a_failover() {
    let (h, clock) = Harness::start_with_clock().await;
    let sid = session_preferring(0);
    h.mock
        .set_fault(Some("status=429;retry_after=1".parse().unwrap()));
    let (status, _, _) = premium(&h, &sid, &[]).await;
    assert_eq!(status, 200);
    assert_eq!((h.mock.request_count(), h.mock_b.request_count()), (1, 1));
    h.mock.set_fault(None);
    clock.advance(Duration::from_millis(1_100));
    // Its first choice recovered, but the conversation (and its prompt cache) stays on mock-b.
    for _ in 0..3 {
        let (status, _, _) = premium(&h, &sid, &[]).await;
        assert_eq!(status, 200);
    }
    assert_eq!((h.mock.request_count(), h.mock_b.request_count()), (1, 4));
}

#[tokio::test]
async fn full_capacity_queues_then_refuses_with_capacity_queue_full() {
    let h = Arc::new(Harness::start().await);
    let key = h.add_key(2, KeyPermissions::default()).await;
    let call = |h: Arc<Harness>, key: String, slow: bool| async move {
        let mut req = h
            .http
            .post(h.url("/compat/v1/chat/completions"))
            .bearer_auth(key)
            .body(chat("narrow-model", true).to_string());
        if slow {
            req = req
                .header("x-mock-delay-ms", "250")
                .header("x-mock-events", "4");
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.unwrap();
        (
            status,
            serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null),
        )
    };
    // Two slow streams fill mock-b (max_concurrency = 2).
    let mut running = JoinSet::new();
    for _ in 0..2 {
        running.spawn(call(h.clone(), key.clone(), true));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while h.stores.slots.in_use(&["mock-b"]).await.unwrap()[0] < 2 {
        assert!(Instant::now() < deadline, "the slow calls never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Two wait (queue depth 2); the fifth is refused at once.
    let mut waiting = JoinSet::new();
    for _ in 0..2 {
        waiting.spawn(call(h.clone(), key.clone(), false));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let (status, body) = call(h.clone(), key.clone(), false).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "capacity_queue_full");
    assert!(body["error"]["message"].is_string());
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "refused at once, not after waiting"
    );
    // The waiters give up after queue_wait_ms (400 ms), before the slow calls end (~1 s).
    while let Some(r) = waiting.join_next().await {
        let (status, body) = r.unwrap();
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (429, Some("capacity_queue_full"))
        );
    }
    while let Some(r) = running.join_next().await {
        assert_eq!(r.unwrap().0, 200);
    }
    assert_eq!(
        h.stores.slots.in_use(&["mock-b"]).await.unwrap(),
        vec![0],
        "slots given back"
    );
    assert_eq!(
        h.mock_b.request_count(),
        2,
        "refused and timed-out calls never reached the supplier"
    );
    // Capacity is back.
    let (status, _) = call(h.clone(), key.clone(), false).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn simple_work_is_downgraded_only_under_pressure_and_when_allowed() {
    let h = Arc::new(Harness::start().await);
    let pair = h.add_key(3, KeyPermissions::default()).await;
    let premium = h.add_key(2, KeyPermissions::default()).await;
    let call = |h: Arc<Harness>,
                key: String,
                body: Value,
                extra: Option<(&'static str, &'static str)>| async move {
        let mut req = h
            .http
            .post(h.url("/compat/v1/chat/completions"))
            .bearer_auth(key)
            .body(body.to_string());
        if let Some((k, v)) = extra {
            req = req.header(k, v);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let served = resp
            .headers()
            .get("x-tollgate-model-served")
            .map(|v| v.to_str().unwrap().to_string());
        let bytes = resp.bytes().await.unwrap();
        (
            status,
            served,
            serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null),
        )
    };
    // No pressure: big-model is served by big-model.
    let (status, served, body) =
        call(h.clone(), pair.clone(), chat("big-model", false), None).await;
    assert_eq!((status, served), (200, None));
    assert_eq!(body["model"], "big-model");
    // One slow call holds 1 of big-model's 2 slots: pressure 0.5.
    let mut slow = JoinSet::new();
    slow.spawn(call(
        h.clone(),
        pair.clone(),
        chat("big-model", true),
        Some(("x-mock-delay-ms", "400")),
    ));
    let deadline = Instant::now() + Duration::from_secs(5);
    while h.stores.slots.in_use(&["mock-b"]).await.unwrap()[0] < 1 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Simple work under pressure goes to small-model, billed and reported as such.
    let (status, served, body) =
        call(h.clone(), pair.clone(), chat("big-model", false), None).await;
    assert_eq!((status, served.as_deref()), (200, Some("small-model")));
    assert_eq!(
        body["model"], "small-model",
        "the response names the model that served"
    );
    let events: Vec<UsageEvent> = {
        let mut all = Vec::new();
        for _ in 0..2 {
            all.push(h.usage_event().await);
        }
        all
    };
    let down = events
        .iter()
        .find(|e| e.model_served == "small-model")
        .unwrap();
    assert_eq!(down.model_requested, "big-model");
    // Complex work, an opted-out client, and a key whose group lacks the target keep the model.
    let mut with_tools = chat("big-model", false);
    with_tools["tools"] = json!([{"type": "function", "function": {"name": "f"}}]);
    for (key, body, extra) in [
        (pair.clone(), with_tools, None),
        (
            pair.clone(),
            chat("big-model", false),
            Some(("x-tollgate-downgrade", "never")),
        ),
        (premium.clone(), chat("big-model", false), None),
    ] {
        let (status, served, body) = call(h.clone(), key, body, extra).await;
        assert_eq!((status, served), (200, None), "{body}");
        assert_eq!(body["model"], "big-model");
    }
    while let Some(r) = slow.join_next().await {
        assert_eq!(r.unwrap().0, 200);
    }
    assert!(
        h.metrics
            .render()
            .contains(r#"tollgate_downgrades_total{from="big-model",to="small-model"} 1"#)
    );
}

/// A session id whose order for twin-model (accounts 0 = mock, 1 = dead) puts `first` first.
fn twin_session(first: usize) -> String {
    (0..1000)
        .map(|i| format!("twin-{i}"))
        .find(|sid| {
            proxy::rendezvous_order(&[0, 1], &["mock", "dead", "mock-b"], &format!("42:{sid}"))[0]
                == first
        })
        .unwrap()
}

#[tokio::test]
async fn a_refused_connection_fails_over_and_cools_the_account() {
    let h = Harness::start().await;
    let key = h.add_key(3, KeyPermissions::default()).await;
    let sid = twin_session(1);
    let send = || {
        h.http
            .post(h.url("/compat/v1/chat/completions"))
            .bearer_auth(&key)
            .header("x-session-id", &sid)
            .body(chat("twin-model", false).to_string())
            .send()
    };
    let resp = send().await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.bytes().await.unwrap();
    let e = h.usage_event().await;
    assert_eq!((e.account_id.as_str(), e.attempts), ("mock", 2));
    let left = h.stores.cooldowns.remaining(&["dead"]).await.unwrap();
    assert!(left[0].is_some(), "the unreachable account cools");
    let resp = send().await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.bytes().await.unwrap();
    assert_eq!(
        h.usage_event().await.attempts,
        1,
        "the cooling account is skipped"
    );
}

#[tokio::test]
async fn no_retry_once_bytes_reached_the_client() {
    let h = Harness::start().await;
    let sid = session_preferring(0);
    let key = h.add_key(2, KeyPermissions::default()).await;
    let resp = h
        .http
        .post(h.url("/compat/v1/chat/completions"))
        .bearer_auth(&key)
        .header("x-session-id", &sid)
        .header("x-mock-fault", "cut_after=2")
        .body(chat("gpt-4o", true).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    let mut errored = false;
    while let Some(chunk) = stream.next().await {
        if chunk.is_err() {
            errored = true;
            break;
        }
    }
    assert!(errored, "the stream ends abnormally");
    assert_eq!(
        h.mock_b.request_count(),
        0,
        "never retried elsewhere after bytes were sent"
    );
    assert_eq!(h.usage_event().await.attempts, 1);
}

#[tokio::test]
async fn two_instances_share_stickiness_and_cooldowns() {
    let Some(redis_url) = testkit::redis_url() else {
        eprintln!("REDIS_URL not set: shared-routing scenario skipped");
        return;
    };
    let prefix = format!("share:{}:", uuid_like());
    let stores = Stores::redis(&redis_url, &prefix).await.unwrap();
    let one = Harness::start_with_stores(stores.clone()).await;
    // The second instance: same configuration and store, other process state.
    let settings = Arc::new(
        Settings::parse(
            &config_with(
                &one.mock.base_url(),
                "http://127.0.0.1:9/v1",
                &one.mock_b.base_url(),
                300_000,
            ),
            &|_| None,
        )
        .unwrap(),
    );
    let gateway = Gateway::new(settings, stores.clone(), Arc::new(Metrics::new().unwrap()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let two = format!("http://{}", listener.local_addr().unwrap());
    let (_stop, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    tasks.spawn(proxy::serve_listener(listener, gateway, stop_rx));
    stores.keys.load(&[]).await.unwrap();
    stores.wallets.load(42, nano(1_000 * NANOS)).await.unwrap();
    let key = one.add_key(2, KeyPermissions::default()).await;
    let post = |base: String, sid: String| {
        let (http, key) = (one.http.clone(), key.clone());
        async move {
            let resp = http
                .post(format!("{base}/compat/v1/chat/completions"))
                .bearer_auth(key)
                .header("x-session-id", sid)
                .body(chat("gpt-4o", false).to_string())
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            resp.bytes().await.unwrap();
            status
        }
    };
    // Stickiness across instances: a session preferring mock-b lands there from both.
    let sid_b = session_preferring(2);
    for base in [one.base.clone(), two.clone(), one.base.clone()] {
        assert_eq!(post(base, sid_b.clone()).await, 200);
    }
    assert_eq!(
        (one.mock.request_count(), one.mock_b.request_count()),
        (0, 3)
    );
    // A cooldown decided by one instance is honoured by the other.
    let sid_a = session_preferring(0);
    one.mock
        .set_fault(Some("status=429;retry_after=30".parse().unwrap()));
    assert_eq!(post(one.base.clone(), sid_a.clone()).await, 200);
    assert_eq!(one.mock.request_count(), 1);
    one.mock.set_fault(None);
    assert_eq!(post(two.clone(), sid_a.clone()).await, 200);
    assert_eq!(
        one.mock.request_count(),
        1,
        "the other instance skips the cooling account"
    );
}

/// Admin routes while admin-api cannot be reached: the partner API's envelope, 503
/// `SERVICE_UNAVAILABLE` (retry later), never a supplier error or an authentication error.
#[tokio::test]
async fn admin_routes_without_admin_api_answer_503() {
    let h = Harness::start().await;
    for path in ["/partner/v1/me", "/api/v1/organization/billing/balance"] {
        let (status, body) = json_of(
            h.http
                .get(h.url(path))
                .bearer_auth("tgp_dev_whatever")
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 503, "{path}: {body}");
        assert_eq!(body["code"], 503, "{body}");
        assert_eq!(body["reason"], "SERVICE_UNAVAILABLE", "{body}");
        assert!(
            body["message"].as_str().unwrap().contains("admin API"),
            "{body}"
        );
        assert!(body["metadata"].is_object(), "{body}");
    }
    assert_eq!(h.mock.request_count(), 0);
    h.no_usage_event().await;
}

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
    let (status, reply) = json_of(h.transcribe(&key, "audio-1", body.clone()).await).await;
    assert_eq!(status, 429, "the only capable account is cooling: {reply}");
    assert_eq!(reply["error"]["type"], "usage_limit_reached");
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
    let w = h.stores.wallets.snapshot(42).await.unwrap().unwrap();
    assert_eq!(w.reserved, NanoUsd::ZERO, "nothing held");
}

#[tokio::test]
async fn a_rate_limit_reset_named_only_in_the_body_is_honoured() {
    let (h, clock) = Harness::start_with_clock().await;
    let key = h.add_key(2, KeyPermissions::default()).await;
    // narrow-model has one account; its 429 names the reset only in the message, not in headers.
    h.mock_b
        .set_fault(Some("status=429;reset_body=2".parse().unwrap()));
    let call = || {
        h.http
            .post(h.url("/compat/v1/chat/completions"))
            .bearer_auth(&key)
            .body(chat("narrow-model", false).to_string())
            .send()
    };
    let (status, body) = json_of(call().await.unwrap()).await;
    assert_eq!(status, 429);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("try again in 2s"),
        "{body}"
    );
    h.mock_b.set_fault(None);
    let (status, body) = json_of(call().await.unwrap()).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["type"], "usage_limit_reached");
    let resets = body["error"]["resets_in_seconds"].as_u64().unwrap();
    assert!(
        (1..=2).contains(&resets),
        "cooled until the body's reset (2 s), not the 30 s default: {resets}"
    );
    assert_eq!(h.mock_b.request_count(), 1);
    clock.advance(Duration::from_millis(2_100));
    let (status, body) = json_of(call().await.unwrap()).await;
    assert_eq!(status, 200, "served again after the reset: {body}");
}
