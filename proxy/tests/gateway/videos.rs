//! The video routes at the gateway alone: without a task book, the refusals a client sees before
//! any task exists, on one pooled connection, none reaching a supplier or holding money; with this
//! process's own book (`opstate::MemoryTaskBook`), one task from create to download and its
//! charge. The flow on the ledger database's book, across several proxies, is in
//! `tests/tests/e2e/video.rs`.

use super::Harness;
use super::errors::{exchange, raw_post};

/// A video model on the first mock with the `video` capability; group 9 has the `video` feature,
/// group 10 the same model without it.
fn videos(text: String) -> String {
    let mock = super::surfaces::mock_root(&text, "id = \"mock\"");
    with_video_accounts(&text, &[("vid-openai", &mock)])
}

/// `text` with the video model `vid-x` on `accounts` (id, root of an OpenAI-style supplier), in
/// that order, and groups 9 (with the `video` feature) and 10 (without).
fn with_video_accounts(text: &str, accounts: &[(&str, &str)]) -> String {
    let accounts: String = accounts
        .iter()
        .map(|(id, root)| {
            format!(
                r#"
[[accounts]]
id = "{id}"
provider = "openai"
base_url = "{root}/v1"
api_key = "sk-mock-supplier"
models = ["vid-x"]
capabilities = ["video"]
"#
            )
        })
        .collect();
    format!(
        r#"{text}
[[models]]
id = "vid-x"
family = "vid"
kind = "video"
per_second = 0.10
{accounts}
[[groups]]
id = 9
name = "Video"
product_code = "video"
models = ["vid-x"]
wholesale_rate_multiplier = 1
features = ["video"]

[[groups]]
id = 10
name = "No video"
product_code = "novideo"
models = ["vid-x"]
wholesale_rate_multiplier = 1
"#
    )
}

/// Creates a 4-second task of `vid-x` with `key` (in `session`, if any); its object, answered 200.
async fn create(h: &Harness, key: &str, session: Option<String>) -> serde_json::Value {
    let mut request = h.http.post(h.url("/compat/v1/videos")).bearer_auth(key);
    if let Some(session) = session {
        request = request.header("x-session-id", session);
    }
    let body = serde_json::json!({"model": "vid-x", "prompt": "a fox", "durationSeconds": 4});
    let created = request.json(&body).send().await.unwrap();
    assert_eq!(created.status(), 200);
    created.json().await.unwrap()
}

/// Polls task `id` with `key`: its object.
async fn poll(h: &Harness, key: &str, id: &str) -> serde_json::Value {
    let url = h.url(&format!("/compat/v1/videos/{id}"));
    let polled = h.http.get(url).bearer_auth(key).send().await.unwrap();
    polled.json().await.unwrap()
}

