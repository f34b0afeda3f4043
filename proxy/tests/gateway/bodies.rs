//! Request bodies: large bodies forwarded intact, the size limit, chunked uploads with and without
//! a length, and malformed bodies refused before the supplier.

use super::*;

#[tokio::test]
async fn large_body_is_forwarded_intact_and_oversize_is_refused() {
    let h = Harness::start().await;
    let filler = "x".repeat(3 * 1024 * 1024);
    let body = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": filler}]});
    let sent = body.to_string();
    let resp = h
        .post("/compat/v1/chat/completions", &body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(h.mock.requests()[0].body.len(), sent.len());
    assert_eq!(
        h.mock.requests()[0].body,
        sent.as_bytes(),
        "3 MB body arrives byte for byte"
    );

    let too_big = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x".repeat(MAX_BODY)}]});
    let (status, err) = json_of(
        h.post("/compat/v1/chat/completions", &too_big)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 413);
    assert_eq!(err["error"]["code"], "request_too_large");
    assert_eq!(
        h.mock.request_count(),
        1,
        "the oversize body never reached the supplier"
    );
}

#[tokio::test]
async fn chunked_body_over_64k_needs_a_length() {
    let h = Harness::start().await;
    let body = chat(&"m".repeat(100 * 1024), false).to_string();
    let resp = h.post_chunked(&body, 16 * 1024).await;
    let (status, err) = json_of(resp).await;
    assert_eq!(status, 411);
    assert_eq!(err["error"]["code"], "length_required");
    assert_eq!(h.mock.request_count(), 0);
}

#[tokio::test]
async fn small_chunked_body_is_forwarded() {
    let h = Harness::start().await;
    let body = chat("gpt-4o-mini", false).to_string();
    let resp = h.post_chunked(&body, 7).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(h.mock.requests()[0].body, body.as_bytes());
}

#[tokio::test]
async fn malformed_bodies_are_refused_before_the_supplier() {
    let h = Harness::start().await;
    for (body, param) in [
        ("{not json".to_string(), Value::Null),
        (json!({"messages": []}).to_string(), json!("model")),
        (
            json!({"model": "gpt-4o-mini"}).to_string(),
            json!("messages"),
        ),
        (
            json!({"model": "gpt-4o-mini", "messages": [], "stream": "yes"}).to_string(),
            json!("stream"),
        ),
        (String::new(), Value::Null),
    ] {
        let resp = h
            .http
            .post(h.url("/compat/v1/chat/completions"))
            .bearer_auth(&h.key)
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let (status, err) = json_of(resp).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(err["error"]["type"], "invalid_request_error", "{body}");
        assert_eq!(err["error"]["param"], param, "{body}");
    }
    assert_eq!(h.mock.request_count(), 0);
}

/// A body nested deeper than the documented limit (128 levels) never reaches a supplier: one
/// customer must not be able to make an account fail (and cool) for every tenant.
#[tokio::test]
async fn deeply_nested_json_is_refused_before_the_supplier() {
    let h = Harness::start().await;
    let levels = 100_000;
    let arrays = format!("{}{}", "[".repeat(levels), "]".repeat(levels));
    let objects = format!("{}1{}", r#"{"a":"#.repeat(levels), "}".repeat(levels));
    let bodies = [
        (
            "/compat/v1/chat/completions",
            format!(r#"{{"model":"gpt-4o-mini","messages":{arrays}}}"#),
        ),
        (
            "/compat/v1/responses",
            format!(r#"{{"model":"gpt-4o-mini","input":{arrays}}}"#),
        ),
        (
            "/compat/v1/chat/completions",
            format!(
                r#"{{"model":"gpt-4o-mini","messages":[{{"role":"user","content":"hi"}}],"extra":{objects}}}"#
            ),
        ),
    ];
    for (path, body) in bodies {
        let (status, err) = json_of(
            h.http
                .post(h.url(path))
                .bearer_auth(&h.key)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 400, "{path}: {err}");
        assert_eq!(err["error"]["type"], "invalid_request_error", "{path}");
        assert!(
            err["error"]["message"]
                .as_str()
                .unwrap()
                .contains("128 levels"),
            "{err}"
        );
    }
    assert_eq!(h.mock.request_count(), 0, "nothing reached the supplier");
    h.no_usage_event().await;
    // At the limit, the body is forwarded.
    let nested = format!("{}{}", "[".repeat(120), "]".repeat(120));
    let body = format!(
        r#"{{"model":"gpt-4o-mini","messages":[{{"role":"user","content":"hi"}}],"extra":{nested}}}"#
    );
    let resp = h
        .http
        .post(h.url("/compat/v1/chat/completions"))
        .bearer_auth(&h.key)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(h.mock.request_count(), 1);
}

/// A client that stops sending its body gets 408 after `server.request_body_timeout_ms` (1 s
/// here), with `Connection: close`; nothing reached a supplier, nothing was held or charged.
#[tokio::test]
async fn a_stalled_request_body_answers_408() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let h = Harness::start().await;
    let before = h.wallet().await;
    let addr = h.base.trim_start_matches("http://").to_string();
    let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /compat/v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{{\"model\":\"gpt-4o-mini\",",
        h.key
    );
    sock.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), sock.read_to_end(&mut out))
        .await
        .expect("the gateway answered and closed")
        .unwrap();
    let text = String::from_utf8_lossy(&out).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 408"), "{text}");
    assert!(text.contains("connection: close"), "{text}");
    assert!(text.contains("request_timeout"), "{text}");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "waited for the timeout"
    );
    assert_eq!(h.mock.request_count(), 0);
    h.no_usage_event().await;
    let after = h.wallet().await;
    assert_eq!(
        (after.balance, after.reserved),
        (before.balance, before.reserved)
    );
}

/// Only the headers a supplier needs reach it: an unused 64 KiB client header, cookies,
/// attribution, SDK telemetry and forwarding headers stay at the gateway.
#[tokio::test]
async fn only_allowlisted_client_headers_reach_the_supplier() {
    let h = Harness::start().await;
    let resp = h
        .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
        .header("x-padding", "p".repeat(60 * 1024))
        .header("cookie", "session=secret")
        .header("x-tollgate-project", "alpha")
        .header("x-stainless-lang", "python")
        .header("x-forwarded-for", "10.0.0.1")
        .header("openai-beta", "assistants=v2")
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let names: Vec<String> = h.mock.requests()[0]
        .headers
        .iter()
        .map(|(k, _)| k.clone())
        .collect();
    for absent in [
        "x-padding",
        "cookie",
        "x-tollgate-project",
        "x-stainless-lang",
        "x-forwarded-for",
    ] {
        assert!(
            !names.iter().any(|n| n == absent),
            "{absent} reached the supplier: {names:?}"
        );
    }
    for present in [
        "openai-beta",
        "accept",
        "content-type",
        "authorization",
        "host",
        "content-length",
    ] {
        assert!(
            names.iter().any(|n| n == present),
            "{present} missing: {names:?}"
        );
    }
    let recorded = h.mock.requests();
    let auth = &recorded[0]
        .headers
        .iter()
        .find(|(k, _)| k == "authorization")
        .unwrap()
        .1;
    assert_eq!(
        auth, "Bearer sk-mock-supplier",
        "the account's credential, never the customer's"
    );
}

/// Bad input on every gateway route: each answer is a 4xx in the route's error shape (or a closed
/// connection for framing errors), nothing reaches a supplier, nothing is held or charged, and
/// the next request on a fresh connection is served.
#[tokio::test]
async fn bad_input_on_every_route_changes_nothing() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let h = Harness::start().await;
    let before = h.wallet().await;
    let addr = h.base.trim_start_matches("http://").to_string();
    let form_ct = "multipart/form-data; boundary=XyZ";
    let bodies: Vec<(&str, &str, &str, Vec<u8>)> = vec![
        (
            "malformed json",
            "/compat/v1/chat/completions",
            "application/json",
            b"{\"model\":".to_vec(),
        ),
        (
            "not an object",
            "/compat/v1/chat/completions",
            "application/json",
            b"[1,2,3]".to_vec(),
        ),
        (
            "model a number",
            "/compat/v1/chat/completions",
            "application/json",
            br#"{"model":5,"messages":[]}"#.to_vec(),
        ),
        (
            "stream a string",
            "/compat/v1/chat/completions",
            "application/json",
            br#"{"model":"gpt-4o-mini","stream":"yes","messages":[]}"#.to_vec(),
        ),
        (
            "huge max_tokens",
            "/compat/v1/chat/completions",
            "application/json",
            br#"{"model":"gpt-4o-mini","max_tokens":1e400,"messages":[]}"#.to_vec(),
        ),
        (
            "negative max_tokens",
            "/compat/v1/chat/completions",
            "application/json",
            br#"{"model":"gpt-4o-mini","max_tokens":-5,"messages":[]}"#.to_vec(),
        ),
        (
            "invalid utf-8",
            "/compat/v1/chat/completions",
            "application/json",
            b"{\"model\":\"gpt-4o-mini\xff\xfe\"}".to_vec(),
        ),
        (
            "empty body",
            "/compat/v1/responses",
            "application/json",
            Vec::new(),
        ),
        (
            "responses wrong model type",
            "/compat/v1/responses",
            "application/json",
            br#"{"model":["gpt-4o-mini"],"input":"x"}"#.to_vec(),
        ),
        (
            "empty multipart",
            "/compat/v1/audio/transcriptions",
            form_ct,
            Vec::new(),
        ),
        (
            "truncated multipart",
            "/compat/v1/audio/transcriptions",
            form_ct,
            b"--XyZ\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\nwhisper-1".to_vec(),
        ),
        (
            "json on the form route",
            "/compat/v1/audio/transcriptions",
            "application/json",
            br#"{"model":"whisper-1"}"#.to_vec(),
        ),
    ];
    for (name, path, ct, body) in bodies {
        let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let mut request = format!(
            "POST {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-type: {ct}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            h.key,
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(&body);
        sock.write_all(&request).await.unwrap();
        let mut out = Vec::new();
        sock.read_to_end(&mut out).await.unwrap();
        let text = String::from_utf8_lossy(&out).to_string();
        let status: u16 = text.split(' ').nth(1).unwrap_or("0").parse().unwrap_or(0);
        assert!((400..500).contains(&status), "{name}: {text}");
        let json = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b)
            .unwrap_or_default();
        let v: Value =
            serde_json::from_str(json).unwrap_or_else(|_| panic!("{name}: not JSON: {text}"));
        assert!(v["error"]["message"].is_string(), "{name}: {v}");
        assert!(v["error"]["type"].is_string(), "{name}: {v}");
    }
    // Framing errors (both Content-Length and Transfer-Encoding: 400 and the connection closes) and
    // a 200 KiB header (accepted by the HTTP layer, refused by the route, never forwarded).
    for (name, request) in [
        (
            "length and chunked",
            format!(
                "POST /compat/v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
                h.key
            ),
        ),
        (
            "oversized header",
            format!(
                "POST /compat/v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\nx-big: {}\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{{}}",
                h.key,
                "b".repeat(200 * 1024)
            ),
        ),
    ] {
        let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let _ = sock.write_all(request.as_bytes()).await;
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), sock.read_to_end(&mut out)).await;
        let text = String::from_utf8_lossy(&out).to_string();
        let status: u16 = text.split(' ').nth(1).unwrap_or("0").parse().unwrap_or(0);
        assert!((400..500).contains(&status), "{name}: {text}");
    }
    assert_eq!(h.mock.request_count(), 0, "nothing reached a supplier");
    h.no_usage_event().await;
    let after = h.wallet().await;
    assert_eq!(
        (after.balance, after.reserved),
        (before.balance, before.reserved)
    );
    // The next request on a fresh connection is served.
    let resp = h
        .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

