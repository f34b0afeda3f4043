//! Routing over supplier accounts: session stickiness, failover on a 429, a 5xx or a refused
//! connection, cooldowns until the reset (from headers or the body), no retry once bytes reached
//! the client, and stickiness and cooldowns shared by two instances.

use super::*;
use futures_util::StreamExt;

fn uuid_like() -> String {
    format!("{}-{:?}", std::process::id(), std::thread::current().id()).replace(['(', ')'], "")
}

/// A session id whose rendezvous order for gpt-4o puts account `first` (0 = mock, 2 = mock-b)
/// first, for organization 42.
fn session_preferring(first: usize) -> String {
    (0..1000)
        .map(|i| format!("s{i}"))
        .find(|sid| {
            proxy::rendezvous_order(&[0, 2], &["mock", "dead", "mock-b"], &format!("42:{sid}"))[0]
                == first
        })
        .unwrap()
}

async fn premium(h: &Harness, sid: &str, extra: &[(&str, &str)]) -> (u16, Value, Vec<u8>) {
    let key = h.add_key(2, KeyPermissions::default()).await;
    let mut req = h
        .http
        .post(h.url("/compat/v1/chat/completions"))
        .bearer_auth(key)
        .header("x-session-id", sid)
        .body(chat("gpt-4o", false).to_string());
    for (k, v) in extra {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.bytes().await.unwrap().to_vec();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        bytes,
    )
}

#[tokio::test]
async fn sessions_stick_to_one_account() {
    let h = Harness::start().await;
    for first in [0, 2] {
        let sid = session_preferring(first);
        let (a0, b0) = (h.mock.request_count(), h.mock_b.request_count());
        for _ in 0..4 {
            let (status, _, _) = premium(&h, &sid, &[]).await;
            assert_eq!(status, 200);
        }
        let (a, b) = (h.mock.request_count() - a0, h.mock_b.request_count() - b0);
        assert_eq!(
            if first == 0 { (a, b) } else { (b, a) },
            (4, 0),
            "same session, same account"
        );
    }
}

#[tokio::test]
async fn a_429_fails_over_and_cools_the_account_until_its_reset() {
    let (h, clock) = Harness::start_with_clock().await;
    let sid = session_preferring(0);
    h.mock
        .set_fault(Some("status=429;retry_after=2".parse().unwrap()));
    let big = "y".repeat(300 * 1024);
    let body = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": big}]});
    let key = h.add_key(2, KeyPermissions::default()).await;
    let resp = h
        .http
        .post(h.url("/compat/v1/chat/completions"))
        .bearer_auth(&key)
        .header("x-session-id", &sid)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200, "the client never sees the 429");
    resp.bytes().await.unwrap();
    assert_eq!(h.mock.request_count(), 1);
    assert_eq!(h.mock_b.request_count(), 1);
    assert_eq!(
        h.mock.requests()[0].body,
        h.mock_b.requests()[0].body,
        "the identical body reached the next account"
    );
    assert_eq!(h.mock_b.requests()[0].body.len(), body.to_string().len());
    let e = h.usage_event().await;
    assert_eq!((e.account_id.as_str(), e.attempts), ("mock-b", 2));
    // Cooling: the same session now goes straight to the other account.
    let (status, _, _) = premium(&h, &sid, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(h.mock.request_count(), 1, "a cooling account is skipped");
    let text = h.metrics.render();
    assert!(
        text.contains(r#"tollgate_failovers_total{reason="rate_limited"} 1"#),
        "{text}"
    );
    // After the reset the account serves again (a new conversation that prefers it; the first one
    // stays where it moved).
    h.mock.set_fault(None);
    clock.advance(Duration::from_millis(2_100));
    let fresh = (0..1000)
        .map(|i| format!("fresh-{i}"))
        .find(|sid| {
            proxy::rendezvous_order(&[0, 2], &["mock", "dead", "mock-b"], &format!("42:{sid}"))[0]
                == 0
        })
        .unwrap();
    let (status, _, _) = premium(&h, &fresh, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(h.mock.request_count(), 2, "back after its reset time");
}

#[tokio::test]
async fn when_every_account_cools_the_client_gets_usage_limit_reached() {
    let h = Harness::start().await;
    let sid = session_preferring(0);
    h.mock
        .set_fault(Some("status=429;retry_after=5".parse().unwrap()));
    h.mock_b
        .set_fault(Some("status=429;retry_after=3".parse().unwrap()));
    // Both refuse: the last 429 is answered in SPEC's shape, with the reset its supplier named
    // (Retry-After: 3), never the supplier's own body.
    let (status, body, _) = premium(&h, &sid, &[]).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["type"], "usage_limit_reached", "{body}");
    assert_eq!(body["error"]["resets_in_seconds"], 3, "{body}");
    assert!(body["error"]["message"].is_string());
    // Now both are cooling: answered at once, no supplier contacted.
    let (status, body, _) = premium(&h, &sid, &[]).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["type"], "usage_limit_reached");
    assert!(body["error"]["message"].is_string());
    let resets = body["error"]["resets_in_seconds"].as_u64().unwrap();
    assert!(
        (1..=3).contains(&resets),
        "the shortest remaining cooldown: {resets}"
    );
    assert_eq!(h.mock.request_count() + h.mock_b.request_count(), 2);
    let e = h.usage_event().await;
    assert_eq!(
        (e.cost_nanos, e.charged_nanos),
        (NanoUsd::ZERO, NanoUsd::ZERO),
        "a refused call costs nothing"
    );
    assert_eq!(h.wallet().await.reserved, NanoUsd::ZERO);
}

