//! Funding and allocations: allocation changes, groups and retail rates against the partner's
//! funding, top-up sessions, and money held by requests in flight that cannot be taken back.

use super::*;

#[tokio::test]
async fn allocations_groups_and_rates() {
    let api = Api::start().await;
    let owner = api.partner("owner", &["partner:write"], "300", "1.0").await;
    let (id, _) = api.active_customer(&owner, "alloc", 100.0, 1.0).await;
    // reserved = 100 × 0.9 / 1.0 = 90.
    assert_eq!(api.funding(&owner).await["reserved_allocations_usd"], 90);
    let alloc = |body: Value| {
        let api = &api;
        let owner = owner.clone();
        async move {
            api.write(
                &owner,
                Method::POST,
                &format!("/customers/{id}/allocations"),
                Some(&body),
            )
            .await
        }
    };
    for (body, reason) in [
        (
            json!({"action": "grow", "amount_usd": 1}),
            "INVALID_PARTNER_ALLOCATION_ACTION",
        ),
        (
            json!({"amount_usd": 1}),
            "INVALID_PARTNER_ALLOCATION_ACTION",
        ),
        (
            json!({"action": "increase", "amount_usd": 0}),
            "INVALID_PARTNER_ALLOCATION_AMOUNT",
        ),
        (
            json!({"action": "increase", "amount_usd": "5"}),
            "INVALID_PARTNER_ALLOCATION_AMOUNT",
        ),
        (
            json!({"action": "decrease"}),
            "INVALID_PARTNER_ALLOCATION_AMOUNT",
        ),
        (
            json!({"action": "increase", "amount_usd": 1e13}),
            "INVALID_PARTNER_ALLOCATION_AMOUNT",
        ),
        (
            json!({"action": "set_limit", "limit_usd": -1}),
            "INVALID_PARTNER_ALLOCATION_LIMIT",
        ),
        (
            json!({"action": "set_limit"}),
            "INVALID_PARTNER_ALLOCATION_LIMIT",
        ),
    ] {
        let (s, v) = alloc(body.clone()).await;
        assert_error(s, &v, 400, reason);
    }
    // 300 funding − 90 reserved = 210 available; increasing by 250 needs 225.
    let (s, v) = alloc(json!({"action": "increase", "amount_usd": 250})).await;
    assert_error(s, &v, 403, "PARTNER_FUNDING_INSUFFICIENT");
    assert_eq!(v["metadata"]["required_usd"], 225);
    let (s, v) = alloc(json!({"action": "increase", "amount_usd": 100})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["data"]["customer"]["partner_allocation_cap_usd"], 200);
    assert_eq!(v["data"]["customer"]["organization_balance_usd"], 200);
    assert_eq!(api.funding(&owner).await["reserved_allocations_usd"], 180);
    let (s, v) = alloc(json!({"action": "set_limit", "limit_usd": 50})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["data"]["customer"]["organization_balance_usd"], 50);
    let (s, v) = alloc(json!({"action": "decrease", "amount_usd": 20})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["data"]["customer"]["partner_allocation_cap_usd"], 30);
    let f = api.funding(&owner).await;
    assert_eq!(
        (
            f["available_funding_usd"].clone(),
            f["reserved_allocations_usd"].clone()
        ),
        (json!(273), json!(27))
    );
    let (s, v) = alloc(json!({"action": "decrease", "amount_usd": 31})).await;
    assert_error(s, &v, 400, "PARTNER_ALLOCATION_LIMIT_BELOW_USED");
    assert_eq!(v["metadata"]["partner_allocation_used_usd"], 0);

    // Groups carry both multipliers and the floor.
    let (s, v) = api.get(&owner, &format!("/customers/{id}/groups")).await;
    assert_eq!(s, 200);
    assert_eq!(
        v["data"][0],
        json!({"id": 1, "name": "Standard", "description": "text", "product_code": "std", "rate_multiplier": 1, "status": "active", "wholesale_rate_multiplier": 0.8, "retail_floor_rate_multiplier": 1})
    );
    assert_eq!(v["data"][1]["retail_floor_rate_multiplier"], 1);
    let rate = |group: &str, body: Value| {
        let api = &api;
        let owner = owner.clone();
        let group = group.to_string();
        async move {
            api.write(
                &owner,
                Method::PUT,
                &format!("/customers/{id}/groups/{group}/rate"),
                Some(&body),
            )
            .await
        }
    };
    for body in [
        json!({}),
        json!({"retail_rate_multiplier": 0}),
        json!({"retail_rate_multiplier": "2"}),
        json!({"retail_rate_multiplier": 2, "x": 1}),
    ] {
        let (s, v) = rate("1", body).await;
        assert_error(s, &v, 400, "INVALID_PARTNER_CUSTOMER_GROUP_RATE");
    }
    let (s, v) = rate("2", json!({"retail_rate_multiplier": 0.95})).await;
    assert_error(s, &v, 400, "PARTNER_RETAIL_RATE_BELOW_FLOOR");
    let (s, v) = rate("9", json!({"retail_rate_multiplier": 2})).await;
    assert_error(s, &v, 404, "PARTNER_CUSTOMER_GROUP_NOT_FOUND");
    // Raising a price lowers the reservation: 30 × 0.9 / 1.0 stays the max (group 2); raising group 2 to 3 leaves group 1 (0.8) as max: 30 × 0.8 = 24.
    let (s, v) = rate("2", json!({"retail_rate_multiplier": 3})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(api.funding(&owner).await["reserved_allocations_usd"], 24);
    // Lowering a price beyond what funding covers is refused and changes nothing.
    let (s, v) = alloc(json!({"action": "increase", "amount_usd": 320})).await;
    assert_eq!(s, 200, "{v}");
    // cap 350 reserves 350 × 0.8 = 280 of 300; pricing group 2 at 1.0 needs 315.
    let before = api.funding(&owner).await;
    assert_eq!(before["reserved_allocations_usd"], 280);
    let (s, v) = rate("2", json!({"retail_rate_multiplier": 1.0})).await;
    assert_error(s, &v, 403, "PARTNER_FUNDING_INSUFFICIENT");
    assert_eq!(v["metadata"]["required_usd"], 35);
    let (_, groups) = api.get(&owner, &format!("/customers/{id}/groups")).await;
    assert_eq!(groups["data"][1]["rate_multiplier"], 3, "nothing changed");
    assert_eq!(api.funding(&owner).await, before);
}

#[tokio::test]
async fn top_up_sessions() {
    let api = Api::start().await;
    let owner = api.owner("0").await;
    for bad in [
        json!({"amount_usd": 0}),
        json!({"amount_usd": -5}),
        json!({"amount_usd": "5"}),
        json!({}),
        json!({"amount_usd": 1e13}),
    ] {
        let (s, v) = api
            .write(&owner, Method::POST, "/funding/top-up-sessions", Some(&bad))
            .await;
        assert_error(s, &v, 400, "INVALID_PARTNER_TOP_UP_AMOUNT");
    }
    let (s, v) = api
        .write(
            &owner,
            Method::POST,
            "/funding/top-up-sessions",
            Some(&json!({"amount_usd": 50})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let url = v["data"]["url"].as_str().unwrap();
    let path = url.trim_start_matches("https://gw.example.test");
    let (s, _, _, html) = api.call(Method::GET, None, path, None, None).await;
    assert_eq!(s, 200);
    assert!(html.contains("50 USD"));
    // The funding object's top_up_url opens a page in a browser too (a GET, no credential).
    let top_up = api.funding(&owner).await["top_up_url"]
        .as_str()
        .unwrap()
        .to_string();
    let resp = api
        .http
        .get(format!(
            "{}{}",
            api.base,
            top_up.trim_start_matches("https://gw.example.test")
        ))
        .header("accept", "text/html")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "{top_up}");
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/html")
    );
    let page = resp.text().await.unwrap();
    assert!(
        page.contains("Add partner funds") && page.contains("top-up-sessions"),
        "{page}"
    );
    // Paying is the operator's `partner fund`, idempotent by reference.
    let a = admin_api::cli::partner_fund(&api.state, owner.id, "50", Some("pay-1"))
        .await
        .unwrap();
    let b = admin_api::cli::partner_fund(&api.state, owner.id, "50", Some("pay-1"))
        .await
        .unwrap();
    assert_eq!(a["already_posted"], false);
    assert_eq!(b["already_posted"], true);
    assert_eq!(api.funding(&owner).await["available_funding_usd"], 50);
}

#[tokio::test]
async fn held_money_cannot_be_taken_back() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (id, org) = api.active_customer(&owner, "held", 30.0, 1.0).await;
    // A request in flight holds 25 of the 30 USD.
    let held = api
        .state
        .stores
        .wallets
        .reserve(org, "req-1", nano(25_000_000_000), 60_000, "")
        .await
        .unwrap();
    assert!(matches!(held, opstate::Reservation::Held { .. }));
    let (_, before) = api.get(&owner, &format!("/customers/{id}")).await;
    assert_eq!(before["data"]["customer"]["organization_available_usd"], 5);
    let funding_before = api.funding(&owner).await;
    let path = format!("/customers/{id}/allocations");
    let (s, v) = api
        .write(
            &owner,
            Method::POST,
            &path,
            Some(&json!({"action": "decrease", "amount_usd": 10})),
        )
        .await;
    assert_error(s, &v, 409, "PARTNER_CUSTOMER_BALANCE_RESERVED");
    assert_eq!(v["metadata"]["organization_available_usd"], 5);
    let (s, v) = api
        .write(
            &owner,
            Method::POST,
            &path,
            Some(&json!({"action": "set_limit", "limit_usd": 1})),
        )
        .await;
    assert_error(s, &v, 409, "PARTNER_CUSTOMER_BALANCE_RESERVED");
    // Nothing changed: cap, ledger, funding, mirror.
    let (_, after) = api.get(&owner, &format!("/customers/{id}")).await;
    assert_eq!(after["data"]["customer"]["partner_allocation_cap_usd"], 30);
    assert_eq!(after["data"]["customer"]["organization_balance_usd"], 30);
    assert_eq!(api.funding(&owner).await, funding_before);
    let snap = api
        .state
        .stores
        .wallets
        .snapshot(org)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (snap.balance, snap.reserved),
        (nano(30_000_000_000), nano(25_000_000_000))
    );
    // The billing balance shows the hold.
    let token = api.billing_token(org).await;
    let b: Value = api
        .http
        .get(format!("{}/api/v1/organization/billing/balance", api.base))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        b["data"],
        json!({"organization_id": org, "balance_usd": 30, "reserved_usd": 25, "available_usd": 5, "status": "reconciled"})
    );
    // Within what is available, a decrease goes through ledger and mirror together.
    let (s, v) = api
        .write(
            &owner,
            Method::POST,
            &path,
            Some(&json!({"action": "decrease", "amount_usd": 4})),
        )
        .await;
    assert_eq!(s, 200, "{v}");
    let snap = api
        .state
        .stores
        .wallets
        .snapshot(org)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(snap.balance, nano(26_000_000_000));
    // An increase credits the mirror after the commit.
    let (s, _) = api
        .write(
            &owner,
            Method::POST,
            &path,
            Some(&json!({"action": "increase", "amount_usd": 10})),
        )
        .await;
    assert_eq!(s, 200);
    let snap = api
        .state
        .stores
        .wallets
        .snapshot(org)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(snap.balance, nano(36_000_000_000));
    let b: Value = api
        .http
        .get(format!("{}/api/v1/organization/billing/balance", api.base))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(b["data"]["status"], "reconciled");
    assert_eq!(b["data"]["balance_usd"], 36);
}

