//! Customer API keys: the secret shown once, previews, disabling, and the gateway's key directory
//! rebuilt when the store loses it.

use super::*;

#[tokio::test]
async fn keys_secret_once_previews_disable() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (id, org) = api.active_customer(&owner, "keys", 10.0, 1.0).await;
    let path = format!("/customers/{id}/api-keys");
    for body in [
        json!({"group_id": 1}),
        json!({"name": "k", "group_id": "1"}),
        json!({"name": "k"}),
        json!({"name": "k", "group_id": 1, "x": 2}),
    ] {
        let (s, v) = api.write(&owner, Method::POST, &path, Some(&body)).await;
        assert_error(s, &v, 400, "INVALID_PARTNER_CUSTOMER_API_KEY");
    }
    let (s, v) = api
        .write(
            &owner,
            Method::POST,
            &path,
            Some(&json!({"name": "k", "group_id": 7})),
        )
        .await;
    assert_error(s, &v, 404, "PARTNER_CUSTOMER_NOT_FOUND");
    let key = "key-create-1";
    let body = json!({"name": "prod", "group_id": 1});
    let (s, _, first, _) = api
        .call(
            Method::POST,
            Some(&owner.token),
            &format!("/partner/v1{path}"),
            Some(&body),
            Some(key),
        )
        .await;
    assert_eq!(s, 200, "{first}");
    let secret = first["data"]["key"].as_str().unwrap().to_string();
    assert!(secret.starts_with("tgk_dev_"));
    let key_id = first["data"]["api_key_id"].as_i64().unwrap();
    // The gateway's directory knows it.
    let record = api
        .state
        .stores
        .keys
        .lookup(&api.state.hasher.hash(&secret))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (record.org_id, record.group_id, record.key_id),
        (org, 1, key_id)
    );
    // A replay has the preview, never the secret.
    let (s, headers, replay, text) = api
        .call(
            Method::POST,
            Some(&owner.token),
            &format!("/partner/v1{path}"),
            Some(&body),
            Some(key),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(headers["idempotent-replayed"], "true");
    assert!(replay["data"].get("key").is_none());
    assert!(!text.contains(&secret));
    assert_eq!(replay["data"]["preview"], first["data"]["preview"]);
    let (_, list) = api.get(&owner, &path).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 1);
    assert!(!list.to_string().contains(&secret));
    // Disable: gone from the directory when the DELETE returns.
    let (s, v) = api
        .write(&owner, Method::DELETE, &format!("{path}/abc"), None)
        .await;
    assert_error(s, &v, 400, "INVALID_PARTNER_CUSTOMER_API_KEY");
    let (s, v) = api
        .write(&owner, Method::DELETE, &format!("{path}/999"), None)
        .await;
    assert_error(s, &v, 404, "PARTNER_CUSTOMER_API_KEY_NOT_FOUND");
    let (s, v) = api
        .write(&owner, Method::DELETE, &format!("{path}/{key_id}"), None)
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["data"]["status"], "disabled");
    assert_eq!(
        api.state
            .stores
            .keys
            .lookup(&api.state.hasher.hash(&secret))
            .await
            .unwrap(),
        None
    );
    // Disabled keys still answer their usage route; another customer's key is not found.
    let (s, v) = api.get(&owner, &format!("{path}/{key_id}/usage")).await;
    assert_eq!(s, 200, "{v}");
    let (other, _) = api.active_customer(&owner, "other", 0.0, 1.0).await;
    let (s, v) = api
        .get(
            &owner,
            &format!("/customers/{other}/api-keys/{key_id}/usage"),
        )
        .await;
    assert_error(s, &v, 404, "PARTNER_CUSTOMER_API_KEY_NOT_FOUND");
    // No secret is stored anywhere in the database's idempotency records.
    use sea_orm::EntityTrait;
    let records = entities::idempotency_records::Entity::find()
        .all(&api.state.db)
        .await
        .unwrap();
    assert!(records.iter().all(|r| {
        !r.response_body
            .clone()
            .unwrap_or_default()
            .contains(&secret)
    }));
}

