//! The partner and billing APIs over HTTP: admin-api's router in-process on 127.0.0.1:0, a fresh
//! database per test (PostgreSQL when `DATABASE_URL` is set, else in-memory SQLite) and the
//! in-memory operational store. Every error reason of the spec is provoked here, with its status,
//! `reason`, `metadata` where the spec names it, and a check that nothing changed.

#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: failing loudly is the point"
)]

use admin_api::AppState;
use admin_api::caller::Caller;
use money::NanoUsd;
use opstate::Stores;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use settings::Settings;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::task::JoinSet;

/// An amount of nano-USD.
fn nano(nanos: i64) -> NanoUsd {
    NanoUsd::from_nanos(nanos)
}

const PEPPER: &str = "api-test-pepper-0123456789";

fn config(db_url: &str, outbox: &str) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:1"
public_base_url = "https://gw.example.test"
[admin]
embedded = true
[database]
url = "{db_url}"
[security]
key_pepper = "{PEPPER}"
[mail]
outbox_dir = "{outbox}"
[[models]]
id = "gpt-4o-mini"
family = "gpt-4o"
kind = "text"
input_per_mtok = 0.15
output_per_mtok = 0.6
[[models]]
id = "gpt-4o"
family = "gpt-4o"
kind = "text"
input_per_mtok = 2.5
output_per_mtok = 10
[[groups]]
id = 1
name = "Standard"
description = "text"
product_code = "std"
models = ["gpt-4o-mini"]
wholesale_rate_multiplier = 0.8
[[groups]]
id = 2
name = "Premium"
product_code = "pro"
models = ["gpt-4o"]
wholesale_rate_multiplier = 0.9
"#
    )
}

struct Api {
    base: String,
    state: AppState,
    http: reqwest::Client,
    outbox: std::path::PathBuf,
    idem: AtomicU64,
    _stop: tokio::sync::watch::Sender<bool>,
    _tasks: JoinSet<()>,
}

#[derive(Clone)]
struct Partner {
    id: i64,
    token: String,
}

impl Api {
    async fn start() -> Api {
        let outbox =
            std::env::temp_dir().join(format!("tollgate-outbox-{}", uuid::Uuid::new_v4().simple()));
        let text = config(
            &testkit::fresh_database_url().await,
            outbox.to_str().unwrap(),
        );
        let settings = Arc::new(Settings::parse(&text, &|_| None).unwrap());
        let state = admin_api::AppState::connect(settings, Stores::memory())
            .await
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, rx) = tokio::sync::watch::channel(false);
        let mut tasks = JoinSet::new();
        let s = state.clone();
        tasks.spawn(async move {
            admin_api::serve(listener, s, rx).await.unwrap();
        });
        Api {
            base,
            state,
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
            outbox,
            idem: AtomicU64::new(0),
            _stop: stop,
            _tasks: tasks,
        }
    }

    async fn partner(&self, role: &str, scopes: &[&str], funding: &str, min_rate: &str) -> Partner {
        let scopes: Vec<String> = scopes.iter().map(|s| s.to_string()).collect();
        let new =
            admin_api::cli::NewPartner::parse("Acme", min_rate, funding, role, &scopes).unwrap();
        let out = admin_api::cli::partner_create(&self.state, new)
            .await
            .unwrap();
        Partner {
            id: out["partner_id"].as_i64().unwrap(),
            token: out["token"].as_str().unwrap().to_string(),
        }
    }

    async fn owner(&self, funding: &str) -> Partner {
        self.partner("owner", &["partner:write"], funding, "1.0")
            .await
    }

    fn next_key(&self) -> String {
        format!("key-{}", self.idem.fetch_add(1, Ordering::SeqCst))
    }

    async fn call(
        &self,
        method: Method,
        token: Option<&str>,
        path: &str,
        body: Option<&Value>,
        idem: Option<&str>,
    ) -> (StatusCode, reqwest::header::HeaderMap, Value, String) {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(k) = idem {
            req = req.header("idempotency-key", k);
        }
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let text = resp.text().await.unwrap();
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        (status, headers, json, text)
    }

    async fn get(&self, p: &Partner, path: &str) -> (StatusCode, Value) {
        let (s, _, v, _) = self
            .call(
                Method::GET,
                Some(&p.token),
                &format!("/partner/v1{path}"),
                None,
                None,
            )
            .await;
        (s, v)
    }

    async fn write(
        &self,
        p: &Partner,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> (StatusCode, Value) {
        let key = self.next_key();
        let (s, _, v, _) = self
            .call(
                method,
                Some(&p.token),
                &format!("/partner/v1{path}"),
                body,
                Some(&key),
            )
            .await;
        (s, v)
    }

    async fn create(
        &self,
        p: &Partner,
        external: &str,
        allocation: f64,
        rate: f64,
    ) -> (StatusCode, Value) {
        let email = format!("owner@{external}.example");
        self.write(
            p,
            Method::PUT,
            &format!("/customers/by-external-id/{external}"),
            Some(&json!({
                "name": format!("Org {external}"),
                "contact_email": email,
                "initial_allocation_usd": allocation,
                "retail_rate_multiplier": rate,
            })),
        )
        .await
    }

    /// Creates and activates a customer; returns its id and organization id.
    async fn active_customer(
        &self,
        p: &Partner,
        external: &str,
        allocation: f64,
        rate: f64,
    ) -> (i64, i64) {
        let (status, body) = self.create(p, external, allocation, rate).await;
        assert_eq!(status, 200, "{body}");
        let url = body["data"]["activation"]["invite_url"]
            .as_str()
            .unwrap()
            .to_string();
        let token = url.rsplit('/').next().unwrap();
        let (s, _, v, _) = self
            .call(
                Method::POST,
                None,
                &format!("/invitations/{token}/accept"),
                Some(&json!({"email": format!("owner@{external}.example")})),
                None,
            )
            .await;
        assert_eq!(s, 200, "{v}");
        (
            body["data"]["customer"]["id"].as_i64().unwrap(),
            v["data"]["organization_id"].as_i64().unwrap(),
        )
    }

    async fn funding(&self, p: &Partner) -> Value {
        let (s, v) = self.get(p, "/funding").await;
        assert_eq!(s, 200);
        v["data"].clone()
    }

    async fn count(&self, table: &str) -> i64 {
        use sea_orm::{ConnectionTrait, Statement};
        let row = self
            .state
            .db
            .query_one_raw(Statement::from_string(
                self.state.db.get_database_backend(),
                format!("SELECT CAST(COUNT(*) AS BIGINT) AS n FROM {table}"),
            ))
            .await
            .unwrap()
            .unwrap();
        row.try_get::<i64>("", "n").unwrap()
    }
}

