//! The billing API: organization billing tokens, the balance and daily usage, an inactive
//! organization's token, and a missing or lost wallet answering 503 rather than zero.

use super::*;

#[tokio::test]
async fn billing_api_tokens_balance_and_daily_usage() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (_, org) = api.active_customer(&owner, "bill", 40.0, 1.0).await;
    let token = api.billing_token(org).await;
    assert!(
        admin_api::cli::billing_token(&api.state, "create", org)
            .await
            .is_err(),
        "one active token per organization"
    );
    let balance = |t: Option<String>, header: bool| {
        let api = &api;
        async move {
            let mut req = api
                .http
                .get(format!("{}/api/v1/organization/billing/balance", api.base));
            if let Some(t) = t {
                req = if header {
                    req.header("x-organization-billing-token", t)
                } else {
                    req.bearer_auth(t)
                };
            }
            let resp = req.send().await.unwrap();
            (resp.status(), resp.json::<Value>().await.unwrap())
        }
    };
    for header in [false, true] {
        let (s, v) = balance(Some(token.clone()), header).await;
        assert_eq!(s, 200, "{v}");
        assert_eq!(
            v["data"],
            json!({"organization_id": org, "balance_usd": 40, "reserved_usd": 0, "available_usd": 40, "status": "reconciled"})
        );
    }
    let partner_token_as_billing = owner.token.clone();
    for bad in [
        None,
        Some("tgb_dev_nope".to_string()),
        Some(partner_token_as_billing),
    ] {
        let (s, v) = balance(bad, false).await;
        assert_error(s, &v, 401, "ORG_BILLING_TOKEN_INVALID");
    }
    let rotated = admin_api::cli::billing_token(&api.state, "rotate", org)
        .await
        .unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
    let (s, v) = balance(Some(token.clone()), false).await;
    assert_error(s, &v, 401, "ORG_BILLING_TOKEN_INVALID");
    let (s, _) = balance(Some(rotated.clone()), false).await;
    assert_eq!(s, 200);
    // Daily usage.
    let daily = |q: &str| {
        let api = &api;
        let (t, q) = (rotated.clone(), q.to_string());
        async move {
            let resp = api
                .http
                .get(format!(
                    "{}/api/v1/organization/billing/usage/daily{q}",
                    api.base
                ))
                .bearer_auth(t)
                .send()
                .await
                .unwrap();
            (resp.status(), resp.json::<Value>().await.unwrap())
        }
    };
    let (s, v) = daily("?date=2026-01-05").await;
    assert_eq!(s, 200, "{v}");
    let d = &v["data"];
    for field in [
        "organization_id",
        "from",
        "to",
        "totals",
        "projects",
        "api_keys",
        "models",
        "workflows",
        "unavailable_dimensions",
        "wallet_spend",
        "usage_coverage",
    ] {
        assert!(d.get(field).is_some(), "{field}");
    }
    assert_eq!(d["from"], "2026-01-05T00:00:00Z");
    assert_eq!(d["to"], "2026-01-06T00:00:00Z");
    for field in [
        "requests",
        "input_tokens",
        "output_tokens",
        "cache_tokens",
        "cost_usd",
        "actual_cost_usd",
        "usage_cost_usd",
    ] {
        assert!(d["totals"].get(field).is_some(), "totals.{field}");
    }
    let (s, v) = daily("").await;
    assert_eq!(s, 200, "date defaults to today");
    assert_eq!(
        v["data"]["from"],
        format!("{}T00:00:00Z", chrono::Utc::now().date_naive())
    );
    for bad in [
        "?date=2024-02-30",
        "?date=2024-1-5",
        "?date=20240105",
        "?date=2024-01-05T00:00:00Z",
        "?date=",
        "?date=2024-01-05&date=2024-01-06",
    ] {
        let (s, v) = daily(bad).await;
        assert_eq!(s, 400, "{bad}");
        assert!(v.get("reason").is_none(), "{bad}: 400 without reason: {v}");
        assert_eq!(v["code"], 400);
    }
    // Revoked: invalid.
    admin_api::cli::billing_token(&api.state, "revoke", org)
        .await
        .unwrap();
    let (s, v) = balance(Some(rotated), false).await;
    assert_error(s, &v, 401, "ORG_BILLING_TOKEN_INVALID");
}