/// A configuration reload replaces the groups admin-api prices with (`AppState::set_groups`, what
/// `SIGHUP` does): the group list shows the new wholesale multiplier and retail floor at once, and
/// a key's limits are capped by the group's new per-key limit.
#[tokio::test]
async fn reloaded_groups_apply_to_the_partner_api_at_once() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (id, _) = api.active_customer(&owner, "reload", 10.0, 1.5).await;
    let (_, v) = api.get(&owner, &format!("/customers/{id}/groups")).await;
    assert_eq!(v["data"][0]["wholesale_rate_multiplier"], 0.8, "{v}");
    let mut groups = (*api.state.groups()).clone();
    groups[0].wholesale_rate_multiplier = money::RateMultiplier::from_ppm(1_200_000).unwrap();
    groups[0].key_max_concurrency = Some(1);
    api.state.set_groups(groups);
    let (_, v) = api.get(&owner, &format!("/customers/{id}/groups")).await;
    assert_eq!(v["data"][0]["wholesale_rate_multiplier"], 1.2, "{v}");
    assert_eq!(v["data"][0]["retail_floor_rate_multiplier"], 1.2, "{v}");
    let (s, v) = api
        .write(
            &owner,
            Method::POST,
            &format!("/customers/{id}/api-keys"),
            Some(&json!({"name": "k", "group_id": 1, "max_concurrency": 2})),
        )
        .await;
    assert_error(s, &v, 400, "INVALID_PARTNER_CUSTOMER_API_KEY");
    assert!(v["message"].as_str().unwrap().contains("at most 1"), "{v}");
}
