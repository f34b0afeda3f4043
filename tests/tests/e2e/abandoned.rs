//! Failover after bytes (issue 47) through HTTP, on the in-memory and the Redis store, on
//! whichever database the suite runs: a supplier whose answer begins (a 200, a first event or
//! half a JSON body) and breaks before its content reaches the client is abandoned. The client
//! gets the other account's whole answer, never the broken one; the call has one usage record
//! and one customer charge; the abandoned attempt is recorded with what it served (estimated
//! under a call's bounds) and its cost at the supplier's prices, counted in the margin report and
//! the `/metrics` counters.

use super::{attempts_of, record_of};
use mock_supplier::{Fault, MockConfig, MockHandle, MockSupplier};
use serde_json::{Value, json};
use testkit::{Account, Group, Model, TestConfig};
use tollgate::{App, Role};

const MTOK: i64 = 1_000_000;

/// Calls `path` until the breaking account has been tried (each call's account order is its
/// own); returns that call's request id, status and body.
async fn until_broken(
    (http, base, key): (&reqwest::Client, &str, &str),
    (path, usage): (&str, &str),
    body: &Value,
    breaking: &MockHandle,
) -> (String, u16, String) {
    for _ in 0..40 {
        let before = breaking.request_count();
        let resp = http
            .post(format!("{base}{path}"))
            .bearer_auth(key)
            .header("x-mock-usage", usage)
            .json(body)
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let id = resp.headers()["x-request-id"].to_str().unwrap().to_string();
        let text = resp.text().await.unwrap();
        if breaking.request_count() > before {
            return (id, status, text);
        }
    }
    panic!("the breaking account is tried within 40 calls");
}

