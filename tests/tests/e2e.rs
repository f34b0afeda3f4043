//! End-to-end: whole deployments built by `tollgate::App` (the binaries' wiring) against the mock
//! supplier. Runs on PostgreSQL when `DATABASE_URL` is set, else on SQLite files; on Redis as well
//! when `REDIS_URL` is set.

#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: failing loudly is the point"
)]

use credentials::{Env, KeyHasher};
use mock_supplier::{MockConfig, MockSupplier};
use opstate::Stores;
use testkit::{Account, Group, Model, TestConfig};
use tollgate::{App, Role};

#[path = "e2e/abandoned.rs"]
mod abandoned;
#[path = "e2e/batch_lists.rs"]
mod batch_lists;
#[path = "e2e/batch_offload.rs"]
mod batch_offload;
#[path = "e2e/batches.rs"]
mod batches;
#[path = "e2e/browser.rs"]
mod browser;
#[path = "e2e/checkout.rs"]
mod checkout;
#[path = "e2e/generations.rs"]
mod generations;
#[path = "e2e/reconcile.rs"]
mod reconcile;
#[path = "e2e/sdk.rs"]
mod sdk;
#[path = "e2e/supplier_batches.rs"]
mod supplier_batches;
#[path = "e2e/supplier_cost.rs"]
mod supplier_cost;
#[path = "e2e/video.rs"]
mod video;

/// The database at `db_url`, migrated, with a demo key of group 1 (a funded demo organization)
/// minted in it while no gateway runs: a gateway started afterwards knows it from the ledger only.
async fn database_with_demo_key(
    db_url: &str,
) -> (sea_orm::DatabaseConnection, admin_api::demo::DemoKey) {
    let db = admin_api::db::connect(db_url).await.unwrap();
    admin_api::db::migrate(&db).await.unwrap();
    let minted = admin_api::demo::demo_key(
        &db,
        Stores::memory().keys.as_ref(),
        &KeyHasher::new(testkit::PEPPER.as_bytes()),
        Env::Dev,
        1,
    )
    .await
    .unwrap();
    (db, minted)
}