fn assert_error(status: StatusCode, body: &Value, expected_status: u16, reason: &str) {
    assert_eq!(status.as_u16(), expected_status, "{body}");
    assert_eq!(body["code"], expected_status, "{body}");
    assert_eq!(body["reason"], reason, "{body}");
    assert!(body["message"].is_string(), "{body}");
    assert!(body["metadata"].is_object(), "{body}");
}

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
async fn create_customer_validation_errors_create_nothing() {
    let api = Api::start().await;
    let owner = api
        .partner("owner", &["partner:write"], "1000", "1.1")
        .await;
    let good = json!({"name": "Globex", "contact_email": "ann@globex.example", "initial_allocation_usd": 10, "retail_rate_multiplier": 1.5});
    let with = |k: &str, v: Value| {
        let mut b = good.clone();
        if v.is_null() {
            b.as_object_mut().unwrap().remove(k);
        } else {
            b[k] = v;
        }
        b
    };
    let long = "x".repeat(129);
    for external in ["a%2Fb", "sp%20ace", long.as_str(), "caf%C3%A9", "a..b%2F"] {
        let (s, v) = api
            .write(
                &owner,
                Method::PUT,
                &format!("/customers/by-external-id/{external}"),
                Some(&good),
            )
            .await;
        assert_error(s, &v, 400, "INVALID_PARTNER_EXTERNAL_CUSTOMER_ID");
    }
    let cases: Vec<(Value, &str)> = vec![
        (with("name", Value::Null), "INVALID_PARTNER_CUSTOMER"),
        (with("name", json!("!!!")), "INVALID_PARTNER_CUSTOMER"),
        (with("status", json!("active")), "INVALID_PARTNER_CUSTOMER"),
        (
            with("contact_email", json!("not-an-email")),
            "INVALID_PARTNER_CUSTOMER_CONTACT",
        ),
        (
            with("contact_email", Value::Null),
            "INVALID_PARTNER_CUSTOMER_CONTACT",
        ),
        (
            with("initial_allocation_usd", json!(-0.01)),
            "INVALID_PARTNER_INITIAL_ALLOCATION",
        ),
        (
            with("initial_allocation_usd", json!("10")),
            "INVALID_PARTNER_INITIAL_ALLOCATION",
        ),
        (
            with("retail_rate_multiplier", Value::Null),
            "INVALID_PARTNER_RETAIL_RATE",
        ),
        (
            with("retail_rate_multiplier", json!(0)),
            "INVALID_PARTNER_RETAIL_RATE",
        ),
        (
            with("retail_rate_multiplier", json!(-1)),
            "INVALID_PARTNER_RETAIL_RATE",
        ),
        (
            with("retail_rate_multiplier", json!("1.5")),
            "INVALID_PARTNER_RETAIL_RATE",
        ),
        (
            with("retail_rate_multiplier", json!(1.05)),
            "PARTNER_RETAIL_RATE_BELOW_FLOOR",
        ),
    ];
    for (body, reason) in cases {
        let (s, v) = api
            .write(
                &owner,
                Method::PUT,
                "/customers/by-external-id/ok-id",
                Some(&body),
            )
            .await;
        assert_error(s, &v, 400, reason);
        if reason == "PARTNER_RETAIL_RATE_BELOW_FLOOR" {
            assert_eq!(v["metadata"]["retail_floor_rate_multiplier"], 1.1);
        }
    }
    let ok_id = "A-z_0.9:".to_string() + &"x".repeat(120);
    assert_eq!(ok_id.len(), 128);
    let f = api.funding(&owner).await;
    assert_eq!(f["available_funding_usd"], 1000);
    assert_eq!(f["reserved_allocations_usd"], 0);
    assert_eq!(api.count("customers").await, 0);
    assert_eq!(api.count("organizations").await, 0);
    assert!(
        std::fs::read_dir(&api.outbox)
            .map(|d| d.count())
            .unwrap_or(0)
            == 0,
        "no email was sent"
    );
    let (s, v) = api
        .write(
            &owner,
            Method::PUT,
            &format!("/customers/by-external-id/{ok_id}"),
            Some(&good),
        )
        .await;
    assert_eq!(
        s, 200,
        "a 128-character id of the allowed characters is fine: {v}"
    );
}

#[tokio::test]
async fn create_customer_business_errors() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    // 200 USD at retail 1.0 over wholesale max 0.9 reserves 180 > 100.
    let (s, v) = api.create(&owner, "big", 200.0, 1.0).await;
    assert_error(s, &v, 403, "PARTNER_FUNDING_INSUFFICIENT");
    assert_eq!(
        v["metadata"],
        json!({"available_funding_usd": 100, "required_usd": 180, "shortfall_usd": 80, "next_action": "top_up_partner_balance"})
    );
    assert_eq!(api.count("customers").await, 0);
    assert_eq!(api.funding(&owner).await["available_funding_usd"], 100);
    // Never for an unfunded customer, even without funding.
    let broke = api.owner("0").await;
    let (s, v) = api.create(&broke, "free", 0.0, 1.0).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["data"]["created"], true);
    // The same external id again: the existing customer, created false, no invite_url, no email.
    let mails = std::fs::read_dir(&api.outbox).unwrap().count();
    let (s, again) = api.create(&broke, "free", 0.0, 1.0).await;
    assert_eq!(s, 200);
    assert_eq!(again["data"]["created"], false);
    assert!(again["data"]["activation"].get("invite_url").is_none());
    assert_eq!(std::fs::read_dir(&api.outbox).unwrap().count(), mails);
    // The same external id for a different contact: conflict.
    let (s, v) = api
        .write(&broke, Method::PUT, "/customers/by-external-id/free", Some(&json!({"name": "Other", "contact_email": "x@other.example", "initial_allocation_usd": 0, "retail_rate_multiplier": 1.0})))
        .await;
    assert_error(s, &v, 409, "PARTNER_EXTERNAL_CUSTOMER_CONFLICT");
    // A taken slug (organization slugs are global).
    let (s, v) = api
        .write(&owner, Method::PUT, "/customers/by-external-id/other", Some(&json!({"name": "Org free", "contact_email": "y@y.example", "initial_allocation_usd": 0, "retail_rate_multiplier": 1.0})))
        .await;
    assert_error(s, &v, 409, "PARTNER_CUSTOMER_SLUG_EXISTS");
    assert_eq!(api.count("customers").await, 1);
}