#[tokio::test]
async fn an_answer_that_breaks_before_its_content_is_failed_over_and_its_attempt_recorded() {
    let good = MockSupplier::start(MockConfig::default()).await.unwrap();
    let breaking = MockSupplier::start(MockConfig::default()).await.unwrap();
    // A stream: its first event (the role, no text), then the connection is cut; a JSON body:
    // half of it, then cut.
    breaking.set_fault(Some("cut_after=1".parse::<Fault>().unwrap()));
    let db_url = testkit::fresh_database_url().await;
    let config = TestConfig::embedded()
        .database(&db_url)
        .model(
            Model::gpt_4o_mini()
                .line("supplier_input_per_mtok = 0.10")
                .line("supplier_output_per_mtok = 0.40"),
        )
        .account(
            Account::openai("breaking", &breaking.base_url(), &["gpt-4o-mini"])
                .supplier_price_multiplier(0.5),
        )
        .account(Account::openai(
            "answering",
            &good.base_url(),
            &["gpt-4o-mini"],
        ))
        .group(Group::new(1, &["gpt-4o-mini"]))
        // The breaking account is cooled for a minute once abandoned: tried once per store.
        .set("routing", "error_cooldown_ms", 60_000u64)
        .set("metrics", "listen", "127.0.0.1:0");
    let state = admin_api::AppState::connect(config.settings(), opstate::Stores::memory())
        .await
        .unwrap();
    admin_api::db::migrate(&state.db).await.unwrap();
    let key = admin_api::demo::quickstart(&state, 1)
        .await
        .unwrap()
        .key
        .api_key;
    let db = state.db.clone();
    let mut deployments = vec![("memory", config.clone(), true)];
    if let Some(url) = testkit::redis_url() {
        let redis = config.redis(&url, &testkit::redis_prefix("abandon"));
        deployments.push(("redis", redis, false));
    }
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut abandoned = 0;
    for (name, config, stream) in deployments {
        let app = App::build(config.settings(), Role::Proxy).await.unwrap();
        let running = app.start();
        let base = running.base_url().unwrap();
        let mut body = json!({"model": "gpt-4o-mini", "max_tokens": 50,
            "messages": [{"role": "user", "content": "hi"}]});
        body["stream"] = json!(stream);
        let (id, status, text) = until_broken(
            (&http, &base, &key),
            ("/compat/v1/chat/completions", "prompt=1000,completion=500"),
            &body,
            &breaking,
        )
        .await;
        abandoned += 1;
        // The client got the answering account's whole answer, nothing of the broken one.
        assert_eq!(status, 200, "{name}: {text}");
        if stream {
            assert!(text.trim_end().ends_with("data: [DONE]"), "{name}: {text}");
            assert_eq!(text.matches(r#""role":"assistant""#).count(), 1, "{name}");
        } else {
            let answer: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(answer["usage"]["completion_tokens"], 500, "{name}");
        }
        // One usage record, one charge: the answering account's, exact.
        let record = record_of(&db, &id).await;
        assert_eq!(record.account_id, "answering", "{name}");
        assert_eq!(record.measurement, "exact", "{name}");
        assert_eq!((record.input_tokens, record.output_tokens), (1_000, 500));
        assert!(record.charged_nanos > 0, "{name}");
        let exact = (1_000 * 100_000_000 + 500 * 400_000_000) / MTOK;
        assert_eq!(record.supplier_cost_nanos, Some(exact), "{name}");
        // The abandoned attempt: what it served, estimated under a call's bounds (input from
        // the request's bytes, output from the text it carried: none, or half a JSON body), at
        // the supplier's prices × its account's multiplier (rounded up).
        let left = attempts_of(&db, &id).await;
        assert_eq!(left.len(), 1, "{name}: {left:?}");
        let a = &left[0];
        assert_eq!(
            (
                a.attempt,
                a.account_id.as_str(),
                a.outcome.as_str(),
                a.status
            ),
            (1, "breaking", "abandoned", 200),
            "{name}"
        );
        assert_eq!(a.measurement, "estimated", "{name}");
        let bytes = i64::try_from(serde_json::to_vec(&body).unwrap().len()).unwrap();
        assert_eq!(a.input_tokens, (bytes + 3) / 4, "{name}");
        match stream {
            true => assert_eq!(a.output_tokens, 0, "{name}"),
            false => assert!((1..=50).contains(&a.output_tokens), "{name}: {a:?}"),
        }
        let cost = (a.input_tokens * 100_000_000 + a.output_tokens * 400_000_000) / 2;
        assert_eq!(
            a.supplier_cost_nanos,
            Some((cost + MTOK - 1) / MTOK),
            "{name}"
        );
        // The operator's counters.
        let scrape = format!("http://{}/metrics", running.addresses().metrics.unwrap());
        let metrics = http.get(scrape).send().await.unwrap().text().await.unwrap();
        let line = r#"tollgate_failovers_total{reason="abandoned"} 1"#;
        assert!(metrics.contains(line), "{name}: {metrics}");
        running.stop().await.unwrap();
    }
    // The margin report counts the abandoned attempts' cost and what they served.
    let today = chrono::Utc::now().date_naive();
    let report = admin_api::services::margin::report(&db, today, today)
        .await
        .unwrap();
    let row = report
        .rows
        .iter()
        .find(|r| r.account == "breaking")
        .unwrap();
    use sea_orm::EntityTrait;
    let left = entities::supplier_attempts::Entity::find()
        .all(&db)
        .await
        .unwrap();
    assert_eq!((row.calls, row.attempts), (0, abandoned));
    assert_eq!(
        row.supplier_cost.nanos(),
        left.iter()
            .map(|a| a.supplier_cost_nanos.unwrap())
            .sum::<i64>()
    );
    assert_eq!(
        row.input_tokens,
        left.iter().map(|a| a.input_tokens).sum::<i64>()
    );
    assert!(row.supplier_cost.nanos() > 0);
    // One customer charge per call: the organization's spend account was posted exactly what
    // its usage records were charged (the abandoned attempts charged nobody).
    use admin_api::ledger::{self, AccountRef};
    let records = entities::usage_records::Entity::find()
        .all(&db)
        .await
        .unwrap();
    let org = records[0].organization_id;
    let spent = ledger::balance(&db, &AccountRef::org_spend(org).code)
        .await
        .unwrap()
        .nanos()
        .abs();
    assert_eq!(spent, records.iter().map(|r| r.charged_nanos).sum::<i64>());
}

/// A stream whose supplier sends its error event before any text (an overloaded supplier:
/// Anthropic's `event: error`, OpenAI's `data: {"error": …}`) is failed over like a cut one: the
/// client gets the other account's whole stream, without the error.
#[tokio::test]
async fn a_stream_error_before_its_content_is_failed_over() {
    let good = MockSupplier::start(MockConfig::default()).await.unwrap();
    let breaking = MockSupplier::start(MockConfig::default()).await.unwrap();
    breaking.set_fault(Some("error_after=1".parse::<Fault>().unwrap()));
    let db_url = testkit::fresh_database_url().await;
    let config = TestConfig::embedded()
        .database(&db_url)
        .model(Model::gpt_4o_mini())
        .model(Model::text("claude-x", 3.0, 15.0).family("claude"))
        .account(Account::openai(
            "oa-breaking",
            &breaking.base_url(),
            &["gpt-4o-mini"],
        ))
        .account(Account::openai(
            "oa-answering",
            &good.base_url(),
            &["gpt-4o-mini"],
        ))
        .account(Account::anthropic(
            "an-breaking",
            &breaking.root_url(),
            &["claude-x"],
        ))
        .account(Account::anthropic(
            "an-answering",
            &good.root_url(),
            &["claude-x"],
        ))
        .group(Group::new(1, &["gpt-4o-mini", "claude-x"]))
        .set("routing", "error_cooldown_ms", 60_000u64);
    let state = admin_api::AppState::connect(config.settings(), opstate::Stores::memory())
        .await
        .unwrap();
    admin_api::db::migrate(&state.db).await.unwrap();
    let key = admin_api::demo::quickstart(&state, 1)
        .await
        .unwrap()
        .key
        .api_key;
    let app = App::build(config.settings(), Role::Proxy).await.unwrap();
    let running = app.start();
    let base = running.base_url().unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let cases = [
        (
            "/compat/v1/chat/completions",
            "gpt-4o-mini",
            "data: [DONE]",
            "oa",
        ),
        ("/v1/messages", "claude-x", "event: message_stop", "an"),
    ];
    for (path, model, last, prefix) in cases {
        let body = json!({"model": model, "max_tokens": 50, "stream": true,
            "messages": [{"role": "user", "content": "hi"}]});
        let call = (path, "prompt=1000,completion=5");
        let (id, status, text) = until_broken((&http, &base, &key), call, &body, &breaking).await;
        assert_eq!(status, 200, "{model}: {text}");
        assert!(!text.contains("error"), "{model}: {text}");
        assert!(text.contains(last), "{model}: {text}");
        let record = record_of(&state.db, &id).await;
        assert_eq!(record.account_id, format!("{prefix}-answering"));
        let left = attempts_of(&state.db, &id).await;
        assert_eq!(left.len(), 1, "{model}: {left:?}");
        assert_eq!(
            (left[0].account_id.clone(), left[0].outcome.as_str()),
            (format!("{prefix}-breaking"), "abandoned"),
        );
        // Anthropic's `message_start` reported the input before the error: exact tokens,
        // still an estimate of the attempt (its output never came).
        if prefix == "an" {
            assert_eq!(left[0].input_tokens, 1_000, "{left:?}");
        }
    }
    running.stop().await.unwrap();
}
