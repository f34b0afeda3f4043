//! End-to-end: keys created through admin-api's services land in the ledger database, the key
//! directory is rebuilt from it exactly as an embedded gateway does at start, and the gateway
//! serves the key against the mock supplier. Runs on PostgreSQL when `DATABASE_URL` is set, else
//! on SQLite; on Redis as well when `REDIS_URL` is set.

#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: failing loudly is the point"
)]

use credentials::{Env, KeyHasher};
use mock_supplier::{MockConfig, MockSupplier};
use opstate::Stores;
use proxy::{Gateway, Metrics};
use settings::Settings;
use std::sync::Arc;
use tokio::task::JoinSet;

const PEPPER: &str = "e2e-pepper-0123456789";

async fn stores_under_test() -> Vec<(&'static str, Stores)> {
    let mut out = vec![("memory", Stores::memory())];
    if let Ok(url) = std::env::var("REDIS_URL") {
        let prefix = format!("e2e:{}:", uuid::Uuid::new_v4().simple());
        out.push((
            "redis",
            Stores::redis(&url, &prefix)
                .await
                .expect("REDIS_URL unusable"),
        ));
    }
    out
}

#[tokio::test]
async fn key_from_the_database_reaches_the_gateway() {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let db_url = tollgate_e2e::fresh_database_url().await;
    let text = format!(
        r#"
[server]
listen = "127.0.0.1:1"
[admin]
embedded = true
[database]
url = "{db_url}"
[security]
key_pepper = "{PEPPER}"
[[models]]
id = "gpt-4o-mini"
family = "gpt-4o"
kind = "text"
input_per_mtok = 0.15
output_per_mtok = 0.6
[[accounts]]
id = "mock"
provider = "openai"
base_url = "{}"
api_key = "sk-mock"
models = ["gpt-4o-mini"]
[[groups]]
id = 1
name = "Standard"
product_code = "std"
models = ["gpt-4o-mini"]
wholesale_rate_multiplier = 1
"#,
        mock.base_url()
    );
    let settings = Arc::new(Settings::parse(&text, &|_| None).unwrap());
    let db = admin_api::db::connect(&db_url).await.unwrap();
    admin_api::db::migrate(&db).await.unwrap();
    // Minted while no gateway runs: only the database knows it.
    let minted = admin_api::demo::demo_key(
        &db,
        Stores::memory().keys.as_ref(),
        &KeyHasher::new(PEPPER.as_bytes()),
        Env::Dev,
        1,
    )
    .await
    .unwrap();

    for (name, stores) in stores_under_test().await {
        assert!(!stores.keys.is_loaded().await.unwrap(), "{name}");
        let loaded = admin_api::keys::rebuild_directory(&db, stores.keys.as_ref())
            .await
            .unwrap();
        assert_eq!(loaded, 1, "{name}");
        let gateway = Gateway::new(
            settings.clone(),
            stores.clone(),
            Arc::new(Metrics::new().unwrap()),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (_stop, stop_rx) = tokio::sync::watch::channel(false);
        let mut tasks = JoinSet::new();
        tasks.spawn(proxy::serve_listener(listener, gateway, stop_rx));
        let resp = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .post(format!("{base}/compat/v1/chat/completions"))
            .bearer_auth(&minted.api_key)
            .header("x-mock-usage", "prompt=3,completion=2")
            .body(r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}"#)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{name}");
        let mut event = None;
        for _ in 0..200 {
            let got = stores
                .usage
                .claim("e2e", 10, std::time::Duration::from_secs(60))
                .await
                .unwrap();
            if let Some(e) = got.into_iter().next() {
                event = Some(e.event);
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let event = event.expect("usage event");
        assert_eq!(event.org_id, minted.organization_id, "{name}");
        assert_eq!(event.key_id, minted.key_id, "{name}");
        assert_eq!((event.input_tokens, event.output_tokens), (3, 2), "{name}");
    }
}
