//! A batch line held for a supplier's own batch API and booked from its answer (issue 46,
//! `proxy::batch_offload`), through HTTP as the runner sends it: held once (the same answer when
//! held again, nothing sent to the supplier), refused as a call while held, booked once at the
//! batch price from the supplier's reported usage (a second booking is the kept answer, charged
//! nothing), a supplier's failure charged nothing, a line not held refused, a line no batch
//! account serves refused with nothing held and then served as a call. On both stores.

use super::batches::{batch_price, deployments, records, signed, wallet};
use super::database_with_demo_key;
use mock_supplier::{MockConfig, MockSupplier};
use serde_json::{Value, json};
use testkit::{Account, Group, Model, TestConfig};
use tollgate::{App, Role};

/// The supplier's answer to a chat line, as OpenAI's batch output carries it.
fn answer(input: u64, output: u64) -> Value {
    json!({"id": "chatcmpl-b", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini",
           "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
           "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output}})
}

#[tokio::test]
async fn a_held_line_is_booked_once_from_the_suppliers_answer() {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let db_url = testkit::fresh_database_url().await;
    let (db, minted) = database_with_demo_key(&db_url).await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let hasher = credentials::KeyHasher::new(testkit::PEPPER.as_bytes());
    let config = TestConfig::embedded()
        .database(&db_url)
        .model(Model::gpt_4o_mini().line("batch_discount = 0.4"))
        .model(Model::text("plain-model", 1.0, 2.0))
        .account(Account::openai("offload", &mock.base_url(), &["gpt-4o-mini"]).capability("batch"))
        .account(Account::openai("plain", &mock.base_url(), &["plain-model"]))
        .group(Group::new(1, &["gpt-4o-mini", "plain-model"]));
    let org = minted.organization_id;
    let key = minted.api_key.as_str();
    for (name, config) in deployments(&config, "batch-offload") {
        let app = App::build(config.settings(), Role::Proxy).await.unwrap();
        let running = app.start();
        let base = running.base_url().unwrap();
        let batch = format!("batch_off_{name}");
        let send = |header: &str, stage: Option<&str>, body: &Value| {
            let mut r = http
                .post(format!("{base}/compat/v1/chat/completions"))
                .header(credentials::batch_line::HEADER, header)
                .json(body);
            if let Some(s) = stage {
                r = r.header("x-tollgate-batch-stage", s);
            }
            r.send()
        };
        let chat = |model: &str| json!({"model": model, "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]});
        let code = |v: &Value| v["error"]["code"].as_str().unwrap_or("").to_string();
        let before = wallet(&db, org).await;
        let sent_before = mock.request_count();

        // Held: the account and the body to send it; nothing reaches the supplier.
        let id = uuid::Uuid::now_v7().simple().to_string();
        let header = signed(&hasher, key, &batch, 0, &id);
        let held = send(&header, Some("hold"), &chat("gpt-4o-mini"))
            .await
            .unwrap();
        assert_eq!(held.status(), 200, "{name}");
        assert_eq!(held.headers()["x-tollgate-batch-held"], "true", "{name}");
        let held: Value = held.json().await.unwrap();
        assert_eq!(held["account"], "offload", "{name}: {held}");
        assert_eq!(held["url"], "/v1/chat/completions", "{name}");
        assert_eq!(held["body"]["model"], "gpt-4o-mini", "{name}: {held}");
        assert!(held["hold_nanos"].as_i64().unwrap() > 0, "{name}");
        let again: Value = send(&header, Some("hold"), &chat("gpt-4o-mini"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(again, held, "{name}: held again, the same");
        let as_call = send(&header, None, &chat("gpt-4o-mini")).await.unwrap();
        assert_eq!(as_call.status(), 409, "{name}");
        assert_eq!(
            code(&as_call.json().await.unwrap()),
            "batch_line_in_progress",
            "{name}"
        );
        assert_eq!(mock.request_count(), sent_before, "{name}: nothing sent");

        // Booked from the supplier's answer: once, at the batch price of what it reported.
        let booking = json!({"status_code": 200, "body": answer(11, 7)});
        let booked = send(&header, Some("book"), &booking).await.unwrap();
        assert_eq!(booked.status(), 200, "{name}");
        assert_eq!(booked.headers()["x-request-id"].to_str().unwrap(), id);
        assert_eq!(
            booked.json::<Value>().await.unwrap(),
            answer(11, 7),
            "{name}"
        );
        let again = send(&header, Some("book"), &booking).await.unwrap();
        assert_eq!(again.headers()["x-tollgate-batch-replay"], "true", "{name}");
        assert_eq!(again.json::<Value>().await.unwrap(), answer(11, 7));
        let recs = records(&db, &batch, 1).await;
        assert_eq!(recs.len(), 1, "{name}: one record");
        let r = &recs[0];
        assert_eq!((r.input_tokens, r.output_tokens), (11, 7), "{name}");
        assert_eq!(r.measurement, "exact", "{name}");
        assert_eq!(r.account_id, "offload", "{name}");
        assert_eq!(r.request_id, id, "{name}");
        assert_eq!(r.batch_line, Some(0), "{name}");
        assert_eq!(r.charged_nanos, batch_price(r), "{name}: the batch price");

        // A supplier's failure: booked, charged nothing, its answer kept.
        let failed_id = uuid::Uuid::now_v7().simple().to_string();
        let failed = signed(&hasher, key, &batch, 1, &failed_id);
        let h = send(&failed, Some("hold"), &chat("gpt-4o-mini"))
            .await
            .unwrap();
        assert_eq!(h.status(), 200, "{name}");
        let error = json!({"error": {"message": "boom", "type": "server_error"}});
        let b = send(
            &failed,
            Some("book"),
            &json!({"status_code": 500, "body": error}),
        )
        .await
        .unwrap();
        assert_eq!(b.status(), 500, "{name}");
        assert_eq!(b.json::<Value>().await.unwrap(), error, "{name}");

        // Refusals: a line never held; a line no batch account serves (nothing held, then
        // served as a call); a bad stage; a bad booking.
        let fresh = signed(
            &hasher,
            key,
            &batch,
            2,
            &uuid::Uuid::now_v7().simple().to_string(),
        );
        let not_held = send(&fresh, Some("book"), &booking).await.unwrap();
        assert_eq!(not_held.status(), 409, "{name}");
        assert_eq!(code(&not_held.json().await.unwrap()), "batch_line_not_held");
        let plain_id = uuid::Uuid::now_v7().simple().to_string();
        let plain = signed(&hasher, key, &batch, 3, &plain_id);
        let refused = send(&plain, Some("hold"), &chat("plain-model"))
            .await
            .unwrap();
        assert_eq!(refused.status(), 409, "{name}");
        assert_eq!(
            code(&refused.json().await.unwrap()),
            "batch_offload_unavailable",
            "{name}"
        );
        let served = send(&plain, None, &chat("plain-model")).await.unwrap();
        assert_eq!(served.status(), 200, "{name}: then served as a call");
        let bad_stage = send(&fresh, Some("later"), &chat("gpt-4o-mini"))
            .await
            .unwrap();
        assert_eq!(bad_stage.status(), 400, "{name}");
        let held_again = signed(
            &hasher,
            key,
            &batch,
            4,
            &uuid::Uuid::now_v7().simple().to_string(),
        );
        assert_eq!(
            send(&held_again, Some("hold"), &chat("gpt-4o-mini"))
                .await
                .unwrap()
                .status(),
            200
        );
        for bad in [json!({"status_code": 42}), json!({"body": {}}), json!([1])] {
            let r = send(&held_again, Some("book"), &bad).await.unwrap();
            assert_eq!(r.status(), 400, "{name}: {bad}");
        }

        // The ledger: the booked line and the plain call, the failure nothing.
        let recs = records(&db, &batch, 3).await;
        assert_eq!(
            recs.len(),
            3,
            "{name}: booked, failed, the plain call; none for the line held and not booked"
        );
        let failed_rec = recs.iter().find(|r| r.request_id == failed_id).unwrap();
        assert_eq!(
            (failed_rec.status, failed_rec.charged_nanos),
            (500, 0),
            "{name}"
        );
        let charged: i64 = recs.iter().map(|r| r.charged_nanos).sum();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while wallet(&db, org).await != before - charged && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(wallet(&db, org).await, before - charged, "{name}");
        running.stop().await.unwrap();
    }
}
