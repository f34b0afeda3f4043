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