#[tokio::test]
async fn a_5xx_fails_over_but_a_request_error_does_not() {
    let h = Harness::start().await;
    let sid = session_preferring(0);
    h.mock.set_fault(Some("status=500".parse().unwrap()));
    let (status, _, _) = premium(&h, &sid, &[]).await;
    assert_eq!(status, 200);
    assert_eq!((h.mock.request_count(), h.mock_b.request_count()), (1, 1));
    // A request-shape error is the client's: passed through, never retried elsewhere.
    let other = session_preferring(2);
    h.mock_b.set_fault(Some("status=400".parse().unwrap()));
    let (status, _, _) = premium(&h, &other, &[]).await;
    assert_eq!(status, 400);
    assert_eq!(h.mock_b.request_count(), 2);
    assert_eq!(h.mock.request_count(), 1, "no retry on a 400");
}

#[tokio::test]
async fn a_session_stays_where_it_moved_after_a_failover() {
    let (h, clock) = Harness::start_with_clock().await;
    let sid = session_preferring(0);
    h.mock
        .set_fault(Some("status=429;retry_after=1".parse().unwrap()));
    let (status, _, _) = premium(&h, &sid, &[]).await;
    assert_eq!(status, 200);
    assert_eq!((h.mock.request_count(), h.mock_b.request_count()), (1, 1));
    h.mock.set_fault(None);
    clock.advance(Duration::from_millis(1_100));
    // Its first choice recovered, but the conversation (and its prompt cache) stays on mock-b.
    for _ in 0..3 {
        let (status, _, _) = premium(&h, &sid, &[]).await;
        assert_eq!(status, 200);
    }
    assert_eq!((h.mock.request_count(), h.mock_b.request_count()), (1, 4));
}

/// A session id whose order for twin-model (accounts 0 = mock, 1 = dead) puts `first` first.
fn twin_session(first: usize) -> String {
    (0..1000)
        .map(|i| format!("twin-{i}"))
        .find(|sid| {
            proxy::rendezvous_order(&[0, 1], &["mock", "dead", "mock-b"], &format!("42:{sid}"))[0]
                == first
        })
        .unwrap()
}

#[tokio::test]
async fn a_refused_connection_fails_over_and_cools_the_account() {
    let h = Harness::start().await;
    let key = h.add_key(3, KeyPermissions::default()).await;
    let sid = twin_session(1);
    let send = || {
        h.http
            .post(h.url("/compat/v1/chat/completions"))
            .bearer_auth(&key)
            .header("x-session-id", &sid)
            .body(chat("twin-model", false).to_string())
            .send()
    };
    let resp = send().await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.bytes().await.unwrap();
    let e = h.usage_event().await;
    assert_eq!((e.account_id.as_str(), e.attempts), ("mock", 2));
    let left = h.stores.cooldowns.remaining(&["dead"]).await.unwrap();
    assert!(left[0].is_some(), "the unreachable account cools");
    let resp = send().await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.bytes().await.unwrap();
    assert_eq!(
        h.usage_event().await.attempts,
        1,
        "the cooling account is skipped"
    );
}

