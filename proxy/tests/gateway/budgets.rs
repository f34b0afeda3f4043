//! Key budgets (DESIGN §6d): a call whose hold would take its key past the budget is refused with
//! 429 `budget_exceeded` before any supplier, on one gateway and across two sharing a store.

use super::*;
use opstate::{BudgetPeriod, KeyBudget};

/// The hold of a chat call of gpt-4o-mini with a 1000-token output cap (what admission reserves).
fn hold_of(body: &Value) -> NanoUsd {
    proxy::worst_case(
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
    .unwrap()
    .0
}

/// Publishes key `key_id` of organization 42 (group 1) with `budget`; returns its secret.
async fn budget_key(stores: &Stores, hasher: &KeyHasher, key_id: i64, budget: KeyBudget) -> String {
    let secret = credentials::generate(Kind::CustomerKey, Env::Dev);
    let record = KeyRecord {
        key_id,
        org_id: 42,
        group_id: 1,
        permissions: KeyPermissions::default(),
        rate: Some(RateMultiplier::ONE),
        expires_at: None,
        limits: KeyLimits::default(),
        budget: Some(budget),
    };
    stores
        .keys
        .publish(&hasher.hash(secret.expose()), &record)
        .await
        .unwrap();
    secret.expose().to_string()
}

/// A gateway on `stores`, prepared as [`Harness::start`] prepares its own: a complete directory,
/// organization 42 holding 1 000 USD, and a key of its own.
async fn prepared(stores: Stores) -> Harness {
    let mut h = Harness::start_with_stores(stores).await;
    h.stores.keys.load(&[]).await.unwrap();
    h.stores
        .wallets
        .load(42, nano(1_000 * NANOS))
        .await
        .unwrap();
    h.key = h.add_key(1, KeyPermissions::default()).await;
    h
}

fn capped_chat() -> Value {
    let mut body = chat("gpt-4o-mini", false);
    body["max_tokens"] = json!(1000);
    body
}

async fn over_budget_on_every_surface(h: &Harness) {
    let body = capped_chat();
    let hold = hold_of(&body);
    // Room for one call's hold and a half: the first is served, its charge counts, the next
    // would pass the budget.
    let budget = KeyBudget {
        limit: nano(hold.nanos() * 3 / 2),
        period: BudgetPeriod::Day,
    };
    let key = budget_key(&h.stores, &h.hasher, 900, budget).await;
    let resp = h
        .http
        .post(h.url("/compat/v1/chat/completions"))
        .bearer_auth(&key)
        .header("x-mock-usage", "prompt=50,completion=1000")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    resp.bytes().await.unwrap();
    let first = h.usage_event().await;
    assert!(first.charged_nanos.nanos() > hold.nanos() / 2, "{first:?}");
    let served = h.mock.request_count();

    let resp = h
        .http
        .post(h.url("/compat/v1/chat/completions"))
        .bearer_auth(&key)
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let retry: u64 = resp.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let (status, err) = json_of(resp).await;
    assert_eq!(status, 429, "{err}");
    assert_eq!(err["error"]["type"], "budget_exceeded", "{err}");
    assert!(
        err["error"]["message"].as_str().unwrap().contains("budget"),
        "{err}"
    );
    let resets = err["error"]["resets_in_seconds"].as_u64().unwrap();
    assert!((1..=86_400).contains(&resets), "{err}");
    assert_eq!(retry, resets);

    // The Messages surface answers in its own shape, keeping the type and the reset.
    let (status, err) = json_of(
        h.http
            .post(h.url("/v1/messages"))
            .header("x-api-key", &key)
            .header("anthropic-version", "2023-06-01")
            .body(
                json!({"model": "gpt-4o-mini", "max_tokens": 1000,
                       "messages": [{"role": "user", "content": "hi"}]})
                .to_string(),
            )
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 429, "{err}");
    assert_eq!(err["type"], "error", "{err}");
    assert_eq!(err["error"]["type"], "budget_exceeded", "{err}");
    assert!(
        err["error"]["resets_in_seconds"].as_u64().is_some(),
        "{err}"
    );

    assert_eq!(
        h.mock.request_count(),
        served,
        "no refused call reached a supplier"
    );
    h.no_usage_event().await;
    let w = h.wallet().await;
    assert_eq!(w.reserved, NanoUsd::ZERO, "a refused call holds nothing");
    let spend = h
        .stores
        .wallets
        .key_spend(42, &[900])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(spend.keys[0].day, first.charged_nanos);
    assert_eq!(spend.keys[0].month, first.charged_nanos);
    // Another key of the organization is not held back by this one's budget.
    let (status, _) = json_of(
        h.post("/compat/v1/chat/completions", &body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn a_key_over_its_budget_is_refused_before_the_supplier_in_memory() {
    let h = Harness::start().await;
    over_budget_on_every_surface(&h).await;
}

#[tokio::test]
async fn a_key_over_its_budget_is_refused_before_the_supplier_on_redis() {
    let Some(url) = testkit::redis_url() else {
        return;
    };
    let stores = Stores::redis(&url, &testkit::redis_prefix("budget"))
        .await
        .unwrap();
    let h = prepared(stores).await;
    over_budget_on_every_surface(&h).await;
}

/// Two gateways sharing one Redis store, many calls of one key at once: the key's charges never
/// pass its budget, and every refused call is refused before any supplier.
#[tokio::test]
async fn two_gateways_never_take_a_key_past_its_budget() {
    let Some(url) = testkit::redis_url() else {
        return;
    };
    let stores = Stores::redis(&url, &testkit::redis_prefix("budget2"))
        .await
        .unwrap();
    let one = prepared(stores.clone()).await;
    let two = Harness::start_with_stores(stores.clone()).await;
    let body = capped_chat();
    let hold = hold_of(&body);
    let budget = KeyBudget {
        limit: nano(hold.nanos() * 8),
        period: BudgetPeriod::Month,
    };
    let key = budget_key(&stores, &one.hasher, 901, budget).await;
    let mut tasks = JoinSet::new();
    for i in 0..60 {
        let base = if i % 2 == 0 {
            one.base.clone()
        } else {
            two.base.clone()
        };
        let (http, key, body) = (one.http.clone(), key.clone(), body.clone());
        tasks.spawn(async move {
            let resp = http
                .post(format!("{base}/compat/v1/chat/completions"))
                .bearer_auth(key)
                .header("x-mock-usage", "prompt=50,completion=1000")
                .header("x-mock-delay-ms", "20")
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            let body: Value = serde_json::from_slice(&resp.bytes().await.unwrap()).unwrap();
            (status, body)
        });
    }
    let (mut ok, mut refused) = (0, 0);
    while let Some(r) = tasks.join_next().await {
        match r.unwrap() {
            (200, _) => ok += 1,
            (429, b) => {
                assert_eq!(b["error"]["type"], "budget_exceeded", "{b}");
                refused += 1;
            }
            (other, b) => panic!("unexpected {other}: {b}"),
        }
    }
    assert!(ok >= 8 && refused > 0, "ok {ok}, refused {refused}");
    assert_eq!(
        one.mock.request_count() + two.mock.request_count(),
        ok,
        "refused calls never reached a supplier"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    let spend = loop {
        let s = stores
            .wallets
            .key_spend(42, &[901])
            .await
            .unwrap()
            .unwrap()
            .keys[0];
        if s.held.is_zero() || Instant::now() > deadline {
            break s;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(spend.held, NanoUsd::ZERO);
    assert!(spend.month <= budget.limit, "{spend:?} past {budget:?}");
    assert!(
        spend.month.nanos() >= hold.nanos() * 8 / 2,
        "most of the budget was used: {spend:?}"
    );
}
