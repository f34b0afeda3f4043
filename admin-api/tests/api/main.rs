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
use money::NanoUsd;
use opstate::Stores;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use settings::Settings;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::task::JoinSet;

mod account;
mod audit;
mod batches;
mod billing;
mod console;
mod customers;
mod dashboard;
mod funding;
mod funding_properties;
mod gate;
mod idempotency;
mod invitations;
mod keys;
mod openapi;
mod partitions;
mod payments;
mod proof;
mod regions;
mod requests;
mod rules;
mod security;
mod settlement;
mod settlers;
mod standing;
mod statements;
mod task_book;
mod upgrade;
mod usage;
mod webhooks;

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
key_max_concurrency = 4
key_requests_per_minute = 120
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
        Api::start_with("").await
    }

    /// admin-api on the test configuration with `extra` TOML appended (e.g. a `[payments]`
    /// section).
    async fn start_with(extra: &str) -> Api {
        Api::start_on(extra, Stores::memory()).await
    }

    /// As [`Api::start_with`], on the operational store `stores`.
    async fn start_on(extra: &str, stores: Stores) -> Api {
        let outbox =
            std::env::temp_dir().join(format!("tollgate-outbox-{}", uuid::Uuid::new_v4().simple()));
        let text = config(
            &testkit::fresh_database_url().await,
            outbox.to_str().unwrap(),
        ) + extra;
        let settings = Arc::new(Settings::parse(&text, &|_| None).unwrap());
        let state = admin_api::AppState::connect(settings, stores)
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
        let (s, v) = self
            .accept_invitation(token, &format!("owner@{external}.example"))
            .await;
        assert_eq!(s, 200, "{v}");
        (
            body["data"]["customer"]["id"].as_i64().unwrap(),
            v["data"]["organization_id"].as_i64().unwrap(),
        )
    }

    /// Accepts invitation `token` as a program does (DESIGN §6c, `testkit::accept_invitation`).
    async fn accept_invitation(&self, token: &str, email: &str) -> (StatusCode, Value) {
        let url = format!("{}/invitations/{token}/accept", self.base);
        let (s, v) = testkit::accept_invitation(&self.http, &url, email, &self.outbox).await;
        (StatusCode::from_u16(s).unwrap(), v)
    }

    /// A new organization billing token of `org` (the operator command's).
    async fn billing_token(&self, org: i64) -> String {
        admin_api::cli::billing_token(&self.state, "create", org)
            .await
            .unwrap()["token"]
            .as_str()
            .unwrap()
            .to_string()
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