#[tokio::test]
async fn no_retry_once_bytes_reached_the_client() {
    let h = Harness::start().await;
    let sid = session_preferring(0);
    let key = h.add_key(2, KeyPermissions::default()).await;
    h.mock.set_fault(Some("cut_after=2".parse().unwrap()));
    let resp = h
        .http
        .post(h.url("/compat/v1/chat/completions"))
        .bearer_auth(&key)
        .header("x-session-id", &sid)
        .body(chat("gpt-4o", true).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    let mut errored = false;
    while let Some(chunk) = stream.next().await {
        if chunk.is_err() {
            errored = true;
            break;
        }
    }
    assert!(errored, "the stream ends abnormally");
    assert_eq!(
        h.mock_b.request_count(),
        0,
        "never retried elsewhere after bytes were sent"
    );
    assert_eq!(h.usage_event().await.attempts, 1);
}

#[tokio::test]
async fn two_instances_share_stickiness_and_cooldowns() {
    let Some(redis_url) = testkit::redis_url() else {
        eprintln!("REDIS_URL not set: shared-routing scenario skipped");
        return;
    };
    let prefix = format!("share:{}:", uuid_like());
    let stores = Stores::redis(&redis_url, &prefix).await.unwrap();
    let one = Harness::start_with_stores(stores.clone()).await;
    // The second instance: same configuration and store, other process state.
    let settings = Arc::new(
        Settings::parse(
            &config_with(
                &one.mock.base_url(),
                "http://127.0.0.1:9/v1",
                &one.mock_b.base_url(),
                300_000,
            ),
            &|_| None,
        )
        .unwrap(),
    );
    let gateway = Gateway::new(settings, stores.clone(), Arc::new(Metrics::new().unwrap()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let two = format!("http://{}", listener.local_addr().unwrap());
    let (_stop, stop_rx) = watch::channel(false);
    let mut tasks = JoinSet::new();
    tasks.spawn(proxy::serve_listener(listener, gateway, stop_rx));
    stores.keys.load(&[]).await.unwrap();
    stores.wallets.load(42, nano(1_000 * NANOS)).await.unwrap();
    let key = one.add_key(2, KeyPermissions::default()).await;
    let post = |base: String, sid: String| {
        let (http, key) = (one.http.clone(), key.clone());
        async move {
            let resp = http
                .post(format!("{base}/compat/v1/chat/completions"))
                .bearer_auth(key)
                .header("x-session-id", sid)
                .body(chat("gpt-4o", false).to_string())
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            resp.bytes().await.unwrap();
            status
        }
    };
    // Stickiness across instances: a session preferring mock-b lands there from both.
    let sid_b = session_preferring(2);
    for base in [one.base.clone(), two.clone(), one.base.clone()] {
        assert_eq!(post(base, sid_b.clone()).await, 200);
    }
    assert_eq!(
        (one.mock.request_count(), one.mock_b.request_count()),
        (0, 3)
    );
    // A cooldown decided by one instance is honoured by the other.
    let sid_a = session_preferring(0);
    one.mock
        .set_fault(Some("status=429;retry_after=30".parse().unwrap()));
    assert_eq!(post(one.base.clone(), sid_a.clone()).await, 200);
    assert_eq!(one.mock.request_count(), 1);
    one.mock.set_fault(None);
    assert_eq!(post(two.clone(), sid_a.clone()).await, 200);
    assert_eq!(
        one.mock.request_count(),
        1,
        "the other instance skips the cooling account"
    );
}

#[tokio::test]
async fn a_rate_limit_reset_named_only_in_the_body_is_honoured() {
    let (h, clock) = Harness::start_with_clock().await;
    let key = h.add_key(2, KeyPermissions::default()).await;
    // narrow-model has one account; its 429 names the reset only in the message, not in headers.
    h.mock_b
        .set_fault(Some("status=429;reset_body=2".parse().unwrap()));
    let call = || {
        h.http
            .post(h.url("/compat/v1/chat/completions"))
            .bearer_auth(&key)
            .body(chat("narrow-model", false).to_string())
            .send()
    };
    // The client gets SPEC's shape with the reset the supplier's body named.
    let (status, body) = json_of(call().await.unwrap()).await;
    assert_eq!(status, 429);
    assert_eq!(body["error"]["type"], "usage_limit_reached", "{body}");
    assert_eq!(body["error"]["resets_in_seconds"], 2, "{body}");
    h.mock_b.set_fault(None);
    let (status, body) = json_of(call().await.unwrap()).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["type"], "usage_limit_reached");
    let resets = body["error"]["resets_in_seconds"].as_u64().unwrap();
    assert!(
        (1..=2).contains(&resets),
        "cooled until the body's reset (2 s), not the 30 s default: {resets}"
    );
    assert_eq!(h.mock_b.request_count(), 1);
    clock.advance(Duration::from_millis(2_100));
    let (status, body) = json_of(call().await.unwrap()).await;
    assert_eq!(status, 200, "served again after the reset: {body}");
}

/// Accounts cooling after server errors or refused connections are not a usage limit: the client
/// gets 503 with `Retry-After`; as soon as one cooling account cools for a usage limit, 429
/// `usage_limit_reached`.
#[tokio::test]
async fn accounts_cooling_after_failures_answer_503_not_a_usage_limit() {
    let h = Harness::start().await;
    let sid = session_preferring(0);
    h.mock.set_fault(Some("status=500".parse().unwrap()));
    h.mock_b.set_fault(Some("status=503".parse().unwrap()));
    let (status, _, _) = premium(&h, &sid, &[]).await;
    assert_eq!(status, 503, "the last supplier's own 5xx");
    let key = h.add_key(2, KeyPermissions::default()).await;
    let resp = h
        .http
        .post(h.url("/compat/v1/chat/completions"))
        .bearer_auth(&key)
        .body(chat("gpt-4o", false).to_string())
        .send()
        .await
        .unwrap();
    let retry_after: u64 = resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let (status, body) = json_of(resp).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["type"], "service_unavailable", "{body}");
    assert_eq!(body["error"]["code"], "upstream_unavailable", "{body}");
    assert!((1..=5).contains(&retry_after), "{retry_after}");
    assert_eq!(
        h.mock.request_count() + h.mock_b.request_count(),
        2,
        "no supplier contacted"
    );
    // One account now cools for a usage limit (longer than its failure cooldown): 429.
    h.stores
        .cooldowns
        .cool(
            "mock-b",
            Duration::from_secs(20),
            opstate::CoolCause::UsageLimit,
        )
        .await
        .unwrap();
    let (status, body, _) = premium(&h, &sid, &[]).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["type"], "usage_limit_reached", "{body}");
    assert!(
        body["error"]["resets_in_seconds"].as_u64().unwrap() <= 5,
        "the shortest wait: {body}"
    );
}

