//! Video tasks end to end on a fleet: admin-api and two proxies on one Redis and one ledger
//! database, the mock supplier's video API behind them. Create, poll and download through either
//! proxy; the signed URL without credentials (expired, tampered); tenant isolation; the exact
//! per-second charge; a failed task free; a task whose proxy stopped ended by the other proxy's
//! sweeper, charged once, its hold never taken by the reconciler meanwhile.

use mock_supplier::{MockConfig, MockSupplier};
use reqwest::StatusCode;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use testkit::{Account, Group, Model, TestConfig};
use tollgate::{App, Role};

const PER_SECOND_NANOS: i64 = 100_000_000; // 0.10 USD

async fn wait_for<T>(what: &str, seconds: u64, mut probe: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn usage_records(
    db: &sea_orm::DatabaseConnection,
    request_id: &str,
) -> Vec<entities::usage_records::Model> {
    entities::usage_records::Entity::find()
        .filter(entities::usage_records::Column::RequestId.eq(request_id))
        .all(db)
        .await
        .unwrap()
}

/// admin-api (`Role::AdminApi`) and two proxies of `config` sharing its stores, and a demo key
/// of group 1 with its wallet mirror loaded.
struct Fleet {
    state: admin_api::AppState,
    key: admin_api::demo::DemoKey,
    admin: tollgate::Running,
    a: tollgate::Running,
    b: tollgate::Running,
}

async fn fleet(config: TestConfig) -> Fleet {
    let admin = App::build(config.settings(), Role::AdminApi).await.unwrap();
    let state = admin.admin_state().unwrap().clone();
    let admin_addr = admin.addresses().admin.unwrap();
    let admin = admin.start();
    let s = &state;
    let key = admin_api::demo::demo_key(&s.db, s.stores.keys.as_ref(), &s.hasher, s.env, 1)
        .await
        .unwrap();
    admin_api::services::wallets::reload(s, key.organization_id)
        .await
        .unwrap();
    let proxy_config = config.set("admin", "listen", admin_addr.to_string());
    let mut proxies = Vec::new();
    for _ in 0..2 {
        proxies.push(
            App::build(proxy_config.settings(), Role::Proxy)
                .await
                .unwrap()
                .start(),
        );
    }
    let b = proxies.pop().unwrap();
    let a = proxies.pop().unwrap();
    Fleet {
        state,
        key,
        admin,
        a,
        b,
    }
}

#[tokio::test]
async fn video_tasks_on_a_fleet() {
    let Some(redis_url) = testkit::redis_url() else {
        eprintln!("REDIS_URL not set: the fleet video scenario needs Redis; skipped");
        return;
    };
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let config = TestConfig::embedded()
        .database(&testkit::fresh_database_url().await)
        .redis(&redis_url, &testkit::redis_prefix("video"))
        .set("admin", "embedded", false)
        .set("admin", "listen", "127.0.0.1:0")
        .set("money", "hold_ttl_ms", 1000u64)
        .set("money", "reconcile_interval_ms", 100u64)
        .set("video", "url_ttl_ms", 2000u64)
        .set("video", "task_ttl_ms", 60_000u64)
        .set("video", "sweep_interval_ms", 300u64)
        .model(Model::gpt_4o_mini())
        .model(
            Model::video("sora-2", 0.10)
                .line("video_durations = [4, 8, 12]")
                .line("per_second_by_resolution = { \"4k\" = 0.30 }"),
        )
        .account(Account::openai("mock", &mock.base_url(), &["gpt-4o-mini"]))
        .account(Account::openai("mock-video", &mock.base_url(), &["sora-2"]).capability("video"))
        .group(Group::new(1, &["gpt-4o-mini", "sora-2"]).feature("video"))
        .group(Group::new(2, &["gpt-4o-mini", "sora-2"]));
    let Fleet {
        state,
        key,
        admin: admin_running,
        a: proxy_a,
        b: proxy_b,
    } = fleet(config).await;
    let s = &state;
    let no_feature = admin_api::demo::demo_key(&s.db, s.stores.keys.as_ref(), &s.hasher, s.env, 2)
        .await
        .unwrap();
    let other_org =
        super::key_of_another_organization(&s.db, s.stores.keys.as_ref(), &s.hasher, s.env).await;
    let (a, b) = (proxy_a.base_url().unwrap(), proxy_b.base_url().unwrap());
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let wallet = || async {
        s.stores
            .wallets
            .snapshot(key.organization_id)
            .await
            .unwrap()
            .unwrap()
    };
    let create = |base: &str, api_key: &str, body: Value, mock: &str| {
        http.post(format!("{base}/compat/v1/videos"))
            .bearer_auth(api_key)
            .header("x-mock-video", mock)
            .json(&body)
            .send()
    };
    let poll = |base: &str, api_key: &str, id: &str| {
        http.get(format!("{base}/compat/v1/videos/{id}"))
            .bearer_auth(api_key)
            .send()
    };
    let link_local = "http://169.254.169.254/latest/meta-data/image.png";
    let job = json!({
        "model": "sora-2", "prompt": "a lighthouse at dusk", "durationSeconds": 8,
        "resolution": "720p", "aspectRatio": "16:9", "generate_audio": true,
        "reference_images": [{"url": link_local}],
    });

    // Refusals change nothing and reach no supplier.
    let before = mock.requests().len();
    let refused = create(&a, &no_feature.api_key, job.clone(), "")
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "permission_denied");
    for (bad, param) in [
        (
            json!({"model": "sora-2", "prompt": "p", "durationSeconds": 5}),
            "durationSeconds",
        ),
        (
            json!({"model": "sora-2", "prompt": "p", "resolution": "8k"}),
            "resolution",
        ),
        (
            json!({"model": "sora-2", "prompt": "p", "image_urls": ["file:///etc/passwd"]}),
            "image_urls[0]",
        ),
        (json!({"model": "sora-2", "prompt": "p", "fps": 30}), "fps"),
    ] {
        let r = create(&a, &key.api_key, bad, "").await.unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["param"], param, "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error");
    }
    assert_eq!(
        mock.requests().len(),
        before,
        "no refused create reached the supplier"
    );
    assert_eq!(wallet().await.reserved.nanos(), 0);

    // Create through proxy A.
    let created = create(
        &a,
        &key.api_key,
        job.clone(),
        "delay_ms=1500,seconds=8,bytes=3000000",
    )
    .await
    .unwrap();
    assert_eq!(created.status(), StatusCode::OK);
    let hold_id = created.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    let text = created.text().await.unwrap();
    assert!(
        !text.contains("video_mock"),
        "the supplier's task id is never shown: {text}"
    );
    let task: Value = serde_json::from_str(&text).unwrap();
    let id = task["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("video_"), "{task}");
    assert_eq!(task["status"], "queued");
    let hold = wallet().await.reserved.nanos();
    assert!(
        hold >= 8 * PER_SECOND_NANOS,
        "8 s held at 0.10 × the retail rate: {hold}"
    );
    assert_eq!(hold % 8, 0);
    // What reached the supplier: its own credential, the OpenAI video body, the URL untouched.
    let sent = mock
        .requests()
        .into_iter()
        .rfind(|r| r.path == "/v1/videos")
        .unwrap();
    let auth = sent
        .headers
        .iter()
        .find(|(k, _)| k == "authorization")
        .unwrap();
    assert!(!auth.1.contains(&key.api_key));
    let sent: Value = serde_json::from_slice(&sent.body).unwrap();
    assert_eq!(sent["seconds"], "8");
    assert_eq!(sent["size"], "1280x720");
    assert_eq!(sent["input_reference"]["image_url"], link_local);
    assert_eq!(sent["generate_audio"], true);

    // Another organization's key: exactly like a missing task.
    for path in [
        format!("/compat/v1/videos/{id}"),
        format!("/compat/v1/videos/{id}/content"),
    ] {
        let r = http
            .get(format!("{b}{path}"))
            .bearer_auth(&other_org)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "video_not_found");
    }
    let missing = poll(&b, &key.api_key, "video_nope").await.unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);

    // Proxy B answers the poll; the reconciler leaves the live task's hold alone although text
    // holds expire after 1 s.
    let early: Value = poll(&b, &key.api_key, &id)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        matches!(early["status"].as_str(), Some("queued" | "in_progress")),
        "{early}"
    );
    assert!(early.get("data").is_none());
    let not_ready = http
        .get(format!("{b}/compat/v1/videos/{id}/content"))
        .bearer_auth(&key.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(not_ready.status(), StatusCode::CONFLICT);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    admin_api::workers::reconciler::reconcile_once(s)
        .await
        .unwrap();
    assert_eq!(
        wallet().await.reserved.nanos(),
        hold,
        "a live task's hold is kept"
    );

    let done = wait_for("completion", 15, async || {
        let v: Value = poll(&b, &key.api_key, &id).await.ok()?.json().await.ok()?;
        (v["status"] == "completed").then_some(v)
    })
    .await;
    let url = done["data"][0]["url"].as_str().unwrap().to_string();
    assert!(
        url.starts_with(&format!("{b}/compat/v1/videos/{id}/content?")),
        "{url}"
    );
    assert_eq!(done["seconds"], 8);

    // Exactly 8 s charged, once; the hold is gone.
    let records = wait_for("the usage record", 10, async || {
        let r = usage_records(&s.db, &hold_id).await;
        (!r.is_empty()).then_some(r)
    })
    .await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].video_seconds, 8);
    assert_eq!(records[0].cost_nanos, hold);
    assert_eq!(records[0].model_served, "sora-2");
    assert_eq!(wallet().await.reserved.nanos(), 0);

    // Download with the key through A (streamed), a range through B, the signed URL without one.
    let full = http
        .get(format!("{a}/compat/v1/videos/{id}/content"))
        .bearer_auth(&key.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(full.status(), StatusCode::OK);
    assert_eq!(full.headers()["content-type"], "video/mp4");
    let bytes = full.bytes().await.unwrap();
    assert_eq!(bytes.len(), 3_000_000);
    assert!(
        bytes
            .iter()
            .enumerate()
            .all(|(i, b)| *b == mock_supplier::videos::content_byte(i as u64))
    );
    let part = http
        .get(format!("{b}/compat/v1/videos/{id}/content"))
        .bearer_auth(&key.api_key)
        .header("range", "bytes=1000-1099")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(part.headers()["content-range"], "bytes 1000-1099/3000000");
    assert_eq!(part.bytes().await.unwrap().len(), 100);
    let signed = http.get(&url).send().await.unwrap();
    assert_eq!(signed.status(), StatusCode::OK);
    assert_eq!(signed.bytes().await.unwrap().len(), 3_000_000);
    let supplier_calls = mock.requests().len();
    let tampered = url.replace("signature=", "signature=00");
    for bad in [tampered, url.replace("expires=", "expires=9")] {
        let r = http.get(&bad).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::FORBIDDEN, "{bad}");
        let body: Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_signature");
    }
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let expired = http.get(&url).send().await.unwrap();
    assert_eq!(expired.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        mock.requests().len(),
        supplier_calls,
        "refused URLs contact no supplier"
    );
    let again: Value = poll(&a, &key.api_key, &id)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let fresh = again["data"][0]["url"].as_str().unwrap().to_string();
    assert_ne!(fresh, url);
    assert_eq!(
        http.get(&fresh).send().await.unwrap().status(),
        StatusCode::OK
    );

    // A task failed by the supplier's safety review costs nothing.
    let failing = create(
        &a,
        &key.api_key,
        json!({"model": "sora-2", "prompt": "p", "durationSeconds": 4}),
        "fail=safety",
    )
    .await
    .unwrap();
    assert_eq!(failing.status(), StatusCode::OK);
    let failing_hold = failing.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    let failing: Value = failing.json().await.unwrap();
    let failing_id = failing["id"].as_str().unwrap();
    let failed: Value = poll(&b, &key.api_key, failing_id)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["error"]["code"], "moderation_blocked");
    let records = wait_for("the failed task's record", 10, async || {
        let r = usage_records(&s.db, &failing_hold).await;
        (!r.is_empty()).then_some(r)
    })
    .await;
    assert_eq!((records[0].cost_nanos, records[0].video_seconds), (0, 0));
    assert_eq!(wallet().await.reserved.nanos(), 0);

    // A task whose proxy stopped: B's sweeper ends it (nobody polls), charged once at the
    // 5 seconds the supplier produced of the 8 held.
    let orphan = create(&a, &key.api_key, job.clone(), "delay_ms=800,seconds=5")
        .await
        .unwrap();
    let orphan_hold = orphan.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    let orphan: Value = orphan.json().await.unwrap();
    let orphan_id = orphan["id"].as_str().unwrap().to_string();
    assert_eq!(wallet().await.reserved.nanos(), hold);
    proxy_a.stop().await.unwrap();
    let records = wait_for("the sweeper to end the orphan", 20, async || {
        let r = usage_records(&s.db, &orphan_hold).await;
        (!r.is_empty()).then_some(r)
    })
    .await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].video_seconds, 5);
    assert_eq!(records[0].cost_nanos, hold / 8 * 5);
    admin_api::workers::reconciler::reconcile_once(s)
        .await
        .unwrap();
    let w = wallet().await;
    assert_eq!(w.reserved.nanos(), 0);
    let ended: Value = poll(&b, &key.api_key, &orphan_id)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ended["status"], "completed");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        usage_records(&s.db, &orphan_hold).await.len(),
        1,
        "charged once"
    );

    // Creates the supplier refuses or never answers: nothing held, no task handed out, and a
    // create that may have reached the supplier is never sent twice.
    let tasks_before = entities::video_tasks::Entity::find()
        .all(&s.db)
        .await
        .unwrap()
        .len();
    let short = json!({"model": "sora-2", "prompt": "p", "durationSeconds": 4});
    for (fault, status, check) in [
        ("status=400", StatusCode::BAD_REQUEST, "type"),
        ("close", StatusCode::GATEWAY_TIMEOUT, "upstream_timeout"),
        (
            "status=429;retry_after=7",
            StatusCode::TOO_MANY_REQUESTS,
            "usage_limit_reached",
        ),
    ] {
        mock.set_fault(Some(fault.parse().unwrap()));
        let creates = || {
            mock.requests()
                .iter()
                .filter(|r| r.method == "POST" && r.path == "/v1/videos")
                .count()
        };
        let before = creates();
        let r = create(&b, &key.api_key, short.clone(), "").await.unwrap();
        assert_eq!(r.status(), status, "{fault}");
        let body: Value = r.json().await.unwrap();
        match check {
            // The supplier's own refusal, passed on.
            "type" => assert_eq!(body["error"]["type"], "invalid_request_error", "{body}"),
            "usage_limit_reached" => assert_eq!(body["error"]["type"], check, "{body}"),
            code => assert_eq!(body["error"]["code"], code, "{body}"),
        }
        assert_eq!(creates(), before + 1, "{fault}: sent exactly once");
        // Released when the request ends (`logging`, just after the answer was written).
        wait_for("the hold's release", 5, async || {
            (wallet().await.reserved.nanos() == 0).then_some(())
        })
        .await;
    }
    mock.set_fault(None);
    let failed_tasks = entities::video_tasks::Entity::find()
        .filter(entities::video_tasks::Column::Status.eq(entities::status::VideoTaskStatus::Failed))
        .all(&s.db)
        .await
        .unwrap();
    let all_tasks = entities::video_tasks::Entity::find()
        .all(&s.db)
        .await
        .unwrap();
    assert_eq!(
        all_tasks.len(),
        tasks_before + 3,
        "each refused create recorded"
    );
    assert!(
        failed_tasks.len() >= 4,
        "the refused ones end failed (and the safety one)"
    );

    proxy_b.stop().await.unwrap();
    admin_running.stop().await.unwrap();
}

