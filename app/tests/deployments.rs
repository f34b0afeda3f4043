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

/// Runs the real `proxy` binary with `--check` on `text`; returns (exit code, stdout, stderr).
fn check_config(text: &str, env: &[(&str, &str)]) -> (i32, String, String) {
    let dir = std::env::temp_dir().join(format!("tollgate-check-{}", uuid_like()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_proxy"));
    cmd.arg("--config").arg(&path).arg("--check").env_clear();
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    std::fs::remove_dir_all(&dir).ok();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The environment `conf/example.toml`'s secrets come from.
const EXAMPLE_SECRETS: [(&str, &str); 6] = [
    ("DATABASE_URL", "postgres://postgres@127.0.0.1/test"),
    ("REDIS_URL", "redis://127.0.0.1:6379"),
    ("TOLLGATE_KEY_PEPPER", "a-long-enough-pepper"),
    ("OPENAI_KEY_PRIMARY", "sk-1"),
    ("OPENAI_KEY_SECONDARY", "sk-2"),
    ("GEMINI_KEY", "g-1"),
];

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

/// `proxy --print-default-config` prints the example configuration, which `--check` accepts once
/// its secrets are in the environment.
#[test]
fn print_default_config_prints_a_valid_complete_example() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_proxy"))
        .arg("--print-default-config")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let printed = String::from_utf8(out.stdout).unwrap();
    assert_eq!(printed, include_str!("../../conf/example.toml"));
    for key in [
        "max_in_flight",
        "health_recovery_ms",
        "key_max_concurrency",
        "queue_wait_ms",
    ] {
        assert!(printed.contains(key), "{key}");
    }
    let (code, _, stderr) = check_config(&printed, &EXAMPLE_SECRETS);
    assert_eq!(code, 0, "{stderr}");
    // Without --config and without --print-default-config: a usage error.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_proxy"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--config"));
}

#[test]
fn check_flag_validates_and_names_the_bad_key() {
    let good = config("http://127.0.0.1:9/v1", "http://127.0.0.1:8/v1");
    let (code, stdout, _) = check_config(&good, &[]);
    assert_eq!(code, 0);
    assert!(stdout.contains("configuration OK"), "{stdout}");

    let misspelled = good.replace("max_body_bytes", "max_body_byte");
    let (code, _, stderr) = check_config(&misspelled, &[]);
    assert_eq!(code, 2);
    assert!(stderr.contains("server.max_body_byte"), "{stderr}");

    let bad_ref = good.replace(r#"models = ["dead-model"]"#, r#"models = ["ghost"]"#);
    let (code, _, stderr) = check_config(&bad_ref, &[]);
    assert_eq!(code, 2);
    assert!(
        stderr.contains("accounts[1].models[0]") && stderr.contains("ghost"),
        "{stderr}"
    );

    let example = include_str!("../../conf/example.toml");
    let (code, _, stderr) = check_config(example, &[]);
    assert_eq!(code, 2, "secrets from unset variables are refused");
    assert!(
        stderr.contains("database.url") && stderr.contains("DATABASE_URL"),
        "{stderr}"
    );
    let (code, _, stderr) = check_config(example, &EXAMPLE_SECRETS);
    assert_eq!(code, 0, "{stderr}");
}

/// A real `proxy` process killed with SIGKILL mid-stream leaves its hold behind; the reconciler
/// (admin-api, in this test process) settles it exactly once after its deadline, the settler books
/// it, and the organization's balance is reconciled with a balanced ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_proxy_leaves_a_hold_the_reconciler_resolves_once() {
    let Some(redis_url) = testkit::redis_url() else {
        eprintln!("REDIS_URL not set: crash scenario skipped");
        return;
    };
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let prefix = format!("crash:{}:", std::process::id());
    let port = free_port();
    let text = redis_deployment(&redis_url, &prefix, port, &mock.base_url());
    // admin-api in this process: ledger, settler, reconciler, keeper.
    let settings = Arc::new(Settings::parse(&text, &|_| None).unwrap());
    let admin = AdminApi::start(settings).await;
    let (state, stores) = (admin.state.clone(), admin.stores.clone());
    let demo = admin.demo_key().await;
    let org = demo.organization_id;

    // The gateway as its own process.
    let mut proxy = spawn_proxy(&text, port, "crash").await;
    let base = format!("http://127.0.0.1:{port}");

    // A slow stream: 20 events, 300 ms apart.
    let resp = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(format!("{base}/compat/v1/chat/completions"))
        .bearer_auth(&demo.api_key)
        .header("x-mock-events", "20")
        .header("x-mock-delay-ms", "300")
        .body(chat("gpt-4o-mini", true).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    stream.next().await.unwrap().unwrap();
    let held = stores.wallets.snapshot(org).await.unwrap().unwrap();
    assert!(
        held.reserved.is_positive(),
        "the call holds money: {held:?}"
    );

    // SIGKILL mid-stream: nothing settles.
    proxy.0.kill().unwrap();
    proxy.0.wait().unwrap();
    drop(stream);

    // After the deadline the reconciler settles the hold once, and the settler books it.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        use sea_orm::{EntityTrait, PaginatorTrait};
        let w = stores.wallets.snapshot(org).await.unwrap().unwrap();
        let records = entities::usage_records::Entity::find()
            .count(&state.db)
            .await
            .unwrap();
        if w.reserved.is_zero() && records == 1 && w.pending.is_zero() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not reconciled: {w:?}, {records} records"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    use sea_orm::EntityTrait;
    let records = entities::usage_records::Entity::find()
        .all(&state.db)
        .await
        .unwrap();
    assert_eq!(records[0].measurement, "estimated");
    assert!(
        records[0].charged_nanos > 0,
        "the input estimate is charged"
    );
    let book = admin_api::ledger::balance(
        &state.db,
        &admin_api::ledger::AccountRef::org_wallet(org).code,
    )
    .await
    .unwrap();
    let w = stores.wallets.snapshot(org).await.unwrap().unwrap();
    assert_eq!(
        w.balance.checked_add(w.pending),
        Some(book),
        "mirror and ledger agree"
    );
    assert_eq!(
        book.nanos(),
        100 * NANOS - records[0].charged_nanos,
        "charged exactly once"
    );
    assert_eq!(
        admin_api::ledger::imbalance(&state.db).await.unwrap(),
        money::NanoUsd::ZERO
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while stores.slots.in_use(&["mock"]).await.unwrap() != vec![0] {
        assert!(
            Instant::now() < deadline,
            "the dead proxy's slot never stopped counting"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
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
            .stderr(std::process::Stdio::null())
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

/// Two proxy processes sharing one Redis: 200 concurrent calls against a balance that covers
/// about 20 never overdraw, and every refused call is refused before reaching the supplier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_proxies_on_one_redis_never_overdraw() {
    let Some(redis_url) = testkit::redis_url() else {
        eprintln!("REDIS_URL not set: two-proxy scenario skipped");
        return;
    };
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let prefix = format!("two:{}:", std::process::id());
    let ports = [free_port(), free_port()];
    let texts: Vec<String> = ports
        .iter()
        .map(|p| redis_deployment(&redis_url, &prefix, *p, &mock.base_url()))
        .collect();
    let settings = Arc::new(Settings::parse(&texts[0], &|_| None).unwrap());
    let admin = AdminApi::start(settings.clone()).await;
    let (state, stores) = (admin.state.clone(), admin.stores.clone());
    let demo = admin.demo_key().await;
    let org = demo.organization_id;
    let _a = spawn_proxy(&texts[0], ports[0], "two-a").await;
    let _b = spawn_proxy(&texts[1], ports[1], "two-b").await;

    let mut body = chat("gpt-4o-mini", false);
    body["max_tokens"] = json!(1000);
    let (hold, _) = proxy::worst_case(
        &settings.model("gpt-4o-mini").unwrap().prices,
        Some(money::RateMultiplier::ONE),
        body.to_string().len(),
        Some(1000),
        4096,
    )
    .unwrap();
    // Leave about 20 holds' worth in the wallet (the mirror and the ledger together).
    let book = admin_api::ledger::balance(
        &state.db,
        &admin_api::ledger::AccountRef::org_wallet(org).code,
    )
    .await
    .unwrap();
    let keep = money::NanoUsd::from_nanos(hold.nanos() * 20 + hold.nanos() / 2);
    assert_eq!(
        stores
            .wallets
            .adjust(org, keep.checked_sub(book).unwrap(), "test:shrink")
            .await
            .unwrap(),
        opstate::Adjustment::Applied { balance: keep }
    );
    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(64)
        .build()
        .unwrap();
    let mut calls = JoinSet::new();
    for i in 0..200 {
        let (http, body, key) = (http.clone(), body.clone(), demo.api_key.clone());
        let port = ports[i % 2];
        calls.spawn(async move {
            let resp = http
                .post(format!(
                    "http://127.0.0.1:{port}/compat/v1/chat/completions"
                ))
                .bearer_auth(key)
                .header("x-mock-usage", "prompt=50,completion=1000")
                .header("x-mock-delay-ms", "20")
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            resp.bytes().await.unwrap();
            status
        });
    }
    let (mut ok, mut refused) = (0, 0);
    while let Some(r) = calls.join_next().await {
        match r.unwrap() {
            200 => ok += 1,
            402 => refused += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!(ok + refused, 200);
    assert!(ok >= 20, "the covered calls succeed ({ok})");
    assert_eq!(
        mock.request_count(),
        ok,
        "refused calls never reached the supplier"
    );
    let w = settled_wallet(&stores, org).await;
    assert!(
        !w.balance.is_negative() && w.reserved.is_zero(),
        "never overdrawn, every hold closed: {w:?}"
    );
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

#[test]
fn operator_cli_prints_json() {
    let dir = testkit::temp_dir("cli");
    let db = dir.join("cli.db");
    let path = dir.join("config.toml");
    std::fs::write(
        &path,
        config_builder("http://127.0.0.1:9/v1", "http://127.0.0.1:8/v1")
            .database(&format!("sqlite://{}?mode=rwc", db.display()))
            .toml(),
    )
    .unwrap();
    let run = |args: &[&str]| admin_cli(&path, args);
    let (code, out, err) = run(&[
        "partner",
        "create",
        "--name",
        "Acme",
        "--min-rate-multiplier",
        "1.1",
        "--funding-usd",
        "250",
        "--role",
        "owner",
        "--scope",
        "partner:read,partner:write",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let created: Value = serde_json::from_str(&out).unwrap();
    assert!(created["token"].as_str().unwrap().starts_with("tgp_dev_"));
    assert_eq!(created["available_funding_usd"], 250);
    assert_eq!(created["scopes"], json!(["partner:read", "partner:write"]));
    let id = created["partner_id"].as_i64().unwrap().to_string();
    // A console sign-up link for the partner team (DESIGN §6d), printed as JSON.
    let (code, out, err) = run(&[
        "user",
        "invite",
        "--email",
        "Pat@Acme.example",
        "--partner",
        &id,
        "--role",
        "admin",
    ]);
    assert_eq!(code, Some(0), "{err}");
    let invited: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(invited["email"], "pat@acme.example");
    assert_eq!(invited["role"], "admin");
    assert!(
        invited["sign_up_url"]
            .as_str()
            .unwrap()
            .contains("/console/join/")
    );
    for bad in [
        vec![
            "user",
            "invite",
            "--email",
            "pat@acme.example",
            "--partner",
            id.as_str(),
            "--role",
            "administrator",
        ],
        vec![
            "user",
            "invite",
            "--email",
            "not-an-email",
            "--partner",
            id.as_str(),
            "--role",
            "admin",
        ],
        vec![
            "user",
            "invite",
            "--email",
            "pat@acme.example",
            "--org",
            "999",
            "--role",
            "owner",
        ],
    ] {
        let (code, _, err) = run(&bad);
        assert_eq!(code, Some(1), "{bad:?}: {err}");
    }
    let (code, out, _) = run(&[
        "partner",
        "fund",
        "--partner",
        &id,
        "--amount-usd",
        "50",
        "--reference",
        "pay-1",
    ]);
    assert_eq!(code, Some(0));
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["available_funding_usd"],
        300
    );
    let (code, out, _) = run(&[
        "partner",
        "fund",
        "--partner",
        &id,
        "--amount-usd",
        "50",
        "--reference",
        "pay-1",
    ]);
    assert_eq!(code, Some(0));
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["already_posted"],
        true
    );
    let (code, out, _) = run(&[
        "partner",
        "token",
        "--partner",
        &id,
        "--scope",
        "partner:read",
    ]);
    assert_eq!(code, Some(0));
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["revoked_tokens"],
        1
    );
    for bad in [
        vec![
            "partner",
            "create",
            "--name",
            "X",
            "--min-rate-multiplier",
            "abc",
            "--scope",
            "partner:read",
        ],
        vec![
            "partner",
            "create",
            "--name",
            "X",
            "--min-rate-multiplier",
            "1",
            "--role",
            "king",
            "--scope",
            "partner:read",
        ],
        vec![
            "partner",
            "create",
            "--name",
            "X",
            "--min-rate-multiplier",
            "1",
            "--scope",
            "admin:all",
        ],
        vec!["partner", "fund", "--partner", "999", "--amount-usd", "5"],
        vec!["billing-token", "create", "--org", "999"],
    ] {
        let (code, out, err) = run(&bad);
        assert_eq!(code, Some(1), "{bad:?}: {out}");
        assert!(!err.is_empty());
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// The `admin-api` process killed with SIGKILL while its settler books a backlog, then started
/// again: every usage event is booked exactly once (one record each, the spend posted once), the
/// ledger stays balanced, and the wallet mirror agrees with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_admin_api_loses_no_usage_and_posts_nothing_twice() {
    let Some(redis_url) = testkit::redis_url() else {
        return;
    };
    let db_url = testkit::fresh_database_url().await;
    let prefix = testkit::redis_prefix("settler-crash");
    let admin_port = free_port();
    let text = TestConfig::embedded()
        .set("admin", "embedded", false)
        .set("admin", "listen", format!("127.0.0.1:{admin_port}"))
        .database(&db_url)
        .redis(&redis_url, &prefix)
        .model(Model::gpt_4o_mini())
        .account(Account::openai(
            "mock",
            "http://127.0.0.1:9/v1",
            &["gpt-4o-mini"],
        ))
        .group(Group::new(1, &["gpt-4o-mini"]))
        .toml();
    let settings = Arc::new(Settings::parse(&text, &|_| None).unwrap());
    // The organization, its key and wallet, through a state of our own on the same stores.
    let stores = Stores::redis(&redis_url, &prefix).await.unwrap();
    let state = admin_api::AppState::connect(settings.clone(), stores.clone())
        .await
        .unwrap();
    let demo =
        admin_api::demo::demo_key(&state.db, stores.keys.as_ref(), &state.hasher, state.env, 1)
            .await
            .unwrap();
    let org = demo.organization_id;
    admin_api::services::wallets::reload(&state, org)
        .await
        .unwrap();
    let before = admin_api::ledger::balance(
        &state.db,
        &admin_api::ledger::AccountRef::org_wallet(org).code,
    )
    .await
    .unwrap();
    // A backlog of 300 settled calls, as gateways leave it in the usage stream.
    const CALLS: i64 = 300;
    const COST: i64 = 1_000;
    for i in 0..CALLS {
        let id = format!("req-{i}");
        let amount = money::NanoUsd::from_nanos(COST);
        stores
            .wallets
            .reserve(org, &id, amount, 600_000, "")
            .await
            .unwrap();
        stores.wallets.settle(org, &id, amount).await.unwrap();
        stores
            .usage
            .append(&opstate::UsageEvent {
                request_id: id,
                key_id: demo.key_id,
                org_id: org,
                group_id: 1,
                route: "chat_completions".into(),
                model_requested: "gpt-4o-mini".into(),
                model_served: "gpt-4o-mini".into(),
                account_id: "mock".into(),
                input_tokens: 1,
                output_tokens: 1,
                cached_tokens: 0,
                cache_write_tokens: 0,
                measurement: opstate::Measurement::Exact,
                status: 200,
                stream: false,
                started_at_ms: 1_700_000_000_000 + i as u64,
                latency_ms: 1,
                ttfb_ms: None,
                attempts: 1,
                cost_nanos: amount,
                charged_nanos: amount,
                excess_nanos: money::NanoUsd::ZERO,
                hold_nanos: amount,
                project: None,
                workflow: None,
                audio_seconds: 0,
                images: 0,
                video_seconds: 0,
                retail_rate: None,
                wholesale_rate: None,
                resent: false,
            })
            .await
            .unwrap();
    }
    let dir = testkit::temp_dir("settler-crash");
    let path = dir.join("config.toml");
    std::fs::write(&path, &text).unwrap();
    let spawn = || {
        KillOnDrop(
            std::process::Command::new(env!("CARGO_BIN_EXE_admin-api"))
                .arg("--config")
                .arg(&path)
                .env_remove("DATABASE_URL")
                .env_remove("TOLLGATE_DATABASE_URL")
                .env_remove("TOLLGATE_REDIS_URL")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let records = || {
        let db = state.db.clone();
        async move {
            use sea_orm::{EntityTrait, PaginatorTrait};
            entities::usage_records::Entity::find()
                .count(&db)
                .await
                .unwrap()
        }
    };
    // Killed as soon as its settler has booked something.
    let mut first = spawn();
    let deadline = Instant::now() + Duration::from_secs(30);
    while records().await == 0 {
        assert!(Instant::now() < deadline, "the settler never booked");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    let booked_at_kill = records().await;
    // Started again: it takes the rest over (claims of the dead consumer included).
    let _second = spawn();
    let deadline = Instant::now() + Duration::from_secs(60);
    while records().await < CALLS as u64 {
        assert!(
            Instant::now() < deadline,
            "usage lost: {} of {CALLS}",
            records().await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(records().await, CALLS as u64, "one record per call");
    let spend = admin_api::ledger::balance(
        &state.db,
        &admin_api::ledger::AccountRef::org_spend(org).code,
    )
    .await
    .unwrap();
    assert_eq!(
        spend.nanos(),
        CALLS * COST,
        "spend posted once (killed after {booked_at_kill})"
    );
    assert_eq!(
        admin_api::ledger::imbalance(&state.db).await.unwrap(),
        money::NanoUsd::ZERO
    );
    let book = admin_api::ledger::balance(
        &state.db,
        &admin_api::ledger::AccountRef::org_wallet(org).code,
    )
    .await
    .unwrap();
    assert_eq!(book.nanos(), before.nanos() - CALLS * COST);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let w = stores.wallets.snapshot(org).await.unwrap().unwrap();
        if w.pending.is_zero() {
            assert_eq!(w.balance, book, "mirror and ledger agree");
            break;
        }
        assert!(Instant::now() < deadline, "confirmations missing: {w:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A usage event re-sent by its gateway after Redis lost its data, for a call the settler had
/// already booked, is neither booked again nor confirmed again: the wallet mirror, reloaded from
/// the ledger after the loss, already has the charge.
#[tokio::test]
async fn a_re_sent_event_already_booked_changes_nothing() {
    let Some(redis_url) = testkit::redis_url() else {
        return;
    };
    let db_url = testkit::fresh_database_url().await;
    let prefix = testkit::redis_prefix("resent");
    let text = TestConfig::embedded()
        .database(&db_url)
        .redis(&redis_url, &prefix)
        .model(Model::gpt_4o_mini())
        .account(Account::openai(
            "mock",
            "http://127.0.0.1:9/v1",
            &["gpt-4o-mini"],
        ))
        .group(Group::new(1, &["gpt-4o-mini"]))
        .toml();
    let settings = Arc::new(Settings::parse(&text, &|_| None).unwrap());
    let stores = Stores::redis(&redis_url, &prefix).await.unwrap();
    let state = admin_api::AppState::connect(settings, stores.clone())
        .await
        .unwrap();
    let demo =
        admin_api::demo::demo_key(&state.db, stores.keys.as_ref(), &state.hasher, state.env, 1)
            .await
            .unwrap();
    let org = demo.organization_id;
    admin_api::services::wallets::reload(&state, org)
        .await
        .unwrap();
    let amount = money::NanoUsd::from_nanos(7_000);
    stores
        .wallets
        .reserve(org, "req-x", amount, 600_000, "")
        .await
        .unwrap();
    stores.wallets.settle(org, "req-x", amount).await.unwrap();
    let mut event = opstate::UsageEvent {
        request_id: "req-x".into(),
        key_id: demo.key_id,
        org_id: org,
        group_id: 1,
        route: "chat_completions".into(),
        model_requested: "gpt-4o-mini".into(),
        model_served: "gpt-4o-mini".into(),
        account_id: "mock".into(),
        input_tokens: 1,
        output_tokens: 1,
        cached_tokens: 0,
        cache_write_tokens: 0,
        measurement: opstate::Measurement::Exact,
        status: 200,
        stream: false,
        started_at_ms: 1_700_000_000_000,
        latency_ms: 1,
        ttfb_ms: None,
        attempts: 1,
        cost_nanos: amount,
        charged_nanos: amount,
        excess_nanos: money::NanoUsd::ZERO,
        hold_nanos: amount,
        project: None,
        workflow: None,
        audio_seconds: 0,
        images: 0,
        video_seconds: 0,
        retail_rate: None,
        wholesale_rate: None,
        resent: false,
    };
    stores.usage.append(&event).await.unwrap();
    admin_api::workers::settler::drain_once(&state, "t")
        .await
        .unwrap();
    // Redis loses everything; the mirror is rebuilt from the ledger (which has the charge).
    let mut conn = redis::Client::open(redis_url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg(&keys)
        .query_async(&mut conn)
        .await
        .unwrap();
    admin_api::services::wallets::reload(&state, org)
        .await
        .unwrap();
    let book = admin_api::ledger::balance(
        &state.db,
        &admin_api::ledger::AccountRef::org_wallet(org).code,
    )
    .await
    .unwrap();
    // The gateway re-sends the event.
    event.resent = true;
    stores.usage.append(&event).await.unwrap();
    admin_api::workers::settler::drain_once(&state, "t")
        .await
        .unwrap();
    let w = stores.wallets.snapshot(org).await.unwrap().unwrap();
    assert_eq!(w.balance, book, "the mirror is not debited a second time");
    use sea_orm::{EntityTrait, PaginatorTrait};
    assert_eq!(
        entities::usage_records::Entity::find()
            .count(&state.db)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        admin_api::ledger::balance(
            &state.db,
            &admin_api::ledger::AccountRef::org_wallet(org).code
        )
        .await
        .unwrap(),
        book,
        "the ledger is not debited a second time"
    );
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

/// Health on the metrics listener of a real `proxy` process: `/healthz` while it answers,
/// `/readyz` 200 when it can serve, and 503 naming the failing check while the key directory of
/// a proxy on Redis has not been loaded by admin-api.
#[tokio::test]
async fn health_and_readiness_on_the_metrics_listener() {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let (port, metrics) = (free_port(), free_port());
    let text = config_builder(&mock.base_url(), "http://127.0.0.1:9")
        .set("server", "listen", format!("127.0.0.1:{port}"))
        .set("metrics", "listen", format!("127.0.0.1:{metrics}"))
        .toml();
    let _proxy = spawn_proxy(&text, port, "health").await;
    let base = format!("http://127.0.0.1:{metrics}");
    let (status, body) = get_json(&format!("{base}/healthz")).await;
    assert_eq!((status, &body["status"]), (200, &json!("ok")), "{body}");
    let (status, body) = get_json(&format!("{base}/readyz")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "ready");
    assert_eq!(body["checks"]["key_directory"], "loaded");
    assert_eq!(body["checks"]["operational_store"], "reachable");
    assert_eq!(body["checks"]["database"], "reachable");
    assert_eq!(body["checks"]["configuration"]["state"], "valid");

    let Some(redis_url) = testkit::redis_url() else {
        eprintln!("REDIS_URL not set: the not-ready half skipped");
        return;
    };
    // A proxy on a Redis whose key directory nobody loaded yet: not ready, and says why.
    let prefix = format!("health:{}:{}:", std::process::id(), uuid_like());
    let (port, metrics) = (free_port(), free_port());
    let text = redis_deployment_builder(&redis_url, &prefix, port, &mock.base_url())
        .set("metrics", "listen", format!("127.0.0.1:{metrics}"))
        .toml();
    let _fleet_proxy = spawn_proxy(&text, port, "health-redis").await;
    let base = format!("http://127.0.0.1:{metrics}");
    let (status, body) = get_json(&format!("{base}/healthz")).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = get_json(&format!("{base}/readyz")).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["status"], "not_ready");
    assert_eq!(body["checks"]["key_directory"], "not_loaded");
    assert_eq!(body["checks"]["operational_store"], "reachable");
    // admin-api's keeper loads it: ready.
    let stores = Stores::redis(&redis_url, &prefix).await.unwrap();
    stores.keys.load(&[]).await.unwrap();
    let (status, body) = get_json(&format!("{base}/readyz")).await;
    assert_eq!(status, 200, "{body}");
}

/// The invitation link of the mail in `outbox` (a directory of `.eml` files) whose text contains
/// `marker`, its quoted-printable soft line breaks unfolded.
fn invite_path(outbox: &std::path::Path, marker: &str) -> String {
    let text = std::fs::read_dir(outbox)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .map(|t| t.replace("=\r\n", "").replace("=\n", ""))
        .find(|t| t.contains(marker))
        .expect("a mail");
    let start = text.find("/invitations/").expect("a link");
    text[start..].split_whitespace().next().unwrap().to_string()
}

/// Invitations revoked and re-issued by the operator's `admin-api invitation` command, seen over
/// HTTP: a revoked link stops working and the customer reads `revoked`; a re-issued one is mailed,
/// the old one stays dead, the new one activates; an active customer has nothing to re-issue.
#[tokio::test]
async fn operator_revokes_and_reissues_an_invitation() {
    let dir = testkit::temp_dir("invitations");
    let db = format!("sqlite://{}?mode=rwc", dir.join("ledger.db").display());
    let outbox = dir.join("outbox");
    let config = config_builder("http://127.0.0.1:9/v1", "http://127.0.0.1:8/v1")
        .database(&db)
        .set("mail", "outbox_dir", outbox.display().to_string());
    let path = dir.join("config.toml");
    std::fs::write(&path, config.toml()).unwrap();
    let app = App::build(config.settings(), Role::Proxy).await.unwrap();
    let state = app.admin_state().unwrap().clone();
    let running = app.start();
    let base = running.base_url().unwrap();
    let partner = admin_api::cli::partner_create(
        &state,
        admin_api::cli::NewPartner::parse("Acme", "1.0", "100", "owner", &["partner:write".into()])
            .unwrap(),
    )
    .await
    .unwrap();
    let token = partner["token"].as_str().unwrap().to_string();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let created: Value = http
        .put(format!("{base}/partner/v1/customers/by-external-id/inv-1"))
        .bearer_auth(&token)
        .header("idempotency-key", "inv-create")
        .json(
            &json!({"name": "Initech", "contact_email": "bob@initech.example",
            "initial_allocation_usd": 0, "retail_rate_multiplier": 1}),
        )
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = created["data"]["customer"]["id"].as_i64().unwrap();
    let first = invite_path(&outbox, "created the organization");
    let operator = |args: &[&str]| {
        let (code, out, err) = admin_cli(&path, args);
        (
            code,
            serde_json::from_str::<Value>(&out).unwrap_or(Value::Null),
            err,
        )
    };
    let customer = async |id: i64| -> Value {
        http.get(format!("{base}/partner/v1/customers/{id}"))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    };
    let accept = async |path: &str| -> u16 {
        http.post(format!("{base}{path}/accept"))
            .json(&json!({"email": "bob@initech.example"}))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    };

    let id_arg = id.to_string();
    let (code, out, err) = operator(&["invitation", "revoke", "--customer", &id_arg]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out["revoked_invitations"], 1, "{out}");
    assert_eq!(out["invitation_status"], "revoked");
    let read = customer(id).await;
    assert_eq!(
        read["data"]["activation"]["invitation_status"], "revoked",
        "{read}"
    );
    assert!(
        read["data"]["activation_hint"]
            .as_str()
            .unwrap()
            .contains("revoked")
    );
    let page = http.get(format!("{base}{first}")).send().await.unwrap();
    assert_eq!(page.status(), 410);
    assert!(page.text().await.unwrap().contains("revoked"));
    assert_ne!(
        accept(&first).await,
        200,
        "a revoked link does not activate"
    );

    let (code, out, err) = operator(&["invitation", "reissue", "--customer", &id_arg]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        (out["invitation_status"].as_str(), out["email"].as_str()),
        (Some("pending"), Some("sent")),
        "{out}"
    );
    let second = invite_path(&outbox, "A new invitation");
    assert_ne!(second, first);
    assert!(out["invite_url"].as_str().unwrap().ends_with(&second));
    assert_eq!(
        customer(id).await["data"]["activation"]["invitation_status"],
        "pending"
    );
    assert_ne!(accept(&first).await, 200, "the old link stays dead");
    assert_eq!(accept(&second).await, 200);
    assert_eq!(customer(id).await["data"]["status"], "active");

    // Nothing to do for an active customer, or an unknown one: exit 1 and a message.
    let (code, _, err) = operator(&["invitation", "reissue", "--customer", &id_arg]);
    assert_eq!(code, Some(1));
    assert!(err.contains("active"), "{err}");
    let (code, _, err) = operator(&["invitation", "revoke", "--customer", "999999"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("no such customer"), "{err}");
    running.stop().await.unwrap();
}

/// A reload's configuration: `gpt-4o-mini` at `input`/`output` USD per Mtok, and `gpt-4o` too
/// when `with_gpt_4o`.
fn reload_config(
    mock_url: &str,
    dir: &std::path::Path,
    (port, metrics): (u16, u16),
    (input, output): (f64, f64),
    with_gpt_4o: bool,
) -> TestConfig {
    let mut models = vec!["gpt-4o-mini"];
    if with_gpt_4o {
        models.push("gpt-4o");
    }
    let mut config = TestConfig::embedded()
        .set("server", "listen", format!("127.0.0.1:{port}"))
        .set(
            "server",
            "pid_file",
            dir.join("proxy.pid").display().to_string(),
        )
        .set("metrics", "listen", format!("127.0.0.1:{metrics}"))
        .set(
            "mail",
            "outbox_dir",
            dir.join("outbox").display().to_string(),
        )
        .database(&format!(
            "sqlite://{}?mode=rwc",
            dir.join("ledger.db").display()
        ))
        .model(Model::text("gpt-4o-mini", input, output))
        .account(Account::openai("mock", mock_url, &models))
        .group(Group::new(1, &models));
    if with_gpt_4o {
        config = config.model(Model::text("gpt-4o", 2.5, 10.0));
    }
    config
}

/// Live reload of a real `proxy` process under traffic: `proxy --reload` (and a plain `SIGHUP`)
/// re-reads the file; new prices and a new model apply to calls that start afterwards, a stream
/// in flight finishes on the configuration it started with and is charged at its old price, no
/// call fails meanwhile; an invalid file changes nothing (exit 2 naming the key, `/readyz` and
/// the metrics say it failed); a key that needs a restart is reported as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_under_traffic_applies_to_new_calls_only() {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let dir = testkit::temp_dir("reload");
    let ports = (free_port(), free_port());
    let path = dir.join("proxy.toml");
    let write = |config: &TestConfig| std::fs::write(&path, config.toml()).unwrap();
    write(&reload_config(
        &mock.base_url(),
        &dir,
        ports,
        (0.15, 0.6),
        false,
    ));
    let key = demo_key_cli(&path);
    let _proxy = proxy_process(&path, &[]);
    let base = format!("http://127.0.0.1:{}", ports.0);
    let readyz = format!("http://127.0.0.1:{}/readyz", ports.1);
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    wait_ready(&http, ports.1).await;
    let call = |model: &'static str, stream: bool, slow: bool| {
        let mut req = http
            .post(format!("{base}/compat/v1/chat/completions"))
            .bearer_auth(&key)
            .header("x-mock-usage", "prompt=1000,completion=100")
            .json(&chat(model, stream));
        if slow {
            req = req
                .header("x-mock-delay-ms", "300")
                .header("x-mock-events", "6");
        }
        async move {
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            let id = resp.headers()["x-request-id"].to_str().unwrap().to_string();
            (status, id, resp.text().await.unwrap())
        }
    };
    let reload = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_proxy"))
            .arg("--config")
            .arg(&path)
            .arg("--reload")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let last_reload = || async {
        let v: Value = http
            .get(&readyz)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        v["checks"]["configuration"].clone()
    };
    let (status, _, _) = call("gpt-4o", false, false).await;
    assert_ne!(status, 200, "gpt-4o is not configured yet");

    // Traffic throughout, and one slow stream started before the reload.
    let mut traffic = JoinSet::new();
    let mut slow = JoinSet::new();
    slow.spawn(call("gpt-4o-mini", true, true));
    tokio::time::sleep(Duration::from_millis(200)).await;
    for i in 0..20u64 {
        traffic.spawn(call("gpt-4o-mini", i % 2 == 0, false));
        if i == 5 {
            write(&reload_config(
                &mock.base_url(),
                &dir,
                ports,
                (1.5, 6.0),
                true,
            ));
            let (code, err) = reload();
            assert_eq!(code, Some(0), "{err}");
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while last_reload().await["last_reload"]["result"] != "ok" {
        assert!(Instant::now() < deadline, "{}", last_reload().await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    while let Some(r) = traffic.join_next().await {
        assert_eq!(r.unwrap().0, 200, "no call fails during a reload");
    }
    let (status, old_id, body) = slow.join_next().await.unwrap().unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("[DONE]"), "the stream in flight finished");
    let (status, new_id, _) = call("gpt-4o-mini", false, false).await;
    assert_eq!(status, 200);
    let (status, _, body) = call("gpt-4o", false, false).await;
    assert_eq!(status, 200, "the new model is served: {body}");

    // Charged at the price each call started with: 10× after the reload.
    let db = admin_api::db::connect(&format!(
        "sqlite://{}?mode=rwc",
        dir.join("ledger.db").display()
    ))
    .await
    .unwrap();
    let cost_of = |id: String| {
        let db = db.clone();
        async move {
            use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                if let Some(r) = entities::usage_records::Entity::find()
                    .filter(entities::usage_records::Column::RequestId.eq(id.as_str()))
                    .one(&db)
                    .await
                    .unwrap()
                {
                    return r.cost_nanos;
                }
                assert!(Instant::now() < deadline, "{id} never settled");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    // The demo customer pays its partner's retail rate, 1.25 (`demo::quickstart`).
    assert_eq!(
        cost_of(old_id).await,
        262_500,
        "(1000 × 0.15 + 100 × 0.6) / 1e6 USD × 1.25"
    );
    assert_eq!(cost_of(new_id).await, 2_625_000, "the new price, 10×");

    // An invalid file: refused by --reload (nothing signalled) and by a plain SIGHUP alike.
    let good = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        good.replace(
            "models = [\"gpt-4o-mini\", \"gpt-4o\"]\nwholesale",
            "models = [\"ghost\"]\nwholesale",
        ),
    )
    .unwrap();
    let (code, err) = reload();
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("groups[0].models") && err.contains("ghost"),
        "{err}"
    );
    let pid = std::fs::read_to_string(dir.join("proxy.pid")).unwrap();
    let sent = std::process::Command::new("kill")
        .args(["-HUP", pid.trim()])
        .status()
        .unwrap();
    assert!(sent.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while last_reload().await["last_reload"]["result"] != "failed" {
        assert!(Instant::now() < deadline, "{}", last_reload().await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let state = last_reload().await;
    assert!(
        state["last_reload"]["error"]
            .as_str()
            .unwrap()
            .contains("ghost"),
        "{state}"
    );
    assert_eq!(
        state["state"], "valid",
        "the configuration in force is still the good one"
    );
    let (status, _, _) = call("gpt-4o", false, false).await;
    assert_eq!(status, 200, "nothing changed");
    let metrics = http
        .get(format!("http://127.0.0.1:{}/metrics", ports.1))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("tollgate_config_reloads_total{result=\"ok\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tollgate_config_reloads_total{result=\"failed\"} 1"),
        "{metrics}"
    );

    // A key that needs a restart: the rest applies, the key is reported.
    std::fs::write(
        &path,
        good.replace("[server]\n", "[server]\nmax_body_bytes = 1024\n"),
    )
    .unwrap();
    let (code, err) = reload();
    assert_eq!(code, Some(0), "{err}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while last_reload().await["needs_restart"] != json!(["server"]) {
        assert!(Instant::now() < deadline, "{}", last_reload().await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `SIGTERM` with a stream in flight, on a real embedded `proxy`: it stops accepting at once, the
/// stream finishes whole, the process exits as soon as it has (well within the grace period), and
/// every call served is in the ledger (the embedded settler drained the in-memory stream before
/// the process ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_stream_finish_settles_it_and_exits() {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let dir = testkit::temp_dir("sigterm");
    let ports = (free_port(), free_port());
    let path = dir.join("proxy.toml");
    let config = reload_config(&mock.base_url(), &dir, ports, (0.15, 0.6), false).set(
        "server",
        "shutdown_grace_ms",
        20_000u64,
    );
    std::fs::write(&path, config.toml()).unwrap();
    let key = demo_key_cli(&path);
    let mut proxy = proxy_process(&path, &[]);
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    wait_ready(&http, ports.1).await;
    let url = format!("http://127.0.0.1:{}/compat/v1/chat/completions", ports.0);
    let resp = http
        .post(&url)
        .bearer_auth(&key)
        .json(&chat("gpt-4o-mini", false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let first = resp.headers()["x-request-id"].to_str().unwrap().to_string();
    resp.bytes().await.unwrap();
    // A stream of 6 events 300 ms apart, then SIGTERM while it runs.
    let stream = http
        .post(&url)
        .bearer_auth(&key)
        .header("x-mock-delay-ms", "300")
        .header("x-mock-events", "6")
        .json(&chat("gpt-4o-mini", true));
    let mut running = JoinSet::new();
    running.spawn(async move {
        let resp = stream.send().await.unwrap();
        let id = resp.headers()["x-request-id"].to_str().unwrap().to_string();
        (resp.status().as_u16(), id, resp.text().await.unwrap())
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    let term = std::process::Command::new("kill")
        .args(["-TERM", &proxy.0.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let stopped = Instant::now();
    // New connections are refused soon after (the listener is closed).
    let deadline = Instant::now() + Duration::from_secs(3);
    while tokio::net::TcpStream::connect(("127.0.0.1", ports.0))
        .await
        .is_ok()
    {
        assert!(Instant::now() < deadline, "still accepting after SIGTERM");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, second, body) = running.join_next().await.unwrap().unwrap();
    assert_eq!(status, 200);
    assert!(
        body.contains("[DONE]"),
        "the stream in flight finished whole: {body}"
    );
    // The process exits once nothing is in flight, long before the 20 s grace period.
    let exited = loop {
        if let Some(status) = proxy.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            stopped.elapsed() < Duration::from_secs(15),
            "the proxy did not exit"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exited.success(), "{exited:?}");
    assert!(
        stopped.elapsed() < Duration::from_secs(10),
        "{:?}",
        stopped.elapsed()
    );
    // Both calls are in the ledger: nothing was left in the in-memory stream.
    let db = admin_api::db::connect(&format!(
        "sqlite://{}?mode=rwc",
        dir.join("ledger.db").display()
    ))
    .await
    .unwrap();
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let records = entities::usage_records::Entity::find()
        .filter(entities::usage_records::Column::RequestId.is_in([first, second]))
        .all(&db)
        .await
        .unwrap();
    assert_eq!(records.len(), 2, "{records:?}");
    assert!(records.iter().all(|r| r.charged_nanos > 0));
}

/// Zero-downtime upgrade of a real proxy on Redis, under traffic: `proxy --upgrade` takes over the
/// running proxy's listening sockets; no connection is refused and no call fails while the two
/// hand over, the old process finishes and exits, the new one serves, and every call served is
/// settled once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_under_traffic_refuses_no_connection_and_loses_no_call() {
    let Some(redis_url) = testkit::redis_url() else {
        eprintln!("REDIS_URL not set: upgrade scenario skipped");
        return;
    };
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let dir = testkit::temp_dir("upgrade");
    let prefix = format!("upgrade:{}:{}:", std::process::id(), uuid_like());
    let port = free_port();
    let text = redis_deployment_builder(&redis_url, &prefix, port, &mock.base_url())
        .set(
            "server",
            "pid_file",
            dir.join("proxy.pid").display().to_string(),
        )
        .set(
            "server",
            "upgrade_sock",
            dir.join("upgrade.sock").display().to_string(),
        )
        .toml();
    let settings = Arc::new(Settings::parse(&text, &|_| None).unwrap());
    let admin = AdminApi::start(settings).await;
    let demo = admin.demo_key().await;
    let path = dir.join("proxy.toml");
    std::fs::write(&path, &text).unwrap();
    let mut old = proxy_process(&path, &[]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "proxy did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid_of = || std::fs::read_to_string(dir.join("proxy.pid")).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(10);
    while pid_of().trim() != old.0.id().to_string() {
        assert!(Instant::now() < deadline, "no pid file");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Traffic: 4 clients, a new connection per call (a refused connection would show), for 9 s.
    let url = format!("http://127.0.0.1:{port}/compat/v1/chat/completions");
    let until = Instant::now() + Duration::from_secs(9);
    let mut clients = JoinSet::new();
    for _ in 0..4 {
        let (url, key) = (url.clone(), demo.api_key.clone());
        clients.spawn(async move {
            let http = reqwest::Client::builder()
                .no_proxy()
                .pool_max_idle_per_host(0)
                .build()
                .unwrap();
            let (mut ok, mut failed, mut ids) = (0u32, Vec::new(), Vec::new());
            while Instant::now() < until {
                match http
                    .post(&url)
                    .bearer_auth(&key)
                    .json(&chat("gpt-4o-mini", false))
                    .send()
                    .await
                {
                    Ok(resp) if resp.status() == 200 => {
                        ids.push(resp.headers()["x-request-id"].to_str().unwrap().to_string());
                        resp.bytes().await.unwrap();
                        ok += 1;
                    }
                    Ok(resp) => failed.push(format!("status {}", resp.status())),
                    Err(e) => failed.push(format!("{e:?}")),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (ok, failed, ids)
        });
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut new = proxy_process(&path, &["--upgrade"]);
    // The old process hands its sockets over, finishes, and exits; the new one writes its pid.
    let exited = loop {
        if let Some(status) = old.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < until + Duration::from_secs(20),
            "the old proxy did not exit"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(exited.success(), "{exited:?}");
    assert_eq!(pid_of().trim(), new.0.id().to_string());
    assert!(new.0.try_wait().unwrap().is_none(), "the new proxy runs");
    let mut served = Vec::new();
    while let Some(r) = clients.join_next().await {
        let (ok, failed, ids) = r.unwrap();
        assert!(
            failed.is_empty(),
            "calls failed during the upgrade: {failed:?}"
        );
        assert!(ok > 0);
        served.extend(ids);
    }
    // Every call served is settled once.
    use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let n = entities::usage_records::Entity::find()
            .filter(entities::usage_records::Column::RequestId.is_in(served.clone()))
            .count(&admin.state.db)
            .await
            .unwrap();
        if n == served.len() as u64 {
            break;
        }
        assert!(Instant::now() < deadline, "{n} of {} settled", served.len());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = &mut new;
}

/// SPEC: a deleted key "stops authenticating once the call returns", on every proxy. Two proxy
/// processes on Redis and PostgreSQL keep key records for a minute (`redis.key_cache_ms`); the
/// first call after the partner's DELETE returns is refused on the other proxy too, while a
/// stream already in flight with the key finishes and is charged once. A revocation whose
/// announcement a proxy never received (the directory entry deleted without one) is refused at
/// admission all the same: the admission step checks the directory, with no round trip of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disabled_key_stops_at_once_on_every_proxy() {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let Some(redis_url) = testkit::redis_url() else {
        eprintln!("REDIS_URL not set: two-proxy revocation scenario skipped");
        return;
    };
    let db_url = testkit::fresh_database_url().await;
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let prefix = testkit::redis_prefix("revoke");
    let admin_port = free_port();
    let ports = [free_port(), free_port()];
    let texts: Vec<String> = ports
        .iter()
        .map(|p| {
            redis_deployment_builder(&redis_url, &prefix, *p, &mock.base_url())
                .database(&db_url)
                .set("admin", "listen", format!("127.0.0.1:{admin_port}"))
                .set("redis", "key_cache_ms", 60_000u64)
                .set("money", "hold_ttl_ms", 60_000u64)
                .toml()
        })
        .collect();
    let settings = Arc::new(Settings::parse(&texts[0], &|_| None).unwrap());
    let admin = AdminApi::start(settings).await;
    let partner = admin_api::cli::partner_create(
        &admin.state,
        admin_api::cli::NewPartner::parse("Acme", "1.0", "100", "owner", &["partner:write".into()])
            .unwrap(),
    )
    .await
    .unwrap();
    let token = partner["token"].as_str().unwrap().to_string();
    let _a = spawn_proxy(&texts[0], ports[0], "revoke-a").await;
    let _b = spawn_proxy(&texts[1], ports[1], "revoke-b").await;
    let (a, b) = (
        format!("http://127.0.0.1:{}", ports[0]),
        format!("http://127.0.0.1:{}", ports[1]),
    );
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let partner_call = |method: reqwest::Method, path: String, body: Option<Value>, idem: &str| {
        let mut req = http
            .request(method, format!("{a}/partner/v1{path}"))
            .bearer_auth(&token)
            .header("idempotency-key", idem);
        if let Some(body) = body {
            req = req.json(&body);
        }
        async move {
            let resp = req.send().await.unwrap();
            (
                resp.status().as_u16(),
                resp.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    let (s, created) = partner_call(
        reqwest::Method::PUT,
        "/customers/by-external-id/rev-1".into(),
        Some(json!({"name": "Revoke Co", "contact_email": "ann@revoke.example", "initial_allocation_usd": 20, "retail_rate_multiplier": 1})),
        "c1",
    )
    .await;
    assert_eq!(s, 200, "{created}");
    let id = created["data"]["customer"]["id"].as_i64().unwrap();
    let invite = created["data"]["activation"]["invite_url"]
        .as_str()
        .unwrap();
    let path = &invite[invite.find("/invitations/").unwrap()..];
    let accepted = http
        .post(format!("{a}{path}/accept"))
        .json(&json!({"email": "ann@revoke.example"}))
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 200);
    let mut secrets = Vec::new();
    for n in 0..2 {
        let (s, key) = partner_call(
            reqwest::Method::POST,
            format!("/customers/{id}/api-keys"),
            Some(json!({"name": format!("k{n}"), "group_id": 1})),
            &format!("k{n}"),
        )
        .await;
        assert_eq!(s, 200, "{key}");
        secrets.push((
            key["data"]["key"].as_str().unwrap().to_string(),
            key["data"]["api_key_id"].as_i64().unwrap(),
        ));
    }
    let call = |base: String, secret: String, stream: bool| {
        let http = http.clone();
        async move {
            let resp = http
                .post(format!("{base}/compat/v1/chat/completions"))
                .bearer_auth(secret)
                .header("x-mock-usage", "prompt=10,completion=5")
                .json(&chat("gpt-4o-mini", stream))
                .send()
                .await
                .unwrap();
            resp.status().as_u16()
        }
    };
    let (secret, key_id) = secrets[0].clone();
    // Both proxies have the key's record in their caches.
    assert_eq!(call(a.clone(), secret.clone(), false).await, 200);
    assert_eq!(call(b.clone(), secret.clone(), false).await, 200);
    // A stream with the key is in flight on B when the key is disabled.
    let mut in_flight = JoinSet::new();
    let (client, url, key) = (http.clone(), b.clone(), secret.clone());
    in_flight.spawn(async move {
        let resp = client
            .post(format!("{url}/compat/v1/chat/completions"))
            .bearer_auth(key)
            .header("x-mock-usage", "prompt=10,completion=5")
            .header("x-mock-delay-ms", "300")
            .header("x-mock-events", "4")
            .json(&chat("gpt-4o-mini", true))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let mut body = resp.bytes_stream();
        let mut text = Vec::new();
        while let Some(chunk) = body.next().await {
            text.extend_from_slice(&chunk.unwrap());
        }
        (status, String::from_utf8_lossy(&text).contains("[DONE]"))
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (s, v) = partner_call(
        reqwest::Method::DELETE,
        format!("/customers/{id}/api-keys/{key_id}"),
        None,
        "del",
    )
    .await;
    assert_eq!(s, 200, "{v}");
    // The first calls after the DELETE returned: refused on both proxies.
    assert_eq!(
        call(b.clone(), secret.clone(), false).await,
        401,
        "the other proxy"
    );
    assert_eq!(
        call(a.clone(), secret.clone(), false).await,
        401,
        "the proxy it went through"
    );
    assert_eq!(
        call(b.clone(), secret.clone(), true).await,
        401,
        "streams too"
    );
    // The stream in flight finished normally.
    assert_eq!(in_flight.join_next().await.unwrap().unwrap(), (200, true));
    // A revocation no proxy heard of: the directory entry removed without an announcement.
    let (other, other_id) = secrets[1].clone();
    assert_eq!(
        call(b.clone(), other.clone(), false).await,
        200,
        "cached on B"
    );
    let raw = opstate::RedisStore::connect(&redis_url, &prefix)
        .await
        .unwrap();
    let hash = entities::customer_api_keys::Entity::find_by_id(other_id)
        .one(&admin.state.db)
        .await
        .unwrap()
        .unwrap()
        .key_hash;
    let mut conn = raw.connection();
    let _: i64 = redis::cmd("HDEL")
        .arg(raw.schema().key_directory())
        .arg(&hash)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        call(b.clone(), other, false).await,
        401,
        "refused at admission"
    );
    // Every served call of the first key is charged exactly once: two calls and the stream.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let records = entities::usage_records::Entity::find()
            .filter(entities::usage_records::Column::ApiKeyId.eq(key_id))
            .all(&admin.state.db)
            .await
            .unwrap();
        if records.len() == 3 {
            assert!(
                records
                    .iter()
                    .all(|r| r.status == 200 && r.charged_nanos > 0 && r.measurement == "exact"),
                "{records:?}"
            );
            assert!(records.iter().any(|r| r.stream));
            break;
        }
        assert!(
            records.len() < 3 && Instant::now() < deadline,
            "{records:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let w = settled_wallet(&admin.stores, created_org(&admin.state, id).await).await;
    assert!(w.reserved.is_zero(), "{w:?}");
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
