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
use mock_supplier::{MockConfig, MockHandle, MockSupplier};
use money::{NanoUsd, RateMultiplier};
use opstate::{KeyLimits, KeyPermissions, KeyRecord, ManualClock, Stores, UsageEvent};
use proxy::{Gateway, Metrics};
use serde_json::{Value, json};
use settings::Settings;
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::captured_logs;
use tokio::sync::watch;
use tokio::task::JoinSet;

mod audio;
mod auth;
mod bodies;
mod budgets;
mod capacity;
mod charges;
mod embeddings;
mod errors;
mod images;
mod limits;
mod metering;
mod observability;
mod routing;
mod surfaces;
mod videos;

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
request_body_timeout_ms = 1000

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
forward_headers = ["x-mock-usage", "x-mock-events", "x-mock-delay-ms", "x-mock-audio-seconds", "x-mock-pad-bytes"]
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
forward_headers = ["x-mock-usage", "x-mock-events", "x-mock-delay-ms", "x-mock-audio-seconds", "x-mock-pad-bytes"]
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

/// A supplier that answers every connection with `reply` (raw bytes, HTTP or not), keeps the
/// connection open for `hold`, then closes it. Returns its base URL.
async fn raw_supplier(tasks: &mut JoinSet<()>, reply: &'static [u8], hold: Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    tasks.spawn(async move {
        let mut conns = JoinSet::new();
        while let Ok((mut sock, _)) = listener.accept().await {
            conns.spawn(async move {
                let mut buf = [0u8; 65536];
                let _ = sock.read(&mut buf).await;
                let _ = sock.write_all(reply).await;
                tokio::time::sleep(hold).await;
            });
        }
    });
    url
}

/// A loopback address where nothing listens.
async fn closed_port_url() -> String {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}/v1")
}

impl Harness {
    /// The wallet of organization 42, the one every test key belongs to.
    async fn wallet(&self) -> opstate::WalletSnapshot {
        self.stores.wallets.snapshot(42).await.unwrap().unwrap()
    }

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

    /// A gateway whose `dead` account (serving `dead-model`) is at `dead_url` instead of a closed
    /// port.
    async fn start_with_dead(read_timeout_ms: u64, dead_url: &str) -> Harness {
        Harness::build_with(read_timeout_ms, Stores::memory(), true, Some(dead_url)).await
    }

    async fn build(read_timeout_ms: u64, stores: Stores, prepare: bool) -> Harness {
        Harness::build_with(read_timeout_ms, stores, prepare, None).await
    }

    /// A gateway whose configuration text is edited by `edit` first.
    async fn start_with_config(edit: impl Fn(String) -> String) -> Harness {
        Harness::build_full(300_000, Stores::memory(), true, None, &edit, None).await
    }

    /// As [`Harness::start_with_config`], keeping video tasks in `book`.
    async fn start_with_tasks(
        edit: impl Fn(String) -> String,
        book: Arc<dyn opstate::TaskBook>,
    ) -> Harness {
        Harness::build_full(300_000, Stores::memory(), true, None, &edit, Some(book)).await
    }

    async fn build_with(
        read_timeout_ms: u64,
        stores: Stores,
        prepare: bool,
        dead_url: Option<&str>,
    ) -> Harness {
        Harness::build_full(read_timeout_ms, stores, prepare, dead_url, &|t| t, None).await
    }

    async fn build_full(
        read_timeout_ms: u64,
        stores: Stores,
        prepare: bool,
        dead_url: Option<&str>,
        edit: &dyn Fn(String) -> String,
        tasks: Option<Arc<dyn opstate::TaskBook>>,
    ) -> Harness {
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
        let dead_url = match dead_url {
            Some(url) => url.to_string(),
            None => closed_port_url().await,
        };
        let text = config_with(
            &mock.base_url(),
            &dead_url,
            &mock_b.base_url(),
            read_timeout_ms,
        );
        let settings = Arc::new(Settings::parse(&edit(text), &|_| None).unwrap());
        let metrics = Arc::new(Metrics::new().unwrap());
        let gateway = Gateway::new(settings, stores.clone(), metrics.clone());
        if let Some(book) = tasks {
            gateway.set_video_tasks(book);
        }
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
            expires_at: None,
            limits: KeyLimits::default(),
            budget: None,
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

const NANOS: i64 = 1_000_000_000;
