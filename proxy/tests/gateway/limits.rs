//! Capacity layers besides the accounts' slots: a key's calls in flight and per minute (its own
//! limits, else its group's), the deployment's calls in flight, and each account's capacity
//! estimated from its health. Over a layer: the wait queue, then 429 `capacity_queue_full`;
//! nothing reaches the supplier and nothing is charged for a refused call.

use super::*;

/// Publishes a key of `group_id` (organization 42) with its own `limits`.
pub(crate) async fn limited_key(
    h: &Harness,
    key_id: i64,
    group_id: i64,
    limits: KeyLimits,
) -> String {
    let secret = credentials::generate(Kind::CustomerKey, Env::Dev);
    let record = KeyRecord {
        key_id,
        org_id: 42,
        group_id,
        permissions: KeyPermissions::default(),
        rate: Some(RateMultiplier::ONE),
        expires_at: None,
        limits,
        budget: None,
    };
    h.stores
        .keys
        .publish(&h.hasher.hash(secret.expose()), &record)
        .await
        .unwrap();
    secret.expose().to_string()
}

/// A chat call of `model` with `key`; slow ones stream 4 events 250 ms apart.
async fn call(h: Arc<Harness>, key: String, model: &'static str, slow: bool) -> (u16, Value) {
    let mut req = h
        .http
        .post(h.url("/compat/v1/chat/completions"))
        .bearer_auth(key)
        .body(chat(model, slow).to_string());
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
}

/// The next call of `set` (tracked tasks) to finish.
async fn first_of(set: &mut JoinSet<(u16, Value)>) -> (u16, Value) {
    set.join_next().await.unwrap().unwrap()
}

fn assert_queue_full(status: u16, body: &Value) {
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "capacity_queue_full", "{body}");
    assert!(body["error"]["message"].is_string(), "{body}");
}

