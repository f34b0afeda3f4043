//! The partner API's gate: authentication, scopes and roles, plain-text 404s for unknown paths,
//! another partner's objects, per-token rate limits, and failing closed while the operational store
//! is down.

use super::*;

#[tokio::test]
async fn authentication_scope_and_role() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (s, _, v, _) = api
        .call(Method::GET, None, "/partner/v1/me", None, None)
        .await;
    assert_error(s, &v, 401, "PARTNER_API_AUTHENTICATION_REQUIRED");
    for bad in ["nope", "tgp_dev_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"] {
        let (s, _, v, _) = api
            .call(Method::GET, Some(bad), "/partner/v1/me", None, None)
            .await;
        assert_error(s, &v, 401, "PARTNER_API_TOKEN_INVALID");
    }
    // A customer key or a billing token is not a partner token.
    let key = credentials::generate(credentials::Kind::CustomerKey, credentials::Env::Dev);
    let (s, _, v, _) = api
        .call(
            Method::GET,
            Some(key.expose()),
            "/partner/v1/me",
            None,
            None,
        )
        .await;
    assert_error(s, &v, 401, "PARTNER_API_TOKEN_INVALID");
    // A rotated token stops working.
    let rotated =
        admin_api::cli::partner_token(&api.state, owner.id, &["partner:write".to_string()])
            .await
            .unwrap();
    let (s, _, v, _) = api
        .call(
            Method::GET,
            Some(&owner.token),
            "/partner/v1/me",
            None,
            None,
        )
        .await;
    assert_error(s, &v, 401, "PARTNER_API_TOKEN_INVALID");
    let fresh = Partner {
        id: owner.id,
        token: rotated["token"].as_str().unwrap().into(),
    };
    let (s, v) = api.get(&fresh, "/me").await;
    assert_eq!(s, 200);
    assert_eq!(v["data"]["partner_id"], owner.id);
    assert_eq!(v["data"]["token"]["scopes"], json!(["partner:write"]));

    let reader = api.partner("owner", &["partner:read"], "100", "1.0").await;
    let (s, v) = api.get(&reader, "/funding").await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = api.create(&reader, "c1", 10.0, 1.5).await;
    assert_error(s, &v, 403, "PARTNER_API_SCOPE_REQUIRED");
    let viewer = api
        .partner("viewer", &["partner:write"], "100", "1.0")
        .await;
    let (s, v) = api.get(&viewer, "/me").await;
    assert_eq!(s, 200, "a viewer reads");
    let (s, v2) = api.create(&viewer, "c1", 10.0, 1.5).await;
    assert_error(s, &v2, 403, "PARTNER_ACCESS_REQUIRED");
    assert_eq!(api.count("customers").await, 0, "{v}");
}

#[tokio::test]
async fn unknown_partner_paths_are_plain_text_404() {
    let api = Api::start().await;
    let owner = api.owner("0").await;
    for path in [
        "/balance",
        "/customers",
        "/models",
        "/pricing",
        "/pricing/models",
        "/nope",
    ] {
        for token in [Some(owner.token.as_str()), None] {
            let (s, headers, _, text) = api
                .call(
                    Method::GET,
                    token,
                    &format!("/partner/v1{path}"),
                    None,
                    None,
                )
                .await;
            assert_eq!(s, 404, "{path}");
            assert_eq!(text, "page not found", "{path}");
            assert!(
                headers["content-type"]
                    .to_str()
                    .unwrap()
                    .starts_with("text/plain")
            );
        }
    }
}

#[tokio::test]
async fn another_partners_objects_are_not_found() {
    let api = Api::start().await;
    let a = api.owner("100").await;
    let b = api.owner("100").await;
    let (id, _) = api.active_customer(&a, "mine", 10.0, 1.0).await;
    for path in [
        format!("/customers/{id}"),
        format!("/customers/{id}/balance"),
        format!("/customers/{id}/groups"),
        format!("/customers/{id}/api-keys"),
        format!("/customers/{id}/usage"),
        "/customers/by-external-id/mine".into(),
        "/customers/abc".into(),
    ] {
        let (s, v) = api.get(&b, &path).await;
        assert_error(s, &v, 404, "PARTNER_CUSTOMER_NOT_FOUND");
    }
    let (s, v) = api
        .write(
            &b,
            Method::POST,
            &format!("/customers/{id}/allocations"),
            Some(&json!({"action": "increase", "amount_usd": 1})),
        )
        .await;
    assert_error(s, &v, 404, "PARTNER_CUSTOMER_NOT_FOUND");
    let (s, v) = api.get(&a, "/customers/by-external-id/bad%20id").await;
    assert_error(s, &v, 400, "INVALID_PARTNER_EXTERNAL_CUSTOMER_ID");
}