#[tokio::test]
async fn lifecycle_pending_then_active() {
    let api = Api::start().await;
    let owner = api.owner("1000").await;
    let (s, created) = api.create(&owner, "acme-1", 100.0, 1.25).await;
    assert_eq!(s, 200, "{created}");
    let d = &created["data"];
    assert_eq!(d["created"], true);
    assert_eq!(d["status"], "pending_activation");
    assert_eq!(d["external_customer_id"], "acme-1");
    assert_eq!(d["customer"]["organization_slug"], "org-acme-1");
    assert_eq!(d["customer"]["partner_allocation_cap_usd"], 100);
    assert_eq!(d["activation"]["invitation_status"], "pending");
    assert!(d["activation_hint"].is_string());
    let invite = d["activation"]["invite_url"].as_str().unwrap();
    assert!(
        invite.starts_with("https://gw.example.test/invitations/"),
        "{invite}"
    );
    // 100 × 0.9 / 1.25 = 72 reserved.
    let f = api.funding(&owner).await;
    assert_eq!(
        (
            f["available_funding_usd"].clone(),
            f["reserved_allocations_usd"].clone()
        ),
        (json!(928), json!(72))
    );
    // The invitation email went out with the link.
    let mail: String = std::fs::read_dir(&api.outbox)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect();
    let unfolded = mail.replace("=\r\n", "").replace("=\n", "");
    assert!(
        unfolded.contains(invite),
        "the email carries the invite link"
    );
    let id = d["customer"]["id"].as_i64().unwrap();

    // Pending: every route that needs an active customer answers 409 with the spec's metadata.
    for (method, path, body) in [
        (Method::GET, format!("/customers/{id}/balance"), None),
        (
            Method::POST,
            format!("/customers/{id}/allocations"),
            Some(json!({"action": "increase", "amount_usd": 1})),
        ),
        (Method::GET, format!("/customers/{id}/groups"), None),
        (
            Method::PUT,
            format!("/customers/{id}/groups/1/rate"),
            Some(json!({"retail_rate_multiplier": 2})),
        ),
        (
            Method::POST,
            format!("/customers/{id}/api-keys"),
            Some(json!({"name": "k", "group_id": 1})),
        ),
        (Method::GET, format!("/customers/{id}/usage"), None),
    ] {
        let (s, v) = if method == Method::GET {
            api.get(&owner, &path).await
        } else {
            api.write(&owner, method, &path, body.as_ref()).await
        };
        assert_error(s, &v, 409, "PARTNER_CUSTOMER_PENDING_ACTIVATION");
        assert_eq!(v["metadata"]["invited_email"], "owner@acme-1.example");
        assert_eq!(v["metadata"]["invitation_status"], "pending");
        assert_eq!(
            v["metadata"]["invitation_expires_at"],
            d["activation"]["invitation_expires_at"]
        );
        assert_eq!(v["metadata"]["next_action"], "accept_invitation");
    }
    // Reads by id and external id omit created and invite_url.
    for path in [
        format!("/customers/{id}"),
        "/customers/by-external-id/acme-1".to_string(),
    ] {
        let (s, v) = api.get(&owner, &path).await;
        assert_eq!(s, 200);
        assert!(v["data"].get("created").is_none());
        assert!(v["data"]["activation"].get("invite_url").is_none());
    }
    // The invitation page, a wrong email, then the right one.
    let token = invite.rsplit('/').next().unwrap();
    let (s, _, _, html) = api
        .call(
            Method::GET,
            None,
            &format!("/invitations/{token}"),
            None,
            None,
        )
        .await;
    assert_eq!(s, 200);
    assert!(html.contains("<form") && html.contains("Org acme-1"));
    let (s, _, v, _) = api
        .call(
            Method::POST,
            None,
            &format!("/invitations/{token}/accept"),
            Some(&json!({"email": "eve@evil.example"})),
            None,
        )
        .await;
    assert_eq!(s, 403, "{v}");
    let resp = api
        .http
        .post(format!("{}/invitations/{token}/accept", api.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body("email=Owner%40acme-1.example")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().contains("active"));
    let (s, _, _, _) = api
        .call(
            Method::POST,
            None,
            &format!("/invitations/{token}/accept"),
            Some(&json!({"email": "owner@acme-1.example"})),
            None,
        )
        .await;
    assert_eq!(s, 409, "accepting twice is refused");

    let (s, v) = api.get(&owner, &format!("/customers/{id}/balance")).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(
        v["data"]["organization_balance_usd"], 100,
        "the balance opens with the allocation"
    );
    let (_, v) = api.get(&owner, &format!("/customers/{id}")).await;
    assert_eq!(v["data"]["status"], "active");
    assert_eq!(v["data"]["activation"]["invitation_status"], "accepted");
}

#[tokio::test]
async fn expired_invitation_cannot_activate() {
    use sea_orm::{ConnectionTrait, Statement};
    let api = Api::start().await;
    let owner = api.owner("0").await;
    let (_, created) = api.create(&owner, "late", 0.0, 1.0).await;
    let token = created["data"]["activation"]["invite_url"]
        .as_str()
        .unwrap()
        .rsplit('/')
        .next()
        .unwrap()
        .to_string();
    // Fifteen days later.
    api.state
        .db
        .execute_raw(Statement::from_string(
            api.state.db.get_database_backend(),
            "UPDATE invitations SET expires_at = created_at - INTERVAL '1 day'".replace(
                "created_at - INTERVAL '1 day'",
                if api.state.db.get_database_backend() == sea_orm::DbBackend::Sqlite {
                    "'2000-01-01T00:00:00+00:00'"
                } else {
                    "created_at - INTERVAL '1 day'"
                },
            ),
        ))
        .await
        .unwrap();
    let (s, _, v, _) = api
        .call(
            Method::POST,
            None,
            &format!("/invitations/{token}/accept"),
            Some(&json!({"email": "owner@late.example"})),
            None,
        )
        .await;
    assert_eq!(s, 410, "{v}");
    let id = created["data"]["customer"]["id"].as_i64().unwrap();
    let (s, v) = api.get(&owner, &format!("/customers/{id}/groups")).await;
    assert_error(s, &v, 409, "PARTNER_CUSTOMER_PENDING_ACTIVATION");
    assert_eq!(v["metadata"]["invitation_status"], "expired");
    let (_, v) = api.get(&owner, &format!("/customers/{id}")).await;
    assert_eq!(v["data"]["status"], "pending_activation");
}

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
async fn usage_routes_and_windows() {
    let api = Api::start().await;
    let owner = api.owner("0").await;
    let (id, _) = api.active_customer(&owner, "use", 0.0, 1.0).await;
    let (s, v) = api.get(&owner, &format!("/customers/{id}/usage")).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["data"]["granularity"], "day");
    let buckets = v["data"]["buckets"].as_array().unwrap();
    assert!((7..=8).contains(&buckets.len()), "{}", buckets.len());
    assert_eq!(buckets[0]["burn_usd"], 0);
    for key in ["requests", "total_tokens", "active_api_keys"] {
        assert_eq!(buckets[0][key], 0, "{key}");
    }
    let (s, v) = api
        .get(&owner, &format!("/customers/{id}/usage?granularity=hour"))
        .await;
    assert_eq!(s, 200);
    assert!((24..=25).contains(&v["data"]["buckets"].as_array().unwrap().len()));
    let (s, v) = api
        .get(&owner, &format!("/customers/{id}/usage?granularity=minute"))
        .await;
    assert_error(s, &v, 400, "INVALID_PARTNER_USAGE_GRANULARITY");
    for q in [
        "start_time=yesterday",
        "granularity=hour&start_time=2020-01-01T00:00:00Z&end_time=2020-01-09T00:00:00Z",
        "start_time=2026-02-01T00:00:00Z&end_time=2026-01-01T00:00:00Z",
    ] {
        let (s, v) = api.get(&owner, &format!("/customers/{id}/usage?{q}")).await;
        assert_error(s, &v, 400, "INVALID_PARTNER_USAGE_WINDOW");
    }
    let (s, v) = api.get(&owner, "/customers/999/usage").await;
    assert_error(s, &v, 404, "PARTNER_CUSTOMER_NOT_FOUND");
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
async fn rate_limits_per_token_reads_and_writes() {
    let api = Api::start().await;
    let owner = api.owner("0").await;
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
    // Another token of the same partner has its own budget.
    let second =
        admin_api::cli::partner_token(&api.state, owner.id, &["partner:write".into()]).await;
    // (Rotation revokes the first token; a fresh partner shows independence without rotation.)
    let other = api.owner("0").await;
    let (s, _) = api.get(&other, "/me").await;
    assert_eq!(s, 200);
    let rotated = Partner {
        id: owner.id,
        token: second.unwrap()["token"].as_str().unwrap().into(),
    };
    let (s, _) = api.get(&rotated, "/me").await;
    assert_eq!(s, 200, "a new token starts with a fresh window");
}

#[tokio::test]
async fn billing_api_tokens_balance_and_daily_usage() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (_, org) = api.active_customer(&owner, "bill", 40.0, 1.0).await;
    let token = admin_api::cli::billing_token(&api.state, "create", org)
        .await
        .unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
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
    let token = admin_api::cli::billing_token(&api.state, "create", demo.organization_id)
        .await
        .unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
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

#[test]
fn caller_type_is_public() {
    // The gate's caller type is what services take; keep it constructible for service-level tests.
    let _ = std::mem::size_of::<Caller>();
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
    let token = admin_api::cli::billing_token(&api.state, "create", org)
        .await
        .unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
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

mod funding_properties {
    //! Random sequences of create / activate / allocate / rate-change keep partner funding sound:
    //! available ≥ 0, reserved = Σ allocation × highest wholesale/retail ratio, funding conserved,
    //! and the ledger balanced.

    use super::*;
    use admin_api::db::begin;
    use admin_api::services::{customers, funding};
    use money::{NanoUsd, RateMultiplier};
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Create {
            allocation_usd: u32,
            rate_tenths: u8,
        },
        Activate(usize),
        Increase(usize, u32),
        Decrease(usize, u32),
        SetLimit(usize, u32),
        Rate(usize, i64, u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u32..400, 10u8..30).prop_map(|(a, r)| Op::Create {
                allocation_usd: a,
                rate_tenths: r
            }),
            (0usize..6).prop_map(Op::Activate),
            (0usize..6, 1u32..300).prop_map(|(i, a)| Op::Increase(i, a)),
            (0usize..6, 1u32..300).prop_map(|(i, a)| Op::Decrease(i, a)),
            (0usize..6, 0u32..400).prop_map(|(i, a)| Op::SetLimit(i, a)),
            (0usize..6, 1i64..3, 8u8..30).prop_map(|(i, g, r)| Op::Rate(i, g, r)),
        ]
    }

    const FUNDING_USD: i64 = 500;

    async fn check(api: &Api, partner: &Partner, caller: &Caller, step: usize) {
        use sea_orm::EntityTrait;
        let db = &api.state.db;
        let available = admin_api::ledger::balance(
            db,
            &admin_api::ledger::AccountRef::partner_available(partner.id).code,
        )
        .await
        .unwrap();
        let reserved = admin_api::ledger::partner_total(
            db,
            partner.id,
            admin_api::ledger::AccountKind::PartnerReserved,
        )
        .await
        .unwrap();
        assert!(
            !available.is_negative(),
            "step {step}: available {available:?} < 0"
        );
        assert_eq!(
            available.nanos() + reserved.nanos(),
            FUNDING_USD * 1_000_000_000,
            "step {step}: funding conserved"
        );
        let mut formula = 0i64;
        for c in entities::customers::Entity::find().all(db).await.unwrap() {
            let pairs = customers::price_pairs(db, &api.state, c.id).await.unwrap();
            formula += admin_api::pricing::reservation(
                NanoUsd::from_nanos(c.allocation_cap_nanos),
                &pairs,
            )
            .unwrap()
            .nanos();
        }
        assert_eq!(
            reserved.nanos(),
            formula,
            "step {step}: reserved equals the formula"
        );
        assert_eq!(
            admin_api::ledger::imbalance(db).await.unwrap(),
            NanoUsd::ZERO,
            "step {step}: ledger balanced"
        );
        let _ = caller;
    }

    async fn run(ops: Vec<Op>) {
        let api = Api::start().await;
        let partner = api.owner(&FUNDING_USD.to_string()).await;
        let caller = Caller {
            partner_id: partner.id,
            partner_name: "Acme".into(),
            token_id: 1,
            token_preview: String::new(),
            scopes: vec!["partner:write".into()],
            role: "owner".into(),
            min_rate: RateMultiplier::ONE,
        };
        let mut ids: Vec<(i64, String)> = Vec::new();
        for (step, op) in ops.into_iter().enumerate() {
            let reference = format!("prop:{step}");
            let txn = begin(&api.state.db).await.unwrap();
            let pick = |i: usize| ids.get(i % ids.len().max(1)).cloned();
            let result: Result<(), admin_api::error::ApiError> = match op {
                Op::Create {
                    allocation_usd,
                    rate_tenths,
                } => {
                    let new = customers::NewCustomer {
                        name: format!("Org {step}"),
                        slug: format!("org-{step}"),
                        contact_email: format!("o{step}@x.example"),
                        billing_email: None,
                        initial_allocation: NanoUsd::from_nanos(
                            i64::from(allocation_usd) * 1_000_000_000,
                        ),
                        retail_rate: RateMultiplier::from_ppm(i64::from(rate_tenths) * 100_000)
                            .unwrap(),
                    };
                    customers::create(
                        &txn,
                        &api.state,
                        &caller,
                        &reference,
                        &format!("ext-{step}"),
                        new,
                    )
                    .await
                    .map(|s| {
                        ids.push((s.data.customer.id, format!("o{step}@x.example")));
                    })
                }
                Op::Activate(i) => {
                    txn.rollback().await.unwrap();
                    if let Some((id, email)) = pick(i) {
                        use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
                        let inv = entities::invitations::Entity::find()
                            .filter(entities::invitations::Column::CustomerId.eq(id))
                            .one(&api.state.db)
                            .await
                            .unwrap()
                            .unwrap();
                        // Accept through the service with a token we know the hash of: re-key it.
                        let token = format!("prop-token-{id}");
                        let mut am: entities::invitations::ActiveModel = inv.into();
                        am.token_hash = sea_orm::Set(api.state.hasher.hash(&token));
                        sea_orm::ActiveModelTrait::update(am, &api.state.db)
                            .await
                            .unwrap();
                        let _ =
                            admin_api::services::invitations::accept(&api.state, &token, &email)
                                .await;
                    }
                    check(&api, &partner, &caller, step).await;
                    continue;
                }
                Op::Increase(i, a) | Op::Decrease(i, a) | Op::SetLimit(i, a) => match pick(i) {
                    Some((id, _)) => {
                        let amount = NanoUsd::from_nanos(i64::from(a) * 1_000_000_000);
                        let change = match op {
                            Op::Increase(..) => funding::Allocation::Increase(amount),
                            Op::Decrease(..) => funding::Allocation::Decrease(amount),
                            _ => funding::Allocation::SetLimit(amount),
                        };
                        funding::allocate(
                            &txn,
                            &api.state,
                            &caller,
                            &reference,
                            &id.to_string(),
                            change,
                        )
                        .await
                        .map(|_| ())
                    }
                    None => Ok(()),
                },
                Op::Rate(i, group, tenths) => match pick(i) {
                    Some((id, _)) => funding::set_rate(
                        &txn,
                        &api.state,
                        &caller,
                        &reference,
                        &id.to_string(),
                        &group.to_string(),
                        money::RateMultiplier::from_ppm(i64::from(tenths) * 100_000).unwrap(),
                    )
                    .await
                    .map(|_| ()),
                    None => Ok(()),
                },
            };
            match result {
                Ok(()) => txn.commit().await.unwrap(),
                Err(_) => txn.rollback().await.unwrap(),
            }
            check(&api, &partner, &caller, step).await;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24), .. ProptestConfig::default() })]
        #[test]
        fn funding_invariants_hold(ops in proptest::collection::vec(op(), 1..30)) {
            tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap().block_on(run(ops));
        }
    }
}

