//! Reconciliation against the suppliers' own usage reports (issue 47) through HTTP: calls on an
//! OpenAI-format and an Anthropic account (streams, cache reads and writes), then a round of
//! `reconcile-suppliers` reads the mock's OpenAI completions usage and Anthropic messages usage
//! report (served from what the mock really billed) and finds no drift; a usage record deleted
//! on purpose then shows up as exactly its tokens and its supplier cost, flagged beyond the
//! tolerance, in the table, the command's JSON and the metrics.

use mock_supplier::usage_report::key_id;
use mock_supplier::{MockConfig, MockSupplier};
use money::NanoUsd;
use serde_json::{Value, json};
use testkit::{Account, Group, Model, TestConfig};
use tollgate::{App, Role};

/// The account's api key in testkit's configurations (what the gateway sends the mock).
const SUPPLIER_KEY: &str = "sk-mock-supplier";

async fn booked(db: &sea_orm::DatabaseConnection, n: usize) -> Vec<entities::usage_records::Model> {
    use sea_orm::EntityTrait;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let all = entities::usage_records::Entity::find()
            .all(db)
            .await
            .unwrap();
        if all.len() >= n {
            return all;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {n} booked",
            all.len()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn the_suppliers_reports_agree_with_the_ledger_until_a_record_is_lost() {
    let openai = MockSupplier::start(MockConfig::default()).await.unwrap();
    let anthropic = MockSupplier::start(MockConfig::default()).await.unwrap();
    let db_url = testkit::fresh_database_url().await;
    let priced = |m: Model| {
        m.line("supplier_input_per_mtok = 0.10")
            .line("supplier_output_per_mtok = 0.40")
            .line("supplier_cache_read_per_mtok = 0.01")
            .line("supplier_cache_write_per_mtok = 0.125")
            .line("supplier_cache_write_1h_per_mtok = 0.20")
    };
    let report = |a: Account, anthropic: bool| {
        a.line("usage_report_key = \"sk-admin-mock\"")
            .line(&format!(
                "usage_report_api_key_id = \"{}\"",
                key_id(anthropic, SUPPLIER_KEY)
            ))
    };
    let config = TestConfig::embedded()
        .database(&db_url)
        .model(priced(Model::gpt_4o_mini()))
        .model(priced(
            Model::text("claude-x", 3.0, 15.0)
                .family("claude")
                .line("cached_input_per_mtok = 0.30")
                .line("cache_write_per_mtok = 3.75")
                .line("cache_write_1h_per_mtok = 6.0"),
        ))
        .account(report(
            Account::openai("oa", &openai.base_url(), &["gpt-4o-mini"]),
            false,
        ))
        .account(report(
            Account::anthropic("an", &anthropic.root_url(), &["claude-x"]),
            true,
        ))
        .group(Group::new(1, &["gpt-4o-mini", "claude-x"]))
        .set("metrics", "listen", "127.0.0.1:0")
        // The round runs by hand here.
        .set("reconciliation", "supplier_interval_ms", 0u64);
    let state = admin_api::AppState::connect(config.settings(), opstate::Stores::memory())
        .await
        .unwrap();
    admin_api::db::migrate(&state.db).await.unwrap();
    let key = admin_api::demo::quickstart(&state, 1).await.unwrap().key;
    let app = App::build(config.settings(), Role::Proxy).await.unwrap();
    let running = app.start();
    let base = running.base_url().unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let chat = |stream: bool| {
        json!({"model": "gpt-4o-mini", "stream": stream,
        "messages": [{"role": "user", "content": "hi"}]})
    };
    let message = |stream: bool| {
        json!({"model": "claude-x", "max_tokens": 64, "stream": stream,
        "messages": [{"role": "user", "content": "hi"}]})
    };
    let calls: Vec<(&str, Value, &str)> = vec![
        (
            "/compat/v1/chat/completions",
            chat(false),
            "prompt=1000,completion=500",
        ),
        (
            "/compat/v1/chat/completions",
            chat(true),
            "prompt=2000,completion=7,cached=1024",
        ),
        (
            "/compat/v1/chat/completions",
            chat(false),
            "prompt=30,completion=5",
        ),
        (
            "/v1/messages",
            message(false),
            "prompt=4000,completion=90,cached=2000,cache_creation=1000,cache_creation_1h=400",
        ),
        ("/v1/messages", message(true), "prompt=100,completion=5"),
    ];
    for (path, body, usage) in &calls {
        let resp = http
            .post(format!("{base}{path}"))
            .bearer_auth(&key.api_key)
            .header("x-mock-usage", *usage)
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{path} {usage}");
        resp.bytes().await.unwrap();
    }
    let records = booked(&state.db, calls.len()).await;
    // The hour-long cache writes are metered apart and priced at their own price, on both sides:
    // 1,000 × 0.10 + 2,000 × 0.01 + 600 × 0.125 + 400 × 0.20 + 90 × 0.40 = 311 µUSD at the
    // supplier.
    let cached = records
        .iter()
        .find(|r| r.cache_write_tokens == 1000)
        .unwrap();
    assert_eq!(cached.cache_write_1h_tokens, 400);
    assert_eq!(cached.supplier_cost_nanos, Some(311_000));

    // Both reports agree with the ledger: no drift, nothing flagged.
    let round = admin_api::cli::reconcile_suppliers(&state).await.unwrap();
    let today = chrono::Utc::now().date_naive().to_string();
    let of = |round: &Value, account: &str| -> Value {
        round["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["account"] == account && c["day"] == today.as_str())
            .cloned()
            .unwrap_or_else(|| panic!("{account}: {round}"))
    };
    assert_eq!(round["over_tolerance"], 0, "{round}");
    for account in ["oa", "an"] {
        let c = of(&round, account);
        assert_eq!(
            c["ledger"],
            c["supplier"].clone().with_requests(&c["ledger"]),
            "{c}"
        );
        assert_eq!(
            (&c["drift_input_tokens"], &c["drift_output_tokens"]),
            (&json!(0), &json!(0)),
            "{c}"
        );
        assert_eq!(c["drift_cost_usd"], "0", "{c}");
    }
    let oa = of(&round, "oa");
    assert_eq!(oa["model"], "gpt-4o-mini");
    assert_eq!(
        oa["supplier"]["requests"], 3,
        "OpenAI counts requests: {oa}"
    );
    assert_eq!(oa["supplier"]["input_tokens"], 3030, "{oa}");
    assert_eq!(oa["supplier"]["cached_tokens"], 1024, "{oa}");
    let an = of(&round, "an");
    assert_eq!(
        an["supplier"]["requests"],
        Value::Null,
        "Anthropic counts none: {an}"
    );
    assert_eq!(an["supplier"]["cache_write_tokens"], 1000, "{an}");
    assert_eq!(an["supplier"]["cache_write_1h_tokens"], 400, "{an}");
    assert_eq!(an["supplier"]["input_tokens"], 4100, "{an}");

    // A record lost on purpose: the drift is exactly its tokens and its supplier cost.
    let lost = records
        .iter()
        .find(|r| r.model_served == "gpt-4o-mini" && r.input_tokens == 1000)
        .unwrap();
    {
        use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
        entities::usage_records::Entity::delete_many()
            .filter(entities::usage_records::Column::RequestId.eq(lost.request_id.as_str()))
            .exec(&state.db)
            .await
            .unwrap();
    }
    let round = admin_api::cli::reconcile_suppliers(&state).await.unwrap();
    let oa = of(&round, "oa");
    assert_eq!(
        (&oa["drift_input_tokens"], &oa["drift_output_tokens"]),
        (&json!(1000), &json!(500)),
        "{oa}"
    );
    // 1,000 × 0.10 + 500 × 0.40 USD per million tokens = 300 µUSD: the record's own supplier cost.
    assert_eq!(lost.supplier_cost_nanos, Some(300_000));
    let cost = NanoUsd::from_nanos(lost.supplier_cost_nanos.unwrap());
    assert_eq!(
        oa["drift_cost_usd"],
        cost.to_decimal_usd().to_string(),
        "{oa}"
    );
    assert_eq!(oa["over_tolerance"], true, "{oa}");
    assert_eq!(round["over_tolerance"], 1, "{round}");
    assert_eq!(of(&round, "an")["over_tolerance"], false);
    let stored = {
        use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
        entities::supplier_reconciliations::Entity::find()
            .filter(entities::supplier_reconciliations::Column::AccountId.eq("oa"))
            .filter(entities::supplier_reconciliations::Column::Day.eq(today.as_str()))
            .all(&state.db)
            .await
            .unwrap()
    };
    assert_eq!(
        stored.len(),
        1,
        "one row per day × account × model, rewritten"
    );
    assert_eq!(
        (
            stored[0].theirs_input - stored[0].ours_input,
            stored[0].drift_cost_nanos
        ),
        (1000, Some(300_000))
    );
    // The operator's metrics (admin-api's own registry: the state the round ran on).
    let text = state.meters.render();
    assert!(
        text.contains("tollgate_supplier_reconciliation_flagged 1"),
        "{text}"
    );
    assert!(
        text.contains(r#"tollgate_supplier_drift_tokens{account="oa",model="gpt-4o-mini"} 1500"#),
        "{text}"
    );
    running.stop().await.unwrap();
}

/// The ledger's side carries the request count; the supplier's does only for OpenAI.
trait WithRequests {
    fn with_requests(self, from: &Value) -> Value;
}

impl WithRequests for Value {
    fn with_requests(mut self, from: &Value) -> Value {
        self["requests"] = from["requests"].clone();
        self
    }
}