#[tokio::test]
async fn the_key_directory_is_rebuilt_when_the_store_loses_it() {
    let api = Api::start().await;
    let owner = api.owner("10").await;
    let (id, _) = api.active_customer(&owner, "keeper", 1.0, 1.0).await;
    let (_, created) = api
        .write(
            &owner,
            Method::POST,
            &format!("/customers/{id}/api-keys"),
            Some(&json!({"name": "k", "group_id": 1})),
        )
        .await;
    let hash = api
        .state
        .hasher
        .hash(created["data"]["key"].as_str().unwrap());
    // The store restarts empty (a Redis flush; here: a fresh in-memory store over the same database).
    let mut state = api.state.clone();
    state.stores = Stores::memory();
    assert_eq!(state.stores.keys.lookup(&hash).await.unwrap(), None);
    let (stop, rx) = tokio::sync::watch::channel(false);
    let mut keeper = JoinSet::new();
    keeper.spawn(admin_api::workers::directory::run(
        state.clone(),
        std::time::Duration::from_millis(50),
        rx,
    ));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while state.stores.keys.lookup(&hash).await.unwrap().is_none() {
        assert!(std::time::Instant::now() < deadline, "not rebuilt");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(state.stores.keys.is_loaded().await.unwrap());
    stop.send(true).unwrap();
    keeper.join_next().await.unwrap().unwrap();
}

#[tokio::test]
async fn keys_with_an_expiry_and_limits() {
    let api = Api::start().await;
    let owner = api.owner("10").await;
    let (id, _) = api.active_customer(&owner, "expiring", 1.0, 1.0).await;
    let path = format!("/customers/{id}/api-keys");
    // Every bad value is refused and creates nothing.
    for (body, says) in [
        (
            json!({"name": "k", "group_id": 1, "expires_at": "tomorrow"}),
            "ISO 8601",
        ),
        (
            json!({"name": "k", "group_id": 1, "expires_at": 1_900_000_000}),
            "string",
        ),
        (
            json!({"name": "k", "group_id": 1, "expires_at": "2020-01-01T00:00:00Z"}),
            "future",
        ),
        (
            json!({"name": "k", "group_id": 1, "max_concurrency": 0}),
            "max_concurrency",
        ),
        (
            json!({"name": "k", "group_id": 1, "max_concurrency": "2"}),
            "max_concurrency",
        ),
        (
            json!({"name": "k", "group_id": 1, "max_concurrency": 5}),
            "at most 4",
        ),
        (
            json!({"name": "k", "group_id": 1, "requests_per_minute": 121}),
            "at most 120",
        ),
        (
            json!({"name": "k", "group_id": 1, "requests_per_minute": -1}),
            "requests_per_minute",
        ),
    ] {
        let (s, v) = api.write(&owner, Method::POST, &path, Some(&body)).await;
        assert_error(s, &v, 400, "INVALID_PARTNER_CUSTOMER_API_KEY");
        assert!(v["message"].as_str().unwrap().contains(says), "{body}: {v}");
    }
    let (_, list) = api.get(&owner, &path).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 0, "{list}");

    // A valid expiry (any offset, shown in UTC) and limits within the group's.
    let (s, created) = api
        .write(
            &owner,
            Method::POST,
            &path,
            Some(&json!({"name": "temp", "group_id": 1,
                "expires_at": "2099-06-30T14:00:00+02:00",
                "max_concurrency": 2, "requests_per_minute": 60})),
        )
        .await;
    assert_eq!(s, 200, "{created}");
    let data = &created["data"];
    assert_eq!(data["expires_at"], "2099-06-30T12:00:00Z");
    assert_eq!(data["expired"], false);
    assert_eq!(data["max_concurrency"], 2);
    assert_eq!(data["requests_per_minute"], 60);
    let record = api
        .state
        .stores
        .keys
        .lookup(&api.state.hasher.hash(data["key"].as_str().unwrap()))
        .await
        .unwrap()
        .unwrap();
    let noon = chrono::DateTime::parse_from_rfc3339("2099-06-30T12:00:00Z").unwrap();
    assert_eq!(record.expires_at, Some(noon.timestamp()));
    assert_eq!(record.limits.max_concurrency, Some(2));
    assert_eq!(record.limits.requests_per_minute, Some(60));
    // A key without them: never expires, its group's defaults.
    let (s, plain) = api
        .write(
            &owner,
            Method::POST,
            &path,
            Some(&json!({"name": "plain", "group_id": 1, "expires_at": null})),
        )
        .await;
    assert_eq!(s, 200, "{plain}");
    assert_eq!(plain["data"]["expires_at"], Value::Null);
    assert_eq!(plain["data"]["max_concurrency"], Value::Null);
    let (_, list) = api.get(&owner, &path).await;
    let previews = list["data"].as_array().unwrap();
    assert_eq!(previews.len(), 2);
    assert_eq!(previews[0]["expires_at"], "2099-06-30T12:00:00Z");
    assert!(previews.iter().all(|p| p.get("key").is_none()));
}

