//! The supplier's side of each call (issue 47) through HTTP, on the in-memory and the Redis
//! store, on whichever database the suite runs: a call that fails over records the attempt it
//! left (refused, costing nothing) beside its one customer charge; each answered call carries its
//! supplier cost at the configured supplier prices × the account's multiplier; a cut stream's
//! supplier estimate stays within what the request could have cost; and the margin report
//! (the operator CLI's JSON and its service), per day × account × model, adds up to the ledger —
//! retail to what the organizations' spend accounts were posted, wholesale to what the partner
//! owes — and the `/metrics` counters say the same.

use super::{attempts_of, key_of_another_organization, record_of};
use mock_supplier::{Fault, MockConfig, MockSupplier};
use money::NanoUsd;
use serde_json::{Value, json};
use testkit::{Account, Group, Model, TestConfig};
use tollgate::{App, Role};

/// A chat call; returns its request id and whether the refusing account was tried.
async fn chat(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    body: &Value,
    usage: &str,
) -> (String, reqwest::StatusCode) {
    let resp = http
        .post(format!("{base}/compat/v1/chat/completions"))
        .bearer_auth(key)
        .header("x-mock-usage", usage)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let id = resp.headers()["x-request-id"].to_str().unwrap().to_string();
    let _ = resp.bytes().await; // a cut stream ends short
    (id, status)
}

const MTOK: i64 = 1_000_000;