#[tokio::test]
async fn rate_limits_per_token_reads_and_writes() {
    let api = Api::start().await;
    let owner = api.owner("0").await;
    // The windows are fixed one-minute windows on the wall clock (partner::gate): 61 reads that
    // straddle a minute boundary would count in two windows. Start at a window's beginning, so the
    // whole scenario (seconds, even under a loaded suite) lies in one window.
    let started = fresh_window().await;
    for i in 0..60 {
        let (s, v) = api.get(&owner, "/me").await;
        assert_eq!(s, 200, "read {i}: {v}");
    }
    let (s, headers, v, _) = api
        .call(
            Method::GET,
            Some(&owner.token),
            "/partner/v1/me",
            None,
            None,
        )
        .await;
    assert_error(s, &v, 429, "PARTNER_RATE_LIMITED");
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    // Writes count separately.
    for i in 0..30 {
        let (s, v) = api
            .write(
                &owner,
                Method::POST,
                "/funding/top-up-sessions",
                Some(&json!({"amount_usd": 1})),
            )
            .await;
        assert_eq!(s, 200, "write {i}: {v}");
    }
    let (s, v) = api
        .write(
            &owner,
            Method::POST,
            "/funding/top-up-sessions",
            Some(&json!({"amount_usd": 1})),
        )
        .await;
    assert_error(s, &v, 429, "PARTNER_RATE_LIMITED");
    // A second live token of the same partner (both active at once) has its own budgets: the
    // exhausted first token stays limited while the second reads and writes.
    let second = Partner {
        id: owner.id,
        token: live_token(&api, owner.id).await,
    };
    let (s, v) = api.get(&second, "/me").await;
    assert_eq!(s, 200, "the second token's read budget is its own: {v}");
    let (s, v) = api
        .write(
            &second,
            Method::POST,
            "/funding/top-up-sessions",
            Some(&json!({"amount_usd": 1})),
        )
        .await;
    assert_eq!(s, 200, "the second token's write budget is its own: {v}");
    let (s, _, v, _) = api
        .call(
            Method::GET,
            Some(&owner.token),
            "/partner/v1/me",
            None,
            None,
        )
        .await;
    assert_error(s, &v, 429, "PARTNER_RATE_LIMITED");
    assert_eq!(
        window_index(),
        started,
        "the scenario must run within one rate-limit window"
    );
}

/// The index of the current rate-limit window on the wall clock (the memory store's clock).
fn window_index() -> u128 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    now.as_millis() / admin_api::partner::gate::WINDOW.as_millis()
}

/// Waits, when less than 50 s of the current window are left, for the next window to begin;
/// returns the index of the window the caller starts in.
async fn fresh_window() -> u128 {
    let window = admin_api::partner::gate::WINDOW.as_millis();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let left = window - now % window;
    if left < 50_000 {
        let wait = u64::try_from(left).unwrap() + 50;
        tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
    }
    window_index()
}

/// Mints another active token for `partner` next to the ones it has (as a dashboard issuing a
/// second integration token would), straight into the database.
async fn live_token(api: &Api, partner: i64) -> String {
    use sea_orm::ActiveModelTrait;
    let secret = credentials::generate(credentials::Kind::PartnerToken, api.state.env);
    entities::partner_tokens::ActiveModel {
        partner_id: sea_orm::Set(partner),
        token_hash: sea_orm::Set(api.state.hasher.hash(secret.expose())),
        preview: sea_orm::Set(credentials::preview(secret.expose())),
        scopes: sea_orm::Set("partner:read partner:write".into()),
        status: sea_orm::Set(entities::status::TokenStatus::Active),
        created_at: sea_orm::Set(chrono::Utc::now()),
        revoked_at: sea_orm::Set(None),
        ..Default::default()
    }
    .insert(&api.state.db)
    .await
    .unwrap();
    secret.expose().to_string()
}