/// The properties and required names of a schema, merged through `allOf` parts and `$ref`s.
fn schema_fields(doc: &Value, schema: &Value) -> (serde_json::Map<String, Value>, Vec<String>) {
    if let Some(r) = schema["$ref"].as_str() {
        let name = r.rsplit('/').next().unwrap();
        return schema_fields(doc, &doc["components"]["schemas"][name]);
    }
    let mut props = schema["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut required: Vec<String> = schema["required"]
        .as_array()
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    for part in schema["allOf"].as_array().into_iter().flatten() {
        let (p, r) = schema_fields(doc, part);
        props.extend(p);
        required.extend(r);
    }
    (props, required)
}

/// Every property of `value` is documented in schema `name` and every required documented
/// property is present, recursively through `$ref`s, arrays and `allOf` compositions (a DTO that
/// flattens another).
fn assert_documented(doc: &Value, name: &str, value: &Value) {
    let schema = &doc["components"]["schemas"][name];
    assert!(schema.is_object(), "schema {name} missing");
    let (props, required) = schema_fields(doc, schema);
    assert!(!props.is_empty(), "{name} has no properties");
    let props = &props;
    let obj = value
        .as_object()
        .unwrap_or_else(|| panic!("{name}: not an object: {value}"));
    for key in obj.keys() {
        assert!(
            props.contains_key(key),
            "{name}: served field {key:?} is not documented"
        );
    }
    for key in &required {
        assert!(
            obj.contains_key(key.as_str()),
            "{name}: documented required field {key:?} is not served"
        );
    }
    for (key, prop) in props {
        let Some(v) = obj.get(key) else { continue };
        let reference = prop["$ref"]
            .as_str()
            .or_else(|| prop["oneOf"][0]["$ref"].as_str());
        if let Some(r) = reference {
            assert_documented(doc, r.rsplit('/').next().unwrap(), v);
        } else if let (Some(r), Some(items)) = (prop["items"]["$ref"].as_str(), v.as_array()) {
            for item in items {
                assert_documented(doc, r.rsplit('/').next().unwrap(), item);
            }
        }
    }
}

#[tokio::test]
async fn openapi_documents_every_route_and_field() {
    let api = Api::start().await;
    let (s, _, doc, _) = api
        .call(Method::GET, None, "/partner/v1/openapi.json", None, None)
        .await;
    assert_eq!(s, 200);
    let mut documented: Vec<String> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, ops)| {
            ops.as_object()
                .unwrap()
                .keys()
                .map(move |m| format!("{} {path}", m.to_uppercase()))
        })
        .collect();
    documented.sort();
    let mut expected: Vec<String> = [
        "GET /partner/v1/me",
        "GET /partner/v1/funding",
        "POST /partner/v1/funding/top-up-sessions",
        "PUT /partner/v1/customers/by-external-id/{external_customer_id}",
        "GET /partner/v1/customers/by-external-id/{external_customer_id}",
        "GET /partner/v1/customers/{customer_id}",
        "GET /partner/v1/customers/{customer_id}/balance",
        "POST /partner/v1/customers/{customer_id}/allocations",
        "GET /partner/v1/customers/{customer_id}/groups",
        "PUT /partner/v1/customers/{customer_id}/groups/{group_id}/rate",
        "GET /partner/v1/customers/{customer_id}/api-keys",
        "POST /partner/v1/customers/{customer_id}/api-keys",
        "DELETE /partner/v1/customers/{customer_id}/api-keys/{api_key_id}",
        "GET /partner/v1/customers/{customer_id}/usage",
        "GET /partner/v1/customers/{customer_id}/api-keys/{api_key_id}/usage",
        "GET /api/v1/organization/billing/balance",
        "GET /api/v1/organization/billing/usage/daily",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    expected.sort();
    assert_eq!(documented, expected);
    assert!(doc["components"]["securitySchemes"]["partner_token"].is_object());

    // Served responses match their schemas.
    let owner = api.owner("100").await;
    let (_, me) = api.get(&owner, "/me").await;
    assert_documented(&doc, "PartnerIdentity", &me["data"]);
    assert_documented(&doc, "Funding", &api.funding(&owner).await);
    let (_, created) = api.create(&owner, "doc", 10.0, 1.0).await;
    assert_documented(&doc, "CustomerData", &created["data"]);
    let (id, org) = api.active_customer(&owner, "doc2", 10.0, 1.0).await;
    let (_, read) = api.get(&owner, &format!("/customers/{id}")).await;
    assert_documented(&doc, "CustomerData", &read["data"]);
    let (_, balance) = api.get(&owner, &format!("/customers/{id}/balance")).await;
    assert_documented(&doc, "CustomerBalance", &balance["data"]);
    let (_, groups) = api.get(&owner, &format!("/customers/{id}/groups")).await;
    assert_documented(&doc, "Group", &groups["data"][0]);
    let (_, key) = api
        .write(
            &owner,
            Method::POST,
            &format!("/customers/{id}/api-keys"),
            Some(&json!({"name": "k", "group_id": 1})),
        )
        .await;
    assert_documented(&doc, "KeyPreview", &key["data"]);
    let (_, usage) = api.get(&owner, &format!("/customers/{id}/usage")).await;
    assert_documented(&doc, "UsageBuckets", &usage["data"]);
    let (_, top_up) = api
        .write(
            &owner,
            Method::POST,
            "/funding/top-up-sessions",
            Some(&json!({"amount_usd": 3})),
        )
        .await;
    assert_documented(&doc, "TopUpSession", &top_up["data"]);
    let (_, err) = api.get(&owner, "/customers/999").await;
    assert_documented(&doc, "ErrorEnvelope", &err);
    let token = admin_api::cli::billing_token(&api.state, "create", org)
        .await
        .unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
    for (path, schema) in [
        ("balance", "OrganizationBalance"),
        ("usage/daily", "DailyUsage"),
    ] {
        let v: Value = api
            .http
            .get(format!("{}/api/v1/organization/billing/{path}", api.base))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_documented(&doc, schema, &v["data"]);
    }
}