/// SPEC: a completed task's `data[0].url` is valid 15 minutes. With the default configuration
/// (no `video.url_ttl_ms`), the signed URL's `expires` is 900 s after the poll that returned it,
/// and polling again refreshes it.
#[tokio::test]
async fn the_video_url_lives_fifteen_minutes_by_default() {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let config = TestConfig::embedded()
        .database(&testkit::fresh_database_url().await)
        .model(Model::gpt_4o_mini())
        .model(Model::video("sora-2", 0.10).line("video_durations = [4, 8, 12]"))
        .account(Account::openai("mock", &mock.base_url(), &["gpt-4o-mini"]))
        .account(Account::openai("mock-video", &mock.base_url(), &["sora-2"]).capability("video"))
        .group(Group::new(1, &["gpt-4o-mini", "sora-2"]).feature("video"));
    let app = App::build(config.settings(), Role::Proxy).await.unwrap();
    let s = app.admin_state().unwrap().clone();
    let running = app.start();
    let base = running.base_url().unwrap();
    let key = admin_api::demo::demo_key(&s.db, s.stores.keys.as_ref(), &s.hasher, s.env, 1)
        .await
        .unwrap();
    admin_api::services::wallets::reload(&s, key.organization_id)
        .await
        .unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let created: Value = http
        .post(format!("{base}/compat/v1/videos"))
        .bearer_auth(&key.api_key)
        .header("x-mock-video", "delay_ms=0,seconds=4,bytes=1000")
        .json(&json!({"model": "sora-2", "prompt": "a fox", "durationSeconds": 4}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["id"].as_str().unwrap().to_string();
    let expires_of = |task: &Value| -> u64 {
        let url = task["data"][0]["url"].as_str().unwrap();
        let query = url.split_once('?').unwrap().1;
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix("expires="))
            .unwrap()
            .parse()
            .unwrap()
    };
    let poll = || async {
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let task: Value = http
            .get(format!("{base}/compat/v1/videos/{id}"))
            .bearer_auth(&key.api_key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (before, task)
    };
    let (at, task) = wait_for("the task to complete", 20, async || {
        let (at, task) = poll().await;
        (task["status"] == "completed").then_some((at, task))
    })
    .await;
    let lifetime = expires_of(&task) - at;
    assert!(
        (899..=901).contains(&lifetime),
        "15 minutes: {lifetime} s ({task})"
    );
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (_, again) = poll().await;
    assert!(
        expires_of(&again) > expires_of(&task),
        "polling again refreshes it"
    );
    // The URL works without credentials.
    let url = again["data"][0]["url"].as_str().unwrap().to_string();
    let path = &url[url.find("/compat/v1/videos/").unwrap()..];
    let video = http.get(format!("{base}{path}")).send().await.unwrap();
    assert_eq!(video.status(), StatusCode::OK);
    assert_eq!(video.bytes().await.unwrap().len(), 1000);
    running.stop().await.unwrap();
}

/// Video on a Gemini (Veo) account, on a fleet (two proxies, one Redis, one ledger database):
/// create on one proxy (Veo's `:predictLongRunning` with the reference images as inline bytes),
/// poll on the other (the operation), download through the signed URL (the file named by the
/// operation, fetched from the account itself with its key), exactly the seconds asked charged
/// once; a URL reference and a fourth reference refused before any supplier; a safety failure
/// charged nothing.
#[tokio::test]
async fn veo_tasks_on_a_fleet() {
    let Some(redis_url) = testkit::redis_url() else {
        eprintln!("REDIS_URL not set: the fleet Veo scenario needs Redis; skipped");
        return;
    };
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let config = TestConfig::embedded()
        .database(&testkit::fresh_database_url().await)
        .redis(&redis_url, &testkit::redis_prefix("veo"))
        .set("admin", "embedded", false)
        .set("admin", "listen", "127.0.0.1:0")
        .set("video", "sweep_interval_ms", 300u64)
        .model(Model::gpt_4o_mini())
        .model(
            Model::video("veo-3.1-generate-preview", 0.40)
                .line("video_durations = [4, 6, 8]")
                .line("video_resolutions = [\"720p\", \"1080p\"]"),
        )
        .account(Account::openai("mock", &mock.base_url(), &["gpt-4o-mini"]))
        .account(
            Account::gemini("veo", &mock.root_url(), &["veo-3.1-generate-preview"])
                .capability("video"),
        )
        .group(Group::new(1, &["gpt-4o-mini", "veo-3.1-generate-preview"]).feature("video"));
    let Fleet {
        state,
        key,
        admin: _admin_running,
        a: proxy_a,
        b: proxy_b,
    } = fleet(config).await;
    let s = &state;
    let (a, b) = (proxy_a.base_url().unwrap(), proxy_b.base_url().unwrap());
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let reserved = || async {
        s.stores
            .wallets
            .snapshot(key.organization_id)
            .await
            .unwrap()
            .unwrap()
            .reserved
            .nanos()
    };
    let create = |base: &str, body: Value, mock_video: &str| {
        http.post(format!("{base}/compat/v1/videos"))
            .bearer_auth(&key.api_key)
            .header("x-mock-video", mock_video)
            .json(&body)
            .send()
    };
    let poll = |base: &str, id: &str| {
        http.get(format!("{base}/compat/v1/videos/{id}"))
            .bearer_auth(&key.api_key)
            .send()
    };
    let png = format!(
        "data:image/png;base64,{}",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, b"\x89PNG fake")
    );

    // Refused before any supplier: a URL reference (never fetched), a fourth reference, a
    // behaviour Veo does not have.
    let before = mock.requests().len();
    for (body, param) in [
        (
            json!({"model": "veo-3.1-generate-preview", "prompt": "p", "image_urls": ["https://example.com/a.png"]}),
            "image_urls[0]",
        ),
        (
            json!({"model": "veo-3.1-generate-preview", "prompt": "p", "image_urls": [png, png, png, png]}),
            "image_urls[3]",
        ),
        (
            json!({"model": "veo-3.1-generate-preview", "prompt": "p", "generate_audio": false}),
            "generate_audio",
        ),
        (
            json!({"model": "veo-3.1-generate-preview", "prompt": "p", "durationSeconds": 5}),
            "durationSeconds",
        ),
    ] {
        let r = create(&a, body, "").await.unwrap();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["error"]["param"], param, "{v}");
    }
    assert_eq!(mock.requests().len(), before);
    assert_eq!(reserved().await, 0);

    // Create on A.
    let job = json!({"model": "veo-3.1-generate-preview", "prompt": "a lighthouse at dusk",
                     "durationSeconds": 6, "aspectRatio": "9:16", "resolution": "1080p",
                     "reference_images": [{"url": png}], "image_urls": [png], "generate_audio": true});
    let created = create(&a, job, "delay_ms=600,bytes=500000").await.unwrap();
    assert_eq!(created.status(), StatusCode::OK);
    let hold_id = created.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    let text = created.text().await.unwrap();
    assert!(
        !text.contains("operations"),
        "the supplier's operation is never shown: {text}"
    );
    let task: Value = serde_json::from_str(&text).unwrap();
    let id = task["id"].as_str().unwrap().to_string();
    assert_eq!(task["status"], "queued");
    assert_eq!(reserved().await, 6 * 400_000_000, "6 s held at 0.40");
    let sent = mock
        .requests()
        .into_iter()
        .rfind(|r| r.path.ends_with(":predictLongRunning"))
        .unwrap();
    assert_eq!(
        sent.path,
        "/v1beta/models/veo-3.1-generate-preview:predictLongRunning"
    );
    assert_eq!(sent.header("x-goog-api-key"), Some("sk-mock-supplier"));
    let body: Value = serde_json::from_slice(&sent.body).unwrap();
    assert_eq!(
        body["parameters"],
        json!({"durationSeconds": 6, "aspectRatio": "9:16", "resolution": "1080p", "sampleCount": 1})
    );
    let refs = body["instances"][0]["referenceImages"].as_array().unwrap();
    assert_eq!(refs.len(), 2);
    assert_eq!(refs[0]["image"]["mimeType"], "image/png");
    assert_eq!(refs[0]["referenceType"], "asset");

    // Poll on B until done: exactly the 6 seconds charged, once.
    let done = wait_for("completion", 15, async || {
        let v: Value = poll(&b, &id).await.ok()?.json().await.ok()?;
        (v["status"] == "completed").then_some(v)
    })
    .await;
    assert_eq!(done["seconds"], 6, "{done}");
    let records = wait_for("the usage record", 10, async || {
        let r = usage_records(&s.db, &hold_id).await;
        (!r.is_empty()).then_some(r)
    })
    .await;
    assert_eq!(records.len(), 1);
    assert_eq!(
        (
            records[0].video_seconds,
            records[0].cost_nanos,
            records[0].measurement.as_str()
        ),
        (6, 6 * 400_000_000, "exact")
    );
    assert_eq!(reserved().await, 0);

    // The signed URL (no key) streams the file from the account, whatever host the uri named.
    let url = done["data"][0]["url"].as_str().unwrap().to_string();
    let video = http.get(&url).send().await.unwrap();
    assert_eq!(video.status(), StatusCode::OK);
    let bytes = video.bytes().await.unwrap();
    assert_eq!(bytes.len(), 500_000);
    assert!(
        bytes
            .iter()
            .enumerate()
            .all(|(i, b)| *b == mock_supplier::videos::content_byte(i as u64))
    );
    let download = mock
        .requests()
        .into_iter()
        .rfind(|r| r.path.contains("/files/"))
        .unwrap();
    assert!(
        download.path.starts_with("/v1beta/files/") && download.path.contains(":download"),
        "{}",
        download.path
    );
    assert_eq!(download.header("x-goog-api-key"), Some("sk-mock-supplier"));

    // A safety failure costs nothing.
    let failing = create(
        &b,
        json!({"model": "veo-3.1-generate-preview", "prompt": "p", "durationSeconds": 4}),
        "fail=safety",
    )
    .await
    .unwrap();
    assert_eq!(failing.status(), StatusCode::OK);
    let failing_hold = failing.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    let failing: Value = failing.json().await.unwrap();
    let failed: Value = poll(&a, failing["id"].as_str().unwrap())
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["error"]["code"], "moderation_blocked");
    let records = wait_for("the failed task's record", 10, async || {
        let r = usage_records(&s.db, &failing_hold).await;
        (!r.is_empty()).then_some(r)
    })
    .await;
    assert_eq!((records[0].cost_nanos, records[0].video_seconds), (0, 0));
    assert_eq!(reserved().await, 0);
    proxy_a.stop().await.unwrap();
    proxy_b.stop().await.unwrap();
}