/// Waits (up to 2 s) for organization 42's holds to be released: the call's end runs just after
/// its answer was written.
async fn released(h: &Harness) {
    for _ in 0..100 {
        if h.wallet().await.reserved.nanos() == 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the hold is still held: {:?}", h.wallet().await);
}

fn get(path: &str, key: Option<&str>) -> Vec<u8> {
    let auth = key
        .map(|k| format!("authorization: Bearer {k}\r\n"))
        .unwrap_or_default();
    format!("GET {path} HTTP/1.1\r\nhost: gateway\r\n{auth}\r\n").into_bytes()
}

fn closes(headers: &[(String, String)]) -> bool {
    headers
        .iter()
        .any(|(k, v)| k == "connection" && v.eq_ignore_ascii_case("close"))
}

/// Without the feature: 403 `permission_denied`; without a task book: 503 `store_unavailable`; a
/// keyless content URL with a bad signature: 403 `invalid_signature`; without a key or a
/// signature: 401. GET refusals keep the connection; a refused create (its body unread) says
/// `Connection: close`. No supplier is contacted and nothing is held.
#[tokio::test]
async fn video_refusals_before_any_task() {
    let h = Harness::start_with_config(videos).await;
    let video = h.add_key(9, opstate::KeyPermissions::default()).await;
    let plain = h.add_key(10, opstate::KeyPermissions::default()).await;
    let addr = h.base.trim_start_matches("http://").to_string();
    let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let task = "/compat/v1/videos/video_0123";
    let requests: Vec<(Vec<u8>, u16, Option<&str>)> = vec![
        (get(task, Some(&plain)), 403, Some("permission_denied")),
        (get(task, Some(&video)), 503, Some("store_unavailable")),
        (
            get(&format!("{task}/content"), Some(&video)),
            503,
            Some("store_unavailable"),
        ),
        (
            get(
                &format!("{task}/content?expires=99999999999&signature=00"),
                None,
            ),
            403,
            Some("invalid_signature"),
        ),
        (
            get(&format!("{task}/content?signature=00"), None),
            403,
            Some("invalid_signature"),
        ),
        (get(&format!("{task}/content"), None), 401, None),
        (get("/compat/v1/models", Some(&video)), 200, None),
    ];
    for (i, (request, status, code)) in requests.iter().enumerate() {
        let (got, headers, body) = exchange(&mut sock, request)
            .await
            .unwrap_or_else(|| panic!("request {i}: the connection was closed"));
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(got, *status, "request {i}: {body}");
        if let Some(code) = code {
            assert_eq!(body["error"]["code"], *code, "request {i}: {body}");
        }
        assert!(!closes(&headers), "request {i} closed the connection");
    }
    let create = r#"{"model":"vid-x","prompt":"a fox","durationSeconds":4}"#;
    for (key, status, code) in [
        (&plain, 403, "permission_denied"),
        (&video, 503, "store_unavailable"),
    ] {
        let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let request = raw_post("/compat/v1/videos", Some(key), create);
        let (got, headers, body) = exchange(&mut sock, &request).await.unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!((got, body["error"]["code"].as_str()), (status, Some(code)));
        assert!(
            closes(&headers),
            "an unread create body is said: Connection: close"
        );
    }
    assert_eq!(h.mock.request_count() + h.mock_b.request_count(), 0);
    let wallet = h.stores.wallets.snapshot(42).await.unwrap().unwrap();
    assert_eq!(wallet.reserved.nanos(), 0, "nothing held");
}

/// With this process's own task book, a task runs from create to download at the gateway alone:
/// the create holds the longest duration, the first poll finds it completed and settles what the
/// supplier made (4 seconds at 0.10 USD), later polls and the download read the same record, and
/// the charge is taken once.
#[tokio::test]
async fn a_task_runs_from_create_to_download_on_the_memory_book() {
    let book = std::sync::Arc::new(opstate::MemoryTaskBook::new());
    let h = Harness::start_with_tasks(videos, book.clone()).await;
    let key = h.add_key(9, opstate::KeyPermissions::default()).await;
    let before = h.wallet().await;
    let created = create(&h, &key, None).await;
    let id = created["id"].as_str().unwrap().to_string();
    let record = opstate::TaskBook::get(book.as_ref(), &id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.organization_id, 42);
    assert_eq!(record.account_id.as_deref(), Some("vid-openai"));
    assert!(h.wallet().await.reserved.nanos() > 0, "held while it runs");
    for _ in 0..2 {
        let polled = poll(&h, &key, &id).await;
        assert_eq!(polled["status"], "completed", "{polled}");
    }
    let content = h
        .http
        .get(h.url(&format!("/compat/v1/videos/{id}/content")))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(content.status(), 200);
    assert_eq!(content.bytes().await.unwrap().len(), 1024);
    let after = h.wallet().await;
    assert_eq!(after.reserved.nanos(), 0, "the hold is resolved");
    assert_eq!(
        before.balance.nanos() - after.balance.nanos(),
        400_000_000,
        "4 seconds at 0.10 USD, charged once"
    );
    let ended = opstate::TaskBook::get(book.as_ref(), &id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ended.status, opstate::TaskStatus::Completed);
    assert_eq!(ended.seconds_charged, Some(4));
    assert_eq!(ended.cost_nanos, Some(400_000_000));
}

/// `vid-x` on three accounts, in this order of the configuration: `vid-a` (the first mock),
/// `vid-dead` (where the `dead` account is: nothing listens) and `vid-b` (the second mock).
fn three_accounts(text: String) -> String {
    let first = super::surfaces::mock_root(&text, "id = \"mock\"");
    let dead = super::surfaces::mock_root(&text, "id = \"dead\"");
    let second = super::surfaces::mock_root(&text, "id = \"mock-b\"");
    with_video_accounts(
        &text,
        &[("vid-a", &first), ("vid-dead", &dead), ("vid-b", &second)],
    )
}

/// A session whose rendezvous order of the video accounts is `vid-dead`, `vid-a`, `vid-b`.
fn session_over_dead_then_a() -> String {
    let ids = ["mock", "dead", "mock-b", "vid-a", "vid-dead", "vid-b"];
    (0..5000)
        .map(|i| format!("s{i}"))
        .find(|sid| {
            proxy::rendezvous_order(&[3, 4, 5], &ids, &format!("42:{sid}")) == vec![4, 3, 5]
        })
        .unwrap()
}

fn creates(mock: &mock_supplier::MockHandle) -> usize {
    mock.requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path == "/v1/videos")
        .count()
}