/// A one-message SMTP server on loopback: returns the DATA it received.
async fn fake_smtp() -> (u16, tokio::task::JoinHandle<String>) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    #[allow(
        clippy::disallowed_methods,
        reason = "test server owned by its JoinHandle, awaited by the test"
    )]
    let handle = tokio::spawn(async move {
        let (sock, _) = listener.accept().await.unwrap();
        let (r, mut w) = sock.into_split();
        let mut lines = BufReader::new(r).lines();
        w.write_all(b"220 fake ESMTP\r\n").await.unwrap();
        let mut data = String::new();
        let mut in_data = false;
        while let Ok(Some(line)) = lines.next_line().await {
            if in_data {
                if line == "." {
                    w.write_all(b"250 queued\r\n").await.unwrap();
                    // One message is all this server takes (a pooled client may never QUIT).
                    break;
                } else {
                    data.push_str(&line);
                    data.push('\n');
                }
                continue;
            }
            let cmd = line.to_ascii_uppercase();
            let reply: &[u8] = if cmd.starts_with("EHLO") || cmd.starts_with("HELO") {
                b"250-fake\r\n250 OK\r\n"
            } else if cmd.starts_with("DATA") {
                in_data = true;
                b"354 go ahead\r\n"
            } else if cmd.starts_with("QUIT") {
                w.write_all(b"221 bye\r\n").await.unwrap();
                break;
            } else {
                b"250 OK\r\n"
            };
            w.write_all(reply).await.unwrap();
        }
        data
    });
    (port, handle)
}

