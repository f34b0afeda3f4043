//! Money: exact charges with every hold closed, refusal before the supplier on an insufficient
//! balance, failing closed without a wallet or a price, and no overdraft under concurrency.

use super::*;
use opstate::Measurement;

/// gpt-4o-mini at 0.15 / 0.60 USD per million tokens, rate 1.0.
fn mini_cost(input: u64, output: u64) -> NanoUsd {
    nano(i64::try_from((input * 150_000_000 + output * 600_000_000).div_ceil(1_000_000)).unwrap())
}

#[tokio::test]
async fn calls_are_charged_exactly_and_holds_close() {
    let h = Harness::start().await;
    let before = h.wallet().await;
    for stream in [false, true] {
        let resp = h
            .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", stream))
            .header("x-mock-usage", "prompt=1000,completion=500")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        resp.bytes().await.unwrap();
        let e = h.usage_event().await;
        assert_eq!(e.cost_nanos, mini_cost(1000, 500), "stream={stream}");
        assert_eq!(e.charged_nanos, e.cost_nanos);
        assert_eq!(e.excess_nanos, NanoUsd::ZERO);
        assert!(e.hold_nanos >= e.cost_nanos);
    }
    let after = h.wallet().await;
    assert_eq!(
        before.balance.checked_sub(after.balance),
        mini_cost(1000, 500).checked_add(mini_cost(1000, 500))
    );
    assert_eq!(after.reserved, NanoUsd::ZERO, "every hold closed");
    // A call that never reached a supplier costs nothing.
    let (status, _) = json_of(
        h.post("/compat/v1/chat/completions", &chat("dead-model", false))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 502);
    let e = h.usage_event().await;
    assert_eq!(
        (e.cost_nanos, e.charged_nanos),
        (NanoUsd::ZERO, NanoUsd::ZERO)
    );
    assert_eq!(h.wallet().await, after);
}