/// A create fails over like any call (`attempt.rs`): the account nobody listens on is cooled
/// without anything sent, the one answering 503 is cooled after its one refusal, the third
/// takes the task; the task records the account that accepted it and keeps its hold.
#[tokio::test]
async fn a_video_create_fails_over_like_any_call() {
    let book = std::sync::Arc::new(opstate::MemoryTaskBook::new());
    let h = Harness::start_with_tasks(three_accounts, book.clone()).await;
    let key = h.add_key(9, opstate::KeyPermissions::default()).await;
    h.mock.set_fault(Some("status=503".parse().unwrap()));
    let created = create(&h, &key, Some(session_over_dead_then_a())).await;
    assert_eq!(created["status"], "queued", "{created}");
    let id = created["id"].as_str().unwrap();
    let record = opstate::TaskBook::get(book.as_ref(), id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.account_id.as_deref(), Some("vid-b"));
    assert_eq!(record.status, opstate::TaskStatus::Queued);
    assert_eq!(
        (creates(&h.mock), creates(&h.mock_b)),
        (1, 1),
        "each sent once"
    );
    let cooling = h
        .stores
        .cooldowns
        .remaining(&["vid-dead", "vid-a", "vid-b"])
        .await;
    let cooling: Vec<bool> = cooling.unwrap().iter().map(Option::is_some).collect();
    assert_eq!(cooling, [true, true, false], "the two that failed cool");
    assert!(h.wallet().await.reserved.nanos() > 0, "the task holds");
}

/// A supplier's 2xx that names no task: the status line is written, so the client gets the
/// task's object, failed (`upstream_invalid_response`); the record says the same and the hold
/// is released.
#[tokio::test]
async fn an_acceptance_without_a_task_id_ends_the_task_failed() {
    let mut raw = tokio::task::JoinSet::new();
    let reply: &[u8] =
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
    let url = super::raw_supplier(&mut raw, reply, std::time::Duration::from_millis(10)).await;
    let (h, book) = on_raw_supplier(&url).await;
    let key = h.add_key(9, opstate::KeyPermissions::default()).await;
    let created = create(&h, &key, None).await;
    assert_eq!(created["status"], "failed", "{created}");
    assert_eq!(created["error"]["code"], "upstream_invalid_response");
    let id = created["id"].as_str().unwrap().to_string();
    released(&h).await;
    let record = opstate::TaskBook::get(book.as_ref(), &id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, opstate::TaskStatus::Failed);
    assert_eq!(
        record.failure_code.as_deref(),
        Some("upstream_invalid_response")
    );
    assert_eq!(record.cost_nanos, Some(0));
    // The poll answers the record as it is.
    let polled = poll(&h, &key, &id).await;
    assert_eq!(polled["status"], "failed", "{polled}");
}

/// A task book whose acceptances are lost (`None`: its database went away between the two
/// writes) or late (`Some(delay)`: a slow write).
struct Acceptances(opstate::MemoryTaskBook, Option<std::time::Duration>);

#[async_trait::async_trait]
impl opstate::TaskBook for Acceptances {
    async fn ping(&self) -> Result<(), opstate::TaskBookError> {
        self.0.ping().await
    }
    async fn insert(&self, task: opstate::Task) -> Result<(), opstate::TaskBookError> {
        self.0.insert(task).await
    }
    async fn get(&self, id: &str) -> Result<Option<opstate::Task>, opstate::TaskBookError> {
        self.0.get(id).await
    }
    async fn accepted(
        &self,
        id: &str,
        account: &str,
        supplier_id: &str,
        status: opstate::TaskStatus,
        progress: i32,
    ) -> Result<bool, opstate::TaskBookError> {
        let Some(delay) = self.1 else {
            return Err(opstate::TaskBookError("gone".into()));
        };
        tokio::time::sleep(delay).await;
        self.0
            .accepted(id, account, supplier_id, status, progress)
            .await
    }
    async fn progressed(
        &self,
        id: &str,
        status: opstate::TaskStatus,
        progress: i32,
    ) -> Result<(), opstate::TaskBookError> {
        self.0.progressed(id, status, progress).await
    }
    async fn ended(
        &self,
        id: &str,
        ending: &opstate::Ending,
    ) -> Result<bool, opstate::TaskBookError> {
        self.0.ended(id, ending).await
    }
    async fn due(
        &self,
        before: chrono::DateTime<chrono::Utc>,
        limit: u64,
    ) -> Result<Vec<opstate::Task>, opstate::TaskBookError> {
        self.0.due(before, limit).await
    }
    async fn claim(&self, task: &opstate::Task) -> Result<bool, opstate::TaskBookError> {
        self.0.claim(task).await
    }
}