#[tokio::test]
async fn invitation_email_goes_out_over_smtp() {
    let (port, server) = fake_smtp().await;
    let mail = settings::Mail {
        smtp_url: Some(format!("smtp://127.0.0.1:{port}")),
        from: "Tollgate <no-reply@gw.example.test>".into(),
        outbox_dir: std::env::temp_dir(),
    };
    let mailer = admin_api::mail::Mailer::from_settings(&mail).unwrap();
    mailer
        .send(
            "ann@globex.example",
            "Join Globex",
            "Accept: https://gw.example.test/invitations/abc".into(),
        )
        .await
        .unwrap();
    let data = server.await.unwrap();
    assert!(data.contains("To: ann@globex.example"), "{data}");
    assert!(data.contains("Subject: Join Globex"), "{data}");
    assert!(
        data.contains("https://gw.example.test/invitations/abc"),
        "{data}"
    );
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
    let token = admin_api::cli::billing_token(&api.state, "create", org)
        .await
        .unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
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

#[tokio::test]
async fn lost_wallet_mirror_answers_503_until_reloaded() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (_, org) = api.active_customer(&owner, "lost", 12.0, 1.0).await;
    let token = admin_api::cli::billing_token(&api.state, "create", org)
        .await
        .unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
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

#[tokio::test]
async fn a_dead_gateways_hold_is_settled_once_at_its_estimate() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (_, org) = api.active_customer(&owner, "crash", 10.0, 1.0).await;
    let wallets = api.state.stores.wallets.clone();
    let meta = opstate::HoldMeta {
        key_id: 5,
        group_id: 1,
        route: "chat_completions".into(),
        model_requested: "gpt-4o-mini".into(),
        model_served: "gpt-4o-mini".into(),
        stream: true,
        started_at_ms: 1_700_000_000_000,
        input_tokens: 1_000,
        input_cost_nanos: nano(150_000),
        audio_seconds: 0,
    };
    // A gateway reserved, then died: its hold is past its deadline at once.
    wallets
        .reserve(
            org,
            "req-dead",
            nano(2_000_000),
            0,
            &serde_json::to_string(&meta).unwrap(),
        )
        .await
        .unwrap();
    wallets
        .reserve(org, "req-alive", nano(2_000_000), 600_000, "")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    assert_eq!(
        admin_api::workers::reconciler::reconcile_once(&api.state)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        admin_api::workers::reconciler::reconcile_once(&api.state)
            .await
            .unwrap(),
        0,
        "at most once"
    );
    let snap = wallets.snapshot(org).await.unwrap().unwrap();
    assert_eq!(
        (snap.reserved, snap.pending),
        (nano(2_000_000), nano(150_000)),
        "the live hold stays"
    );
    // The late settlement of the dead gateway finds nothing.
    assert_eq!(
        wallets.settle(org, "req-dead", nano(999)).await.unwrap(),
        opstate::Settlement::Unknown
    );
    // The settler books the estimate like any call.
    assert_eq!(
        admin_api::workers::settler::drain_once(&api.state, "t")
            .await
            .unwrap(),
        1
    );
    use sea_orm::EntityTrait;
    let records = entities::usage_records::Entity::find()
        .all(&api.state.db)
        .await
        .unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(
        (records[0].measurement.as_str(), records[0].charged_nanos),
        ("estimated", 150_000)
    );
    let book = admin_api::ledger::balance(
        &api.state.db,
        &admin_api::ledger::AccountRef::org_wallet(org).code,
    )
    .await
    .unwrap();
    assert_eq!(book, nano(10_000_000_000 - 150_000));
    let snap = wallets.snapshot(org).await.unwrap().unwrap();
    assert_eq!(
        (snap.balance.checked_add(snap.pending), snap.pending),
        (Some(book), NanoUsd::ZERO),
        "reconciled"
    );
    assert_eq!(
        admin_api::ledger::imbalance(&api.state.db).await.unwrap(),
        NanoUsd::ZERO
    );
}

