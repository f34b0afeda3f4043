//! The official `openai`, `anthropic` and `google-genai` Python SDKs, unmodified, against a whole
//! deployment: every served cell of client surface × supplier format, streaming and not, plain
//! calls and tool round trips, each charged exactly once at the served model's price; the SDKs'
//! own error classes, model lists and token counts; images, video tasks and embeddings.
//! `tests/sdk/*.py` make the calls; these tests start the deployment and check what reached the
//! supplier and what was booked.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mock_supplier::{MockConfig, MockSupplier, RecordedRequest};
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::Value;
use testkit::{Account, Group, Model, TestConfig};
use tollgate::{App, Role};

/// What the tool returns in every round trip (the script sends it back to the model).
const TOOL_RESULT: &str = "sunny-42";

/// Nano-USD per token of input and output: the served model's price.
fn price(model: &str) -> (i64, i64) {
    match model {
        "gpt-4o-mini" => (150, 600),
        "claude-x" => (3_000, 15_000),
        "gemini-x" => (1_250, 10_000),
        other => panic!("no price for {other}"),
    }
}

/// Runs `tests/sdk/{script}` with the SDK venv's `python` and `args`; its stdout, once it exited
/// successfully within `seconds`.
async fn run_script(python: &std::path::Path, script: &str, args: &[&str], seconds: u64) -> String {
    let path = format!("{}/sdk/{script}", env!("CARGO_MANIFEST_DIR"));
    let mut cmd = std::process::Command::new(python);
    cmd.arg(&path)
        .args(args)
        // The SDKs must reach the loopback gateway, never a proxy of the environment.
        .env("NO_PROXY", "*")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY");
    let output = tokio::time::timeout(
        Duration::from_secs(seconds),
        tokio::task::spawn_blocking(move || cmd.output()),
    )
    .await
    .unwrap_or_else(|_| panic!("{script} took more than {seconds} s"))
    .unwrap()
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{script} failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The ledger's usage records once there are `n` (20 s at most), and no more: a refused call
/// leaves none.
async fn settled_records(
    db: &sea_orm::DatabaseConnection,
    n: usize,
    what: &str,
) -> Vec<entities::usage_records::Model> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let records = entities::usage_records::Entity::find()
            .all(db)
            .await
            .unwrap();
        if records.len() >= n {
            assert_eq!(records.len(), n, "refused calls leave no record");
            return records;
        }
        assert!(
            Instant::now() < deadline,
            "not every {what} was settled: {}",
            records.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sdks_are_served_on_every_cell_and_charged_exactly() {
    let Some(python) = testkit::sdk_python() else {
        eprintln!("SDK venv missing (scripts/sdk-env): official SDK matrix skipped");
        return;
    };
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let db_url = testkit::fresh_database_url().await;
    let mut config = TestConfig::embedded()
        .database(&db_url)
        .model(Model::gpt_4o_mini())
        .model(Model::text("claude-x", 3.0, 15.0).family("claude"))
        .model(Model::text("gemini-x", 1.25, 10.0).family("gemini"))
        .account(Account::openai("oa", &mock.base_url(), &["gpt-4o-mini"]))
        .account(Account::anthropic("an", &mock.root_url(), &["claude-x"]))
        .account(Account::gemini("ge", &mock.root_url(), &["gemini-x"]))
        .group(Group::new(1, &["gpt-4o-mini", "claude-x", "gemini-x"]));
    if let Some(url) = testkit::redis_url() {
        config = config.redis(&url, &testkit::redis_prefix("sdk"));
    }
    let (db, key) = super::database_with_demo_key(&db_url).await;
    let running = App::build(config.settings(), Role::Proxy)
        .await
        .unwrap()
        .start();
    let base = running.base_url().unwrap();

    let stdout = run_script(
        &python,
        "matrix.py",
        &[
            base.as_str(),
            key.api_key.as_str(),
            "openai=gpt-4o-mini",
            "anthropic=claude-x",
            "gemini=gemini-x",
        ],
        240,
    )
    .await;
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let errors: Vec<&Value> = lines.iter().filter(|l| l.get("error").is_some()).collect();
    assert!(
        errors.is_empty(),
        "SDK calls failed:\n{}",
        errors
            .iter()
            .map(|e| format!("{}:\n{}", e["id"], e["error"].as_str().unwrap_or_default()))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let calls: Vec<&Value> = lines.iter().filter(|l| l.get("client").is_some()).collect();
    let checks: BTreeMap<&str, &Value> = lines
        .iter()
        .filter(|l| l.get("check").is_some())
        .map(|l| (l["id"].as_str().unwrap(), l))
        .collect();
    // chat, responses, messages × 3 suppliers + native × gemini, × {json, stream} × 3 steps.
    assert_eq!(calls.len(), 10 * 2 * 3, "{stdout}");

    // Every call's usage record: found by its unique prompt count, exactly one, at the served
    // model's price; what the SDK reported is what the supplier reported.
    let deadline = Instant::now() + Duration::from_secs(20);
    while entities::usage_records::Entity::find()
        .count(&db)
        .await
        .unwrap()
        < calls.len() as u64
    {
        assert!(Instant::now() < deadline, "not every call was settled");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let supplier_requests = mock.requests();
    let mut total = 0i64;
    for call in &calls {
        let id = call["id"].as_str().unwrap();
        let (prompt, completion) = (
            call["prompt"].as_i64().unwrap(),
            call["completion"].as_i64().unwrap(),
        );
        let model = call["model"].as_str().unwrap();
        assert_eq!(
            call["usage"],
            serde_json::json!({"input": prompt, "output": completion}),
            "{id}: usage the SDK saw"
        );
        let records = entities::usage_records::Entity::find()
            .filter(entities::usage_records::Column::InputTokens.eq(prompt))
            .all(&db)
            .await
            .unwrap();
        assert_eq!(records.len(), 1, "{id}: charged once");
        let r = &records[0];
        let (inp, out) = price(model);
        let cost = prompt * inp + completion * out;
        assert_eq!(
            (
                r.model_served.as_str(),
                r.output_tokens,
                r.measurement.as_str(),
                r.stream,
                r.cost_nanos,
                r.charged_nanos
            ),
            (
                model,
                completion,
                "exact",
                call["stream"].as_bool().unwrap(),
                cost,
                cost
            ),
            "{id}"
        );
        total += cost;

        // The supplier was spoken to in its own format, with the account's credential only.
        let sent = supplier_request(&supplier_requests, prompt, completion);
        let (supplier, client) = (
            call["supplier"].as_str().unwrap(),
            call["client"].as_str().unwrap(),
        );
        let stream = call["stream"].as_bool().unwrap();
        let path = match (supplier, client, stream) {
            ("openai", "responses", _) => "/v1/responses",
            ("openai", _, _) => "/v1/chat/completions",
            ("anthropic", _, _) => "/v1/messages",
            (_, _, false) => "/v1beta/models/gemini-x:generateContent",
            (_, _, true) => "/v1beta/models/gemini-x:streamGenerateContent?alt=sse",
        };
        let credential = match supplier {
            "openai" => ("authorization", "Bearer sk-mock-supplier"),
            "anthropic" => ("x-api-key", "sk-mock-supplier"),
            _ => ("x-goog-api-key", "sk-mock-supplier"),
        };
        assert_eq!(sent.path, path, "{id}");
        assert_eq!(sent.header(credential.0), Some(credential.1), "{id}");
        assert!(
            !sent.headers.iter().any(|(_, v)| v.contains(&key.api_key)),
            "{id}: the customer key reached the supplier"
        );

        let step = call["step"].as_i64().unwrap();
        let text = call["text"].as_str().unwrap();
        if step == 2 {
            assert_eq!(
                (&call["tool"]["name"], &call["tool"]["args"]),
                (&Value::from("lookup"), &serde_json::json!({"q": "mock"})),
                "{id}: the supplier's tool call reached the SDK"
            );
        } else {
            assert!(call["tool"].is_null(), "{id}: {call}");
            assert!(!text.is_empty(), "{id}: no text");
        }
        if step == 3 {
            let body = sent.json().unwrap();
            assert!(
                carries_tool_result(supplier, client, &body),
                "{id}: the tool result did not reach the supplier in its format: {body}"
            );
        }
    }
    let wallet = admin_api::ledger::balance(
        &db,
        &admin_api::ledger::AccountRef::org_wallet(key.organization_id).code,
    )
    .await
    .unwrap();
    assert_eq!(
        wallet.nanos(),
        admin_api::demo::DEMO_CREDIT_USD * money::NANOS_PER_USD - total,
        "the ledger holds exactly the sum of the calls"
    );

    // The SDKs' own error classes (each surface's error shape parsed by its SDK).
    for (id, class, status) in [
        ("openai-unknown-model", "NotFoundError", 404),
        ("openai-bad-key", "AuthenticationError", 401),
        ("anthropic-unknown-model", "NotFoundError", 404),
        ("anthropic-bad-key", "AuthenticationError", 401),
        ("anthropic-invalid", "BadRequestError", 400),
        ("native-unknown-model", "ClientError", 404),
        ("native-not-gemini-served", "ClientError", 404),
        ("native-bad-key", "ClientError", 401),
        ("openai-no-key", "AuthenticationError", 401),
        ("anthropic-no-key", "AuthenticationError", 401),
        ("native-no-key", "ClientError", 401),
    ] {
        let c = checks[id];
        assert_eq!(
            (c["class"].as_str(), c["status"].as_i64()),
            (Some(class), Some(status)),
            "{id}: {c}"
        );
    }
    let all = serde_json::json!(["claude-x", "gemini-x", "gpt-4o-mini"]);
    assert_eq!(checks["openai-models"]["ids"], all);
    assert_eq!(checks["anthropic-models"]["ids"], all);
    assert_eq!(
        checks["native-models"]["ids"],
        serde_json::json!(["models/gemini-x"])
    );
    for id in ["anthropic-count", "native-count"] {
        assert!(checks[id]["tokens"].as_i64().unwrap() > 0, "{}", checks[id]);
    }
    // Errors and lists left no record; each token count that reached a supplier left its audit
    // record (every request that reached a supplier does) at no charge.
    let prompts: Vec<i64> = calls
        .iter()
        .map(|c| c["prompt"].as_i64().unwrap())
        .collect();
    let others: Vec<_> = entities::usage_records::Entity::find()
        .all(&db)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| !prompts.contains(&r.input_tokens))
        .collect();
    let mut others: Vec<(&str, i64, i64)> = others
        .iter()
        .map(|r| (r.route.as_str(), r.cost_nanos, r.charged_nanos))
        .collect();
    others.sort();
    assert_eq!(
        others,
        [
            ("messages_count_tokens", 0, 0),
            ("native_count_tokens", 0, 0)
        ],
        "records of no generation call"
    );
    running.stop().await.unwrap();
}

/// The supplier request of one call, found by the `x-mock-usage` the gateway forwarded.
fn supplier_request(
    requests: &[RecordedRequest],
    prompt: i64,
    completion: i64,
) -> &RecordedRequest {
    let want = format!("prompt={prompt},completion={completion}");
    let found: Vec<&RecordedRequest> = requests
        .iter()
        .filter(|r| r.header("x-mock-usage") == Some(want.as_str()))
        .collect();
    assert_eq!(found.len(), 1, "supplier requests with {want}");
    found[0]
}

/// Whether `body` (what the supplier received) carries the tool's result in the supplier's own
/// format, answering the call the supplier made (same id, or same name for Gemini).
fn carries_tool_result(supplier: &str, client: &str, body: &Value) -> bool {
    let has = |v: &Value| v.to_string().contains(TOOL_RESULT);
    let items = |key: &str| body[key].as_array().cloned().unwrap_or_default();
    match (supplier, client) {
        ("openai", "responses") => {
            let call_ids: Vec<Value> = items("input")
                .iter()
                .filter(|i| i["type"] == "function_call" && i["name"] == "lookup")
                .map(|i| i["call_id"].clone())
                .collect();
            items("input").iter().any(|i| {
                i["type"] == "function_call_output"
                    && has(&i["output"])
                    && call_ids.contains(&i["call_id"])
            })
        }
        ("openai", _) => {
            let call_ids: Vec<Value> = items("messages")
                .iter()
                .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
                .filter(|c| c["function"]["name"] == "lookup")
                .map(|c| c["id"].clone())
                .collect();
            items("messages").iter().any(|m| {
                m["role"] == "tool" && has(&m["content"]) && call_ids.contains(&m["tool_call_id"])
            })
        }
        ("anthropic", _) => {
            let blocks: Vec<Value> = items("messages")
                .iter()
                .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
                .collect();
            let call_ids: Vec<&Value> = blocks
                .iter()
                .filter(|b| b["type"] == "tool_use" && b["name"] == "lookup")
                .map(|b| &b["id"])
                .collect();
            blocks.iter().any(|b| {
                b["type"] == "tool_result"
                    && has(&b["content"])
                    && call_ids.contains(&&b["tool_use_id"])
            })
        }
        ("gemini", _) => {
            let parts: Vec<Value> = items("contents")
                .iter()
                .flat_map(|c| c["parts"].as_array().cloned().unwrap_or_default())
                .collect();
            parts.iter().any(|p| p["functionCall"]["name"] == "lookup")
                && parts.iter().any(|p| {
                    p["functionResponse"]["name"] == "lookup"
                        && has(&p["functionResponse"]["response"])
                })
        }
        _ => false,
    }
}

/// The official `openai` SDK's `images.generate` and `images.edit` on both image profiles and
/// google-genai's `generate_content` on a native image model, through a whole deployment: what
/// reached the supplier, what the SDK got, and one usage record per call at the per-image price.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sdks_generate_and_edit_images() {
    let Some(python) = testkit::sdk_python() else {
        eprintln!("SDK venv missing (scripts/sdk-env): official SDK image calls skipped");
        return;
    };
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let db_url = testkit::fresh_database_url().await;
    let mut config = TestConfig::embedded()
        .database(&db_url)
        .model(Model::image("gpt-image-x", 0.04).author("openai"))
        .model(Model::image("gem-image-fast", 0.039).family("gem-image"))
        .model(
            Model::image("gem-image-pro", 0.134)
                .family("gem-image")
                .aspect_ratios(&["1:1", "16:9"]),
        )
        .account(
            Account::openai("oa-img", &mock.base_url(), &["gpt-image-x"])
                .capability("image_generation"),
        )
        .account(
            Account::gemini(
                "ge-img",
                &mock.root_url(),
                &["gem-image-fast", "gem-image-pro"],
            )
            .capability("image_generation")
            .capability("image_edit"),
        )
        .group(Group::new(
            1,
            &["gpt-image-x", "gem-image-fast", "gem-image-pro"],
        ));
    if let Some(url) = testkit::redis_url() {
        config = config.redis(&url, &testkit::redis_prefix("sdk-images"));
    }
    let (db, key) = super::database_with_demo_key(&db_url).await;
    let running = App::build(config.settings(), Role::Proxy)
        .await
        .unwrap()
        .start();
    let base = running.base_url().unwrap();
    let png = mock_supplier::images::png_b64();

    let stdout = run_script(
        &python,
        "images.py",
        &[
            base.as_str(),
            key.api_key.as_str(),
            "gpt-image-x",
            "gem-image-fast",
            "gem-image-pro",
            png.as_str(),
        ],
        120,
    )
    .await;
    let lines: BTreeMap<String, Value> = stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| (v["id"].as_str().unwrap().to_string(), v))
        .collect();
    let errors: Vec<&Value> = lines
        .values()
        .filter(|l| l.get("error").is_some())
        .collect();
    assert!(errors.is_empty(), "SDK image calls failed:\n{errors:#?}");
    // What each SDK got: the mock's PNG, as many as the supplier returned.
    for (id, count) in [
        ("openai-generate", 2),
        ("fast-generate", 1),
        ("fast-generate-url", 1),
        ("pro-edit-two", 1),
        ("pro-edit-one", 1),
        ("native-pro", 1),
    ] {
        let l = &lines[id];
        assert_eq!(
            (l["count"].as_u64(), l["b64"].as_str()),
            (Some(count), Some(png.as_str())),
            "{id}: {l}"
        );
    }
    let own = lines["openai-generate-url"]["url"].as_str().unwrap();
    assert!(
        own.starts_with(&mock.root_url()),
        "the supplier's own URL: {own}"
    );
    let hosted = lines["fast-generate-url"]["url"].as_str().unwrap();
    assert!(hosted.contains("/media/"), "a gateway URL: {hosted}");
    for (id, class) in [
        ("openai-edit-refused", "BadRequestError"),
        ("openai-bad-size", "BadRequestError"),
        ("native-bad-ratio", "ClientError"),
    ] {
        assert_eq!(lines[id]["class"], class, "{id}: {}", lines[id]);
        assert_eq!(lines[id]["status"], 400, "{id}: {}", lines[id]);
    }

    // What reached the supplier.
    let sent = mock.requests();
    let bodies = |path: &str| -> Vec<Value> {
        sent.iter()
            .filter(|r| r.path == path)
            .map(|r| serde_json::from_slice(&r.body).unwrap())
            .collect()
    };
    let openai = bodies("/v1/images/generations");
    assert_eq!(openai.len(), 2, "refused calls reach no supplier");
    assert_eq!(openai[0]["model"], "gpt-image-x");
    assert_eq!(
        (openai[0]["size"].as_str(), openai[0]["quality"].as_str()),
        (Some("1536x1024"), Some("high"))
    );
    assert!(openai[0].get("user").is_none(), "user is not forwarded");
    assert_eq!(openai[1]["quality"], "medium");
    let fast = bodies("/v1beta/models/gem-image-fast:generateContent");
    assert_eq!(fast.len(), 2);
    assert_eq!(
        fast[0]["generationConfig"]["imageConfig"]["aspectRatio"],
        "2:3"
    );
    let pro = bodies("/v1beta/models/gem-image-pro:generateContent");
    assert_eq!(pro.len(), 3);
    let parts = |b: &Value| b["contents"][0]["parts"].as_array().unwrap().len();
    assert_eq!(
        (parts(&pro[0]), parts(&pro[1])),
        (3, 2),
        "the edits' references as inlineData"
    );
    assert_eq!(pro[0]["contents"][0]["parts"][1]["inlineData"]["data"], png);
    assert_eq!(
        pro[2]["generationConfig"]["imageConfig"]["aspectRatio"],
        "16:9"
    );

    // One usage record per served call, priced per image.
    let records = settled_records(&db, 7, "image call").await;
    let mut got: Vec<(String, String, i64, i64)> = records
        .iter()
        .map(|r| {
            (
                r.route.clone(),
                r.model_served.clone(),
                r.images,
                r.cost_nanos,
            )
        })
        .collect();
    got.sort();
    let want = |route: &str, model: &str, images: i64, each: i64| {
        (route.to_string(), model.to_string(), images, images * each)
    };
    let mut expected = vec![
        want("image_generations", "gpt-image-x", 2, 40_000_000),
        want("image_generations", "gpt-image-x", 1, 40_000_000),
        want("image_generations", "gem-image-fast", 1, 39_000_000),
        want("image_generations", "gem-image-fast", 1, 39_000_000),
        want("image_edits", "gem-image-pro", 1, 134_000_000),
        want("image_edits", "gem-image-pro", 1, 134_000_000),
        want("native_generate", "gem-image-pro", 1, 134_000_000),
    ];
    expected.sort();
    assert_eq!(got, expected);
    running.stop().await.unwrap();
}

/// The README's video example: the official openai SDK's generic `post`/`get` create a task, poll
/// it to completion and download it (signed URL without a key, and with the key); one usage
/// record at 4 s × the per-second price. The same script against both kinds of video account:
/// the OpenAI video API and Veo on a Gemini account.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_openai_sdk_runs_a_video_task() {
    let Some(python) = testkit::sdk_python() else {
        eprintln!("SDK venv missing (scripts/sdk-env): official SDK video task skipped");
        return;
    };
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let db_url = testkit::fresh_database_url().await;
    let config = TestConfig::embedded()
        .database(&db_url)
        .model(Model::video("vid-x", 0.10))
        .model(Model::video("veo-x", 0.10).line("video_durations = [4, 6, 8]"))
        .account(Account::openai("oa-vid", &mock.base_url(), &["vid-x"]).capability("video"))
        .account(Account::gemini("veo", &mock.root_url(), &["veo-x"]).capability("video"))
        .group(Group::new(1, &["vid-x", "veo-x"]).feature("video"));
    let (db, key) = super::database_with_demo_key(&db_url).await;
    let running = App::build(config.settings(), Role::Proxy)
        .await
        .unwrap()
        .start();
    let base = running.base_url().unwrap();
    for (model, create_path) in [
        ("vid-x", "/v1/videos"),
        ("veo-x", "/v1beta/models/veo-x:predictLongRunning"),
    ] {
        let stdout = run_script(&python, "videos.py", &[&base, &key.api_key, model], 60).await;
        let out: Value = serde_json::from_str(stdout.trim()).unwrap();
        assert!(out.get("error").is_none(), "{model}: {out:#}");
        assert_eq!(out["status"], "completed", "{model}");
        assert_eq!(out["seconds"], 4, "{model}");
        assert_eq!(
            (out["signed_bytes"].as_u64(), out["keyed_bytes"].as_u64()),
            (Some(1024), Some(1024)),
            "{model}"
        );
        let created = mock
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path == create_path)
            .count();
        assert_eq!(created, 1, "{model}: one task created at the supplier");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let records = entities::usage_records::Entity::find()
                .filter(entities::usage_records::Column::OrganizationId.eq(key.organization_id))
                .filter(entities::usage_records::Column::Route.eq("video_create"))
                .filter(entities::usage_records::Column::ModelServed.eq(model))
                .all(&db)
                .await
                .unwrap();
            if let Some(r) = records.first() {
                assert_eq!(records.len(), 1, "{model}");
                assert_eq!(r.video_seconds, 4, "{model}");
                // 4 s × 0.10 USD × the demo key's retail rate (1.0).
                assert_eq!(r.cost_nanos, 400_000_000, "{model}");
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{model}: never settled"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    running.stop().await.unwrap();
}

/// The official SDKs' embedding calls (issue 46): openai's `embeddings.create` (base64 on the wire
/// by default, floats when asked) and google-genai's `embed_content` (`batchEmbedContents`), each
/// against an OpenAI-format and a Gemini-format supplier. The vectors are the supplier's exactly;
/// each call is booked once at the model's input price (the Gemini supplier's usage estimated from
/// the inputs, as it reports none); what a format cannot take is the SDK's own 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sdks_embed() {
    use mock_supplier::embeddings::vector;
    let Some(python) = testkit::sdk_python() else {
        eprintln!("SDK venv missing (scripts/sdk-env): official SDK embeddings skipped");
        return;
    };
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let db_url = testkit::fresh_database_url().await;
    let mut config = TestConfig::embedded()
        .database(&db_url)
        .model(Model::embedding("emb-oa", 0.02))
        .model(Model::embedding("emb-ge", 0.15))
        .account(Account::openai("oa-emb", &mock.base_url(), &["emb-oa"]))
        .account(Account::gemini("ge-emb", &mock.root_url(), &["emb-ge"]))
        .group(Group::new(1, &["emb-oa", "emb-ge"]));
    if let Some(url) = testkit::redis_url() {
        config = config.redis(&url, &testkit::redis_prefix("sdk-embed"));
    }
    let (db, key) = super::database_with_demo_key(&db_url).await;
    let running = App::build(config.settings(), Role::Proxy)
        .await
        .unwrap()
        .start();
    let base = running.base_url().unwrap();
    let stdout = run_script(
        &python,
        "embeddings.py",
        &[&base, &key.api_key, "emb-oa", "emb-ge"],
        120,
    )
    .await;
    let lines: BTreeMap<String, Value> = stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| (v["id"].as_str().unwrap().to_string(), v))
        .collect();
    let errors: Vec<&Value> = lines
        .values()
        .filter(|l| l.get("error").is_some())
        .collect();
    assert!(
        errors.is_empty(),
        "SDK embedding calls failed:\n{errors:#?}"
    );
    let vectors = |texts: &[&str], dims: usize| -> Value {
        texts
            .iter()
            .map(|t| vector(t.as_bytes(), dims))
            .collect::<Vec<_>>()
            .into()
    };
    for name in ["openai", "gemini"] {
        let got = |id: &str| lines[&format!("{name}-{id}")].clone();
        assert_eq!(
            got("sdk-openai-default")["vectors"],
            vectors(&["alpha", "beta"], 8),
            "{name}"
        );
        assert_eq!(got("sdk-openai-default")["prompt_tokens"], 3, "{name}");
        assert_eq!(
            got("sdk-openai-float")["vectors"],
            vectors(&["gamma"], 4),
            "{name}"
        );
        assert_eq!(
            got("sdk-genai")["vectors"],
            vectors(&["alpha", "beta"], 4),
            "{name}"
        );
    }
    for (id, class) in [
        ("genai-task-type-to-openai", "ClientError"),
        ("openai-tokens-to-gemini", "BadRequestError"),
    ] {
        assert_eq!(
            (lines[id]["class"].as_str(), lines[id]["status"].as_u64()),
            (Some(class), Some(400)),
            "{id}"
        );
    }
    // What reached each supplier: base64 asked by the SDK's default and passed on; floats asked
    // when the gateway translates; google-genai's batch as sent.
    let sent = mock.requests();
    let bodies = |path: &str| -> Vec<Value> {
        sent.iter()
            .filter(|r| r.path == path)
            .map(|r| serde_json::from_slice(&r.body).unwrap())
            .collect()
    };
    let openai = bodies("/v1/embeddings");
    assert_eq!(openai.len(), 3, "refused calls reach no supplier");
    assert_eq!(openai[0]["encoding_format"], "base64");
    assert_eq!(openai[2]["encoding_format"], "float");
    assert_eq!(openai[2]["dimensions"], 4);
    let gemini = bodies("/v1beta/models/emb-ge:batchEmbedContents");
    assert_eq!(gemini.len(), 3);
    assert_eq!(gemini[2]["requests"][0]["content"]["role"], "user");
    // One record per served call: 3, 2 and 3 input tokens at 20 and 150 nano-USD a token.
    let records = settled_records(&db, 6, "embedding").await;
    let mut got: Vec<(String, i64, String, i64)> = records
        .iter()
        .map(|r| {
            (
                r.model_served.clone(),
                r.input_tokens,
                r.measurement.clone(),
                r.charged_nanos,
            )
        })
        .collect();
    got.sort();
    let want = |model: &str, tokens: i64, measurement: &str, per_token: i64| {
        (
            model.to_string(),
            tokens,
            measurement.to_string(),
            tokens * per_token,
        )
    };
    let mut expected = vec![
        want("emb-oa", 3, "exact", 20),
        want("emb-oa", 2, "exact", 20),
        want("emb-oa", 3, "exact", 20),
        want("emb-ge", 3, "estimated", 150),
        want("emb-ge", 2, "estimated", 150),
        want("emb-ge", 3, "estimated", 150),
    ];
    expected.sort();
    assert_eq!(got, expected);
    running.stop().await.unwrap();
}

