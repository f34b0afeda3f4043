//! Partner webhooks (issue 45) over HTTP: endpoints registered and refused by their rules, the
//! secret shown once, an activation delivered once with a signature a receiver verifies, a
//! receiver that fails three times served on the fourth try and again on redelivery, two workers
//! sharing the outbox without delivering anything twice, and private addresses refused without
//! `[webhooks] allow_private_addresses`.

use super::console::activate_by;
use super::*;
use admin_api::webhooks::{send::Sender, signature};
use admin_api::workers::webhooks::deliver_due;
use std::collections::VecDeque;
use std::sync::Mutex;

/// Loopback receivers allowed, retries fast.
const FAST: &str = "\n[webhooks]\nallow_private_addresses = true\nretry_base_ms = 200\npoll_interval_ms = 50\ntimeout_ms = 2000\n";

/// One request a receiver got.
#[derive(Clone, Debug)]
struct Hit {
    headers: axum::http::HeaderMap,
    body: String,
}

/// A loopback receiver: answers the statuses of its script in turn, then 200; records each hit.
struct Receiver {
    url: String,
    hits: Arc<Mutex<Vec<Hit>>>,
    _task: JoinSet<()>,
}

impl Receiver {
    async fn start(script: &[u16]) -> Receiver {
        let hits = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(
            script.iter().copied().collect::<VecDeque<u16>>(),
        ));
        let (h, sc) = (hits.clone(), script.clone());
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(
                move |headers: axum::http::HeaderMap, body: String| async move {
                    h.lock().unwrap().push(Hit { headers, body });
                    let status = sc.lock().unwrap().pop_front().unwrap_or(200);
                    (
                        axum::http::StatusCode::from_u16(status).unwrap(),
                        format!("receiver says {status}"),
                    )
                },
            ),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let mut task = JoinSet::new();
        task.spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver {
            url,
            hits,
            _task: task,
        }
    }

    fn hits(&self) -> Vec<Hit> {
        self.hits.lock().unwrap().clone()
    }
}