#[tokio::test]
async fn settlement_is_idempotent_under_redelivery() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (_, org) = api.active_customer(&owner, "redeliver", 10.0, 1.0).await;
    let w = api.state.stores.wallets.clone();
    w.reserve(org, "req-1", nano(1_000_000), 600_000, "")
        .await
        .unwrap();
    assert_eq!(
        w.settle(org, "req-1", nano(400_000)).await.unwrap(),
        opstate::Settlement::Settled {
            charged: nano(400_000),
            excess: nano(0)
        }
    );
    let event = settled_event(
        "req-1",
        org,
        "gpt-4o-mini",
        1_700_000_000_000,
        400_000,
        400_000,
    );
    // The same event delivered three times (a settler died before acknowledging).
    for _ in 0..3 {
        api.state.stores.usage.append(&event).await.unwrap();
    }
    assert_eq!(
        admin_api::workers::settler::drain_once(&api.state, "t")
            .await
            .unwrap(),
        3
    );
    use sea_orm::{EntityTrait, PaginatorTrait};
    assert_eq!(
        entities::usage_records::Entity::find()
            .count(&api.state.db)
            .await
            .unwrap(),
        1
    );
    let spend = admin_api::ledger::balance(
        &api.state.db,
        &admin_api::ledger::AccountRef::org_spend(org).code,
    )
    .await
    .unwrap();
    assert_eq!(spend, nano(400_000), "charged once");
    let snap = w.snapshot(org).await.unwrap().unwrap();
    assert_eq!(
        (snap.balance, snap.pending),
        (nano(10_000_000_000 - 400_000), NanoUsd::ZERO)
    );
    let buckets = entities::usage_hourly::Entity::find()
        .all(&api.state.db)
        .await
        .unwrap();
    assert_eq!(
        (buckets.len(), buckets[0].requests, buckets[0].cost_nanos),
        (1, 1, 400_000)
    );
}

fn settled_event(
    id: &str,
    org: i64,
    model: &str,
    at_ms: u64,
    cost: i64,
    charged: i64,
) -> opstate::UsageEvent {
    opstate::UsageEvent {
        request_id: id.into(),
        key_id: 1,
        org_id: org,
        group_id: 1,
        route: "chat_completions".into(),
        model_requested: model.into(),
        model_served: model.into(),
        account_id: "a".into(),
        input_tokens: 10,
        output_tokens: 5,
        cached_tokens: 0,
        measurement: opstate::Measurement::Exact,
        status: 200,
        stream: false,
        started_at_ms: at_ms,
        latency_ms: 5,
        ttfb_ms: Some(1),
        attempts: 1,
        cost_nanos: nano(cost),
        charged_nanos: nano(charged),
        excess_nanos: nano(0),
        hold_nanos: nano(cost),
        project: None,
        workflow: None,
        audio_seconds: 0,
    }
}

