//! The console in a real browser (issue 28): headless Chromium from the distribution's packages
//! (`chromium`, `chromium-driver`), driven by `tests/browser/console.py` (selenium, in the SDK
//! venv) by visible labels and button texts, through the gateway of an embedded deployment. Every
//! page: no SEVERE entry in the browser's log (JavaScript errors, CSP violations) and no serious or
//! critical axe-core finding; screenshots land in `target/console-shots/`.
//!
//! Without Chromium, its driver or the venv the test is skipped, unless
//! `TOLLGATE_REQUIRE_BROWSER=1` (CI), which makes that a failure.

use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;
use testkit::{Account, Group, Model, TestConfig};
use tollgate::{App, Role};

/// The browser, its driver and the Python with selenium, or `None` (skip) when one is missing.
fn browser_tools() -> Option<std::path::PathBuf> {
    let required = std::env::var("TOLLGATE_REQUIRE_BROWSER").as_deref() == Ok("1");
    let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    let driver = std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into());
    let python = testkit::sdk_python();
    let missing: Vec<&str> = [
        (!Path::new(&chromium).exists()).then_some("chromium"),
        (!Path::new(&driver).exists()).then_some("chromium-driver"),
        python.is_none().then_some("the SDK venv (scripts/sdk-env)"),
    ]
    .into_iter()
    .flatten()
    .collect();
    if missing.is_empty() {
        return python;
    }
    assert!(
        !required,
        "TOLLGATE_REQUIRE_BROWSER=1 but {} missing (scripts/browser-env installs them)",
        missing.join(", ")
    );
    eprintln!("browser test skipped: {} missing", missing.join(", "));
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_a_real_browser() {
    let Some(python) = browser_tools() else {
        return;
    };
    let mock = mock_supplier::MockSupplier::start(mock_supplier::MockConfig::default())
        .await
        .unwrap();
    // Stripe's hosted Checkout stand-in: "Add funds" and "Save a card" must reach it from the
    // browser under the console's CSP.
    let checkout = super::checkout::Checkout::start().await;
    let config = TestConfig::embedded()
        .set("payments", "provider", "stripe")
        .set("payments", "stripe_secret_key", super::checkout::SECRET_KEY)
        .set("payments", "stripe_webhook_secret", "whsec_browser")
        .set("payments", "stripe_api_base", checkout.base.clone())
        // The partner's webhook receiver runs on loopback (console.py).
        .set("webhooks", "allow_private_addresses", true)
        .database(&testkit::fresh_database_url().await)
        .model(Model::gpt_4o_mini())
        .account(Account::openai("mock", &mock.base_url(), &["gpt-4o-mini"]))
        .group(Group::new(1, &["gpt-4o-mini"]));
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
    let token = partner["token"].as_str().unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    // A customer's invitation path (`/invitations/…`) and customer id.
    let customer = |external: &'static str, email: &'static str| {
        let (http, base, token) = (http.clone(), base.clone(), token.to_string());
        async move {
            let created: Value = http
                .put(format!(
                    "{base}/partner/v1/customers/by-external-id/{external}"
                ))
                .bearer_auth(token)
                .header("idempotency-key", external)
                .json(
                    &json!({"name": format!("Org {external}"), "contact_email": email,
                              "initial_allocation_usd": 25, "retail_rate_multiplier": 1}),
                )
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let invite = created["data"]["activation"]["invite_url"]
                .as_str()
                .unwrap();
            (
                invite[invite.find("/invitations/").unwrap()..].to_string(),
                created["data"]["customer"]["id"].as_i64().unwrap(),
            )
        }
    };
    let (path, _) = customer("browser-1", "ann@browser.example").await;
    // A second customer whose invitation has expired.
    let (expired, late) = customer("browser-2", "cy@browser.example").await;
    {
        use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};
        let row = entities::invitations::Entity::find()
            .filter(entities::invitations::Column::CustomerId.eq(late))
            .one(&state.db)
            .await
            .unwrap()
            .unwrap();
        let mut row: entities::invitations::ActiveModel = row.into();
        row.expires_at = Set(chrono::Utc::now() - chrono::Duration::hours(1));
        row.update(&state.db).await.unwrap();
    }
    let outbox = config.settings().mail.outbox_dir.clone();
    // The partner's first owner, invited by the operator; and another partner.
    let link = admin_api::cli::user_invite(
        &state,
        "pat@acme.example",
        None,
        Some(partner["partner_id"].as_i64().unwrap()),
        "owner",
    )
    .await
    .unwrap();
    let url = link["sign_up_url"].as_str().unwrap();
    let partner_join = url[url.find("/console/join/").unwrap()..].to_string();
    let other = admin_api::cli::partner_create(
        &state,
        admin_api::cli::NewPartner::parse("Other", "1.0", "1", "owner", &["partner:read".into()])
            .unwrap(),
    )
    .await
    .unwrap();
    let other_partner = other["partner_id"].as_i64().unwrap().to_string();
    let shots = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/console-shots");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("browser/console.py");
    let mut cmd = std::process::Command::new(&python);
    cmd.arg(&script)
        .args([base.as_str(), &path, "ann@browser.example"])
        .arg(&shots)
        .arg(&outbox)
        .arg(&expired)
        .arg(&partner_join)
        .arg(&other_partner)
        .arg(&checkout.base)
        .env("NO_PROXY", "*")
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("ALL_PROXY");
    let output = tokio::time::timeout(
        Duration::from_secs(180),
        tokio::task::spawn_blocking(move || cmd.output()),
    )
    .await
    .expect("the browser run took more than 3 minutes")
    .unwrap()
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let out: Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|_| {
        panic!(
            "console.py printed no JSON: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    assert!(out.get("error").is_none(), "{out:#}");
    assert_eq!(out["steps"].as_array().unwrap().len(), 31, "{out:#}");
    let pages = out["pages"].as_object().unwrap();
    assert!(pages.len() >= 55, "{out:#}");
    for (name, page) in pages {
        assert_eq!(
            page["log"],
            json!([]),
            "{name}: the browser's log has errors: {page:#}"
        );
        let serious: Vec<&Value> = page["axe"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| matches!(v["impact"].as_str(), Some("serious" | "critical")))
            .collect();
        assert!(serious.is_empty(), "{name}: axe findings {serious:#?}");
        assert!(
            shots.join(format!("{name}.png")).exists(),
            "{name}: no screenshot"
        );
    }
    running.stop().await.unwrap();
}