#[tokio::test]
async fn missing_wallet_is_reconciliation_required_never_zero() {
    let api = Api::start().await;
    // An active organization without a ledger wallet (the demo organization has none).
    let demo = admin_api::demo::demo_key(
        &api.state.db,
        api.state.stores.keys.as_ref(),
        &api.state.hasher,
        api.state.env,
        1,
    )
    .await
    .unwrap();
    let token = api.billing_token(demo.organization_id).await;
    let resp = api
        .http
        .get(format!("{}/api/v1/organization/billing/balance", api.base))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let v: Value = resp.json().await.unwrap();
    assert_error(status, &v, 503, "ORG_BALANCE_RECONCILIATION_REQUIRED");
    assert!(v.get("data").is_none());
}

#[tokio::test]
async fn billing_token_of_an_inactive_organization_is_invalid() {
    let api = Api::start().await;
    let owner = api.owner("0").await;
    let (_, created) = api.create(&owner, "pending", 0.0, 1.0).await;
    let org = {
        use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
        entities::customers::Entity::find()
            .filter(
                entities::customers::Column::Id
                    .eq(created["data"]["customer"]["id"].as_i64().unwrap()),
            )
            .one(&api.state.db)
            .await
            .unwrap()
            .unwrap()
            .organization_id
    };
    let token = api.billing_token(org).await;
    let resp = api
        .http
        .get(format!("{}/api/v1/organization/billing/balance", api.base))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let v: Value = resp.json().await.unwrap();
    assert_error(status, &v, 401, "ORG_BILLING_TOKEN_INVALID");
}