/// An acceptance the task book loses (it is recorded after the client's answer was written): the
/// hold is released with the call, nothing is charged, and the record stays `submitting` (the
/// sweeper ends it as lost: `video::sweep`), shown as queued meanwhile.
#[tokio::test]
async fn an_acceptance_the_book_loses_releases_the_hold() {
    let book = std::sync::Arc::new(Acceptances(opstate::MemoryTaskBook::new(), None));
    let h = Harness::start_with_tasks(videos, book.clone()).await;
    let key = h.add_key(9, opstate::KeyPermissions::default()).await;
    let before = h.wallet().await;
    let created = create(&h, &key, None).await;
    let id = created["id"].as_str().unwrap().to_string();
    released(&h).await;
    let after = h.wallet().await;
    assert_eq!(after.balance, before.balance, "nothing charged");
    let record = opstate::TaskBook::get(book.as_ref(), &id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.status, opstate::TaskStatus::Submitting);
    assert_eq!(record.account_id, None);
}

/// A poll sent on another connection as soon as the create answered, while the acceptance is
/// still being written (the call's end records it just after the answer; here the write takes
/// 300 ms): the poll waits for it and answers the supplier's state (the mock's task is completed
/// at once), not `queued`.
#[tokio::test]
async fn a_poll_at_once_waits_for_the_acceptance() {
    let late = Some(std::time::Duration::from_millis(300));
    let book = std::sync::Arc::new(Acceptances(opstate::MemoryTaskBook::new(), late));
    let h = Harness::start_with_tasks(videos, book.clone()).await;
    let key = h.add_key(9, opstate::KeyPermissions::default()).await;
    let created = create(&h, &key, None).await;
    assert_eq!(created["status"], "queued", "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    // On another connection, as from another proxy of a fleet (the create's own connection
    // takes its next request only once the create's end ran).
    let other = reqwest::Client::builder().no_proxy().build().unwrap();
    let url = h.url(&format!("/compat/v1/videos/{id}"));
    let polled = other.get(url).bearer_auth(&key).send().await.unwrap();
    let polled: serde_json::Value = polled.json().await.unwrap();
    assert_eq!(polled["status"], "completed", "{polled}");
}

/// A supplier's acceptance larger than the gateway reads of a task object (1 MiB): only the first
/// MiB is kept, which is no object, so the task ends failed (`upstream_invalid_response`) with
/// its hold released, and the client gets the task's object, not the supplier's bytes.
#[tokio::test]
async fn an_acceptance_past_the_object_limit_ends_the_task_failed() {
    let pad = "x".repeat(1024 * 1024 + 10);
    let body = format!(r#"{{"id":"video_big","status":"queued","progress":0,"pad":"{pad}"}}"#);
    let head = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    let reply: &'static [u8] = Box::leak(format!("{head}{body}").into_bytes().into_boxed_slice());
    let mut raw = tokio::task::JoinSet::new();
    let url = super::raw_supplier(&mut raw, reply, std::time::Duration::from_millis(200)).await;
    let (h, _book) = on_raw_supplier(&url).await;
    let key = h.add_key(9, opstate::KeyPermissions::default()).await;
    let created = create(&h, &key, None).await;
    assert_eq!(created["status"], "failed", "{created}");
    assert_eq!(created["error"]["code"], "upstream_invalid_response");
    assert!(created.get("pad").is_none());
    released(&h).await;
}

/// A gateway whose one video account (`vid-raw`) is the raw supplier at `url`, with its task book.
async fn on_raw_supplier(url: &str) -> (Harness, std::sync::Arc<opstate::MemoryTaskBook>) {
    let book = std::sync::Arc::new(opstate::MemoryTaskBook::new());
    let on_raw = |text: String| {
        let raw = super::surfaces::mock_root(&text, "id = \"dead\"");
        with_video_accounts(&text, &[("vid-raw", &raw)])
    };
    let h = Harness::build_full(
        300_000,
        opstate::Stores::memory(),
        true,
        Some(url),
        &on_raw,
        Some(book.clone()),
    )
    .await;
    (h, book)
}
