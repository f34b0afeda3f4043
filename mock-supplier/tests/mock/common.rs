//! Shared helpers of the mock's end-to-end tests: starting instances, sending
//! requests (to `/v1…` for OpenAI and to the root for Anthropic and Gemini),
//! raw HTTP exchanges and SSE parsing.

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::StreamExt;
use mock_supplier::{MockConfig, MockHandle, MockSupplier};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub async fn start() -> MockHandle {
    MockSupplier::start(MockConfig::default()).await.unwrap()
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

pub async fn post(
    mock: &MockHandle,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    post_to(&format!("{}{path}", mock.base_url()), body, headers).await
}

/// Sends a JSON `body` to `url` with `headers`.
async fn post_to(url: &str, body: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut req = client()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_owned());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

/// Status, headers and the full body of `resp`.
async fn whole(resp: reqwest::Response) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let status = resp.status().as_u16();
    let h = resp.headers().clone();
    let bytes = resp.bytes().await.unwrap().to_vec();
    (status, h, bytes)
}

/// Sends `body` to `path` and returns status, headers and the full body.
pub async fn post_full(
    mock: &MockHandle,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    whole(post(mock, path, body, headers).await).await
}

/// Writes a raw HTTP/1.1 request and reads until EOF or error; returns the
/// bytes read and whether the connection ended with a clean EOF.
pub async fn raw_exchange(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    extra: &str,
) -> (Vec<u8>, bool) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: mock\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra}\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut chunk)).await {
            Ok(Ok(0)) => return (buf, true),
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Ok(Err(_)) => return (buf, false),
            Err(_) => panic!("raw exchange timed out"),
        }
    }
}

/// Splits an SSE body into (event name, data) pairs.
pub fn sse_events(body: &[u8]) -> Vec<(Option<String>, String)> {
    let text = std::str::from_utf8(body).unwrap();
    text.split("\n\n")
        .filter(|b| !b.is_empty())
        .map(|block| {
            let mut event = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(e) = line.strip_prefix("event: ") {
                    event = Some(e.to_owned());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = d.to_owned();
                } else {
                    data = line.to_owned();
                }
            }
            (event, data)
        })
        .collect()
}

/// A mock requiring `key` in every format's auth header.
pub async fn start_keyed(key: &str) -> MockHandle {
    MockSupplier::start(MockConfig {
        api_key: Some(key.into()),
        ..MockConfig::default()
    })
    .await
    .unwrap()
}

/// Sends `body` to `http://ADDR{path}` (the root, not `/v1`).
pub async fn post_root(
    mock: &MockHandle,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    post_to(&format!("{}{path}", mock.root_url()), body, headers).await
}

/// Like [`post_root`], returning status, headers and the full body.
pub async fn post_root_full(
    mock: &MockHandle,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    whole(post_root(mock, path, body, headers).await).await
}

/// `GET http://ADDR{path}`: status, headers and body.
pub async fn get_root(
    mock: &MockHandle,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let mut req = client().get(format!("{}{path}", mock.root_url()));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    whole(req.send().await.unwrap()).await
}

/// Reads a streamed body until its end or an error; returns the bytes and
/// whether it ended in an error (a cut).
pub async fn read_stream(resp: reqwest::Response) -> (Vec<u8>, bool) {
    let mut stream = resp.bytes_stream();
    let mut received = Vec::new();
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(c) => received.extend_from_slice(&c),
            Err(_) => return (received, true),
        }
    }
    (received, false)
}

/// Parses a JSON body.
pub fn json_of(body: &[u8]) -> serde_json::Value {
    serde_json::from_slice(body).unwrap()
}

/// Splits an SSE body into (event name, parsed data) pairs; every event must
/// carry JSON data.
pub fn sse_json(body: &[u8]) -> Vec<(Option<String>, serde_json::Value)> {
    sse_events(body)
        .into_iter()
        .map(|(e, d)| (e, serde_json::from_str(&d).unwrap()))
        .collect()
}

/// Splits a Gemini SSE body (`data: JSON\r\n\r\n` events) into the parsed
/// chunks, checking the framing.
pub fn gemini_chunks(body: &[u8]) -> Vec<serde_json::Value> {
    let text = std::str::from_utf8(body).unwrap();
    assert!(text.ends_with("\r\n\r\n"), "{text:?}");
    text.split_terminator("\r\n\r\n")
        .map(|event| {
            let data = event.strip_prefix("data: ").unwrap();
            assert!(!data.contains('\n'), "one data line per event");
            serde_json::from_str(data).unwrap()
        })
        .collect()
}