/// Key budgets (DESIGN §6d): every bad value refused with nothing created; a budget shown with its
/// standing in the current period, published to the gateway's directory, and its spend read
/// from the store; keys without one unchanged. On the in-memory store and on Redis.
#[tokio::test]
async fn keys_with_a_budget() {
    budgets_on(Api::start().await).await;
    if let Some(url) = testkit::redis_url() {
        let stores = Stores::redis(&url, &testkit::redis_prefix("budgets"))
            .await
            .unwrap();
        budgets_on(Api::start_on("", stores).await).await;
    }
}

async fn budgets_on(api: Api) {
    let owner = api.owner("100").await;
    let (id, org) = api.active_customer(&owner, "budgets", 10.0, 1.0).await;
    let path = format!("/customers/{id}/api-keys");
    for (body, says) in [
        (
            json!({"name": "k", "group_id": 1, "budget_usd": 0}),
            "budget_usd",
        ),
        (
            json!({"name": "k", "group_id": 1, "budget_usd": -1}),
            "budget_usd",
        ),
        (
            json!({"name": "k", "group_id": 1, "budget_usd": "5"}),
            "budget_usd",
        ),
        (
            json!({"name": "k", "group_id": 1, "budget_usd": 1e-10}),
            "budget_usd",
        ),
        (
            json!({"name": "k", "group_id": 1, "budget_usd": 2_000_000}),
            "budget_usd",
        ),
        (
            json!({"name": "k", "group_id": 1, "budget_usd": 5, "budget_period": "week"}),
            "budget_period",
        ),
        (
            json!({"name": "k", "group_id": 1, "budget_usd": 5, "budget_period": 1}),
            "budget_period",
        ),
        (
            json!({"name": "k", "group_id": 1, "budget_period": "day"}),
            "needs budget_usd",
        ),
    ] {
        let (s, v) = api.write(&owner, Method::POST, &path, Some(&body)).await;
        assert_error(s, &v, 400, "INVALID_PARTNER_CUSTOMER_API_KEY");
        assert!(v["message"].as_str().unwrap().contains(says), "{body}: {v}");
    }
    let (_, list) = api.get(&owner, &path).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 0, "{list}");

    let (s, created) = api
        .write(
            &owner,
            Method::POST,
            &path,
            Some(&json!({"name": "capped", "group_id": 1, "budget_usd": 2.5,
                "budget_period": "day"})),
        )
        .await;
    assert_eq!(s, 200, "{created}");
    let budget = &created["data"]["budget"];
    let tomorrow = (chrono::Utc::now().date_naive() + chrono::Days::new(1))
        .format("%Y-%m-%dT00:00:00Z")
        .to_string();
    assert_eq!(
        budget,
        &json!({"budget_usd": 2.5, "budget_period": "day", "spent_usd": 0, "held_usd": 0,
            "remaining_usd": 2.5, "resets_at": tomorrow}),
        "{created}"
    );
    let key_id = created["data"]["api_key_id"].as_i64().unwrap();
    let record = api
        .state
        .stores
        .keys
        .lookup(
            &api.state
                .hasher
                .hash(created["data"]["key"].as_str().unwrap()),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        record.budget,
        Some(opstate::KeyBudget {
            limit: nano(2_500_000_000),
            period: opstate::BudgetPeriod::Day
        })
    );
    // Without a period: per month. Without a budget: no budget field at all.
    let (_, monthly) = api
        .write(
            &owner,
            Method::POST,
            &path,
            Some(&json!({"name": "monthly", "group_id": 1, "budget_usd": 100})),
        )
        .await;
    assert_eq!(
        monthly["data"]["budget"]["budget_period"], "month",
        "{monthly}"
    );
    let (_, plain) = api
        .write(
            &owner,
            Method::POST,
            &path,
            Some(&json!({"name": "plain", "group_id": 1, "budget_usd": null})),
        )
        .await;
    assert!(plain["data"].get("budget").is_none(), "{plain}");

    // A call of the capped key, as a gateway makes it: held, then settled at 0.75 USD.
    let asks = [opstate::SlotAsk {
        account: "a",
        max: 10,
    }];
    let admitted = api
        .state
        .stores
        .calls
        .admit(
            &asks,
            "budget-call-1",
            std::time::Duration::from_secs(30),
            opstate::Limits::default(),
            Some(opstate::HoldAsk {
                org,
                hold_id: "budget-call-1",
                amount: nano(1_000_000_000),
                ttl_ms: 60_000,
                meta: "",
                spend: Some(opstate::SpendAsk {
                    key_id,
                    budget: record.budget,
                }),
            }),
        )
        .await
        .unwrap();
    assert_eq!(admitted.taken, Some(0), "{admitted:?}");
    let (_, list) = api.get(&owner, &path).await;
    let capped = &list["data"][0];
    assert_eq!(capped["budget"]["held_usd"], 1, "{list}");
    assert_eq!(capped["budget"]["remaining_usd"], 1.5, "{list}");
    let now_ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap();
    let event = opstate::UsageEvent {
        key_id,
        ..super::settlement::settled_event(
            "budget-call-1",
            org,
            "gpt-4o-mini",
            now_ms,
            750_000_000,
            0,
        )
    };
    api.state
        .stores
        .calls
        .finish(opstate::Finish {
            slot: Some(("a", "budget-call-1")),
            gates: &[],
            hold: Some((org, "budget-call-1")),
            cost: nano(750_000_000),
            event: Some(&event),
        })
        .await
        .unwrap();
    let (_, list) = api.get(&owner, &path).await;
    let capped = &list["data"][0];
    assert_eq!(
        (
            &capped["budget"]["spent_usd"],
            &capped["budget"]["held_usd"],
            &capped["budget"]["remaining_usd"]
        ),
        (&json!(0.75), &json!(0), &json!(1.75)),
        "{list}"
    );
    assert!(list["data"][2].get("budget").is_none(), "{list}");

    // The store loses everything: the spend comes back from the ledger with the wallets.
    admin_api::workers::settler::drain_once(&api.state, "t")
        .await
        .unwrap();
    let fresh = Stores::memory();
    admin_api::services::wallets::reload_all_into(&api.state.db, &fresh)
        .await
        .unwrap();
    let restored = fresh
        .wallets
        .key_spend(org, &[key_id])
        .await
        .unwrap()
        .unwrap()
        .keys[0];
    assert_eq!(
        (restored.day, restored.month, restored.held),
        (nano(750_000_000), nano(750_000_000), nano(0))
    );
}

