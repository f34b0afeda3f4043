//! Account capacity: full accounts queue callers then refuse with capacity_queue_full, and simple
//! work is downgraded only under pressure and when allowed.

use super::*;

#[tokio::test]
async fn full_capacity_queues_then_refuses_with_capacity_queue_full() {
    let h = Arc::new(Harness::start().await);
    let key = h.add_key(2, KeyPermissions::default()).await;
    let call = |h: Arc<Harness>, key: String, slow: bool| async move {
        let mut req = h
            .http
            .post(h.url("/compat/v1/chat/completions"))
            .bearer_auth(key)
            .body(chat("narrow-model", true).to_string());
        if slow {
            req = req
                .header("x-mock-delay-ms", "250")
                .header("x-mock-events", "4");
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.unwrap();
        (
            status,
            serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null),
        )
    };
    // Two slow streams fill mock-b (max_concurrency = 2).
    let mut running = JoinSet::new();
    for _ in 0..2 {
        running.spawn(call(h.clone(), key.clone(), true));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while h.stores.slots.in_use(&["mock-b"]).await.unwrap()[0] < 2 {
        assert!(Instant::now() < deadline, "the slow calls never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Two wait (queue depth 2); the fifth is refused at once.
    let mut waiting = JoinSet::new();
    for _ in 0..2 {
        waiting.spawn(call(h.clone(), key.clone(), false));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let (status, body) = call(h.clone(), key.clone(), false).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "capacity_queue_full");
    assert!(body["error"]["message"].is_string());
    assert!(
        started.elapsed() < Duration::from_millis(200),
        "refused at once, not after waiting"
    );
    // The waiters give up after queue_wait_ms (400 ms), before the slow calls end (~1 s).
    while let Some(r) = waiting.join_next().await {
        let (status, body) = r.unwrap();
        assert_eq!(
            (status, body["error"]["code"].as_str()),
            (429, Some("capacity_queue_full"))
        );
    }
    while let Some(r) = running.join_next().await {
        assert_eq!(r.unwrap().0, 200);
    }
    assert_eq!(
        h.stores.slots.in_use(&["mock-b"]).await.unwrap(),
        vec![0],
        "slots given back"
    );
    assert_eq!(
        h.mock_b.request_count(),
        2,
        "refused and timed-out calls never reached the supplier"
    );
    // Capacity is back.
    let (status, _) = call(h.clone(), key.clone(), false).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn simple_work_is_downgraded_only_under_pressure_and_when_allowed() {
    let h = Arc::new(Harness::start().await);
    let pair = h.add_key(3, KeyPermissions::default()).await;
    let premium = h.add_key(2, KeyPermissions::default()).await;
    let call = |h: Arc<Harness>,
                key: String,
                body: Value,
                extra: Option<(&'static str, &'static str)>| async move {
        let mut req = h
            .http
            .post(h.url("/compat/v1/chat/completions"))
            .bearer_auth(key)
            .body(body.to_string());
        if let Some((k, v)) = extra {
            req = req.header(k, v);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let served = resp
            .headers()
            .get("x-tollgate-model-served")
            .map(|v| v.to_str().unwrap().to_string());
        let bytes = resp.bytes().await.unwrap();
        (
            status,
            served,
            serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null),
        )
    };
    // No pressure: big-model is served by big-model.
    let (status, served, body) =
        call(h.clone(), pair.clone(), chat("big-model", false), None).await;
    assert_eq!((status, served), (200, None));
    assert_eq!(body["model"], "big-model");
    // One slow call holds 1 of big-model's 2 slots: pressure 0.5.
    let mut slow = JoinSet::new();
    slow.spawn(call(
        h.clone(),
        pair.clone(),
        chat("big-model", true),
        Some(("x-mock-delay-ms", "400")),
    ));
    let deadline = Instant::now() + Duration::from_secs(5);
    while h.stores.slots.in_use(&["mock-b"]).await.unwrap()[0] < 1 {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Simple work under pressure goes to small-model, billed and reported as such.
    let (status, served, body) =
        call(h.clone(), pair.clone(), chat("big-model", false), None).await;
    assert_eq!((status, served.as_deref()), (200, Some("small-model")));
    assert_eq!(
        body["model"], "small-model",
        "the response names the model that served"
    );
    let events: Vec<UsageEvent> = {
        let mut all = Vec::new();
        for _ in 0..2 {
            all.push(h.usage_event().await);
        }
        all
    };
    let down = events
        .iter()
        .find(|e| e.model_served == "small-model")
        .unwrap();
    assert_eq!(down.model_requested, "big-model");
    // Complex work, an opted-out client, and a key whose group lacks the target keep the model.
    let mut with_tools = chat("big-model", false);
    with_tools["tools"] = json!([{"type": "function", "function": {"name": "f"}}]);
    for (key, body, extra) in [
        (pair.clone(), with_tools, None),
        (
            pair.clone(),
            chat("big-model", false),
            Some(("x-tollgate-downgrade", "never")),
        ),
        (premium.clone(), chat("big-model", false), None),
    ] {
        let (status, served, body) = call(h.clone(), key, body, extra).await;
        assert_eq!((status, served), (200, None), "{body}");
        assert_eq!(body["model"], "big-model");
    }
    while let Some(r) = slow.join_next().await {
        assert_eq!(r.unwrap().0, 200);
    }
    assert!(
        h.metrics
            .render()
            .contains(r#"tollgate_downgrades_total{from="big-model",to="small-model"} 1"#)
    );
}

/// A call that waited in the queue and then finds its wallet short is refused (402) and gives
/// back the slot it took: nothing reaches the supplier, nothing stays held, capacity is whole.
#[tokio::test]
async fn a_queued_call_refused_by_its_wallet_gives_its_slot_back() {
    let h = Arc::new(Harness::start().await);
    let key = h.add_key(2, KeyPermissions::default()).await;
    let poor = credentials::generate(Kind::CustomerKey, Env::Dev);
    let record = KeyRecord {
        key_id: 977,
        org_id: 77,
        group_id: 2,
        permissions: KeyPermissions::default(),
        rate: Some(RateMultiplier::ONE),
        expires_at: None,
        limits: KeyLimits::default(),
        budget: None,
    };
    let hash = h.hasher.hash(poor.expose());
    h.stores.keys.publish(&hash, &record).await.unwrap();
    h.stores
        .wallets
        .load(77, NanoUsd::from_nanos(1))
        .await
        .unwrap();
    let call = |h: Arc<Harness>, key: String, slow: bool| async move {
        let mut req = h
            .http
            .post(h.url("/compat/v1/chat/completions"))
            .bearer_auth(key)
            .body(chat("narrow-model", true).to_string());
        if slow {
            req = req
                // A pause before each of the stream's few events: ends well within the queue's
                // 400 ms wait.
                .header("x-mock-delay-ms", "30")
                .header("x-mock-events", "2");
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.unwrap();
        let body = serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null);
        (status, body)
    };
    // Two slow streams fill mock-b (max_concurrency = 2); the poor key's call waits for a slot.
    let mut running = JoinSet::new();
    for _ in 0..2 {
        running.spawn(call(h.clone(), key.clone(), true));
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while h.stores.slots.in_use(&["mock-b"]).await.unwrap()[0] < 2 {
        assert!(Instant::now() < deadline, "the slow calls never started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (status, body) = call(h.clone(), poor.expose().to_string(), false).await;
    assert_eq!(status, 402, "{body}");
    assert_eq!(body["error"]["code"], "insufficient_balance");
    while let Some(r) = running.join_next().await {
        assert_eq!(r.unwrap().0, 200);
    }
    assert_eq!(
        h.stores.slots.in_use(&["mock-b"]).await.unwrap(),
        vec![0],
        "slot given back"
    );
    let wallet = h.stores.wallets.snapshot(77).await.unwrap().unwrap();
    assert_eq!(wallet.reserved, NanoUsd::ZERO, "nothing held");
    assert_eq!(wallet.balance, NanoUsd::from_nanos(1), "nothing charged");
    assert_eq!(
        h.mock_b.request_count(),
        2,
        "the refused call reached no supplier"
    );
}
