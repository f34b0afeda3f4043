//! Error answers: unknown routes and models, unreachable, failing and stalled suppliers, and admin
//! routes while admin-api cannot be reached.

use super::*;

#[tokio::test]
async fn unknown_routes_and_models() {
    let h = Harness::start().await;
    // /responses without the compat segment is not a route, with or without a key.
    for path in ["/responses", "/v1/responses", "/compat/v1/nope"] {
        let (status, body) = json_of(
            h.post(path, &json!({"model": "gpt-4o-mini", "input": "x"}))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 404, "{path}");
        assert_eq!(body["error"]["code"], "unknown_route", "{path}");
    }
    let (status, _) = json_of(h.http.post(h.url("/responses")).send().await.unwrap()).await;
    assert_eq!(status, 404);
    // Unknown model, a model outside the key's group, and a wrong author prefix all read as unknown.
    for model in ["gpt-9", "gpt-4o", "anthropic/gpt-4o-mini", "openai/o3-mini"] {
        let (status, body) = json_of(
            h.post("/compat/v1/chat/completions", &chat(model, false))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 404, "{model}");
        assert_eq!(body["error"]["code"], "model_not_found", "{model}");
        assert_eq!(body["error"]["type"], "invalid_request_error");
    }
    // A configured model no account serves.
    let (status, body) = json_of(
        h.post("/compat/v1/chat/completions", &chat("o3-mini", false))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 503);
    assert_eq!(body["error"]["code"], "no_account_available");
    assert_eq!(h.mock.request_count(), 0);
    h.no_usage_event().await;
}

#[tokio::test]
async fn unreachable_supplier_gets_a_json_error() {
    let h = Harness::start().await;
    let (status, body) = json_of(
        h.post("/compat/v1/chat/completions", &chat("dead-model", false))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 502);
    assert_eq!(body["error"]["type"], "upstream_error");
    assert_eq!(body["error"]["code"], "upstream_unreachable");
    let e = h.usage_event().await;
    assert_eq!(
        (e.input_tokens, e.output_tokens),
        (0, 0),
        "nothing was served"
    );
    assert_eq!(e.status, 502);
    assert_eq!(e.account_id, "dead");
}

#[tokio::test]
async fn supplier_errors_pass_through_unchanged() {
    let h = Harness::start().await;
    h.mock.set_fault(Some("status=400".parse().unwrap()));
    let resp = h
        .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let received = resp.bytes().await.unwrap();
    assert_eq!(received, h.mock.requests()[0].response_body);
}

#[tokio::test]
async fn stalled_supplier_times_out_with_a_json_error() {
    let h = Harness::start_with(300).await;
    h.mock.set_fault(Some("stall_ms=2000".parse().unwrap()));
    let (status, body) = json_of(
        h.post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 504);
    assert_eq!(body["error"]["code"], "upstream_timeout");
    let e = h.usage_event().await;
    assert_eq!(e.status, 504);
    assert_eq!((e.input_tokens, e.output_tokens), (0, 0));
}

/// Admin routes while admin-api cannot be reached: the partner API's envelope, 503
/// `SERVICE_UNAVAILABLE` (retry later), never a supplier error or an authentication error; a
/// key's ledger reads the same 503 in the gateway's shape.
#[tokio::test]
async fn admin_routes_without_admin_api_answer_503() {
    let h = Harness::start().await;
    for path in ["/partner/v1/me", "/api/v1/organization/billing/balance"] {
        let (status, body) = json_of(
            h.http
                .get(h.url(path))
                .bearer_auth("tgp_dev_whatever")
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 503, "{path}: {body}");
        assert_eq!(body["code"], 503, "{body}");
        assert_eq!(body["reason"], "SERVICE_UNAVAILABLE", "{body}");
        assert!(
            body["message"].as_str().unwrap().contains("admin API"),
            "{body}"
        );
        assert!(body["metadata"].is_object(), "{body}");
    }
    // A key's ledger reads are on the gateway's base URL: the gateway's shape (issue 45).
    for path in [
        "/compat/v1/key",
        "/compat/v1/generations/01a225d33e0b75f287d89dc673838d57",
    ] {
        let (status, body) = json_of(
            h.http
                .get(h.url(path))
                .bearer_auth(&h.key)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 503, "{path}: {body}");
        assert_eq!(body["error"]["code"], "service_unavailable", "{body}");
        assert_eq!(body["error"]["type"], "service_unavailable", "{body}");
        assert!(body.get("reason").is_none(), "{body}");
    }
    assert_eq!(h.mock.request_count(), 0);
    h.no_usage_event().await;
}