/// Delivers what is due until `done` holds (10 s at most).
async fn deliver_until(api: &Api, done: impl Fn() -> bool) {
    let sender = Sender::new(api.state.settings.webhooks.allow_private_addresses).unwrap();
    for _ in 0..200 {
        deliver_due(&api.state, &sender, "test").await.unwrap();
        if done() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("deliveries did not arrive in 10 s");
}

/// Registers an endpoint for `events`; returns its id and secret.
async fn register(api: &Api, p: &Partner, url: &str, events: &[&str]) -> (i64, String) {
    let (s, v) = api
        .write(
            p,
            Method::POST,
            "/webhooks",
            Some(&json!({"url": url, "events": events, "description": "ours"})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    (
        v["data"]["id"].as_i64().unwrap(),
        v["data"]["secret"].as_str().unwrap().to_string(),
    )
}

#[tokio::test]
async fn an_activation_is_delivered_once_signed_and_endpoints_follow_their_rules() {
    let api = Api::start_with(FAST).await;
    let acme = api.owner("100").await;
    let receiver = Receiver::start(&[]).await;
    // Registered: the secret once; a replay of the create answers without it.
    let key = "create-hook";
    let body = json!({"url": receiver.url, "events": ["customer.activated"]});
    let (s, _, created, _) = api
        .call(
            Method::POST,
            Some(&acme.token),
            "/partner/v1/webhooks",
            Some(&body),
            Some(key),
        )
        .await;
    assert_eq!(s, 200, "{created}");
    let secret = created["data"]["secret"].as_str().unwrap().to_string();
    assert!(
        secret.starts_with("whsec_") && secret.len() == 54,
        "{secret}"
    );
    assert_eq!(created["data"]["events"], json!(["customer.activated"]));
    assert_eq!(created["data"]["status"], "active");
    let id = created["data"]["id"].as_i64().unwrap();
    let (s, headers, replay, _) = api
        .call(
            Method::POST,
            Some(&acme.token),
            "/partner/v1/webhooks",
            Some(&body),
            Some(key),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert!(replay["data"].get("secret").is_none(), "{replay}");
    let (s, list) = api.get(&acme, "/webhooks").await;
    assert_eq!(s, 200);
    assert_eq!(list["data"].as_array().unwrap().len(), 1);
    assert!(!list.to_string().contains(&secret), "never listed");
    let stored = api.count("webhook_endpoints").await;
    assert_eq!(stored, 1);
    // Refusals change nothing.
    for (bad, why) in [
        (json!({}), "url is required"),
        (json!({"url": 5}), "url must be a string"),
        (json!({"url": "ftp://hooks.example.com/"}), "https"),
        (json!({"url": receiver.url, "events": ["nope"]}), "events"),
        (json!({"url": receiver.url, "events": []}), "at least one"),
        (json!({"url": receiver.url, "status": "disabled"}), "PATCH"),
        (
            json!({"url": receiver.url, "secret": "mine"}),
            "unknown field",
        ),
        (
            json!({"url": receiver.url, "description": "x".repeat(201)}),
            "description",
        ),
    ] {
        let (s, v) = api
            .write(&acme, Method::POST, "/webhooks", Some(&bad))
            .await;
        assert_error(s, &v, 400, "INVALID_PARTNER_WEBHOOK");
        assert!(v["message"].as_str().unwrap().contains(why), "{bad}: {v}");
    }
    assert_eq!(api.count("webhook_endpoints").await, 1);
    // Another partner's endpoint does not exist for it.
    let rival = api.owner("1").await;
    for path in [
        format!("/webhooks/{id}"),
        format!("/webhooks/{id}/deliveries"),
    ] {
        let (s, v) = api.get(&rival, &path).await;
        assert_error(s, &v, 404, "PARTNER_WEBHOOK_NOT_FOUND");
    }
    let (s, v) = api
        .write(
            &rival,
            Method::PATCH,
            &format!("/webhooks/{id}"),
            Some(&json!({"status": "disabled"})),
        )
        .await;
    assert_error(s, &v, 404, "PARTNER_WEBHOOK_NOT_FOUND");

    // The activation: one delivery, signed, with the event's id in the header and the body.
    let (_, org, _) = activate_by(&api, &acme, "hooked-1").await;
    deliver_until(&api, || !receiver.hits().is_empty()).await;
    for _ in 0..5 {
        let sender = Sender::new(true).unwrap();
        deliver_due(&api.state, &sender, "test").await.unwrap();
    }
    let hits = receiver.hits();
    assert_eq!(hits.len(), 1, "once per change");
    let hit = &hits[0];
    let sig = hit.headers["tollgate-signature"].to_str().unwrap();
    let now = chrono::Utc::now().timestamp();
    assert!(
        signature::verify(&secret, sig, hit.body.as_bytes(), now),
        "{sig}"
    );
    assert!(!signature::verify(
        "whsec_wrong",
        sig,
        hit.body.as_bytes(),
        now
    ));
    let event: Value = serde_json::from_str(&hit.body).unwrap();
    assert_eq!(event["type"], "customer.activated");
    assert_eq!(event["data"]["organization_id"], org);
    assert_eq!(event["data"]["external_customer_id"], "hooked-1");
    assert!(event["id"].as_str().unwrap().starts_with("evt_"));
    assert_eq!(
        hit.headers["tollgate-event-id"],
        event["id"].as_str().unwrap()
    );
    assert_eq!(hit.headers["content-type"], "application/json");
    // The log: one attempt, the receiver's status and its first bytes.
    let (s, log) = api.get(&acme, &format!("/webhooks/{id}/deliveries")).await;
    assert_eq!(s, 200, "{log}");
    let d = &log["data"]["deliveries"][0];
    assert_eq!(d["status"], "succeeded", "{log}");
    assert_eq!(d["event_id"], event["id"]);
    assert_eq!(d["attempt_log"][0]["status_code"], 200);
    assert_eq!(d["attempt_log"][0]["response_excerpt"], "receiver says 200");
    // A disabled endpoint gets nothing new; deleting it fails what was pending.
    let (s, v) = api
        .write(
            &acme,
            Method::PATCH,
            &format!("/webhooks/{id}"),
            Some(
                &json!({"status": "disabled", "events": ["customer.activated", "statement.ready"]}),
            ),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["data"]["status"], "disabled");
    activate_by(&api, &acme, "hooked-2").await;
    assert_eq!(
        api.count("webhook_deliveries").await,
        1,
        "none for a disabled endpoint"
    );
    let (s, v) = api
        .write(&acme, Method::DELETE, &format!("/webhooks/{id}"), None)
        .await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = api.get(&acme, &format!("/webhooks/{id}")).await;
    assert_error(s, &v, 404, "PARTNER_WEBHOOK_NOT_FOUND");
}

#[tokio::test]
async fn a_receiver_failing_three_times_gets_the_event_on_the_fourth_try_and_again_on_redelivery() {
    let api = Api::start_with(FAST).await;
    let acme = api.owner("100").await;
    let receiver = Receiver::start(&[500, 500, 500]).await;
    let (id, secret) = register(&api, &acme, &receiver.url, &["statement.ready"]).await;
    let txn = sea_orm::TransactionTrait::begin(&api.state.db)
        .await
        .unwrap();
    let event = admin_api::services::partner_webhooks::emit(
        &txn,
        &api.state,
        acme.id,
        "statement.ready",
        json!({"month": "2026-10"}),
        None,
    )
    .await
    .unwrap()
    .unwrap();
    txn.commit().await.unwrap();
    deliver_until(&api, || receiver.hits().len() >= 4).await;
    let hits = receiver.hits();
    assert_eq!(hits.len(), 4);
    for hit in &hits {
        assert_eq!(
            hit.headers["tollgate-event-id"],
            event.as_str(),
            "a stable id"
        );
        let sig = hit.headers["tollgate-signature"].to_str().unwrap();
        assert!(signature::verify(
            &secret,
            sig,
            hit.body.as_bytes(),
            chrono::Utc::now().timestamp()
        ));
    }
    let (_, log) = api.get(&acme, &format!("/webhooks/{id}/deliveries")).await;
    let d = &log["data"]["deliveries"][0];
    assert_eq!(d["status"], "succeeded", "{log}");
    assert_eq!(d["attempts"], 4);
    let codes: Vec<i64> = d["attempt_log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["status_code"].as_i64().unwrap())
        .collect();
    assert_eq!(codes, [500, 500, 500, 200]);
    // Redelivery: due at once, the same event id.
    let delivery = d["id"].as_i64().unwrap();
    let (s, v) = api
        .write(
            &acme,
            Method::POST,
            &format!("/webhooks/{id}/deliveries/{delivery}/redeliver"),
            None,
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["data"]["status"], "pending");
    deliver_until(&api, || receiver.hits().len() >= 5).await;
    assert_eq!(
        receiver.hits()[4].headers["tollgate-event-id"],
        event.as_str()
    );
    let (s, v) = api
        .write(
            &acme,
            Method::POST,
            &format!("/webhooks/{id}/deliveries/999999/redeliver"),
            None,
        )
        .await;
    assert_error(s, &v, 404, "PARTNER_WEBHOOK_DELIVERY_NOT_FOUND");
}

#[tokio::test]
async fn two_workers_deliver_each_event_once() {
    let api = Api::start_with(FAST).await;
    let acme = api.owner("100").await;
    let receiver = Receiver::start(&[]).await;
    register(&api, &acme, &receiver.url, &["funding.balance_low"]).await;
    for n in 0..20 {
        let txn = sea_orm::TransactionTrait::begin(&api.state.db)
            .await
            .unwrap();
        admin_api::services::partner_webhooks::emit(
            &txn,
            &api.state,
            acme.id,
            "funding.balance_low",
            json!({"n": n}),
            None,
        )
        .await
        .unwrap();
        txn.commit().await.unwrap();
    }
    let (a, b) = (Sender::new(true).unwrap(), Sender::new(true).unwrap());
    for _ in 0..100 {
        let (x, y) = tokio::join!(
            deliver_due(&api.state, &a, "worker-a"),
            deliver_due(&api.state, &b, "worker-b")
        );
        x.unwrap();
        y.unwrap();
        if receiver.hits().len() >= 20 {
            break;
        }
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let hits = receiver.hits();
    let mut ids: Vec<String> = hits
        .iter()
        .map(|h| h.headers["tollgate-event-id"].to_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!((hits.len(), ids.len()), (20, 20), "each event once");
}

#[tokio::test]
async fn private_addresses_are_refused_without_the_setting() {
    let api = Api::start().await;
    let acme = api.owner("100").await;
    let canary = Receiver::start(&[]).await;
    for url in [
        canary.url.clone(),
        "https://127.0.0.1/hook".into(),
        "https://2130706433/".into(),
        "https://[::1]/".into(),
        "https://[::ffff:127.0.0.1]/".into(),
        "https://169.254.169.254/latest/meta-data".into(),
        "https://localhost/".into(),
        "https://user@good.example@127.0.0.1/".into(),
    ] {
        let (s, v) = api
            .write(&acme, Method::POST, "/webhooks", Some(&json!({"url": url})))
            .await;
        assert_error(s, &v, 400, "INVALID_PARTNER_WEBHOOK");
    }
    assert_eq!(api.count("webhook_endpoints").await, 0);
    // A public-looking endpoint is accepted; if its address turns private later (here: written
    // straight into the table), the delivery is refused at send time and the canary sees nothing.
    let (_, _) = register(
        &api,
        &acme,
        "https://hooks.example.com/tollgate",
        &["statement.ready"],
    )
    .await;
    {
        use sea_orm::{EntityTrait, sea_query::Expr};
        entities::webhook_endpoints::Entity::update_many()
            .col_expr(
                entities::webhook_endpoints::Column::Url,
                Expr::value(canary.url.replace("http://", "https://")),
            )
            .exec(&api.state.db)
            .await
            .unwrap();
    }
    let txn = sea_orm::TransactionTrait::begin(&api.state.db)
        .await
        .unwrap();
    admin_api::services::partner_webhooks::emit(
        &txn,
        &api.state,
        acme.id,
        "statement.ready",
        json!({}),
        None,
    )
    .await
    .unwrap();
    txn.commit().await.unwrap();
    let sender = Sender::new(false).unwrap();
    assert_eq!(deliver_due(&api.state, &sender, "test").await.unwrap(), 1);
    assert!(canary.hits().is_empty(), "the canary is never reached");
    let (_, list) = api.get(&acme, "/webhooks").await;
    let id = list["data"][0]["id"].as_i64().unwrap();
    let (_, log) = api.get(&acme, &format!("/webhooks/{id}/deliveries")).await;
    let attempt = &log["data"]["deliveries"][0]["attempt_log"][0];
    assert!(attempt["status_code"].is_null(), "{log}");
    assert!(
        attempt["error"]
            .as_str()
            .unwrap()
            .contains("not a public address"),
        "{log}"
    );
}

/// The README's code block of `lang` under "### Partner webhooks".
fn readme_snippet(lang: &str) -> String {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
    let section = &readme[readme.find("### Partner webhooks").unwrap()..];
    let start = section.find(&format!("```{lang}\n")).unwrap() + lang.len() + 4;
    let len = section[start..].find("```").unwrap();
    section[start..start + len].to_string()
}

/// Runs the README's verifier of `lang` on a delivery; whether it accepted it.
fn readme_verifies(lang: &str, secret: &str, header: &str, body: &[u8]) -> bool {
    let dir = std::env::temp_dir().join(format!("tollgate-verify-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let body_path = dir.join("body");
    std::fs::write(&body_path, body).unwrap();
    let (program, script) = match lang {
        "python" => (
            "python3",
            format!(
                "{}\nimport sys\nsys.exit(0 if verify(sys.argv[1], sys.argv[2], open(sys.argv[3], 'rb').read()) else 1)\n",
                readme_snippet("python")
            ),
        ),
        _ => (
            "node",
            format!(
                "{}\nprocess.exit(verify(process.argv[2], process.argv[3], require('fs').readFileSync(process.argv[4])) ? 0 : 1);\n",
                readme_snippet("javascript")
            ),
        ),
    };
    let script_path = dir.join("verify");
    std::fs::write(&script_path, script).unwrap();
    let out = std::process::Command::new(program)
        .arg(&script_path)
        .args([secret, header])
        .arg(&body_path)
        .output()
        .unwrap_or_else(|e| panic!("{program} is needed to run the README's verifier: {e}"));
    let _ = std::fs::remove_dir_all(&dir);
    match out.status.code() {
        Some(0) => true,
        Some(1) => false,
        _ => panic!("{program} failed: {}", String::from_utf8_lossy(&out.stderr)),
    }
}

#[tokio::test]
async fn the_readmes_verifiers_accept_real_deliveries() {
    let api = Api::start_with(FAST).await;
    let acme = api.owner("100").await;
    let receiver = Receiver::start(&[]).await;
    let (_, secret) = register(&api, &acme, &receiver.url, &["statement.ready"]).await;
    let txn = sea_orm::TransactionTrait::begin(&api.state.db)
        .await
        .unwrap();
    admin_api::services::partner_webhooks::emit(
        &txn,
        &api.state,
        acme.id,
        "statement.ready",
        json!({"month": "2026-10", "note": "ünïcode ✓"}),
        None,
    )
    .await
    .unwrap();
    txn.commit().await.unwrap();
    deliver_until(&api, || !receiver.hits().is_empty()).await;
    let hit = &receiver.hits()[0];
    let header = hit.headers["tollgate-signature"].to_str().unwrap();
    let body = hit.body.as_bytes();
    let mut tampered = body.to_vec();
    tampered[2] ^= 1;
    for lang in ["python", "javascript"] {
        assert!(
            readme_verifies(lang, &secret, header, body),
            "{lang}: a real delivery"
        );
        assert!(
            !readme_verifies(lang, "whsec_other", header, body),
            "{lang}: another secret"
        );
        assert!(
            !readme_verifies(lang, &secret, header, &tampered),
            "{lang}: a changed body"
        );
        // Signed correctly, an hour ago: refused for its age alone.
        let old = signature::sign(&secret, chrono::Utc::now().timestamp() - 3_600, body);
        assert!(
            !readme_verifies(lang, &secret, &old, body),
            "{lang}: an old time"
        );
    }
}

/// Webhook events of `event_type` in the outbox: their `data`.
async fn events_of(api: &Api, event_type: &str) -> Vec<Value> {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    entities::webhook_events::Entity::find()
        .filter(entities::webhook_events::Column::EventType.eq(event_type))
        .all(&api.state.db)
        .await
        .unwrap()
        .iter()
        .map(|e| serde_json::from_str(&e.data).unwrap())
        .collect()
}

#[tokio::test]
async fn swept_events_and_a_spent_budget_are_written_once() {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, sea_query::Expr};
    let api = Api::start_with(FAST).await;
    let acme = api.owner("100").await;
    // An invitation whose time ran out; a partner that existed before this month began.
    let (s, v) = api.create(&acme, "late-1", 5.0, 1.0).await;
    assert_eq!(s, 200, "{v}");
    let customer = v["data"]["customer"]["id"].as_i64().unwrap();
    let past = chrono::Utc::now() - chrono::Duration::hours(1);
    entities::invitations::Entity::update_many()
        .col_expr(entities::invitations::Column::ExpiresAt, Expr::value(past))
        .filter(entities::invitations::Column::CustomerId.eq(customer))
        .exec(&api.state.db)
        .await
        .unwrap();
    entities::partners::Entity::update_many()
        .col_expr(
            entities::partners::Column::CreatedAt,
            Expr::value(chrono::Utc::now() - chrono::Duration::days(70)),
        )
        .filter(entities::partners::Column::Id.eq(acme.id))
        .exec(&api.state.db)
        .await
        .unwrap();
    let sweep = admin_api::services::webhook_sweeps::sweep;
    assert_eq!(sweep(&api.state).await.unwrap(), 2);
    assert_eq!(sweep(&api.state).await.unwrap(), 0, "each once");
    let expired = events_of(&api, "invitation.expired").await;
    assert_eq!(expired.len(), 1);
    assert_eq!(expired[0]["external_customer_id"], "late-1");
    let ready = events_of(&api, "statement.ready").await;
    let last = admin_api::services::statements::Month::of(chrono::Utc::now()).previous();
    assert_eq!(ready.len(), 1);
    assert_eq!(ready[0]["month"], last.to_string());
    assert!(
        ready[0]["pdf_url"].as_str().unwrap().ends_with(&format!(
            "/console/partners/{}/statements/{last}.pdf",
            acme.id
        )),
        "{}",
        ready[0]
    );

    // A key with a 1 USD monthly budget: a 0.6 USD charge leaves less than a call like it.
    let (id, org) = api.active_customer(&acme, "budgeted", 10.0, 1.0).await;
    let (s, v) = api
        .write(
            &acme,
            Method::POST,
            &format!("/customers/{id}/api-keys"),
            Some(&json!({"name": "capped", "group_id": 1, "budget_usd": 1, "budget_period": "month"})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let key = v["data"]["api_key_id"]
        .as_i64()
        .or_else(|| v["data"]["id"].as_i64())
        .unwrap();
    let now = chrono::Utc::now().to_rfc3339();
    super::console::spend(&api, org, key, "gpt-4o-mini", &now, 300_000_000, 0).await;
    admin_api::workers::settler::drain_once(&api.state, "t")
        .await
        .unwrap();
    assert!(
        events_of(&api, "key.budget_exceeded").await.is_empty(),
        "0.7 left ≥ 0.3"
    );
    super::console::spend(&api, org, key, "gpt-4o-mini", &now, 600_000_000, 0).await;
    admin_api::workers::settler::drain_once(&api.state, "t")
        .await
        .unwrap();
    let exceeded = events_of(&api, "key.budget_exceeded").await;
    assert_eq!(exceeded.len(), 1, "0.1 left < 0.6");
    assert_eq!(exceeded[0]["api_key_id"], key);
    assert_eq!(exceeded[0]["spent_usd"], 0.9);
    super::console::spend(&api, org, key, "gpt-4o-mini", &now, 50_000_000, 0).await;
    admin_api::workers::settler::drain_once(&api.state, "t")
        .await
        .unwrap();
    assert_eq!(
        events_of(&api, "key.budget_exceeded").await.len(),
        1,
        "once per key and period"
    );
}

#[tokio::test]
async fn the_dashboard_registers_endpoints_for_owners_and_explains_refusals() {
    let api = Api::start().await;
    let acme = api.owner("100").await;
    let mut olga =
        super::console::joined(&api, None, Some(acme.id), "olga@hooks.example", "owner").await;
    let path = format!("/console/partners/{}/webhooks", acme.id);
    let page = olga.get(&path).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let csrf = page.csrf();
    let refused = olga
        .post(
            &path,
            &[
                ("csrf", &csrf),
                ("url", "https://127.0.0.1/hook"),
                ("events", "statement.ready"),
            ],
            None,
        )
        .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("must name a public host"),
        "{}",
        refused.body
    );
    assert!(refused.body.contains("aria-invalid=\"true\""));
    assert_eq!(api.count("webhook_endpoints").await, 0, "nothing changed");
    let made = olga
        .post(
            &path,
            &[
                ("csrf", &csrf),
                ("url", "https://hooks.example.com/in"),
                ("events", "statement.ready"),
                ("events", "customer.activated"),
            ],
            None,
        )
        .await;
    assert_eq!(made.status, 200, "{}", made.body);
    assert!(
        made.body
            .contains("id=\"new-secret\" class=\"secret\">whsec_")
    );
    assert!(
        made.body.contains("statement.ready, customer.activated"),
        "{}",
        made.body
    );
    assert!(
        super::console::audit_texts(&api)
            .await
            .iter()
            .any(|t| t.contains("webhook_created")),
        "audited"
    );
    // A viewer reads the list, registers nothing.
    let mut vera =
        super::console::joined(&api, None, Some(acme.id), "vera@hooks.example", "viewer").await;
    let seen = vera.get(&path).await;
    assert!(seen.body.contains("hooks.example.com/in") && !seen.body.contains("Register endpoint"));
}

#[tokio::test]
async fn a_partner_has_at_most_sixteen_endpoints() {
    let api = Api::start().await;
    let acme = api.owner("100").await;
    for n in 0..16 {
        let url = format!("https://hooks.example.com/{n}");
        let (s, v) = api
            .write(&acme, Method::POST, "/webhooks", Some(&json!({"url": url})))
            .await;
        assert_eq!(s, 200, "{n}: {v}");
    }
    let (s, v) = api
        .write(
            &acme,
            Method::POST,
            "/webhooks",
            Some(&json!({"url": "https://hooks.example.com/17"})),
        )
        .await;
    assert_error(s, &v, 409, "PARTNER_WEBHOOK_LIMIT_REACHED");
    assert_eq!(v["metadata"]["max_endpoints"], 16, "{v}");
    assert_eq!(api.count("webhook_endpoints").await, 16, "nothing changed");
}

/// A receiver's answer is bounded: one that announces a 10 MiB body, sends 256 KiB of it and then
/// stalls is recorded by its status and first 512 bytes as soon as they arrive, never waited for
/// or read whole.
#[tokio::test]
async fn a_receivers_answer_is_read_only_as_far_as_the_log_keeps_it() {
    use admin_api::webhooks::send::{Answer, KEPT_BYTES};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let mut tasks = JoinSet::new();
    tasks.spawn(async move {
        let mut held = Vec::new();
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut request = vec![0u8; 64 * 1024];
            let _ = socket.read(&mut request).await;
            let head = "HTTP/1.1 200 OK\r\ncontent-length: 10485760\r\n\r\n";
            let _ = socket.write_all(head.as_bytes()).await;
            let _ = socket.write_all(&vec![b'x'; 256 * 1024]).await;
            // Never the rest: the connection stays open, silent.
            held.push(socket);
        }
    });
    let sender = Sender::new(true).unwrap();
    let started = std::time::Instant::now();
    let answer = sender
        .post(&url, &[], bytes::Bytes::from_static(b"{}"))
        .await;
    match answer {
        Answer::Status {
            status,
            first_bytes,
        } => {
            assert_eq!(status, 200);
            assert_eq!(first_bytes.len(), KEPT_BYTES);
            assert!(first_bytes.bytes().all(|b| b == b'x'));
        }
        other => panic!("{other:?}"),
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "the rest of the body was not waited for: {:?}",
        started.elapsed()
    );
}