#[tokio::test]
async fn insufficient_balance_is_refused_before_the_supplier() {
    let h = Harness::start().await;
    // A 100 000-token output cap at 0.60 USD / Mtok needs 0.06 USD; leave 0.01.
    h.stores.wallets.load(42, nano(NANOS / 100)).await.unwrap();
    let mut body = chat("gpt-4o-mini", false);
    body["max_tokens"] = json!(100_000);
    let (status, err) = json_of(
        h.post("/compat/v1/chat/completions", &body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 402, "{err}");
    assert_eq!(err["error"]["type"], "insufficient_quota");
    assert_eq!(err["error"]["code"], "insufficient_balance");
    assert_eq!(h.mock.request_count(), 0, "refused before any supplier");
    h.no_usage_event().await;
    assert_eq!(h.wallet().await.reserved, NanoUsd::ZERO);
    // A smaller cap fits.
    body["max_tokens"] = json!(100);
    let resp = h
        .post("/compat/v1/chat/completions", &body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    // A non-integer cap is a bad request.
    body["max_tokens"] = json!("lots");
    let (status, err) = json_of(
        h.post("/compat/v1/chat/completions", &body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 400, "{err}");
}

#[tokio::test]
async fn missing_wallet_or_price_fails_closed() {
    let h = Harness::start().await;
    // Another organization whose wallet the store does not have.
    let secret = credentials::generate(Kind::CustomerKey, Env::Dev);
    let mut record = KeyRecord {
        key_id: 7,
        org_id: 77,
        group_id: 1,
        permissions: KeyPermissions::default(),
        rate: Some(RateMultiplier::ONE),
        expires_at: None,
        limits: KeyLimits::default(),
        budget: None,
    };
    h.stores
        .keys
        .publish(&h.hasher.hash(secret.expose()), &record)
        .await
        .unwrap();
    let call = |key: String| {
        let h = &h;
        async move {
            json_of(
                h.http
                    .post(h.url("/compat/v1/chat/completions"))
                    .bearer_auth(key)
                    .body(chat("gpt-4o-mini", false).to_string())
                    .send()
                    .await
                    .unwrap(),
            )
            .await
        }
    };
    let (status, err) = call(secret.expose().to_string()).await;
    assert_eq!(status, 503, "{err}");
    assert_eq!(err["error"]["code"], "wallet_unavailable");
    // A key without a price for its group is never free.
    record.org_id = 42;
    record.rate = None;
    h.stores
        .keys
        .publish(&h.hasher.hash(secret.expose()), &record)
        .await
        .unwrap();
    let (status, err) = call(secret.expose().to_string()).await;
    assert_eq!(status, 503, "{err}");
    assert_eq!(err["error"]["code"], "price_unavailable");
    assert_eq!(h.mock.request_count(), 0);
}

#[tokio::test]
async fn concurrent_calls_never_overdraw() {
    let h = Arc::new(Harness::start().await);
    // Each call reserves (body ≈ 100 bytes → 50 input tokens) + 1000 output tokens ≈ 0.0006 USD;
    // the balance covers about 20 of them.
    let mut body = chat("gpt-4o-mini", false);
    body["max_tokens"] = json!(1000);
    let (hold, _) = proxy::worst_case(
        &Settings::parse(&config("http://x/v1", "http://y/v1"), &|_| None)
            .unwrap()
            .model("gpt-4o-mini")
            .unwrap()
            .prices,
        Some(RateMultiplier::ONE),
        body.to_string().len(),
        Some(1000),
        4096,
    )
    .unwrap();
    h.stores
        .wallets
        .load(42, nano(hold.nanos() * 20 + hold.nanos() / 2))
        .await
        .unwrap();
    let mut tasks = JoinSet::new();
    for _ in 0..200 {
        let (h, body) = (h.clone(), body.clone());
        tasks.spawn(async move {
            let resp = h
                .post("/compat/v1/chat/completions", &body)
                .header("x-mock-usage", "prompt=50,completion=1000")
                .header("x-mock-delay-ms", "20")
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            resp.bytes().await.unwrap();
            status
        });
    }
    let mut ok = 0;
    let mut refused = 0;
    while let Some(r) = tasks.join_next().await {
        match r.unwrap() {
            200 => ok += 1,
            402 => refused += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!(ok + refused, 200);
    assert!(ok >= 20, "at least the covered calls succeed ({ok})");
    assert_eq!(
        h.mock.request_count(),
        ok,
        "refused calls never reached the supplier"
    );
    let w = settled_wallet(&h.stores, 42).await;
    assert!(!w.balance.is_negative(), "never overdrawn: {w:?}");
    assert_eq!(w.reserved, NanoUsd::ZERO);
}

/// The wallet once every hold has closed (settlement runs after the last byte reached the
/// client), or as it is after 5 s.
async fn settled_wallet(stores: &Stores, org: i64) -> opstate::WalletSnapshot {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let w = stores.wallets.snapshot(org).await.unwrap().unwrap();
        if w.reserved.is_zero() || Instant::now() > deadline {
            return w;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A supplier that sends its headers and then nothing until the read timeout served nothing: the
/// call is recorded with zero tokens and charged nothing, JSON and stream alike.
#[tokio::test]
async fn headers_without_a_body_cost_nothing() {
    for (stream, reply) in [
        (
            false,
            &b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n"[..],
        ),
        (
            true,
            &b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"[..],
        ),
    ] {
        let mut tasks = JoinSet::new();
        let stalled = raw_supplier(&mut tasks, reply, Duration::from_secs(3)).await;
        let h = Harness::start_with_dead(300, &stalled).await;
        let before = h.wallet().await;
        let resp = h
            .post("/compat/v1/chat/completions", &chat("dead-model", stream))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "stream={stream}");
        let body = resp.bytes().await;
        assert!(
            body.as_ref().map_or(true, |b| b.is_empty()),
            "stream={stream}: no byte reached the client"
        );
        let e = h.usage_event().await;
        assert_eq!(
            (e.input_tokens, e.output_tokens, e.cost_nanos, e.charged_nanos),
            (0, 0, NanoUsd::ZERO, NanoUsd::ZERO),
            "stream={stream}: {e:?}"
        );
        assert_eq!(e.measurement, Measurement::Exact, "stream={stream}");
        let after = settled_wallet(&h.stores, 42).await;
        assert_eq!(after.balance, before.balance, "stream={stream}: nothing charged");
    }
}

/// A non-streaming 200 without `usage` is charged the documented estimate (input ⌈request bytes
/// / 4⌉, output ⌈response bytes / 4⌉), flagged estimated; never zero output.
#[tokio::test]
async fn a_json_answer_without_usage_is_charged_an_estimate() {
    const BODY: &str = r#"{"id":"chatcmpl-1","object":"chat.completion","model":"dead-model","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there, this answer reports no usage."},"finish_reason":"stop"}]}"#;
    static REPLY: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let reply = REPLY.get_or_init(|| {
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{BODY}",
            BODY.len()
        )
        .into_bytes()
    });
    let mut tasks = JoinSet::new();
    let supplier = raw_supplier(&mut tasks, reply, Duration::ZERO).await;
    let h = Harness::start_with_dead(300_000, &supplier).await;
    let request = chat("dead-model", false);
    let (status, body) = json_of(
        h.post("/compat/v1/chat/completions", &request)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let e = h.usage_event().await;
    assert_eq!(e.measurement, Measurement::Estimated);
    assert_eq!(e.output_tokens, (BODY.len() as u64).div_ceil(4));
    assert_eq!(
        e.input_tokens,
        (request.to_string().len() as u64).div_ceil(4)
    );
    assert!(e.cost_nanos.is_positive(), "{e:?}");
    // The event carries the rates it was priced at (the partner's side is priced from them).
    assert_eq!(
        (e.retail_rate, e.wholesale_rate),
        (Some(RateMultiplier::ONE), Some(RateMultiplier::ONE))
    );
}

/// A stream that outlives its hold's deadline keeps its hold: the gateway renews it while the call
/// is in progress (so the reconciler never takes it for a dead gateway's), and the call is charged
/// its exact price once, at the end.
#[tokio::test]
async fn a_stream_longer_than_its_hold_keeps_the_hold_and_pays_exactly() {
    let h = Harness::start_with_config(|t| format!("{t}\n[money]\nhold_ttl_ms = 1000\n")).await;
    let before = h.wallet().await;
    let resp = h
        .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", true))
        .header("x-mock-events", "12")
        .header("x-mock-delay-ms", "250")
        .header("x-mock-usage", "prompt=1000,completion=500")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut reading = JoinSet::new();
    reading.spawn(async move { resp.bytes().await.unwrap() });
    // Past twice the TTL, the call still holds its money and nothing is overdue.
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    let w = h.wallet().await;
    assert!(w.reserved.is_positive(), "the hold is open: {w:?}");
    assert!(
        h.stores.wallets.expired(42).await.unwrap().is_empty(),
        "a live call's hold is renewed, never overdue"
    );
    reading.join_next().await.unwrap().unwrap();
    let e = h.usage_event().await;
    assert_eq!(e.measurement, Measurement::Exact);
    assert_eq!(e.charged_nanos, mini_cost(1000, 500), "{e:?}");
    let after = settled_wallet(&h.stores, 42).await;
    assert_eq!(
        before.balance.checked_sub(after.balance),
        Some(mini_cost(1000, 500))
    );
    assert!(h.stores.wallets.expired(42).await.unwrap().is_empty());
}

/// Redis loses its data (a flush, a failover without persistence) before the settler drained a
/// call's usage event: the gateway notices within a second or two and appends the event again,
/// flagged `resent`, so the call is never free.
#[tokio::test]
async fn usage_events_are_re_sent_after_the_store_lost_them() {
    let Some(redis_url) = testkit::redis_url() else {
        return;
    };
    let prefix = testkit::redis_prefix("resend");
    let stores = Stores::redis(&redis_url, &prefix).await.unwrap();
    let h = Harness::build(300_000, stores.clone(), true).await;
    // Let the gateway set its marker in the store.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resp = h
        .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let request_id = resp.headers()["x-request-id"].to_str().unwrap().to_string();
    resp.bytes().await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The flush: every key of this gateway's store, its undrained usage stream included.
    let client = redis::Client::open(redis_url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!keys.is_empty());
    let _: () = redis::cmd("DEL")
        .arg(&keys)
        .query_async(&mut conn)
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let event = loop {
        let got = stores
            .usage
            .claim("test", 10, Duration::from_secs(60))
            .await
            .unwrap();
        if let Some(entry) = got.into_iter().find(|e| e.event.request_id == request_id) {
            break entry.event;
        }
        assert!(Instant::now() < deadline, "the event was not re-sent");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(event.resent);
    assert!(event.cost_nanos.is_positive());
}

/// Supplier misbehaviour after a 200: a body that is not JSON, a body cut mid-way, a 16 MiB body.
/// The client gets what the supplier sent (or a cut), the call is charged the documented estimate
/// (something was served), and the gateway keeps serving.
#[tokio::test]
async fn misbehaving_suppliers_are_charged_an_estimate_and_the_gateway_stays_up() {
    static BIG: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let big = BIG.get_or_init(|| {
        let body = format!(r#"{{"choices":[{{"message":{{"content":"{}"}}}}]}}"#, "x".repeat(16 * 1024 * 1024));
        let mut r = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        )
        .into_bytes();
        r.extend_from_slice(body.as_bytes());
        r
    });
    let cases: [(&str, &'static [u8], bool); 3] = [
        (
            "garbage",
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 16\r\nconnection: close\r\n\r\nthis is not json",
            true,
        ),
        (
            "cut mid-body",
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 1000\r\nconnection: close\r\n\r\n{\"choices\":[{\"message\":{\"content\":\"partial",
            false,
        ),
        ("16 MiB", big.as_slice(), true),
    ];
    for (name, reply, whole) in cases {
        let mut tasks = JoinSet::new();
        let supplier = raw_supplier(&mut tasks, reply, Duration::ZERO).await;
        let h = Harness::start_with_dead(5_000, &supplier).await;
        let resp = h
            .post("/compat/v1/chat/completions", &chat("dead-model", false))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{name}");
        let body = resp.bytes().await;
        assert_eq!(body.is_ok(), whole, "{name}: whole body or a cut");
        let e = h.usage_event().await;
        assert_eq!(e.measurement, Measurement::Estimated, "{name}");
        assert!(
            e.output_tokens > 0 && e.cost_nanos.is_positive(),
            "{name}: {e:?}"
        );
        let ok = h
            .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
            .send()
            .await
            .unwrap();
        assert_eq!(ok.status(), 200, "{name}: the gateway keeps serving");
    }
}

/// An answer far larger than the meter keeps is charged the usage it reports, exactly: a 10 MiB
/// and a 100 MiB JSON chat answer, and a responses stream whose final event (carrying the whole
/// text and the usage) is one 10 MiB line. The wallet loses what the calls cost and no more.
#[tokio::test]
async fn huge_answers_are_charged_the_usage_they_report() {
    let h = Harness::start().await;
    let before = h.wallet().await;
    let mut body = chat("gpt-4o-mini", false);
    body["max_tokens"] = json!(64);
    let mut stream =
        json!({"model": "gpt-4o-mini", "input": "hi", "stream": true, "max_output_tokens": 64});
    stream["stream"] = json!(true);
    let cases = [
        ("/compat/v1/chat/completions", &body, 10 << 20),
        ("/compat/v1/chat/completions", &body, 100 << 20),
        ("/compat/v1/responses", &stream, 10 << 20),
    ];
    let mut spent = NanoUsd::ZERO;
    for (path, body, pad) in cases {
        let resp = h
            .post(path, body)
            .header("x-mock-usage", "prompt=12,completion=16")
            .header("x-mock-pad-bytes", pad.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let received = resp.bytes().await.unwrap();
        assert!(
            received.len() > pad,
            "{path} {pad}: the whole answer reached the client"
        );
        let e = h.usage_event().await;
        assert_eq!(
            (e.input_tokens, e.output_tokens, e.measurement),
            (12, 16, Measurement::Exact),
            "{path} {pad}"
        );
        assert_eq!(e.cost_nanos, mini_cost(12, 16));
        assert_eq!(e.charged_nanos, e.cost_nanos);
        assert_eq!(e.excess_nanos, NanoUsd::ZERO);
        spent = spent.checked_add(e.cost_nanos).unwrap();
    }
    let after = h.wallet().await;
    assert_eq!(before.balance.checked_sub(after.balance), Some(spent));
    assert_eq!(after.reserved, NanoUsd::ZERO);
}

/// A large JSON answer cut in half (no usage reached the gateway) is charged an estimate no
/// larger than the request could have cost: output at most its `max_tokens`, input at most its
/// body's bytes; without a cap, at most the configured default.
#[tokio::test]
async fn cut_answers_are_estimated_within_what_the_request_could_cost() {
    let h = Harness::start().await;
    h.mock.set_fault(Some("cut_after=1".parse().unwrap()));
    for (cap, bound) in [(Some(64), 64), (None, 4096)] {
        let mut body = chat("gpt-4o-mini", false);
        if let Some(cap) = cap {
            body["max_tokens"] = json!(cap);
        }
        let resp = h
            .post("/compat/v1/chat/completions", &body)
            .header("x-mock-pad-bytes", (10 << 20).to_string())
            .send()
            .await
            .unwrap();
        let _ = resp.bytes().await;
        let e = h.usage_event().await;
        assert_eq!(e.measurement, Measurement::Estimated, "{e:?}");
        assert_eq!(e.output_tokens, bound, "cap {cap:?}");
        assert!(e.input_tokens <= body.to_string().len() as u64);
        assert!(e.cost_nanos <= e.hold_nanos, "never above the hold");
    }
}