/// The official openai SDK's batch calls (issue 46): `files.create`, `batches.create`,
/// `batches.retrieve`, `files.content`, unmodified, on every account format that serves the
/// batch's endpoint (chat on OpenAI- and Anthropic-format accounts, embeddings on OpenAI- and
/// Gemini-format ones); each line booked once, in its batch.
#[tokio::test]
async fn official_sdks_batch() {
    let Some(python) = testkit::sdk_python() else {
        eprintln!("SDK venv missing (scripts/sdk-env): official SDK batches skipped");
        return;
    };
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let db_url = testkit::fresh_database_url().await;
    let models = ["gpt-x", "claude-x", "gemini-x", "emb-oa", "emb-ge"];
    let mut config = TestConfig::embedded()
        .database(&db_url)
        .model(Model::text("gpt-x", 0.15, 0.6))
        .model(Model::text("claude-x", 3.0, 15.0))
        .model(Model::text("gemini-x", 0.3, 2.5))
        .model(Model::embedding("emb-oa", 0.02))
        .model(Model::embedding("emb-ge", 0.15))
        .account(Account::openai(
            "oa",
            &mock.base_url(),
            &["gpt-x", "emb-oa"],
        ))
        .account(Account::anthropic("an", &mock.root_url(), &["claude-x"]))
        .account(Account::gemini(
            "ge",
            &mock.root_url(),
            &["gemini-x", "emb-ge"],
        ))
        .group(Group::new(1, &models))
        .set("batches", "poll_interval_ms", 50);
    if let Some(url) = testkit::redis_url() {
        config = config.redis(&url, &testkit::redis_prefix("sdk-batch"));
    }
    let (db, key) = super::database_with_demo_key(&db_url).await;
    let running = App::build(config.settings(), Role::Proxy)
        .await
        .unwrap()
        .start();
    let base = running.base_url().unwrap();
    let pairs = [
        ("/v1/chat/completions", "gpt-x", "chat.completion"),
        ("/v1/chat/completions", "claude-x", "chat.completion"),
        ("/v1/chat/completions", "gemini-x", "chat.completion"),
        ("/v1/embeddings", "emb-oa", "list"),
        ("/v1/embeddings", "emb-ge", "list"),
    ];
    let mut args: Vec<String> = pairs.iter().map(|(e, m, _)| format!("{e}:{m}")).collect();
    // Anthropic's message batches: on an Anthropic-format account, and translated to an OpenAI one.
    args.extend(["claude-x", "gpt-x", "gemini-x"].map(|m| format!("anthropic:{m}")));
    let mut argv: Vec<&str> = vec![&base, &key.api_key];
    argv.extend(args.iter().map(String::as_str));
    let stdout = run_script(&python, "batches.py", &argv, 180).await;
    let lines: BTreeMap<String, Value> = stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| (v["id"].as_str().unwrap().to_string(), v))
        .collect();
    let errors: Vec<&Value> = lines
        .values()
        .filter(|l| l.get("error").is_some())
        .collect();
    assert!(errors.is_empty(), "SDK batch calls failed:\n{errors:#?}");
    for (endpoint, model, object) in pairs {
        let got = &lines[&format!("{endpoint}:{model}")];
        assert_eq!(got["status"], "completed", "{got}");
        assert_eq!(
            got["counts"],
            serde_json::json!({"total": 3, "completed": 3, "failed": 0}),
            "{got}"
        );
        assert_eq!(
            got["metadata"],
            serde_json::json!({"job": "nightly"}),
            "{got}"
        );
        let ids: Vec<String> = (0..3).map(|i| format!("{model}-{i}")).collect();
        assert_eq!(got["custom_ids"], serde_json::json!(ids), "{got}");
        assert_eq!(got["listed"], true, "the SDK's paged list finds it: {got}");
        assert_eq!(
            got["objects"],
            serde_json::json!([object, object, object]),
            "{got}"
        );
        let batch = got["batch"].as_str().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let records = loop {
            let found = entities::usage_records::Entity::find()
                .filter(entities::usage_records::Column::BatchId.eq(batch))
                .all(&db)
                .await
                .unwrap();
            if found.len() >= 3 || std::time::Instant::now() > deadline {
                break found;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(records.len(), 3, "{model}: one record per line");
        assert!(
            records
                .iter()
                .all(|r| r.model_served == model && r.charged_nanos > 0),
            "{model}"
        );
    }
    for model in ["claude-x", "gpt-x", "gemini-x"] {
        let got = &lines[&format!("anthropic:{model}")];
        assert_eq!(got["status"], "ended", "{got}");
        assert_eq!(
            got["counts"],
            serde_json::json!({"processing": 0, "succeeded": 3, "errored": 0, "canceled": 0, "expired": 0}),
            "{got}"
        );
        let ids: Vec<String> = (0..3).map(|i| format!("{model}-{i}")).collect();
        assert_eq!(got["custom_ids"], serde_json::json!(ids), "{got}");
        assert_eq!(got["listed"], true, "the SDK's paged list finds it: {got}");
        assert_eq!(
            got["types"],
            serde_json::json!(["succeeded", "succeeded", "succeeded"]),
            "{got}"
        );
        assert_eq!(
            got["messages"],
            serde_json::json!(["message", "message", "message"]),
            "{got}"
        );
        let batch = got["batch"].as_str().unwrap();
        assert!(batch.starts_with("msgbatch_"), "{got}");
        let deadline = Instant::now() + Duration::from_secs(10);
        let records = loop {
            let n = entities::usage_records::Entity::find()
                .filter(entities::usage_records::Column::BatchId.eq(batch))
                .count(&db)
                .await
                .unwrap();
            if n >= 3 || Instant::now() > deadline {
                break n;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(records, 3, "{model}: one record per request");
    }
    for (id, class, status) in [
        ("unknown-batch", "NotFoundError", 404),
        ("bad-purpose", "BadRequestError", 400),
        ("unknown-message-batch", "NotFoundError", 404),
        ("bad-custom-id", "BadRequestError", 400),
    ] {
        let got = &lines[id];
        assert_eq!(
            (&got["class"], &got["status"]),
            (&serde_json::json!(class), &serde_json::json!(status)),
            "{id}: {got}"
        );
    }
    running.stop().await.unwrap();
}
