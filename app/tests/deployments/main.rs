//! Deployments as operators run them: the real `proxy` binary (`--check`, killed mid-stream, two
//! processes on one Redis) next to an admin-api deployment built in this process by [`App`].

#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: failing loudly is the point"
)]

use futures_util::StreamExt;
use mock_supplier::{MockConfig, MockSupplier};
use opstate::Stores;
use serde_json::{Value, json};
use settings::Settings;
use std::sync::Arc;
use std::time::{Duration, Instant};
use testkit::{Account, Group, KillOnDrop, Model, TestConfig, free_port};
use tokio::task::JoinSet;
use tollgate::{App, Role, Stop};

mod batches;
mod cli;
mod crash;
mod lifecycle;
mod observe;
mod webhooks;

/// The gateway's test configuration: two accounts, the second unreachable, a text group.
fn config(mock_url: &str, dead_url: &str) -> String {
    config_builder(mock_url, dead_url).toml()
}

fn config_builder(mock_url: &str, dead_url: &str) -> TestConfig {
    TestConfig::embedded()
        .set("server", "max_body_bytes", 4_194_304u64)
        .model(Model::gpt_4o_mini())
        .model(Model::text("dead-model", 1.0, 1.0))
        .account(Account::openai("mock", mock_url, &["gpt-4o-mini"]))
        .account(Account::openai("dead", dead_url, &["dead-model"]))
        .group(Group::new(1, &["gpt-4o-mini", "dead-model"]))
}

/// A distributed deployment's configuration: proxies on Redis at `port`, holds of 1 s, a fast
/// reconciler; admin-api (on port 0) in the test process.
fn redis_deployment(redis_url: &str, prefix: &str, port: u16, mock_url: &str) -> String {
    redis_deployment_builder(redis_url, prefix, port, mock_url).toml()
}

fn redis_deployment_builder(
    redis_url: &str,
    prefix: &str,
    port: u16,
    mock_url: &str,
) -> TestConfig {
    TestConfig::embedded()
        .set("server", "listen", format!("127.0.0.1:{port}"))
        .set("admin", "embedded", false)
        .set("admin", "listen", "127.0.0.1:0")
        .redis(redis_url, prefix)
        .set("money", "hold_ttl_ms", 1000u64)
        .set("money", "reconcile_interval_ms", 100u64)
        .set("routing", "slot_ttl_ms", 1000u64)
        .model(Model::gpt_4o_mini())
        .account(Account::openai("mock", mock_url, &["gpt-4o-mini"]).max_concurrency(1000))
        .group(Group::new(1, &["gpt-4o-mini"]))
}

const NANOS: i64 = 1_000_000_000;

/// admin-api (ledger, settler, reconciler, key-directory keeper) built by [`App`] in this process
/// and served on this test's runtime until dropped.
struct AdminApi {
    state: admin_api::AppState,
    stores: Stores,
    stop: Stop,
    _serving: tokio::task::JoinHandle<()>,
}

impl AdminApi {
    async fn start(settings: Arc<Settings>) -> AdminApi {
        let app = App::build(settings, Role::AdminApi).await.unwrap();
        let state = app.admin_state().unwrap().clone();
        let stores = app.stores().clone();
        let stop = app.stop_handle();
        #[allow(
            clippy::disallowed_methods,
            reason = "the handle is kept and the task stopped on drop"
        )]
        let serving = tokio::spawn(async move { app.run_until_stopped().await.unwrap() });
        AdminApi {
            state,
            stores,
            stop,
            _serving: serving,
        }
    }

    /// A fresh customer key of the demo organization (group 1), its wallet mirror loaded (the
    /// deployment started before the organization existed).
    async fn demo_key(&self) -> admin_api::demo::DemoKey {
        let s = &self.state;
        let key = admin_api::demo::demo_key(&s.db, s.stores.keys.as_ref(), &s.hasher, s.env, 1)
            .await
            .unwrap();
        admin_api::services::wallets::reload(s, key.organization_id)
            .await
            .unwrap();
        key
    }
}

impl Drop for AdminApi {
    fn drop(&mut self) {
        self.stop.stop();
    }
}

/// Starts a real `proxy --config CONFIG ARGS…` (its output discarded), killed when dropped.
fn proxy_process(config: &std::path::Path, args: &[&str]) -> KillOnDrop {
    KillOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_proxy"))
            .arg("--config")
            .arg(config)
            .args(args)
            .env_remove("DATABASE_URL")
            .stdout(std::process::Stdio::null())
            // Its log beside its configuration (`proxy.toml` → `proxy.toml.log`), for a failure's
            // diagnosis; appended to by a second process on the same file (an upgrade).
            .stderr(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(config.with_extension("toml.log"))
                    .map_or_else(|_| std::process::Stdio::null(), std::process::Stdio::from),
            )
            .spawn()
            .unwrap(),
    )
}

/// Waits until the proxy whose metrics listener is on `metrics_port` answers `/readyz` with 200.
async fn wait_ready(http: &reqwest::Client, metrics_port: u16) {
    let readyz = format!("http://127.0.0.1:{metrics_port}/readyz");
    let deadline = Instant::now() + Duration::from_secs(20);
    while http
        .get(&readyz)
        .send()
        .await
        .map_or(true, |r| r.status() != 200)
    {
        assert!(Instant::now() < deadline, "proxy did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A customer key of the demo organization (the demo partner's customer at retail rate 1.25),
/// minted by the operator CLI in the database of `config`.
fn demo_key_cli(config: &std::path::Path) -> String {
    let (code, out, err) = admin_cli(config, &["demo"]);
    assert_eq!(code, Some(0), "{err}");
    serde_json::from_str::<Value>(&out).unwrap()["api_key"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Starts a real `proxy` process on `text` and waits until it listens on `port`.
async fn spawn_proxy(text: &str, port: u16, name: &str) -> KillOnDrop {
    let dir = std::env::temp_dir().join(format!("tollgate-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("proxy.toml");
    std::fs::write(&config, text).unwrap();
    let child = proxy_process(&config, &[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "proxy did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child
}

/// The wallet once every hold has closed (settlement runs after the last byte reached the
/// client), or as it is after 5 s.
async fn settled_wallet(stores: &Stores, org: i64) -> opstate::WalletSnapshot {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let w = stores.wallets.snapshot(org).await.unwrap().unwrap();
        if w.reserved.is_zero() || Instant::now() > deadline {
            return w;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn uuid_like() -> String {
    format!("{}-{:?}", std::process::id(), std::thread::current().id()).replace(['(', ')'], "")
}

fn chat(model: &str, stream: bool) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "Say hello"}], "stream": stream})
}

async fn get_json(url: &str) -> (u16, Value) {
    let resp = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(url)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

/// The organization of customer `id`.
async fn created_org(state: &admin_api::AppState, id: i64) -> i64 {
    use sea_orm::EntityTrait;
    entities::customers::Entity::find_by_id(id)
        .one(&state.db)
        .await
        .unwrap()
        .unwrap()
        .organization_id
}

/// Runs the real `admin-api --config CONFIG ARGS…` (the operator CLI) with no database or Redis
/// from the environment: (exit code, stdout, stderr).
fn admin_cli(config: &std::path::Path, args: &[&str]) -> (Option<i32>, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_admin-api"))
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("TOLLGATE_DATABASE_URL")
        .env_remove("TOLLGATE_REDIS_URL")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