/// One HTTP/1.1 exchange on a raw connection: the status, the lowercase headers and the body
/// (Content-Length or chunked framing). `None` when the connection was reset or closed before a
/// whole response arrived.
pub(super) async fn exchange(
    sock: &mut tokio::net::TcpStream,
    request: &[u8],
) -> Option<(u16, Vec<(String, String)>, Vec<u8>)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    sock.write_all(request).await.ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = sock.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let mut body = buf[head_end..].to_vec();
    if let Some(len) = header("content-length") {
        let len: usize = len.parse().ok()?;
        while body.len() < len {
            let n = sock.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            body.extend_from_slice(&chunk[..n]);
        }
        body.truncate(len);
    } else if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        while !body.windows(5).any(|w| w == b"0\r\n\r\n") {
            let n = sock.read(&mut chunk).await.ok()?;
            if n == 0 {
                return None;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    }
    Some((status, headers, body))
}

pub(super) fn raw_post(path: &str, key: Option<&str>, body: &str) -> Vec<u8> {
    let auth = key
        .map(|k| format!("authorization: Bearer {k}\r\n"))
        .unwrap_or_default();
    format!(
        "POST {path} HTTP/1.1\r\nhost: gateway\r\n{auth}content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Every error the gateway writes either leaves the connection usable or says
/// `Connection: close`: a pooled client sends its next request on the same connection and is
/// never reset (a 502 or 504 announced keep-alive and then closed the socket).
#[tokio::test]
async fn every_error_keeps_the_connection_usable_or_says_close() {
    let mut tasks = JoinSet::new();
    let garbage = raw_supplier(
        &mut tasks,
        b"SSH-2.0-OpenSSH_9.6 not http at all\r\n\r\n",
        Duration::ZERO,
    )
    .await;
    let good = |key: &str| {
        raw_post(
            "/compat/v1/chat/completions",
            Some(key),
            &chat("gpt-4o-mini", false).to_string(),
        )
    };
    for round in 0..3 {
        // Fresh gateways each round: a failed account cools, and this test is about connections.
        let closed = Harness::start_with(300).await;
        let broken = Harness::start_with_dead(300, &garbage).await;
        for (h, case) in [
            (&closed, "unreachable"),
            (&broken, "invalid_response"),
            (&closed, "timeout"),
            (&closed, "unknown_route"),
            (&closed, "bad_json"),
            (&closed, "no_key"),
        ] {
            let addr = h.base.trim_start_matches("http://").to_string();
            let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
            let request = match case {
                "unreachable" | "invalid_response" => raw_post(
                    "/compat/v1/chat/completions",
                    Some(&h.key),
                    &chat("dead-model", false).to_string(),
                ),
                "timeout" => {
                    h.mock.set_fault(Some("stall_ms=1500".parse().unwrap()));
                    good(&h.key)
                }
                "unknown_route" => raw_post("/compat/v1/nope", Some(&h.key), "{}"),
                "bad_json" => raw_post("/compat/v1/chat/completions", Some(&h.key), "{not json"),
                _ => raw_post("/compat/v1/chat/completions", None, "{}"),
            };
            let (status, headers, _) = exchange(&mut sock, &request)
                .await
                .unwrap_or_else(|| panic!("round {round} {case}: no whole error response"));
            h.mock.set_fault(None);
            let expected = match case {
                "unreachable" | "invalid_response" => 502,
                "timeout" => 504,
                "unknown_route" => 404,
                "bad_json" => 400,
                _ => 401,
            };
            assert_eq!(status, expected, "round {round} {case}");
            let close = headers
                .iter()
                .any(|(k, v)| k == "connection" && v.eq_ignore_ascii_case("close"));
            if close {
                // The client opens a new connection, as a pooled client does.
                sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
            }
            let (status, _, body) = exchange(&mut sock, &good(&h.key)).await.unwrap_or_else(|| {
                panic!("round {round} {case}: the connection was reset after a {expected} (close announced: {close})")
            });
            assert_eq!(
                status,
                200,
                "round {round} {case}: {}",
                String::from_utf8_lossy(&body)
            );
        }
    }
}