/// The settled record of `request_id` (10 s at most).
async fn record_of(
    db: &sea_orm::DatabaseConnection,
    request_id: &str,
) -> entities::usage_records::Model {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let found = entities::usage_records::Entity::find()
            .filter(entities::usage_records::Column::RequestId.eq(request_id))
            .one(db)
            .await
            .unwrap();
        if let Some(r) = found {
            return r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{request_id} never settled"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// The secret of a key of a new, active organization ("Other"), in group 1, written to the
/// ledger at `db` and published to `keys` (a gateway started afterwards also finds it in the
/// ledger).
/// The attempts a call moved on from (issue 47), in order.
async fn attempts_of(
    db: &sea_orm::DatabaseConnection,
    request_id: &str,
) -> Vec<entities::supplier_attempts::Model> {
    use entities::supplier_attempts as sa;
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
    sa::Entity::find()
        .filter(sa::Column::RequestId.eq(request_id))
        .order_by_asc(sa::Column::Attempt)
        .all(db)
        .await
        .unwrap()
}

async fn key_of_another_organization(
    db: &sea_orm::DatabaseConnection,
    keys: &dyn opstate::KeyDirectory,
    hasher: &KeyHasher,
    env: Env,
) -> String {
    use sea_orm::{ActiveModelTrait, Set};
    let org = entities::organizations::ActiveModel {
        name: Set("Other".into()),
        slug: Set(format!("other-{}", uuid::Uuid::new_v4().simple())),
        status: Set(entities::status::OrganizationStatus::Active),
        created_at: Set(chrono::Utc::now()),
        ..Default::default()
    }
    .insert(db)
    .await
    .unwrap();
    let new = admin_api::keys::NewKey {
        organization_id: org.id,
        group_id: 1,
        name: "other",
        permissions: opstate::KeyPermissions::default(),
        expires_at: None,
        limits: opstate::KeyLimits::default(),
        budget: None,
    };
    let created = admin_api::keys::create_key(db, keys, hasher, env, new)
        .await
        .unwrap();
    created.secret.expose().to_string()
}

#[tokio::test]
async fn key_from_the_database_reaches_the_gateway() {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let db_url = testkit::fresh_database_url().await;
    let config = TestConfig::embedded()
        .database(&db_url)
        .model(Model::gpt_4o_mini())
        .account(Account::openai("mock", &mock.base_url(), &["gpt-4o-mini"]))
        .group(Group::new(1, &["gpt-4o-mini"]));
    // Minted while no gateway runs: only the database knows it.
    let (db, minted) = database_with_demo_key(&db_url).await;

    let mut deployments = vec![("memory", config.clone())];
    if let Some(url) = testkit::redis_url() {
        deployments.push(("redis", config.redis(&url, &testkit::redis_prefix("e2e"))));
    }
    for (name, config) in deployments {
        // An embedded gateway rebuilds its key directory and wallets from the ledger at start.
        let app = App::build(config.settings(), Role::Proxy).await.unwrap();
        assert!(app.stores().keys.is_loaded().await.unwrap(), "{name}");
        let running = app.start();
        let base = running.base_url().unwrap();
        let resp = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .post(format!("{base}/compat/v1/chat/completions"))
            .bearer_auth(&minted.api_key)
            .header("x-mock-usage", "prompt=3,completion=2")
            .body(r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{name}");
        let request_id = resp.headers()["x-request-id"].to_str().unwrap().to_string();
        resp.bytes().await.unwrap();
        // The embedded settler books the call in the ledger database.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let record = loop {
            use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
            let found = entities::usage_records::Entity::find()
                .filter(entities::usage_records::Column::RequestId.eq(request_id.as_str()))
                .one(&db)
                .await
                .unwrap();
            if let Some(r) = found {
                break r;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{name}: never settled"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        assert_eq!(record.organization_id, minted.organization_id, "{name}");
        assert_eq!(record.api_key_id, minted.key_id, "{name}");
        assert_eq!(
            (record.input_tokens, record.output_tokens),
            (3, 2),
            "{name}"
        );
        running.stop().await.unwrap();
    }
}

/// The customer lifecycle over HTTP through the proxy (one public base URL): create → pending →
/// accept the invitation → fund → groups and a rate change → key (secret once) → list → call the
/// gateway with the key → disable → the key is refused → usage and billing routes answer.
#[tokio::test]
async fn customer_lifecycle_through_the_proxy() {
    use serde_json::{Value, json};
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let mut config = TestConfig::embedded()
        .database(&testkit::fresh_database_url().await)
        .model(Model::gpt_4o_mini().author("openai"))
        .account(Account::openai("mock", &mock.base_url(), &["gpt-4o-mini"]))
        .group(Group::new(1, &["gpt-4o-mini"]).wholesale(0.5));
    if let Some(url) = testkit::redis_url() {
        config = config.redis(&url, &testkit::redis_prefix("lifecycle"));
    }
    let app = App::build(config.settings(), Role::Proxy).await.unwrap();
    let state = app.admin_state().unwrap().clone();
    let running = app.start();
    let base = running.base_url().unwrap();

    let partner = admin_api::cli::partner_create(
        &state,
        admin_api::cli::NewPartner::parse("Acme", "1.0", "100", "owner", &["partner:write".into()])
            .unwrap(),
    )
    .await
    .unwrap();
    let token = partner["token"].as_str().unwrap().to_string();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let n = std::sync::atomic::AtomicU32::new(0);
    let call = |method: reqwest::Method, path: &str, body: Option<Value>| {
        let mut req = http
            .request(method.clone(), format!("{base}{path}"))
            .bearer_auth(&token);
        if method != reqwest::Method::GET {
            req = req.header(
                "idempotency-key",
                format!(
                    "e2e-{}",
                    n.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                ),
            );
        }
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        async move {
            let resp = req.send().await.unwrap();
            (
                resp.status().as_u16(),
                resp.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };

    let (s, created) = call(reqwest::Method::PUT, "/partner/v1/customers/by-external-id/ext-42", Some(json!({
        "name": "Globex", "contact_email": "ann@globex.example", "initial_allocation_usd": 20, "retail_rate_multiplier": 2
    })))
    .await;
    assert_eq!(s, 200, "{created}");
    let id = created["data"]["customer"]["id"].as_i64().unwrap();
    let (s, pending) = call(
        reqwest::Method::GET,
        &format!("/partner/v1/customers/{id}/balance"),
        None,
    )
    .await;
    assert_eq!(
        (s, pending["reason"].as_str()),
        (409, Some("PARTNER_CUSTOMER_PENDING_ACTIVATION"))
    );
    assert_eq!(pending["metadata"]["next_action"], "accept_invitation");

    // Accept through the public URL (the path of invite_url, on this proxy).
    let invite = created["data"]["activation"]["invite_url"]
        .as_str()
        .unwrap();
    let path = &invite[invite.find("/invitations/").unwrap()..];
    let page = http.get(format!("{base}{path}")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert!(page.text().await.unwrap().contains("<form"));
    // Accepted by a program that also signs the person up (DESIGN §6c): the first post mails a
    // code to the address (202), the second, with the code, activates; a console session comes
    // back, and admin-api learns the client's address from the gateway, whatever the client
    // claimed in that header.
    let first = json!({"email": "ann@globex.example", "password": "correct horse battery staple"});
    let asked = http
        .post(format!("{base}{path}/accept"))
        .header("x-tollgate-client-ip", "203.0.113.9")
        .json(&first)
        .send()
        .await
        .unwrap();
    assert_eq!(asked.status(), 202);
    let outbox = config.settings().mail.outbox_dir.clone();
    let code = testkit::next_code(&outbox, "ann@globex.example", 0).await;
    let mut second = first.clone();
    second["verification_code"] = json!(code);
    let accepted = http
        .post(format!("{base}{path}/accept"))
        .header("x-tollgate-client-ip", "203.0.113.9")
        .json(&second)
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 200);
    assert!(
        accepted
            .headers()
            .get_all("set-cookie")
            .iter()
            .any(|c| c.to_str().unwrap().starts_with("tg_session=")),
        "a console session"
    );
    {
        use sea_orm::EntityTrait;
        let audit = entities::audit_records::Entity::find()
            .all(&state.db)
            .await
            .unwrap();
        let sign_in = audit.iter().find(|a| a.action == "sign_in").unwrap();
        assert_eq!(
            sign_in.ip.as_deref(),
            Some("127.0.0.1"),
            "the gateway's word, not the client's"
        );
    }
    let console = http
        .get(format!("{base}/console/sign-in"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        console.status(),
        200,
        "the console is served through the gateway"
    );
    assert!(
        console.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("frame-ancestors 'none'")
    );

    let (s, funded) = call(
        reqwest::Method::POST,
        &format!("/partner/v1/customers/{id}/allocations"),
        Some(json!({"action": "increase", "amount_usd": 10})),
    )
    .await;
    assert_eq!(s, 200, "{funded}");
    assert_eq!(funded["data"]["customer"]["organization_balance_usd"], 30);
    let (s, groups) = call(
        reqwest::Method::GET,
        &format!("/partner/v1/customers/{id}/groups"),
        None,
    )
    .await;
    assert_eq!(s, 200);
    assert_eq!(groups["data"][0]["rate_multiplier"], 2);
    let (s, _) = call(
        reqwest::Method::PUT,
        &format!("/partner/v1/customers/{id}/groups/1/rate"),
        Some(json!({"retail_rate_multiplier": 1.5})),
    )
    .await;
    assert_eq!(s, 200);
    let (s, funding) = call(reqwest::Method::GET, "/partner/v1/funding", None).await;
    assert_eq!(s, 200);
    assert_eq!(
        funding["data"]["reserved_allocations_usd"], 10,
        "30 × 0.5 / 1.5"
    );

    let (s, key) = call(
        reqwest::Method::POST,
        &format!("/partner/v1/customers/{id}/api-keys"),
        Some(json!({"name": "prod", "group_id": 1})),
    )
    .await;
    assert_eq!(s, 200, "{key}");
    let secret = key["data"]["key"].as_str().unwrap().to_string();
    let key_id = key["data"]["api_key_id"].as_i64().unwrap();
    let (s, list) = call(
        reqwest::Method::GET,
        &format!("/partner/v1/customers/{id}/api-keys"),
        None,
    )
    .await;
    assert_eq!(s, 200);
    assert!(!list.to_string().contains(&secret) && list["data"][0]["preview"].is_string());

    let chat =
        json!({"model": "openai/gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]});
    let resp = http
        .post(format!("{base}/compat/v1/chat/completions"))
        .bearer_auth(&secret)
        .header("x-mock-usage", "prompt=1000,completion=200")
        .json(&chat)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let request_id = resp.headers()["x-request-id"].to_str().unwrap().to_string();
    resp.bytes().await.unwrap();
    // The same call, streamed: metered from the final usage event, charged the same.
    let mut streamed = chat.clone();
    streamed["stream"] = json!(true);
    let resp = http
        .post(format!("{base}/compat/v1/chat/completions"))
        .bearer_auth(&secret)
        .header("x-mock-usage", "prompt=1000,completion=200")
        .json(&streamed)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(String::from_utf8_lossy(&resp.bytes().await.unwrap()).contains("[DONE]"));
    // The key reads its own standing through the gateway's base URL (DESIGN §6d): both calls'
    // charges in its day, nothing held once they settled.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let standing = loop {
        let v: Value = http
            .get(format!("{base}/compat/v1/key"))
            .bearer_auth(&secret)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let settled = v["data"]["spend"]["held_usd"] == json!(0)
            && v["data"]["spend"]["day_usd"]
                .as_f64()
                .is_some_and(|d| d > 0.0);
        if settled || std::time::Instant::now() > deadline {
            break v;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(standing["data"]["api_key_id"], key_id, "{standing}");
    assert_eq!(standing["data"]["spend"]["held_usd"], 0, "{standing}");
    assert_eq!(
        standing["data"]["spend"]["day_usd"], standing["data"]["spend"]["month_usd"],
        "{standing}"
    );
    assert!(
        standing["data"]["spend"]["day_usd"].as_f64().unwrap() > 0.0,
        "{standing}"
    );
    // What the first call cost, by the request id the gateway answered with (DESIGN §6e), once
    // the settler has booked it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let cost = loop {
        let resp = http
            .get(format!("{base}/compat/v1/generations/{request_id}"))
            .bearer_auth(&secret)
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let v: Value = resp.json().await.unwrap();
        if status == 200 || std::time::Instant::now() > deadline {
            break v;
        }
        assert_eq!(status, 404, "{v}");
        assert_eq!(v["error"]["code"], "generation_not_found", "{v}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(cost["id"], request_id.as_str(), "{cost}");
    assert!(
        cost["model"].as_str().unwrap().ends_with("gpt-4o-mini"),
        "{cost}"
    );
    assert_eq!(cost["status"], 200, "{cost}");
    assert_eq!(cost["measurement"], "exact", "{cost}");
    assert_eq!(
        (&cost["input_tokens"], &cost["output_tokens"]),
        (&json!(1000), &json!(200)),
        "{cost}"
    );
    assert!(cost["cost_usd"].as_f64().unwrap() > 0.0, "{cost}");
    let (s, _) = call(
        reqwest::Method::DELETE,
        &format!("/partner/v1/customers/{id}/api-keys/{key_id}"),
        None,
    )
    .await;
    assert_eq!(s, 200);
    // Refused at once: on Redis the proxy may keep the key's record (`redis.key_cache_ms`), but
    // admission checks the directory in its own store step (see the two-proxy deployment test).
    let revoked = std::time::Instant::now();
    let resp = loop {
        let resp = http
            .post(format!("{base}/compat/v1/chat/completions"))
            .bearer_auth(&secret)
            .json(&chat)
            .send()
            .await
            .unwrap();
        let bound = std::time::Duration::from_millis(settings::DEFAULT_KEY_CACHE_MS + 200);
        if resp.status() == 401 || testkit::redis_url().is_none() || revoked.elapsed() > bound {
            break resp;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(
        resp.status(),
        401,
        "a disabled key is refused within the bound"
    );
    assert_eq!(
        resp.json::<Value>().await.unwrap()["error"]["type"],
        "authentication_error"
    );

    for path in [
        format!("/partner/v1/customers/{id}/usage"),
        format!("/partner/v1/customers/{id}/api-keys/{key_id}/usage?granularity=hour"),
    ] {
        let (s, usage) = call(reqwest::Method::GET, &path, None).await;
        assert_eq!(s, 200, "{path}: {usage}");
        assert!(usage["data"]["buckets"].is_array());
    }
    let org = accepted_org(&state, id).await;
    let billing = admin_api::cli::billing_token(&state, "create", org)
        .await
        .unwrap();
    let resp = http
        .get(format!("{base}/api/v1/organization/billing/balance"))
        .header(
            "x-organization-billing-token",
            billing["token"].as_str().unwrap(),
        )
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let balance: Value = resp.json().await.unwrap();
    if status != 200 {
        let snap = state.stores.wallets.snapshot(org).await.unwrap();
        let book = admin_api::ledger::balance(
            &state.db,
            &admin_api::ledger::AccountRef::org_wallet(org).code,
        )
        .await
        .unwrap();
        panic!("billing balance {status}: {balance}; mirror {snap:?}; ledger {book:?}");
    }
    // 1000 input and 200 output tokens of gpt-4o-mini (0.15 / 0.60 USD per Mtok) at retail 1.5:
    // (150 + 120) / 1e6 × 1.5 = 0.000405 USD per call; two calls.
    let cost = 0.00081;
    assert_eq!(
        balance["data"]["balance_usd"],
        json!(30.0 - cost),
        "{balance}"
    );
    assert_eq!(balance["data"]["reserved_usd"], 0);
    assert_eq!(balance["data"]["status"], "reconciled");
    // The settler drains the usage event into the ledger and the reports.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    // Wait for the settler on the database (the partner routes are rate limited).
    loop {
        use sea_orm::{EntityTrait, PaginatorTrait};
        if entities::usage_records::Entity::find()
            .count(&state.db)
            .await
            .unwrap()
            == 2
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "usage never settled");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (s, usage) = call(
        reqwest::Method::GET,
        &format!("/partner/v1/customers/{id}/usage?granularity=hour"),
        None,
    )
    .await;
    assert_eq!(s, 200);
    let bucket = usage["data"]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["requests"] == 2)
        .unwrap()
        .clone();
    assert_eq!(bucket["burn_usd"], json!(cost));
    assert_eq!(bucket["total_tokens"], 2400);
    assert_eq!(bucket["active_api_keys"], 1);
    let daily: Value = http
        .get(format!("{base}/api/v1/organization/billing/usage/daily"))
        .header(
            "x-organization-billing-token",
            billing["token"].as_str().unwrap(),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(daily["data"]["totals"]["requests"], 2, "{daily}");
    assert_eq!(daily["data"]["totals"]["cost_usd"], json!(cost));
    assert_eq!(daily["data"]["totals"]["actual_cost_usd"], json!(cost));
    assert_eq!(daily["data"]["wallet_spend"]["amount_usd"], json!(cost));
    assert_eq!(daily["data"]["models"][0]["model"], "gpt-4o-mini");
    let spend = admin_api::ledger::balance(
        &state.db,
        &admin_api::ledger::AccountRef::org_spend(org).code,
    )
    .await
    .unwrap();
    assert_eq!(
        spend.nanos(),
        810_000,
        "the ledger moved by exactly price × multiplier × tokens"
    );
    assert_eq!(
        admin_api::ledger::imbalance(&state.db).await.unwrap(),
        money::NanoUsd::ZERO
    );
    // The partner owes the wholesale cost: 0.00081 × 0.5 / 1.5.
    let (s, funding) = call(reqwest::Method::GET, "/partner/v1/funding", None).await;
    assert_eq!(s, 200);
    assert_eq!(
        funding["data"]["outstanding_usage_usd"],
        json!(0.00027),
        "{funding}"
    );
    let unknown = http
        .get(format!("{base}/partner/v1/pricing"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    assert_eq!(unknown.text().await.unwrap(), "page not found");

    // (After the money checks above, which count two calls.) A key that expires in two seconds
    // and takes one call a minute: its limits and expiry travel
    // from the partner API to the gateway with the key's record.
    // The two calls must fall in one minute of the per-minute counter: stay clear of a minute's
    // end.
    let into = chrono::Utc::now().timestamp_millis().rem_euclid(60_000);
    if into > 55_000 {
        tokio::time::sleep(std::time::Duration::from_millis((60_100 - into) as u64)).await;
    }
    let expires = chrono::Utc::now() + chrono::Duration::seconds(2);
    let (s, temp) = call(
        reqwest::Method::POST,
        &format!("/partner/v1/customers/{id}/api-keys"),
        Some(
            json!({"name": "temp", "group_id": 1, "requests_per_minute": 1,
            "expires_at": expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)}),
        ),
    )
    .await;
    assert_eq!(s, 200, "{temp}");
    let temp_secret = temp["data"]["key"].as_str().unwrap().to_string();
    let hello = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]});
    let post = |key: String| {
        let req = http
            .post(format!("{base}/compat/v1/chat/completions"))
            .bearer_auth(key)
            .json(&hello);
        async move {
            let resp = req.send().await.unwrap();
            (
                resp.status().as_u16(),
                resp.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let (s, body) = post(temp_secret.clone()).await;
    assert_eq!(s, 200, "{body}");
    let (s, body) = post(temp_secret.clone()).await;
    assert_eq!(
        (s, &body["error"]["code"]),
        (429, &json!("capacity_queue_full")),
        "{body}"
    );
    while chrono::Utc::now().timestamp() < expires.timestamp() {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (s, body) = post(temp_secret).await;
    assert_eq!(
        (s, &body["error"]["type"]),
        (401, &json!("authentication_error")),
        "{body}"
    );
}

async fn accepted_org(state: &admin_api::AppState, customer_id: i64) -> i64 {
    use sea_orm::EntityTrait;
    entities::customers::Entity::find_by_id(customer_id)
        .one(&state.db)
        .await
        .unwrap()
        .unwrap()
        .organization_id
}

/// Redis flushed while running: the gateway fails closed (503, never an invalid key or a free
/// call), the billing balance answers 503, and both recover once admin-api rebuilt the store from
/// the ledger, with no money lost or created.
#[tokio::test]
async fn redis_flush_fails_closed_then_recovers() {
    use serde_json::Value;
    let Some(redis_url) = testkit::redis_url() else {
        eprintln!("REDIS_URL not set: flush scenario skipped");
        return;
    };
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let prefix = testkit::redis_prefix("flush");
    let config = TestConfig::embedded()
        .database(&testkit::fresh_database_url().await)
        .redis(&redis_url, &prefix)
        .model(Model::gpt_4o_mini())
        .account(Account::openai("mock", &mock.base_url(), &["gpt-4o-mini"]))
        .group(Group::new(1, &["gpt-4o-mini"]));
    let app = App::build(config.settings(), Role::Proxy).await.unwrap();
    let state = app.admin_state().unwrap().clone();
    let demo = admin_api::demo::demo_key(
        &state.db,
        state.stores.keys.as_ref(),
        &state.hasher,
        state.env,
        1,
    )
    .await
    .unwrap();
    admin_api::services::wallets::reload(&state, demo.organization_id)
        .await
        .unwrap();
    let billing = admin_api::cli::billing_token(&state, "create", demo.organization_id)
        .await
        .unwrap();
    let running = app.start();
    let base = running.base_url().unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let chat = || {
        http.post(format!("{base}/compat/v1/chat/completions"))
            .bearer_auth(&demo.api_key)
            .header("x-mock-usage", "prompt=1000,completion=1000")
            .body(r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#)
            .send()
    };
    let balance = || {
        http.get(format!("{base}/api/v1/organization/billing/balance"))
            .bearer_auth(billing["token"].as_str().unwrap())
            .send()
    };
    let settled = |n: u64| {
        let db = state.db.clone();
        async move {
            use sea_orm::{EntityTrait, PaginatorTrait};
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while entities::usage_records::Entity::find()
                .count(&db)
                .await
                .unwrap()
                < n
            {
                assert!(std::time::Instant::now() < deadline, "not settled");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    };
    let r = chat().await.unwrap();
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap();
    settled(1).await;

    // The flush (every key of this deployment).
    let mut conn = redis::Client::open(redis_url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg(&keys)
        .query_async(&mut conn)
        .await
        .unwrap();

    let r = chat().await.unwrap();
    assert_eq!(r.status(), 503, "fails closed while the store is empty");
    let r = balance().await.unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(
        r.json::<Value>().await.unwrap()["reason"],
        "ORG_BALANCE_RECONCILIATION_REQUIRED"
    );
    assert_eq!(mock.request_count(), 1, "nothing reached the supplier");

    // admin-api's keeper rebuilds keys and wallets from the ledger.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let r = chat().await.unwrap();
        if r.status() == 200 {
            r.bytes().await.unwrap();
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never recovered: {}",
            r.status()
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    settled(2).await;
    // Two calls of 1000 + 1000 tokens at 0.15 / 0.60 USD per Mtok: 0.00075 USD each.
    let b: Value = balance().await.unwrap().json().await.unwrap();
    assert_eq!(b["data"]["status"], "reconciled", "{b}");
    assert_eq!(
        b["data"]["balance_usd"],
        serde_json::json!(100.0 - 2.0 * 0.00075),
        "{b}"
    );
    assert_eq!(
        admin_api::ledger::imbalance(&state.db).await.unwrap(),
        money::NanoUsd::ZERO
    );
}

/// A Redis of its own (a `redis-server` process on a free port), stopped with SIGKILL and started
/// again empty: while it is down the gateway answers 503 (never 401, never a free call); once it
/// is back, the deployment recovers without a restart (keys and wallets rebuilt from the ledger),
/// and the ledger stays balanced with exactly the calls that were served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_and_restarted_recovers_without_a_restart() {
    let Some(server) = redis_server_binary() else {
        return;
    };
    let port = testkit::free_port();
    let start_redis = || {
        testkit::KillOnDrop(
            std::process::Command::new(&server)
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .stdout(std::process::Stdio::null())
                .spawn()
                .expect("redis-server starts"),
        )
    };
    let url = format!("redis://127.0.0.1:{port}");
    let wait_up = |url: String| async move {
        for _ in 0..100 {
            if let Ok(c) = redis::Client::open(url.as_str())
                && c.get_multiplexed_async_connection().await.is_ok()
            {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("redis-server did not come up");
    };
    let mut redis = start_redis();
    wait_up(url.clone()).await;
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let config = TestConfig::embedded()
        .database(&testkit::fresh_database_url().await)
        .redis(&url, "outage:")
        .model(Model::gpt_4o_mini())
        .account(Account::openai("mock", &mock.base_url(), &["gpt-4o-mini"]))
        .group(Group::new(1, &["gpt-4o-mini"]));
    let app = App::build(config.settings(), Role::Proxy).await.unwrap();
    let state = app.admin_state().unwrap().clone();
    let demo = admin_api::demo::demo_key(
        &state.db,
        state.stores.keys.as_ref(),
        &state.hasher,
        state.env,
        1,
    )
    .await
    .unwrap();
    admin_api::services::wallets::reload(&state, demo.organization_id)
        .await
        .unwrap();
    let running = app.start();
    let base = running.base_url().unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let call = || {
        http.post(format!("{base}/compat/v1/chat/completions"))
            .bearer_auth(&demo.api_key)
            .body(r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#)
            .send()
    };
    let r = call().await.unwrap();
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap();
    let served_before = mock.request_count();

    // Redis dies.
    drop(redis);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    for _ in 0..3 {
        let r = call().await.unwrap();
        assert_eq!(r.status(), 503, "fails closed while the store is down");
    }
    assert_eq!(
        mock.request_count(),
        served_before,
        "nothing served while down"
    );

    // Redis comes back, empty.
    redis = start_redis();
    wait_up(url.clone()).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let r = call().await.unwrap();
        let status = r.status();
        r.bytes().await.unwrap();
        if status == 200 {
            break;
        }
        assert_eq!(status, 503, "never 401 or a free call while recovering");
        assert!(std::time::Instant::now() < deadline, "did not recover");
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    // Both served calls are booked once; the ledger is balanced.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        use sea_orm::{EntityTrait, PaginatorTrait};
        let n = entities::usage_records::Entity::find()
            .count(&state.db)
            .await
            .unwrap();
        if n >= 2 {
            assert_eq!(n, 2);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not settled");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        admin_api::ledger::imbalance(&state.db).await.unwrap(),
        money::NanoUsd::ZERO
    );
    running.stop().await.unwrap();
    drop(redis);
}

/// The `redis-server` binary for tests that need a Redis of their own; with
/// `TOLLGATE_REQUIRE_SERVICES=1` its absence fails the test.
fn redis_server_binary() -> Option<std::path::PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("redis-server"))
            .find(|p| p.is_file())
    });
    assert!(
        found.is_some() || !testkit::services_required(),
        "TOLLGATE_REQUIRE_SERVICES=1 but redis-server is not installed"
    );
    found
}

/// A TCP forwarder in front of PostgreSQL that the test can cut (every connection closed, new
/// ones refused) and restore: a database outage without stopping the shared server.
struct Cuttable {
    port: u16,
    down: tokio::sync::watch::Sender<bool>,
    _tasks: tokio::task::JoinSet<()>,
}

impl Cuttable {
    async fn start(target: String) -> Cuttable {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (down, watch) = tokio::sync::watch::channel(false);
        let mut tasks = tokio::task::JoinSet::new();
        tasks.spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((mut client, _)) = listener.accept().await {
                if *watch.borrow() {
                    continue;
                }
                let target = target.clone();
                let mut cut = watch.clone();
                conns.spawn(async move {
                    let Ok(mut server) = tokio::net::TcpStream::connect(&target).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
                        _ = cut.wait_for(|d| *d) => {}
                    }
                });
            }
        });
        Cuttable {
            port,
            down,
            _tasks: tasks,
        }
    }

    fn set_down(&self, down: bool) {
        let _ = self.down.send(down);
    }
}

/// PostgreSQL unreachable: the partner and billing APIs answer 503, the gateway keeps serving from
/// the operational store, and settlement catches up once the database is back (every call booked
/// once, ledger balanced).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_keeps_the_gateway_serving() {
    let db_url = testkit::fresh_database_url().await;
    let Some(rest) = db_url.strip_prefix("postgres://") else {
        return; // the outage is PostgreSQL's (the SQLite pass runs the rest of the suite)
    };
    let (userinfo_host, dbname) = rest.split_once('/').unwrap();
    let (userinfo, host) = userinfo_host
        .rsplit_once('@')
        .map_or(("", userinfo_host), |(u, h)| (u, h));
    let cut = Cuttable::start(host.to_string()).await;
    let at = if userinfo.is_empty() {
        String::new()
    } else {
        format!("{userinfo}@")
    };
    let via = format!("postgres://{at}127.0.0.1:{}/{dbname}", cut.port);
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let config = TestConfig::embedded()
        .database(&via)
        .model(Model::gpt_4o_mini())
        .account(Account::openai("mock", &mock.base_url(), &["gpt-4o-mini"]))
        .group(Group::new(1, &["gpt-4o-mini"]));
    let app = App::build(config.settings(), Role::Proxy).await.unwrap();
    let state = app.admin_state().unwrap().clone();
    let demo = admin_api::demo::demo_key(
        &state.db,
        state.stores.keys.as_ref(),
        &state.hasher,
        state.env,
        1,
    )
    .await
    .unwrap();
    admin_api::services::wallets::reload(&state, demo.organization_id)
        .await
        .unwrap();
    let billing = admin_api::cli::billing_token(&state, "create", demo.organization_id)
        .await
        .unwrap();
    let billing = billing["token"].as_str().unwrap().to_string();
    let running = app.start();
    let base = running.base_url().unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let call = || {
        http.post(format!("{base}/compat/v1/chat/completions"))
            .bearer_auth(&demo.api_key)
            .body(r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#)
            .send()
    };
    let direct = admin_api::db::connect(&db_url).await.unwrap();
    let records = || {
        let db = direct.clone();
        async move {
            use sea_orm::{EntityTrait, PaginatorTrait};
            entities::usage_records::Entity::find()
                .count(&db)
                .await
                .unwrap()
        }
    };
    let r = call().await.unwrap();
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap();

    cut.set_down(true);
    for _ in 0..3 {
        let r = call().await.unwrap();
        assert_eq!(
            r.status(),
            200,
            "the gateway serves from the operational store"
        );
        r.bytes().await.unwrap();
    }
    let r = http
        .get(format!("{base}/api/v1/organization/billing/balance"))
        .bearer_auth(&billing)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["reason"], "SERVICE_UNAVAILABLE", "{v}");

    // Let the settler claim the outage's events and fail on them (several rounds), then restore:
    // it retries the entries it holds at once, well before their 30 s claim timeout would hand
    // them out again.
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    cut.set_down(false);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while records().await < 4 {
        assert!(
            std::time::Instant::now() < deadline,
            "settlement did not catch up"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(records().await, 4, "every call booked once");
    assert_eq!(
        admin_api::ledger::imbalance(&direct).await.unwrap(),
        money::NanoUsd::ZERO
    );
    running.stop().await.unwrap();
}

/// Behind a load balancer listed in `[server] trusted_proxies`, the console sees the client the
/// balancer forwarded (the right-most `X-Forwarded-For` entry outside the trusted networks), so
/// the limiter counts clients, not the balancer; without that setting a client's own
/// `X-Forwarded-For` is ignored and the TCP peer counts (DESIGN §6c).
#[tokio::test]
async fn a_trusted_proxys_forwarded_client_is_the_client() {
    for (trusted, expected) in [(true, "198.51.100.7"), (false, "127.0.0.1")] {
        let mut config = TestConfig::embedded()
            .database(&testkit::fresh_database_url().await)
            .model(Model::gpt_4o_mini())
            .account(Account::openai(
                "mock",
                &testkit::closed_url(),
                &["gpt-4o-mini"],
            ))
            .group(Group::new(1, &["gpt-4o-mini"]));
        if trusted {
            config = config.set(
                "server",
                "trusted_proxies",
                vec!["127.0.0.1/32".to_string()],
            );
        }
        let app = App::build(config.settings(), Role::Proxy).await.unwrap();
        let state = app.admin_state().unwrap().clone();
        let running = app.start();
        let base = running.base_url().unwrap();
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let form = http
            .get(format!("{base}/console/sign-in"))
            .send()
            .await
            .unwrap();
        let cookie = form
            .headers()
            .get_all("set-cookie")
            .iter()
            .map(|c| c.to_str().unwrap().split(';').next().unwrap().to_string())
            .find(|c| c.starts_with("tg_csrf="))
            .unwrap();
        let csrf = cookie.trim_start_matches("tg_csrf=").to_string();
        let refused = http
            .post(format!("{base}/console/sign-in"))
            .header("cookie", &cookie)
            .header("x-forwarded-for", "203.0.113.50, 198.51.100.7")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!(
                "csrf={csrf}&email=someone%40lb.example&password=not+the+right+one"
            ))
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 401);
        use sea_orm::EntityTrait;
        let audit = entities::audit_records::Entity::find()
            .all(&state.db)
            .await
            .unwrap();
        let failed = audit.iter().find(|a| a.action == "check_failed").unwrap();
        assert_eq!(
            failed.ip.as_deref(),
            Some(expected),
            "trusted_proxies set: {trusted}"
        );
        running.stop().await.unwrap();
    }
}
