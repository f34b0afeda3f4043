//! Partner webhooks across real admin-api processes (issue 45): two processes deliver each event
//! once between them, and an admin-api killed mid-delivery redelivers it after its restart.

use super::*;
use std::collections::HashMap;
use std::sync::Mutex;

/// A loopback receiver: records each delivery's event id as it arrives, then waits `hold` before
/// answering 200.
struct Receiver {
    url: String,
    ids: Arc<Mutex<Vec<String>>>,
    _task: JoinSet<()>,
}

impl Receiver {
    async fn start(hold: Duration) -> Receiver {
        let ids = Arc::new(Mutex::new(Vec::new()));
        let seen = ids.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: http::HeaderMap| {
                let seen = seen.clone();
                async move {
                    let id = headers["tollgate-event-id"].to_str().unwrap().to_string();
                    seen.lock().unwrap().push(id);
                    tokio::time::sleep(hold).await;
                    "ok"
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let mut task = JoinSet::new();
        task.spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Receiver {
            url,
            ids,
            _task: task,
        }
    }

    fn ids(&self) -> Vec<String> {
        self.ids.lock().unwrap().clone()
    }
}

/// A deployment of admin-api processes on Redis and a fresh database, webhooks to loopback
/// allowed with fast retries and a 2 s delivery timeout (a claim of 7 s); its state (our own, on
/// the same stores), a partner with an endpoint at `receiver`, and the config file.
async fn deployment(
    redis_url: &str,
    name: &str,
    receiver: &str,
) -> (admin_api::AppState, i64, std::path::PathBuf) {
    let prefix = testkit::redis_prefix(name);
    let text = TestConfig::embedded()
        .set("admin", "embedded", false)
        .set("admin", "listen", "127.0.0.1:0")
        .database(&testkit::fresh_database_url().await)
        .redis(redis_url, &prefix)
        .set("webhooks", "allow_private_addresses", true)
        .set("webhooks", "retry_base_ms", 200u64)
        .set("webhooks", "poll_interval_ms", 50u64)
        .set("webhooks", "timeout_ms", 2000u64)
        .model(Model::gpt_4o_mini())
        .account(Account::openai(
            "mock",
            "http://127.0.0.1:9/v1",
            &["gpt-4o-mini"],
        ))
        .group(Group::new(1, &["gpt-4o-mini"]))
        .toml();
    let settings = Arc::new(Settings::parse(&text, &|_| None).unwrap());
    let stores = Stores::redis(redis_url, &prefix).await.unwrap();
    let state = admin_api::AppState::connect(settings, stores)
        .await
        .unwrap();
    let partner = admin_api::cli::partner_create(
        &state,
        admin_api::cli::NewPartner::parse(
            "Hooked",
            "1.0",
            "10",
            "owner",
            &["partner:write".into()],
        )
        .unwrap(),
    )
    .await
    .unwrap();
    let partner_id = partner["partner_id"].as_i64().unwrap();
    // The endpoint, as the partner API makes it (sealed with this deployment's secret).
    {
        let caller = admin_api::caller::Caller {
            partner_id,
            partner_name: "Hooked".into(),
            token_id: 0,
            token_preview: String::new(),
            scopes: vec!["partner:write".into()],
            role: "owner".into(),
            min_rate: money::RateMultiplier::ONE,
        };
        let txn = sea_orm::TransactionTrait::begin(&state.db).await.unwrap();
        let input = admin_api::services::partner_webhooks::EndpointInput {
            url: Some(receiver.to_string()),
            ..Default::default()
        };
        admin_api::services::partner_webhooks::create(&txn, &state, &caller, input)
            .await
            .unwrap();
        txn.commit().await.unwrap();
    }
    let dir = testkit::temp_dir(name);
    let path = dir.join("config.toml");
    std::fs::write(&path, &text).unwrap();
    (state, partner_id, path)
}

pub(super) fn spawn_admin(path: &std::path::Path) -> KillOnDrop {
    KillOnDrop(
        std::process::Command::new(env!("CARGO_BIN_EXE_admin-api"))
            .arg("--config")
            .arg(path)
            .env_remove("DATABASE_URL")
            .env_remove("TOLLGATE_DATABASE_URL")
            .env_remove("TOLLGATE_REDIS_URL")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    )
}

async fn emit(state: &admin_api::AppState, partner: i64, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let txn = sea_orm::TransactionTrait::begin(&state.db).await.unwrap();
        let id = admin_api::services::partner_webhooks::emit(
            &txn,
            state,
            partner,
            "statement.ready",
            json!({"n": i}),
            None,
        )
        .await
        .unwrap()
        .unwrap();
        txn.commit().await.unwrap();
        ids.push(id);
    }
    ids
}

async fn delivery_states(state: &admin_api::AppState) -> HashMap<String, i64> {
    use sea_orm::EntityTrait;
    let mut out = HashMap::new();
    for d in entities::webhook_deliveries::Entity::find()
        .all(&state.db)
        .await
        .unwrap()
    {
        *out.entry(d.status).or_insert(0) += 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_admin_api_processes_deliver_each_event_once() {
    let Some(redis_url) = testkit::redis_url() else {
        eprintln!("REDIS_URL not set: webhook scenario skipped");
        return;
    };
    let receiver = Receiver::start(Duration::from_millis(20)).await;
    let (state, partner, path) = deployment(&redis_url, "hooks-two", &receiver.url).await;
    let _a = spawn_admin(&path);
    let _b = spawn_admin(&path);
    let sent = emit(&state, partner, 40).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while receiver.ids().len() < sent.len() {
        assert!(
            Instant::now() < deadline,
            "{} of {} delivered",
            receiver.ids().len(),
            sent.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut got = receiver.ids();
    got.sort();
    let mut want = sent.clone();
    want.sort();
    assert_eq!(got, want, "each event once, none twice");
    assert_eq!(delivery_states(&state).await.get("succeeded"), Some(&40));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_admin_api_redelivers_after_restart() {
    let Some(redis_url) = testkit::redis_url() else {
        eprintln!("REDIS_URL not set: webhook scenario skipped");
        return;
    };
    // The receiver holds its answer 1.5 s: the process is killed while it waits.
    let receiver = Receiver::start(Duration::from_millis(1500)).await;
    let (state, partner, path) = deployment(&redis_url, "hooks-kill", &receiver.url).await;
    let sent = emit(&state, partner, 1).await;
    let mut first = spawn_admin(&path);
    let deadline = Instant::now() + Duration::from_secs(30);
    while receiver.ids().is_empty() {
        assert!(Instant::now() < deadline, "never delivered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    assert_eq!(
        delivery_states(&state).await.get("pending"),
        Some(&1),
        "not done"
    );
    // Restarted: once the dead process's claim (2 s + 5 s) lapses, the event goes again.
    let _second = spawn_admin(&path);
    let deadline = Instant::now() + Duration::from_secs(30);
    while delivery_states(&state).await.get("succeeded") != Some(&1) {
        assert!(Instant::now() < deadline, "not redelivered");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ids = receiver.ids();
    assert_eq!(
        ids.len(),
        2,
        "at least once: the interrupted delivery and its redelivery"
    );
    assert!(
        ids.iter().all(|i| *i == sent[0]),
        "the same event id: {ids:?}"
    );
}