/// Window counters that never answer, as when Redis is down.
struct DownCounters;

#[async_trait::async_trait]
impl opstate::WindowCounters for DownCounters {
    async fn hit(
        &self,
        _key: &str,
        _window: std::time::Duration,
    ) -> opstate::StoreResult<opstate::WindowHit> {
        Err(opstate::StoreError::Unavailable(
            "connection refused".into(),
        ))
    }
}

/// The operational store down: the partner API fails closed with 503 `SERVICE_UNAVAILABLE` (never
/// an authentication error, never unlimited), and nothing was written.
#[tokio::test]
async fn store_down_answers_503_service_unavailable() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let mut state = api.state.clone();
    state.stores.counters = Arc::new(DownCounters);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (_stop, rx) = tokio::sync::watch::channel(false);
    let mut tasks = JoinSet::new();
    tasks.spawn(async move { admin_api::serve(listener, state, rx).await.unwrap() });
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let reads = http
        .get(format!("{base}/partner/v1/me"))
        .bearer_auth(&owner.token);
    let writes = http
        .put(format!("{base}/partner/v1/customers/by-external-id/down"))
        .bearer_auth(&owner.token)
        .header("idempotency-key", "down-1")
        .json(&json!({"display_name": "Down", "contact_email": "o@down.example"}));
    for req in [reads, writes] {
        let r = req.send().await.unwrap();
        let status = r.status();
        let v: Value = r.json().await.unwrap();
        assert_error(status, &v, 503, "SERVICE_UNAVAILABLE");
    }
    // The write never ran: the customer does not exist through the healthy API.
    let (s, v) = api.get(&owner, "/customers/by-external-id/down").await;
    assert_error(s, &v, 404, "PARTNER_CUSTOMER_NOT_FOUND");
}

/// No partner token, billing token, customer key secret or invitation link appears in any log
/// line (debug level) or in an error body, after a partner flow that creates and uses each of them.
#[tokio::test]
async fn secrets_never_reach_logs_or_error_bodies() {
    testkit::captured_logs();
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (status, created) = api.create(&owner, "secrets", 5.0, 1.0).await;
    assert_eq!(status, 200, "{created}");
    let invite = created["data"]["activation"]["invite_url"]
        .as_str()
        .unwrap()
        .to_string();
    let (id, org) = api.active_customer(&owner, "secrets2", 5.0, 1.0).await;
    let (_, key) = api
        .write(
            &owner,
            Method::POST,
            &format!("/customers/{id}/api-keys"),
            Some(&json!({"name": "k", "group_id": 1})),
        )
        .await;
    let secret = key["data"]["key"].as_str().unwrap().to_string();
    let billing = api.billing_token(org).await;
    // Refusals that see each secret: a wrong route for the partner token, the billing token on the
    // partner API, the customer key as a partner token.
    let mut bodies = Vec::new();
    for token in [&owner.token, &billing, &secret] {
        let (_, _, _, text) = api
            .call(
                Method::GET,
                Some(token),
                "/partner/v1/customers/999",
                None,
                None,
            )
            .await;
        bodies.push(text);
        let resp = api
            .http
            .get(format!("{}/api/v1/organization/billing/balance", api.base))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        bodies.push(resp.text().await.unwrap());
    }
    let logs = testkit::captured_text();
    assert!(logs.contains("customer activated"), "the capture works");
    let token_of_invite = invite.rsplit('/').next().unwrap().to_string();
    for (what, s) in [
        ("partner token", &owner.token),
        ("billing token", &billing),
        ("customer key", &secret),
        ("invitation token", &token_of_invite),
    ] {
        assert!(!logs.contains(s.as_str()), "{what} in the logs");
        for body in &bodies {
            assert!(
                !body.contains(s.as_str()),
                "{what} in an error body: {body}"
            );
        }
    }
}
