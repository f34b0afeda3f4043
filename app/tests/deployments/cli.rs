//! The operator's commands: `proxy --print-default-config` and `--check`, the `admin-api` CLI's
//! JSON, invitations revoked and re-issued from the command line.

use super::*;

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
    assert_eq!(printed, include_str!("../../../conf/example.toml"));
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

    let example = include_str!("../../../conf/example.toml");
    let (code, _, stderr) = check_config(example, &[]);
    assert_eq!(code, 2, "secrets from unset variables are refused");
    assert!(
        stderr.contains("database.url") && stderr.contains("DATABASE_URL"),
        "{stderr}"
    );
    let (code, _, stderr) = check_config(example, &EXAMPLE_SECRETS);
    assert_eq!(code, 0, "{stderr}");
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
        let url = format!("{base}{path}/accept");
        testkit::accept_invitation(&http, &url, "bob@initech.example", &outbox)
            .await
            .0
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