/// Ten dollars into the direct organization's wallet (a top-up), before any gateway starts.
async fn fund_the_other_organization(db: &sea_orm::DatabaseConnection) {
    use admin_api::ledger::{self, AccountRef};
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let org = entities::organizations::Entity::find()
        .filter(entities::organizations::Column::Name.eq("Other"))
        .one(db)
        .await
        .unwrap()
        .unwrap();
    ledger::transfer(
        db,
        "test-top-up",
        "top_up",
        &AccountRef::external(),
        &AccountRef::org_wallet(org.id),
        NanoUsd::from_usd(10).unwrap(),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn failover_cut_streams_and_the_margin_report_add_up_to_the_ledger() {
    let good = MockSupplier::start(MockConfig::default()).await.unwrap();
    let bad = MockSupplier::start(MockConfig::default()).await.unwrap();
    bad.set_fault(Some("status=503".parse::<Fault>().unwrap()));
    let db_url = testkit::fresh_database_url().await;
    // Supplier prices 0.10 / 0.40 USD per million tokens; the answering account pays 0.8 of them.
    let config = TestConfig::embedded()
        .database(&db_url)
        .model(
            Model::gpt_4o_mini()
                .line("supplier_input_per_mtok = 0.10")
                .line("supplier_output_per_mtok = 0.40"),
        )
        .account(Account::openai(
            "refusing",
            &bad.base_url(),
            &["gpt-4o-mini"],
        ))
        .model(
            Model::image("gpt-image-x", 0.04)
                .author("openai")
                .line("supplier_per_image = 0.03"),
        )
        .account(
            Account::openai(
                "answering",
                &good.base_url(),
                &["gpt-4o-mini", "gpt-image-x"],
            )
            .capability("image_generation")
            .supplier_price_multiplier(0.8),
        )
        .group(Group::new(1, &["gpt-4o-mini", "gpt-image-x"]).wholesale(0.7))
        // A refusal cools the account for a minute: every later call goes to the other one.
        .set("routing", "error_cooldown_ms", 60_000u64)
        .set("metrics", "listen", "127.0.0.1:0");
    // The demo partner resells the demo organization (its customer): wholesale is its revenue.
    let state = admin_api::AppState::connect(config.settings(), opstate::Stores::memory())
        .await
        .unwrap();
    admin_api::db::migrate(&state.db).await.unwrap();
    let minted = admin_api::demo::quickstart(&state, 1).await.unwrap().key;
    let db = state.db.clone();
    let direct = key_of_another_organization(
        &db,
        opstate::Stores::memory().keys.as_ref(),
        &credentials::KeyHasher::new(testkit::PEPPER.as_bytes()),
        credentials::Env::Dev,
    )
    .await;
    fund_the_other_organization(&db).await;

    let mut deployments = vec![("memory", config.clone())];
    if let Some(url) = testkit::redis_url() {
        deployments.push((
            "redis",
            config.redis(&url, &testkit::redis_prefix("supcost")),
        ));
    }
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let plain = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]});
    // Each exact call: (1,000 × 0.10 + 500 × 0.40) × 0.8 = 240 µUSD at the supplier.
    let exact_cost = (1_000 * 100_000_000 + 500 * 400_000_000) / MTOK * 8 / 10;
    let (mut calls, mut image_calls) = (0, 0);
    for (name, config) in deployments {
        let app = App::build(config.settings(), Role::Proxy).await.unwrap();
        let running = app.start();
        let base = running.base_url().unwrap();
        let usage = "prompt=1000,completion=500";
        // Until the refusing account is tried (each call's order is its own): that call fails
        // over and is answered by the other account.
        let before = bad.request_count();
        let mut failed_over = None;
        for _ in 0..40 {
            let (id, status) = chat(&http, &base, &minted.api_key, &plain, usage).await;
            assert_eq!(status, 200, "{name}");
            calls += 1;
            if bad.request_count() > before {
                failed_over = Some(id);
                break;
            }
        }
        let id = failed_over.expect("the refusing account is tried within 40 calls");
        let record = record_of(&db, &id).await;
        assert_eq!(record.account_id, "answering", "{name}");
        assert_eq!(record.supplier_cost_nanos, Some(exact_cost), "{name}");
        let left = attempts_of(&db, &id).await;
        assert_eq!(left.len(), 1, "{name}: {left:?}");
        assert_eq!(
            (
                left[0].attempt,
                left[0].account_id.as_str(),
                left[0].outcome.as_str()
            ),
            (1, "refusing", "refused"),
            "{name}"
        );
        assert_eq!(
            (left[0].status, left[0].supplier_cost_nanos),
            (503, Some(0)),
            "{name}"
        );
        assert_eq!(left[0].model, "gpt-4o-mini", "{name}");
        // One customer charge for the call: its record, at the retail price of what was served.
        assert!(record.charged_nanos > 0, "{name}");

        // A direct organization's call (no partner: its revenue is retail).
        let (id, status) = chat(&http, &base, &direct, &plain, usage).await;
        assert_eq!(status, 200, "{name}");
        calls += 1;
        assert_eq!(
            record_of(&db, &id).await.supplier_cost_nanos,
            Some(exact_cost)
        );
        assert!(
            attempts_of(&db, &id).await.is_empty(),
            "{name}: no failover"
        );

        // A stream cut after 3 events: the supplier's usage never arrived; its estimate keeps
        // to the request's bounds (input ≤ its bytes, output ≤ max_tokens).
        let mut stream = plain.clone();
        stream["stream"] = json!(true);
        stream["max_tokens"] = json!(50);
        good.set_fault(Some("cut_after=3".parse::<Fault>().unwrap()));
        let (id, status) = chat(&http, &base, &minted.api_key, &stream, usage).await;
        good.set_fault(None);
        assert_eq!(status, 200, "{name}");
        calls += 1;
        let cut = record_of(&db, &id).await;
        assert_eq!(cut.measurement, "estimated", "{name}");
        let bytes = i64::try_from(serde_json::to_vec(&stream).unwrap().len()).unwrap();
        let bound = (bytes * 100_000_000 + 50 * 400_000_000) / MTOK * 8 / 10 + 1;
        let estimate = cut.supplier_cost_nanos.expect("priced");
        assert!(
            estimate > 0 && estimate <= bound,
            "{name}: {estimate} ≤ {bound}"
        );
        // The same usage as the customer's estimate, at the supplier's prices (rounded up).
        let want = (cut.input_tokens * 100_000_000 + cut.output_tokens * 400_000_000) * 8 / 10;
        assert_eq!(estimate, (want + MTOK - 1) / MTOK, "{name}");
        // An image call is billed per image at the supplier, as its customer is (the tokens the
        // answer reports are not priced): 2 × 0.03 × 0.8 = 48 mUSD.
        let resp = http
            .post(format!("{base}/compat/v1/images/generations"))
            .bearer_auth(&minted.api_key)
            .header("x-mock-images", "2")
            .json(&json!({"model": "gpt-image-x", "prompt": "a lighthouse", "n": 2}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{name}");
        let id = resp.headers()["x-request-id"].to_str().unwrap().to_string();
        resp.bytes().await.unwrap();
        calls += 1;
        image_calls += 1;
        let image = record_of(&db, &id).await;
        assert_eq!(image.images, 2, "{name}");
        assert!(image.output_tokens > 0, "{name}: the answer reports tokens");
        assert_eq!(image.supplier_cost_nanos, Some(48_000_000), "{name}");
        // The operator's counters: this deployment's calls' supplier cost, by account.
        let scrape = format!("http://{}/metrics", running.addresses().metrics.unwrap());
        let text = http.get(scrape).send().await.unwrap().text().await.unwrap();
        let refused = r#"tollgate_supplier_attempts_total{account="refusing",result="refused"} 1"#;
        assert!(text.contains(refused), "{name}: {text}");
        let answered = text
            .lines()
            .find(|l| l.starts_with(r#"tollgate_supplier_cost_usd_total{account="answering""#))
            .unwrap_or_else(|| panic!("{name}: {text}"));
        let usd: f64 = answered.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(usd > 0.0, "{name}: {answered}");
        running.stop().await.unwrap();
    }
    margin_adds_up(&state, calls, image_calls).await;
}

/// The margin report of today: its totals are the ledger's, its supplier cost the records'.
async fn margin_adds_up(state: &admin_api::AppState, calls: i64, image_calls: i64) {
    use admin_api::ledger::{self, AccountRef};
    use sea_orm::EntityTrait;
    let db = &state.db;
    let today = chrono::Utc::now().date_naive();
    let report = admin_api::services::margin::report(db, today, today)
        .await
        .unwrap();
    let records = entities::usage_records::Entity::find()
        .all(db)
        .await
        .unwrap();
    let left = entities::supplier_attempts::Entity::find()
        .all(db)
        .await
        .unwrap();
    let t = &report.totals;
    assert_eq!(t.calls, calls);
    assert_eq!(t.calls, records.len() as i64);
    assert_eq!(t.attempts, calls + left.len() as i64);
    assert_eq!(t.supplier_cost_unknown, 0);
    let sum = |f: fn(&entities::usage_records::Model) -> i64| records.iter().map(f).sum::<i64>();
    assert_eq!(
        t.supplier_cost.nanos(),
        sum(|r| r.supplier_cost_nanos.unwrap())
    );
    // Retail: what the organizations' spend accounts were posted.
    let mut orgs: Vec<i64> = records.iter().map(|r| r.organization_id).collect();
    orgs.sort_unstable();
    orgs.dedup();
    assert_eq!(orgs.len(), 2);
    let mut spent = 0;
    for org in &orgs {
        spent += ledger::balance(db, &AccountRef::org_spend(*org).code)
            .await
            .unwrap()
            .nanos()
            .abs();
    }
    assert_eq!(t.retail.nanos(), spent);
    // Wholesale: what the demo partner owes for its customer's calls.
    let customers = entities::customers::Entity::find().all(db).await.unwrap();
    let partner = customers[0].partner_id;
    let owed = ledger::balance(db, &AccountRef::partner_outstanding_usage(partner).code)
        .await
        .unwrap()
        .nanos()
        .abs();
    assert_eq!(t.wholesale.nanos(), owed);
    assert!(owed > 0);
    // Revenue: wholesale of the resold organization, retail of the direct one.
    let resold = customers[0].organization_id;
    let direct_retail: i64 = records
        .iter()
        .filter(|r| r.organization_id != resold)
        .map(|r| r.charged_nanos)
        .sum();
    assert_eq!(t.revenue.nanos(), owed + direct_retail);
    assert_eq!(
        t.margin(),
        t.revenue.checked_sub(t.supplier_cost),
        "a margin once every cost is known"
    );
    // Rows: the answering account's calls, and the refusing account's attempts (no call).
    let answering = report
        .rows
        .iter()
        .find(|r| r.account == "answering" && r.model == "gpt-4o-mini")
        .unwrap();
    let chats = calls - image_calls;
    assert_eq!((answering.calls, answering.attempts), (chats, chats));
    let refusing = report
        .rows
        .iter()
        .find(|r| r.account == "refusing")
        .unwrap();
    assert_eq!((refusing.calls, refusing.attempts), (0, left.len() as i64));
    assert_eq!(refusing.supplier_cost, NanoUsd::ZERO);
    assert_eq!(refusing.margin(), Some(NanoUsd::ZERO));

    // The operator CLI: the same report as JSON (amounts as decimal strings).
    let day = today.to_string();
    let printed = admin_api::cli::margin(state, Some(&day), Some(&day))
        .await
        .unwrap();
    let usd = |n: NanoUsd| json!(n.to_decimal_usd().to_string());
    assert_eq!(printed["totals"]["retail_usd"], usd(t.retail), "{printed}");
    assert_eq!(
        printed["totals"]["margin_usd"],
        usd(t.margin().unwrap()),
        "{printed}"
    );
    assert_eq!(printed["totals"]["calls"], json!(calls), "{printed}");
    assert_eq!(printed["rows"].as_array().unwrap().len(), report.rows.len());
    for (from, to) in [("2026-13-01", "2026-13-01"), ("2026-11-02", "2026-11-01")] {
        let refused = admin_api::cli::margin(state, Some(from), Some(to)).await;
        assert!(refused.is_err(), "{from} {to}");
    }
}