/// Each of SPEC's five session signals keeps a session on one account: the headers
/// `x-session-id` and `session_id`, and the body fields `session_id`, `conversation_id` and
/// `prompt_cache_key`.
#[tokio::test]
async fn every_session_signal_keeps_a_session_on_one_account() {
    let h = Harness::start().await;
    let key = h.add_key(2, KeyPermissions::default()).await;
    for signal in [
        "x-session-id",
        "session_id",
        "body:session_id",
        "body:conversation_id",
        "body:prompt_cache_key",
    ] {
        for first in [0, 2] {
            let sid = session_preferring(first);
            let (a0, b0) = (h.mock.request_count(), h.mock_b.request_count());
            for _ in 0..3 {
                let mut body = chat("gpt-4o", false);
                let mut req = h
                    .http
                    .post(h.url("/compat/v1/chat/completions"))
                    .bearer_auth(&key);
                match signal.strip_prefix("body:") {
                    Some(field) => body[field] = json!(sid),
                    None => req = req.header(signal, &sid),
                }
                let resp = req.body(body.to_string()).send().await.unwrap();
                assert_eq!(resp.status(), 200, "{signal}");
                resp.bytes().await.unwrap();
            }
            let (a, b) = (h.mock.request_count() - a0, h.mock_b.request_count() - b0);
            assert_eq!(
                if first == 0 { (a, b) } else { (b, a) },
                (3, 0),
                "{signal}: the session's account, every time"
            );
        }
    }
}
