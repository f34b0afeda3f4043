//! Idempotent writes: replay, conflict and the required key, concurrent identical writes with one
//! effect, and a running write versus a dead one's claim.

use super::*;

#[tokio::test]
async fn idempotency_replay_conflict_and_required() {
    let api = Api::start().await;
    let owner = api.owner("1000").await;
    let path = "/partner/v1/customers/by-external-id/idem";
    let body = json!({"name": "Idem", "contact_email": "i@idem.example", "initial_allocation_usd": 10, "retail_rate_multiplier": 1.0});
    let (s, _, v, _) = api
        .call(Method::PUT, Some(&owner.token), path, Some(&body), None)
        .await;
    assert_error(s, &v, 400, "IDEMPOTENCY_KEY_REQUIRED");
    let (s, _, v, _) = api
        .call(Method::PUT, Some(&owner.token), path, Some(&body), Some(""))
        .await;
    assert_error(s, &v, 400, "IDEMPOTENCY_KEY_REQUIRED");
    assert_eq!(api.count("customers").await, 0);
    let (s, h1, first, _) = api
        .call(
            Method::PUT,
            Some(&owner.token),
            path,
            Some(&body),
            Some("same"),
        )
        .await;
    assert_eq!(s, 200);
    assert!(h1.get("idempotent-replayed").is_none());
    assert!(first["data"]["activation"]["invite_url"].is_string());
    // Reordered keys and another number form are the same request.
    let reordered: Value = serde_json::from_str(r#"{"retail_rate_multiplier": 1.00, "initial_allocation_usd": 10.0, "contact_email": "i@idem.example", "name": "Idem"}"#).unwrap();
    let (s, h2, replay, text) = api
        .call(
            Method::PUT,
            Some(&owner.token),
            path,
            Some(&reordered),
            Some("same"),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(h2["idempotent-replayed"], "true");
    assert!(
        replay["data"]["activation"].get("invite_url").is_none(),
        "secrets are not replayed"
    );
    let mut expected = first.clone();
    expected["data"]["activation"]
        .as_object_mut()
        .unwrap()
        .remove("invite_url");
    assert_eq!(
        replay, expected,
        "the replay is the first result minus its secret"
    );
    let (_, _, _, text2) = api
        .call(
            Method::PUT,
            Some(&owner.token),
            path,
            Some(&body),
            Some("same"),
        )
        .await;
    assert_eq!(text, text2, "replays are byte-identical");
    assert_eq!(
        api.funding(&owner).await["reserved_allocations_usd"],
        9,
        "reserved once"
    );
    assert_eq!(
        std::fs::read_dir(&api.outbox).unwrap().count(),
        1,
        "one email"
    );
    // Same key, another body or another route: conflict.
    let mut other = body.clone();
    other["initial_allocation_usd"] = json!(11);
    let (s, _, v, _) = api
        .call(
            Method::PUT,
            Some(&owner.token),
            path,
            Some(&other),
            Some("same"),
        )
        .await;
    assert_error(s, &v, 409, "IDEMPOTENCY_KEY_CONFLICT");
    let (s, _, v, _) = api
        .call(
            Method::POST,
            Some(&owner.token),
            "/partner/v1/funding/top-up-sessions",
            Some(&json!({"amount_usd": 5})),
            Some("same"),
        )
        .await;
    assert_error(s, &v, 409, "IDEMPOTENCY_KEY_CONFLICT");
    // Another partner may use the same key value.
    let other_partner = api.owner("0").await;
    let (s, _, v, _) = api
        .call(
            Method::POST,
            Some(&other_partner.token),
            "/partner/v1/funding/top-up-sessions",
            Some(&json!({"amount_usd": 5})),
            Some("same"),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    // A stored business refusal replays even after the cause is gone.
    let (s, _, v, _) = api.call(Method::PUT, Some(&owner.token), "/partner/v1/customers/by-external-id/big", Some(&json!({"name": "Big", "contact_email": "b@big.example", "initial_allocation_usd": 5000, "retail_rate_multiplier": 1.0})), Some("big-1")).await;
    assert_error(s, &v, 403, "PARTNER_FUNDING_INSUFFICIENT");
    admin_api::cli::partner_fund(&api.state, owner.id, "10000", None)
        .await
        .unwrap();
    let (s, h, v, _) = api.call(Method::PUT, Some(&owner.token), "/partner/v1/customers/by-external-id/big", Some(&json!({"name": "Big", "contact_email": "b@big.example", "initial_allocation_usd": 5000, "retail_rate_multiplier": 1.0})), Some("big-1")).await;
    assert_error(s, &v, 403, "PARTNER_FUNDING_INSUFFICIENT");
    assert_eq!(h["idempotent-replayed"], "true");
    // A validation error stores nothing: the same key works with a corrected body.
    let (s, _, v, _) = api
        .call(
            Method::POST,
            Some(&owner.token),
            "/partner/v1/funding/top-up-sessions",
            Some(&json!({"amount_usd": -1})),
            Some("fix-me"),
        )
        .await;
    assert_error(s, &v, 400, "INVALID_PARTNER_TOP_UP_AMOUNT");
    let (s, _, v, _) = api
        .call(
            Method::POST,
            Some(&owner.token),
            "/partner/v1/funding/top-up-sessions",
            Some(&json!({"amount_usd": 25})),
            Some("fix-me"),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert!(
        v["data"]["url"]
            .as_str()
            .unwrap()
            .starts_with("https://gw.example.test/billing/top-up/")
    );
}

#[tokio::test]
async fn concurrent_identical_writes_have_one_effect() {
    let api = Arc::new(Api::start().await);
    let owner = api.owner("1000").await;
    let body = json!({"name": "Race", "contact_email": "r@race.example", "initial_allocation_usd": 100, "retail_rate_multiplier": 1.0});
    let mut tasks = JoinSet::new();
    for _ in 0..20 {
        let (api, token, body) = (api.clone(), owner.token.clone(), body.clone());
        tasks.spawn(async move {
            api.call(
                Method::PUT,
                Some(&token),
                "/partner/v1/customers/by-external-id/race",
                Some(&body),
                Some("race-key"),
            )
            .await
        });
    }
    let mut statuses = Vec::new();
    while let Some(r) = tasks.join_next().await {
        let (s, _, v, _) = r.unwrap();
        assert!(
            s == 200 || (s == 409 && v["reason"] == "IDEMPOTENCY_IN_PROGRESS"),
            "{s} {v}"
        );
        statuses.push(s.as_u16());
    }
    assert!(statuses.contains(&200));
    assert_eq!(api.count("customers").await, 1);
    assert_eq!(api.count("invitations").await, 1);
    assert_eq!(api.funding(&owner).await["reserved_allocations_usd"], 90);
    assert_eq!(std::fs::read_dir(&api.outbox).unwrap().count(), 1);
}

#[tokio::test]
async fn a_running_write_answers_in_progress_and_a_dead_one_is_taken_over() {
    use sea_orm::{ActiveModelTrait, Set};
    let api = Api::start().await;
    let owner = api.owner("0").await;
    let body = json!({"amount_usd": 5});
    let fingerprint = admin_api::partner::idempotency::Request::new(
        &{
            let mut h = reqwest::header::HeaderMap::new();
            h.insert("idempotency-key", "busy".parse().unwrap());
            h
        },
        "POST",
        "/partner/v1/funding/top-up-sessions",
        &body,
    )
    .unwrap()
    .fingerprint;
    // Another process claimed the key and is still working.
    let now = chrono::Utc::now();
    let claim = entities::idempotency_records::ActiveModel {
        partner_id: Set(owner.id),
        idem_key: Set("busy".into()),
        method: Set("POST".into()),
        path: Set("/partner/v1/funding/top-up-sessions".into()),
        fingerprint: Set(fingerprint),
        state: Set(entities::status::RecordState::InProgress),
        response_status: Set(None),
        response_body: Set(None),
        created_at: Set(now),
        locked_at: Set(now),
        ..Default::default()
    }
    .insert(&api.state.db)
    .await
    .unwrap();
    let (s, _, v, _) = api
        .call(
            Method::POST,
            Some(&owner.token),
            "/partner/v1/funding/top-up-sessions",
            Some(&body),
            Some("busy"),
        )
        .await;
    assert_error(s, &v, 409, "IDEMPOTENCY_IN_PROGRESS");
    assert_eq!(api.count("top_up_sessions").await, 0);
    // Its process died two minutes ago: the retry takes the claim over and runs once.
    let mut stale: entities::idempotency_records::ActiveModel = claim.into();
    stale.locked_at = Set(now - chrono::Duration::seconds(120));
    stale.update(&api.state.db).await.unwrap();
    let (s, _, v, _) = api
        .call(
            Method::POST,
            Some(&owner.token),
            "/partner/v1/funding/top-up-sessions",
            Some(&body),
            Some("busy"),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(api.count("top_up_sessions").await, 1);
}

/// Bad bodies on every partner write: 400 with the route's reason, nothing created and nothing
/// stored under the idempotency key (the key can be retried with a corrected body).
#[tokio::test]
async fn bad_bodies_on_every_write_change_nothing() {
    use sea_orm::{EntityTrait, PaginatorTrait};
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (id, _) = api.active_customer(&owner, "bad-bodies", 5.0, 1.0).await;
    let records_before = entities::idempotency_records::Entity::find()
        .count(&api.state.db)
        .await
        .unwrap();
    let routes: Vec<(&str, String, &str)> = vec![
        (
            "PUT",
            "/partner/v1/customers/by-external-id/new-one".into(),
            "INVALID_PARTNER_CUSTOMER",
        ),
        (
            "POST",
            "/partner/v1/funding/top-up-sessions".into(),
            "INVALID_PARTNER_TOP_UP_AMOUNT",
        ),
        (
            "POST",
            format!("/partner/v1/customers/{id}/allocations"),
            "INVALID_PARTNER_ALLOCATION_ACTION",
        ),
        (
            "PUT",
            format!("/partner/v1/customers/{id}/groups/1/rate"),
            "INVALID_PARTNER_CUSTOMER_GROUP_RATE",
        ),
        (
            "POST",
            format!("/partner/v1/customers/{id}/api-keys"),
            "INVALID_PARTNER_CUSTOMER_API_KEY",
        ),
    ];
    let bodies: [&[u8]; 5] = [
        b"{\"name\":",
        b"[1,2,3]",
        b"{\"name\":\"x\xff\xfe\"}",
        b"\"just a string\"",
        b"{\"amount_usd\":1e400,\"retail_rate_multiplier\":1e400,\"action\":5,\"name\":7}",
    ];
    for (method, path, reason) in &routes {
        for (n, body) in bodies.iter().enumerate() {
            let resp = api
                .http
                .request(method.parse().unwrap(), format!("{}{path}", api.base))
                .bearer_auth(&owner.token)
                .header("idempotency-key", format!("bad-{n}"))
                .header("content-type", "application/json")
                .body(body.to_vec())
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 400, "{method} {path} body {n}");
            let v: Value = resp.json().await.unwrap();
            assert_eq!(v["reason"], *reason, "{method} {path} body {n}: {v}");
            assert_eq!(v["code"], 400);
        }
    }
    assert_eq!(
        entities::idempotency_records::Entity::find()
            .count(&api.state.db)
            .await
            .unwrap(),
        records_before,
        "no key was claimed"
    );
    let (status, _) = api.get(&owner, "/customers/by-external-id/new-one").await;
    assert_eq!(status, 404, "nothing was created");
    let (_, keys) = api.get(&owner, &format!("/customers/{id}/api-keys")).await;
    assert_eq!(keys["data"].as_array().unwrap().len(), 0);
}