#[tokio::test]
async fn one_batch_settles_many_requests_of_many_organizations_exactly() {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (_, rich) = api.active_customer(&owner, "rich", 10.0, 1.0).await;
    let (_, poor) = api.active_customer(&owner, "poor", 0.001, 1.0).await;
    let w = api.state.stores.wallets.clone();
    let hour = 1_700_000_000_000 - 1_700_000_000_000 % 3_600_000;
    // The rich organization: five calls the gateway charged (holds settled in the mirror), over
    // two hours and two models; one of them was settled by an earlier round and comes again.
    let mut events = Vec::new();
    for (i, (model, at)) in [
        ("gpt-4o-mini", hour),
        ("gpt-4o-mini", hour + 10),
        ("gpt-4o", hour + 20),
        ("gpt-4o-mini", hour + 3_600_000),
        ("gpt-4o-mini", hour + 3_600_001),
    ]
    .into_iter()
    .enumerate()
    {
        let id = format!("rich-{i}");
        w.reserve(rich, &id, nano(200_000), 600_000, "")
            .await
            .unwrap();
        w.settle(rich, &id, nano(100_000)).await.unwrap();
        events.push(settled_event(&id, rich, model, at, 100_000, 100_000));
    }
    api.state.stores.usage.append(&events[0]).await.unwrap();
    assert_eq!(
        admin_api::workers::settler::drain_once(&api.state, "t")
            .await
            .unwrap(),
        1
    );
    // The poor organization (0.001 USD): two calls whose holds were lost, each costing 0.0007 USD:
    // the ledger wallet pays the first in full and the second as far as it goes.
    let lost_a = settled_event("poor-a", poor, "gpt-4o-mini", hour, 700_000, 0);
    let lost_b = settled_event("poor-b", poor, "gpt-4o-mini", hour + 1, 700_000, 0);
    for e in events.iter().chain([&lost_a, &lost_b]) {
        api.state.stores.usage.append(e).await.unwrap();
    }
    assert_eq!(
        admin_api::workers::settler::drain_once(&api.state, "t")
            .await
            .unwrap(),
        7
    );
    assert_eq!(api.state.stores.usage.backlog().await.unwrap(), 0);

    let spend = |org: i64| {
        let db = api.state.db.clone();
        async move {
            admin_api::ledger::balance(&db, &admin_api::ledger::AccountRef::org_spend(org).code)
                .await
                .unwrap()
                .nanos()
        }
    };
    assert_eq!(spend(rich).await, 500_000, "each rich call charged once");
    assert_eq!(
        spend(poor).await,
        1_000_000,
        "never more than the wallet held"
    );
    let records = entities::usage_records::Entity::find()
        .filter(entities::usage_records::Column::OrganizationId.eq(poor))
        .order_by_asc(entities::usage_records::Column::RequestId)
        .all(&api.state.db)
        .await
        .unwrap();
    let charged: Vec<(i64, i64)> = records
        .iter()
        .map(|r| (r.charged_nanos, r.excess_nanos))
        .collect();
    assert_eq!(charged, [(700_000, 0), (300_000, 400_000)]);
    let poor_wallet = w.snapshot(poor).await.unwrap().unwrap();
    assert_eq!(
        (poor_wallet.balance, poor_wallet.pending),
        (NanoUsd::ZERO, NanoUsd::ZERO)
    );
    let rich_wallet = w.snapshot(rich).await.unwrap().unwrap();
    assert_eq!(
        (rich_wallet.balance, rich_wallet.pending),
        (nano(10_000_000_000 - 500_000), NanoUsd::ZERO)
    );
    let buckets: Vec<(String, i64, i64)> = entities::usage_hourly::Entity::find()
        .filter(entities::usage_hourly::Column::OrganizationId.eq(rich))
        .order_by_asc(entities::usage_hourly::Column::HourStart)
        .order_by_asc(entities::usage_hourly::Column::Model)
        .all(&api.state.db)
        .await
        .unwrap()
        .into_iter()
        .map(|b| (b.model, b.requests, b.cost_nanos))
        .collect();
    assert_eq!(
        buckets,
        [
            ("gpt-4o".to_string(), 1, 100_000),
            ("gpt-4o-mini".to_string(), 2, 200_000),
            ("gpt-4o-mini".to_string(), 2, 200_000),
        ]
    );
}

#[tokio::test]
async fn daily_usage_breaks_down_by_project_and_workflow() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (_, org) = api.active_customer(&owner, "attr", 10.0, 1.0).await;
    let token = admin_api::cli::billing_token(&api.state, "create", org)
        .await
        .unwrap()["token"]
        .as_str()
        .unwrap()
        .to_string();
    let day = chrono::NaiveDate::from_ymd_opt(2026, 3, 4).unwrap();
    let started = u64::try_from(
        day.and_hms_opt(12, 0, 0)
            .unwrap()
            .and_utc()
            .timestamp_millis(),
    )
    .unwrap();
    for (i, project) in [Some("checkout"), Some("checkout"), None]
        .into_iter()
        .enumerate()
    {
        let event = opstate::UsageEvent {
            request_id: format!("r{i}"),
            key_id: 1,
            org_id: org,
            group_id: 1,
            route: "chat_completions".into(),
            model_requested: "gpt-4o-mini".into(),
            model_served: "gpt-4o-mini".into(),
            account_id: "a".into(),
            input_tokens: 100,
            output_tokens: 10,
            cached_tokens: 0,
            measurement: if i == 2 {
                opstate::Measurement::Estimated
            } else {
                opstate::Measurement::Exact
            },
            status: 200,
            stream: false,
            started_at_ms: started,
            latency_ms: 1,
            ttfb_ms: None,
            attempts: 1,
            cost_nanos: nano(1_000),
            charged_nanos: nano(0),
            excess_nanos: nano(0),
            hold_nanos: nano(0),
            project: project.map(str::to_string),
            workflow: None,
            audio_seconds: 0,
        };
        api.state.stores.usage.append(&event).await.unwrap();
    }
    admin_api::workers::settler::drain_once(&api.state, "t")
        .await
        .unwrap();
    let v: Value = api
        .http
        .get(format!(
            "{}/api/v1/organization/billing/usage/daily?date=2026-03-04",
            api.base
        ))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let d = &v["data"];
    assert_eq!(d["totals"]["requests"], 3, "{v}");
    assert_eq!(
        d["projects"].as_array().unwrap().len(),
        2,
        "checkout and unattributed: {v}"
    );
    assert!(
        d["projects"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["project"] == "checkout" && p["requests"] == 2)
    );
    assert_eq!(d["unavailable_dimensions"], json!(["workflows"]));
    assert_eq!(d["usage_coverage"]["estimated_requests"], 1);
    assert_eq!(d["api_keys"][0]["api_key_id"], 1);
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