#[tokio::test]
async fn lost_wallet_mirror_answers_503_until_reloaded() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (_, org) = api.active_customer(&owner, "lost", 12.0, 1.0).await;
    let token = api.billing_token(org).await;
    // The same database over a store that lost everything (a Redis flush).
    let mut state = api.state.clone();
    state.stores = Stores::memory();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, rx) = tokio::sync::watch::channel(false);
    let mut tasks = JoinSet::new();
    let s2 = state.clone();
    let rx2 = rx.clone();
    tasks.spawn(async move { admin_api::serve(listener, s2, rx2).await.unwrap() });
    let get = |base: String, token: String| async move {
        let r = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .get(format!("{base}/api/v1/organization/billing/balance"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    };
    let (s, v) = get(base.clone(), token.clone()).await;
    assert_eq!(s, 503, "{v}");
    assert_eq!(v["reason"], "ORG_BALANCE_RECONCILIATION_REQUIRED");
    assert!(v.get("data").is_none(), "never a zero balance");
    // The keeper notices the loss and reloads the mirror from the ledger.
    tasks.spawn(admin_api::workers::directory::run(
        state.clone(),
        std::time::Duration::from_millis(50),
        rx,
    ));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (s, v) = get(base.clone(), token.clone()).await;
        if s == 200 {
            assert_eq!(v["data"]["balance_usd"], 12);
            assert_eq!(v["data"]["status"], "reconciled");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not reloaded: {v}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    stop.send(true).unwrap();
}

/// A mirror a settlement found below its open holds (loaded below them) is never reported, even
/// once its figures agree with the ledger again: the billing balance answers 503 until the keeper
/// reloads it from the ledger. The settlement itself charged nothing (never a credit).
#[tokio::test]
async fn a_mirror_found_below_its_holds_answers_503_until_reloaded() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (_, org) = api.active_customer(&owner, "below", 12.0, 1.0).await;
    let token = api.billing_token(org).await;
    let usd = |n: i64| money::NanoUsd::from_nanos(n * 1_000_000_000);
    let w = api.state.stores.wallets.clone();
    w.reserve(org, "a", usd(8), 60_000, "").await.unwrap();
    w.reserve(org, "b", usd(4), 60_000, "").await.unwrap();
    // The mirror is loaded below its holds, then a settlement finds it there.
    w.load(org, usd(3)).await.unwrap();
    assert_eq!(
        w.settle(org, "a", usd(1)).await.unwrap(),
        opstate::Settlement::Settled {
            charged: usd(0),
            excess: usd(1),
            below_holds: true
        }
    );
    // Its figures agree with the ledger again (12 = 12 + 0 pending), but it was found below.
    w.adjust(org, usd(9), "test-back").await.unwrap();
    let snap = w.snapshot(org).await.unwrap().unwrap();
    assert_eq!((snap.balance, snap.pending), (usd(12), usd(0)));
    let get = || async {
        let r = api
            .http
            .get(format!("{}/api/v1/organization/billing/balance", api.base))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    };
    let (s, v) = get().await;
    assert_eq!(
        (s, v["reason"].as_str()),
        (503, Some("ORG_BALANCE_RECONCILIATION_REQUIRED")),
        "{v}"
    );
    assert!(v.get("data").is_none(), "never a figure");
    // The keeper reloads it from the ledger; then it is reported again.
    let (stop, rx) = tokio::sync::watch::channel(false);
    let mut keeper = JoinSet::new();
    keeper.spawn(admin_api::workers::directory::run(
        api.state.clone(),
        std::time::Duration::from_millis(50),
        rx,
    ));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let (s, v) = get().await;
        if s == 200 {
            assert_eq!(v["data"]["balance_usd"], 12);
            assert_eq!(v["data"]["reserved_usd"], 4);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not reloaded: {v}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    stop.send(true).unwrap();
    keeper.join_all().await;
}

/// One active billing token per organization, held by the database (a partial unique index),
/// not by a read-then-insert: concurrent rotations each leave exactly one active token, and a
/// second active row cannot be written even past the service (issue 42).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_rotations_leave_exactly_one_active_token() {
    use entities::org_billing_tokens;
    use entities::status::TokenStatus;
    use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (_, org) = api.active_customer(&owner, "rotations", 10.0, 1.0).await;
    api.billing_token(org).await;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let state = api.state.clone();
        tasks.spawn(async move {
            admin_api::services::billing::issue_token(&state, org, true, None).await
        });
    }
    let mut secrets = Vec::new();
    while let Some(done) = tasks.join_next().await {
        secrets.push(done.unwrap().expect("every rotation queues and succeeds"));
    }
    let active = org_billing_tokens::Entity::find()
        .filter(org_billing_tokens::Column::OrganizationId.eq(org))
        .filter(org_billing_tokens::Column::Status.eq(TokenStatus::Active))
        .all(&api.state.db)
        .await
        .unwrap();
    assert_eq!(active.len(), 1, "{active:?}");
    // Only the last rotation's secret reads the balance.
    let working: Vec<&credentials::Secret> = secrets
        .iter()
        .filter(|s| api.state.hasher.hash(s.expose()) == active[0].token_hash)
        .collect();
    assert_eq!(working.len(), 1);
    // The database itself refuses a second active token.
    let forged = org_billing_tokens::ActiveModel {
        organization_id: Set(org),
        token_hash: Set("forged".into()),
        preview: Set("tgb_forged".into()),
        status: Set(TokenStatus::Active),
        created_at: Set(chrono::Utc::now()),
        revoked_at: Set(None),
        ..Default::default()
    }
    .insert(&api.state.db)
    .await;
    assert!(
        matches!(
            forged.as_ref().map_err(|e| e.sql_err()),
            Err(Some(sea_orm::SqlErr::UniqueConstraintViolation(_)))
        ),
        "{forged:?}"
    );
}