/// The console's key form posts every field (a browser sends the period's select even when no
/// amount is typed): no amount is no budget; an amount makes one, shown in the list.
#[tokio::test]
async fn the_console_key_form_sets_a_budget_only_with_an_amount() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (_, org) = api.active_customer(&owner, "formed", 10.0, 1.0).await;
    let mut ann =
        super::console::joined(&api, Some(org), None, "ann@formed.example", "owner").await;
    let path = format!("/console/orgs/{org}/keys");
    let csrf = ann.get(&path).await.csrf();
    let form = |name: &'static str, amount: &'static str, period: &'static str| {
        vec![
            ("csrf", csrf.clone()),
            ("name", name.to_string()),
            ("group_id", "1".to_string()),
            ("expires_on", String::new()),
            ("max_concurrency", String::new()),
            ("requests_per_minute", String::new()),
            ("budget_usd", amount.to_string()),
            ("budget_period", period.to_string()),
        ]
    };
    for (name, amount, period) in [("plain", "", "month"), ("capped", "12.5", "day")] {
        let fields = form(name, amount, period);
        let pairs: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let made = ann.post(&path, &pairs, None).await;
        assert_eq!(made.status, 200, "{name}: {}", made.body);
        assert!(
            made.body.contains("id=\"new-key\""),
            "{name}: {}",
            made.body
        );
    }
    let list = ann.get(&path).await;
    assert!(list.body.contains("<td>none</td>"), "{}", list.body);
    assert!(
        list.body
            .contains("12.5 USD per day: 0 spent, 0 held, 12.5 left"),
        "{}",
        list.body
    );
    let fields = form("bad", "-3", "day");
    let pairs: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let refused = ann.post(&path, &pairs, None).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("budget_usd"), "{}", refused.body);
}
