//! Observability: the metrics count requests and tokens, and the logs never contain a credential.

use super::*;

#[tokio::test]
async fn metrics_count_requests_and_tokens() {
    let h = Harness::start().await;
    h.post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
        .header("x-mock-usage", "prompt=11,completion=5")
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let _ = h.usage_event().await;
    let text = h.metrics.render();
    assert!(
        text.contains(r#"tollgate_requests_total{model="gpt-4o-mini",route="chat_completions",status="200"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(
            r#"tollgate_tokens_total{kind="input",measurement="exact",model="gpt-4o-mini"} 11"#
        ),
        "{text}"
    );
    assert!(
        text.contains("tollgate_upstream_latency_seconds_bucket"),
        "{text}"
    );
    assert!(
        text.contains(r#"tollgate_in_flight{route="chat_completions"} 0"#),
        "{text}"
    );
}

#[tokio::test]
async fn logs_never_contain_credentials() {
    let h = Harness::start().await;
    let partner = credentials::generate(Kind::PartnerToken, Env::Dev);
    for (name, value) in [
        ("authorization", format!("Bearer {}", h.key)),
        ("x-api-key", h.key.clone()),
        ("x-alt-api-key", h.key.clone()),
        ("authorization", format!("Bearer {}", partner.expose())),
    ] {
        let _ = h
            .http
            .post(h.url("/compat/v1/chat/completions"))
            .header(name, value)
            .body(chat("gpt-4o-mini", true).to_string())
            .send()
            .await
            .unwrap()
            .bytes()
            .await;
    }
    let _ = h.usage_event().await;
    let logs = String::from_utf8_lossy(&captured_logs().lock().unwrap()).into_owned();
    assert!(logs.contains("request settled"), "the capture works");
    assert!(!logs.contains(&h.key), "customer key in logs");
    assert!(!logs.contains(partner.expose()), "partner token in logs");
    let leak: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("sk-mock-supplier"))
        .take(3)
        .collect();
    assert!(leak.is_empty(), "supplier key in logs: {leak:?}");
}

/// The milliseconds of `name` in a `Server-Timing` value.
fn timing(value: &str, name: &str) -> Option<f64> {
    value.split(',').find_map(|part| {
        let part = part.trim();
        part.strip_prefix(name)?.strip_prefix(";dur=")?.parse().ok()
    })
}

/// Every gateway answer says what the gateway added and what the supplier took (`Server-Timing`,
/// DESIGN §6d); the gateway's own errors carry the gateway's part only; the histogram counts the
/// gateway's part; `[server] server_timing = false` turns the header off.
#[tokio::test]
async fn answers_carry_the_gateways_own_time() {
    let h = Harness::start().await;
    h.mock.set_fault(Some("stall_ms=120".parse().unwrap()));
    let started = Instant::now();
    let resp = h
        .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
        .send()
        .await
        .unwrap();
    h.mock.set_fault(None);
    let elapsed = started.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(resp.status(), 200);
    let value = resp.headers()["server-timing"]
        .to_str()
        .unwrap()
        .to_string();
    resp.bytes().await.unwrap();
    let (gateway, upstream) = (
        timing(&value, "gateway").unwrap(),
        timing(&value, "upstream").unwrap(),
    );
    assert!(upstream >= 100.0, "the supplier's wait: {value}");
    assert!(gateway >= 0.0 && gateway < upstream, "{value}");
    assert!(
        gateway + upstream <= elapsed + 1.0,
        "{value} within {elapsed} ms"
    );

    // A refusal the gateway writes itself: its own time only.
    let resp = h
        .post("/compat/v1/chat/completions", &chat("no-such-model", false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let value = resp.headers()["server-timing"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(timing(&value, "gateway").is_some(), "{value}");
    assert!(timing(&value, "upstream").is_none(), "{value}");
    resp.bytes().await.unwrap();
    let _ = h.usage_event().await;
    let text = h.metrics.render();
    assert!(
        text.contains(r#"tollgate_gateway_time_seconds_count{route="chat_completions"} 2"#),
        "{text}"
    );

    // Switched off.
    let off = Harness::start_with_config(|t| {
        t.replacen("[server]\n", "[server]\nserver_timing = false\n", 1)
    })
    .await;
    let resp = off
        .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("server-timing").is_none());
}