/// The carried Pingora write patch (vendor/README.md) from a raw client's side: a request that
/// waits for `100 Continue` gets it, its body reaches the supplier whole and the call is charged;
/// on the same keep-alive connection a stream follows, framed as one chunked body that ends
/// once, and a third call still works (nothing left buffered between messages).
#[tokio::test]
async fn expect_continue_then_a_stream_on_one_connection() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let h = Harness::start().await;
    let addr = h.base.trim_start_matches("http://").to_string();
    let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let body = chat("gpt-4o-mini", false).to_string();
    let head = format!(
        "POST /compat/v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\nexpect: 100-continue\r\ncontent-length: {}\r\n\r\n",
        h.key,
        body.len()
    );
    sock.write_all(head.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), sock.read(&mut buf))
            .await
            .expect("100 Continue within 5 s")
            .unwrap();
        assert!(n > 0, "closed before 100 Continue");
        got.extend_from_slice(&buf[..n]);
    }
    let interim = String::from_utf8_lossy(&got).to_ascii_lowercase();
    assert!(interim.starts_with("http/1.1 100"), "{interim}");
    sock.write_all(body.as_bytes()).await.unwrap();
    let first = read_one_response(&mut sock).await;
    assert!(first.starts_with("http/1.1 200"), "{first}");
    assert_eq!(h.mock.request_count(), 1);
    assert_eq!(h.mock.requests()[0].body, body.as_bytes());
    assert!(h.usage_event().await.charged_nanos.is_positive());
    if first.contains("connection: close") {
        // Pingora does not keep a connection whose request waited for 100 Continue; it says so.
        sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
    }

    let stream_body = chat("gpt-4o-mini", true).to_string();
    let req = format!(
        "POST /compat/v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\nx-mock-events: 20\r\ncontent-length: {}\r\n\r\n{}",
        h.key,
        stream_body.len(),
        stream_body
    );
    sock.write_all(req.as_bytes()).await.unwrap();
    let second = read_one_response(&mut sock).await;
    assert!(second.starts_with("http/1.1 200"), "{second}");
    assert!(second.contains("transfer-encoding: chunked"), "{second}");
    assert_eq!(second.matches("data: [done]").count(), 1, "{second}");
    assert!(second.ends_with("0\r\n\r\n"), "{second}");
    // (the gateway asks the supplier for the stream's usage: stream_options is added)
    let sent: Value = serde_json::from_slice(&h.mock.requests()[1].body).unwrap();
    assert_eq!(sent["stream"], true);
    assert!(h.usage_event().await.stream);

    sock.write_all(head.replace("expect: 100-continue\r\n", "").as_bytes())
        .await
        .unwrap();
    sock.write_all(body.as_bytes()).await.unwrap();
    let third = read_one_response(&mut sock).await;
    assert!(third.starts_with("http/1.1 200"), "{third}");
    assert_eq!(h.mock.request_count(), 3);
}

/// Reads one whole HTTP/1.1 response (content-length or chunked) off a keep-alive socket, lowercased.
async fn read_one_response(sock: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
        if let Some(end) = text.find("\r\n\r\n") {
            let (head, rest) = text.split_at(end + 4);
            let done = if head.contains("transfer-encoding: chunked") {
                rest.ends_with("0\r\n\r\n")
            } else {
                let len = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                rest.len() >= len
            };
            if done {
                return text;
            }
        }
        let n = tokio::time::timeout(Duration::from_secs(5), sock.read(&mut buf))
            .await
            .expect("the response within 5 s")
            .unwrap();
        assert!(n > 0, "closed mid-response: {text}");
        got.extend_from_slice(&buf[..n]);
    }
}
