//! What an operator watches: every metric the Grafana dashboard and the alert rules query is
//! exported by a deployment that served traffic, and the labels stay within bounded sets.

use super::*;
use std::collections::BTreeSet;

const DASHBOARD: &str = include_str!("../../../deploy/grafana/tollgate.json");
const ALERTS: &str = include_str!("../../../deploy/prometheus/alerts.yml");

/// Every `tollgate_…` name in `text`.
fn names_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("tollgate_") {
        let start = i + at;
        let mut end = start + "tollgate_".len();
        while end < bytes.len() && (bytes[end].is_ascii_lowercase() || bytes[end] == b'_') {
            end += 1;
        }
        // A name, not the tail of another word (`deploy/grafana/tollgate.json` has none).
        if start == 0 || !(bytes[start - 1].is_ascii_alphanumeric() || bytes[start - 1] == b'_') {
            out.insert(text[start..end].to_string());
        }
        i = end;
    }
    out
}

/// The exposition's sample names and every label name it uses.
fn exported(exposition: &str) -> (BTreeSet<String>, BTreeSet<String>) {
    let (mut names, mut labels) = (BTreeSet::new(), BTreeSet::new());
    for line in exposition
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let name_end = line.find(['{', ' ']).unwrap();
        names.insert(line[..name_end].to_string());
        if let Some(rest) = line[name_end..].strip_prefix('{') {
            let inside = &rest[..rest.rfind('}').unwrap()];
            for pair in inside.split("\",").filter(|p| !p.is_empty()) {
                labels.insert(pair.split('=').next().unwrap().trim().to_string());
            }
        }
    }
    (names, labels)
}

#[tokio::test]
async fn every_metric_the_dashboard_and_the_alerts_query_is_exported() {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let text = config_builder(&mock.base_url(), "http://127.0.0.1:9")
        .set("server", "listen", "127.0.0.1:0")
        .set("metrics", "listen", "127.0.0.1:0")
        .set("metrics", "organization_labels", 5u64)
        .model(
            Model::text("gpt-4o-large", 5.0, 15.0)
                .family("gpt-4o")
                .downgrade_to("gpt-4o-mini"),
        )
        .toml();
    let settings = Arc::new(Settings::parse(&text, &|_| None).unwrap());
    let app = App::build(settings, Role::Proxy).await.unwrap();
    let state = app.admin_state().unwrap().clone();
    let key = admin_api::demo::demo_key(
        &state.db,
        state.stores.keys.as_ref(),
        &state.hasher,
        state.env,
        1,
    )
    .await
    .unwrap();
    admin_api::services::wallets::reload(&state, key.organization_id)
        .await
        .unwrap();
    let running = app.start();
    let addresses = running.addresses();
    let base = running.base_url().unwrap();
    let scrape = format!("http://{}/metrics", addresses.metrics.unwrap());
    let http = reqwest::Client::new();

    // Traffic: calls served, a stream, and calls to a model whose only account is down.
    for (model, stream) in [
        ("gpt-4o-mini", false),
        ("gpt-4o-mini", true),
        ("gpt-4o-mini", false),
        ("dead-model", false),
        ("dead-model", false),
    ] {
        let r = http
            .post(format!("{base}/compat/v1/chat/completions"))
            .bearer_auth(&key.api_key)
            .json(&chat(model, stream))
            .send()
            .await
            .unwrap();
        let _ = r.bytes().await.unwrap();
    }
    // The settler books the calls that reached an account (the served ones, and the dead
    // account's failures, charged nothing).
    let exact = |body: &str| -> u64 {
        body.lines()
            .find_map(|l| l.strip_prefix("tollgate_usage_records_total{measurement=\"exact\"} "))
            .map_or(0, |v| v.trim().parse().unwrap())
    };
    let deadline = Instant::now() + Duration::from_secs(15);
    let exposition = loop {
        let body = http
            .get(&scrape)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        if exact(&body) >= 3 || Instant::now() > deadline {
            break body;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        exact(&exposition) >= 3,
        "an embedded admin-api's figures are on the proxy's endpoint: {exposition}"
    );
    let org_label = format!(
        "tollgate_organization_spend_usd_total{{organization=\"{}\"}}",
        key.organization_id
    );
    assert!(exposition.contains(&org_label), "{exposition}");
    assert!(exposition.contains("tollgate_store_up 1"), "{exposition}");
    assert!(
        exposition.contains("tollgate_model_accounts{model=\"gpt-4o-mini\"} 1"),
        "{exposition}"
    );

    let (names, labels) = exported(&exposition);
    let queried: BTreeSet<String> = names_in(DASHBOARD)
        .union(&names_in(ALERTS))
        .cloned()
        .collect();
    assert!(
        queried.len() > 25,
        "the dashboard and the rules query the metrics: {queried:?}"
    );
    let missing: Vec<&String> = queried.iter().filter(|n| !names.contains(*n)).collect();
    assert!(missing.is_empty(), "queried but not exported: {missing:?}");

    // Hygiene: counters end in _total, and labels come from bounded sets (no key or request
    // id; the organization only because organization_labels turned it on, with its cap).
    let allowed: BTreeSet<&str> = [
        "route",
        "model",
        "status",
        "reason",
        "kind",
        "measurement",
        "from",
        "to",
        "layer",
        "account",
        "result",
        "status_class",
        "action",
        "organization",
        "le",
    ]
    .into();
    let unexpected: Vec<&String> = labels
        .iter()
        .filter(|l| !allowed.contains(l.as_str()))
        .collect();
    assert!(
        unexpected.is_empty(),
        "labels outside the documented sets: {unexpected:?}"
    );
    for line in exposition.lines().filter(|l| l.starts_with("# TYPE ")) {
        let mut parts = line["# TYPE ".len()..].split(' ');
        let (name, kind) = (parts.next().unwrap(), parts.next().unwrap());
        assert!(name.starts_with("tollgate_"), "{line}");
        assert_eq!(kind == "counter", name.ends_with("_total"), "{line}");
    }
    running.stop().await.unwrap();
}