fn limits_hit(h: &Harness, layer: &str) -> u64 {
    let text = h.metrics.render();
    let needle = format!("tollgate_limits_hit_total{{layer=\"{layer}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(needle.as_str()))
        .map_or(0, |n| n.trim().parse().unwrap())
}

/// Waits until `account` has `n` slots taken.
async fn slots_taken(h: &Harness, account: &str, n: u32) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while h.stores.slots.in_use(&[account]).await.unwrap()[0] < n {
        assert!(Instant::now() < deadline, "the slow calls never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn a_key_over_its_concurrency_waits_then_is_refused_and_holds_up_no_one() {
    let h = Arc::new(Harness::start().await);
    let one = KeyLimits {
        max_concurrency: Some(1),
        requests_per_minute: None,
    };
    let key = limited_key(&h, 501, 1, one).await;
    let before = h.wallet().await;
    let mut slow = JoinSet::new();
    slow.spawn(call(h.clone(), key.clone(), "gpt-4o-mini", true));
    slots_taken(&h, "mock", 1).await;
    // The same key again: waits (queue_wait_ms = 400), then 429, before the slow call ends.
    let started = Instant::now();
    let (status, body) = call(h.clone(), key.clone(), "gpt-4o-mini", false).await;
    assert_queue_full(status, &body);
    assert!(started.elapsed() >= Duration::from_millis(350), "it waited");
    // Meanwhile another key of the same organization is served at once.
    let started = Instant::now();
    let (status, body) = call(h.clone(), h.key.clone(), "gpt-4o-mini", false).await;
    assert_eq!(status, 200, "{body}");
    assert!(started.elapsed() < Duration::from_millis(300));
    assert_eq!(first_of(&mut slow).await.0, 200);
    assert_eq!(
        h.mock.request_count(),
        2,
        "the refused call never reached the supplier"
    );
    assert_eq!(limits_hit(&h, "key_concurrency"), 1);
    assert_eq!(limits_hit(&h, "queue_full"), 1);
    // Two calls charged, the refused one nothing; nothing left held.
    let after = h.wallet().await;
    assert_eq!(after.reserved, NanoUsd::ZERO);
    let mut charged = Vec::new();
    for _ in 0..2 {
        charged.push(h.usage_event().await);
    }
    let total: i64 = charged.iter().map(|e| e.charged_nanos.nanos()).sum();
    assert_eq!(before.balance.nanos() - after.balance.nanos(), total);
    h.no_usage_event().await;
    // The slot is back: the key is served again.
    let (status, _) = call(h.clone(), key, "gpt-4o-mini", false).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_key_over_its_minute_is_refused_at_once_its_group_default_or_its_own() {
    let h = Arc::new(
        Harness::start_with_config(|t| {
            t.replace(
                "product_code = \"pair\"",
                "product_code = \"pair\"\nkey_requests_per_minute = 2",
            )
        })
        .await,
    );
    // Group 3's default: two calls a minute.
    let group_default = limited_key(&h, 601, 3, KeyLimits::default()).await;
    for _ in 0..2 {
        let (status, body) = call(h.clone(), group_default.clone(), "small-model", false).await;
        assert_eq!(status, 200, "{body}");
    }
    let started = Instant::now();
    let (status, body) = call(h.clone(), group_default.clone(), "small-model", false).await;
    assert_queue_full(status, &body);
    assert!(
        started.elapsed() < Duration::from_millis(300),
        "the next minute is beyond the wait bound: refused at once"
    );
    // A key's own, lower limit wins over its group's.
    let own = KeyLimits {
        max_concurrency: None,
        requests_per_minute: Some(1),
    };
    let tight = limited_key(&h, 602, 3, own).await;
    assert_eq!(
        call(h.clone(), tight.clone(), "small-model", false).await.0,
        200
    );
    let (status, body) = call(h.clone(), tight, "small-model", false).await;
    assert_queue_full(status, &body);
    // A key of another group has no such limit.
    for _ in 0..3 {
        assert_eq!(
            call(h.clone(), h.key.clone(), "gpt-4o-mini", false).await.0,
            200
        );
    }
    assert_eq!(
        h.mock.request_count(),
        6,
        "refused calls never reached the supplier"
    );
    assert_eq!(limits_hit(&h, "key_rate"), 2);
    for _ in 0..6 {
        h.usage_event().await;
    }
    h.no_usage_event().await;
    assert_eq!(h.wallet().await.reserved, NanoUsd::ZERO);
}

#[tokio::test]
async fn the_deployment_limit_queues_every_key_in_arrival_order() {
    let h = Arc::new(
        Harness::start_with_config(|t| t.replace("[routing]\n", "[routing]\nmax_in_flight = 1\n"))
            .await,
    );
    let other = h.add_key(2, KeyPermissions::default()).await;
    let mut slow = JoinSet::new();
    slow.spawn(call(h.clone(), h.key.clone(), "gpt-4o-mini", true));
    slots_taken(&h, "mock", 1).await;
    // Another key, another account: still over the deployment's one call in flight.
    let (status, body) = call(h.clone(), other.clone(), "gpt-4o", false).await;
    assert_queue_full(status, &body);
    assert_eq!(limits_hit(&h, "global"), 1);
    assert_eq!(first_of(&mut slow).await.0, 200);
    // The call in flight ended: room again. A waiter gets in as soon as it does.
    slow.spawn(call(h.clone(), h.key.clone(), "gpt-4o-mini", false));
    let (status, body) = call(h.clone(), other, "gpt-4o", false).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(first_of(&mut slow).await.0, 200);
    assert_eq!(h.wallet().await.reserved, NanoUsd::ZERO);
}

#[tokio::test]
async fn an_account_that_answered_429_counts_half_its_capacity_until_it_recovers() {
    let h = Arc::new(
        Harness::start_with_config(|t| {
            t.replace("[routing]\n", "[routing]\nhealth_recovery_ms = 600000\n")
        })
        .await,
    );
    let key = h.add_key(2, KeyPermissions::default()).await;
    // mock-b (max_concurrency 2) is healthy: two slow calls run side by side.
    let mut pair = JoinSet::new();
    pair.spawn(call(h.clone(), key.clone(), "narrow-model", true));
    pair.spawn(call(h.clone(), key.clone(), "narrow-model", true));
    assert_eq!(first_of(&mut pair).await.0, 200);
    assert_eq!(first_of(&mut pair).await.0, 200);
    // One 429 (a reset 1 s away): cooldown for a second, and its estimate halves to 1.
    h.mock_b
        .set_fault(Some("status=429;retry_after=1".parse().unwrap()));
    let (status, body) = call(h.clone(), key.clone(), "narrow-model", false).await;
    assert_ne!(status, 200, "{body}");
    h.mock_b.set_fault(None);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    // Out of cooldown, it takes one call at a time: the second waits, then is refused.
    let mut slow = JoinSet::new();
    slow.spawn(call(h.clone(), key.clone(), "narrow-model", true));
    slots_taken(&h, "mock-b", 1).await;
    let (status, body) = call(h.clone(), key.clone(), "narrow-model", false).await;
    assert_queue_full(status, &body);
    assert_eq!(first_of(&mut slow).await.0, 200);
    assert!(limits_hit(&h, "pool") >= 1);
    assert_eq!(h.wallet().await.reserved, NanoUsd::ZERO);
}
