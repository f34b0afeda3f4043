//! Settlement: the reconciler settles a dead gateway's hold once at its estimate, the settler is
//! idempotent under redelivery, and one batch settles many requests of many organizations exactly
//! on the ledger.

use super::*;

#[tokio::test]
async fn a_dead_gateways_hold_is_settled_once_at_its_estimate() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (_, org) = api.active_customer(&owner, "crash", 10.0, 1.0).await;
    let wallets = api.state.stores.wallets.clone();
    let meta = opstate::HoldMeta {
        key_id: 5,
        group_id: 1,
        route: "chat_completions".into(),
        model_requested: "gpt-4o-mini".into(),
        model_served: "gpt-4o-mini".into(),
        stream: true,
        started_at_ms: 1_700_000_000_000,
        input_tokens: 1_000,
        input_cost_nanos: nano(150_000),
        audio_seconds: 0,
        images: 0,
        video_seconds: 0,
        retail_rate: None,
        wholesale_rate: None,
        batch: None,
    };
    // A gateway reserved, then died: its hold is past its deadline at once.
    wallets
        .reserve(
            org,
            "req-dead",
            nano(2_000_000),
            0,
            &serde_json::to_string(&meta).unwrap(),
        )
        .await
        .unwrap();
    wallets
        .reserve(org, "req-alive", nano(2_000_000), 600_000, "")
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    assert_eq!(
        admin_api::workers::reconciler::reconcile_once(&api.state)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        admin_api::workers::reconciler::reconcile_once(&api.state)
            .await
            .unwrap(),
        0,
        "at most once"
    );
    let snap = wallets.snapshot(org).await.unwrap().unwrap();
    assert_eq!(
        (snap.reserved, snap.pending),
        (nano(2_000_000), nano(150_000)),
        "the live hold stays"
    );
    // The late settlement of the dead gateway finds nothing.
    assert_eq!(
        wallets.settle(org, "req-dead", nano(999)).await.unwrap(),
        opstate::Settlement::Unknown
    );
    // The settler books the estimate like any call.
    assert_eq!(
        admin_api::workers::settler::drain_once(&api.state, "t")
            .await
            .unwrap(),
        1
    );
    use sea_orm::EntityTrait;
    let records = entities::usage_records::Entity::find()
        .all(&api.state.db)
        .await
        .unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(
        (records[0].measurement.as_str(), records[0].charged_nanos),
        ("estimated", 150_000)
    );
    let book = admin_api::ledger::balance(
        &api.state.db,
        &admin_api::ledger::AccountRef::org_wallet(org).code,
    )
    .await
    .unwrap();
    assert_eq!(book, nano(10_000_000_000 - 150_000));
    let snap = wallets.snapshot(org).await.unwrap().unwrap();
    assert_eq!(
        (snap.balance.checked_add(snap.pending), snap.pending),
        (Some(book), NanoUsd::ZERO),
        "reconciled"
    );
    assert_eq!(
        admin_api::ledger::imbalance(&api.state.db).await.unwrap(),
        NanoUsd::ZERO
    );
}

#[tokio::test]
async fn settlement_is_idempotent_under_redelivery() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (_, org) = api.active_customer(&owner, "redeliver", 10.0, 1.0).await;
    let w = api.state.stores.wallets.clone();
    w.reserve(org, "req-1", nano(1_000_000), 600_000, "")
        .await
        .unwrap();
    assert_eq!(
        w.settle(org, "req-1", nano(400_000)).await.unwrap(),
        opstate::Settlement::Settled {
            charged: nano(400_000),
            excess: nano(0),
            below_holds: false,
        }
    );
    let event = settled_event(
        "req-1",
        org,
        "gpt-4o-mini",
        1_700_000_000_000,
        400_000,
        400_000,
    );
    // The same event delivered three times (a settler died before acknowledging).
    for _ in 0..3 {
        api.state.stores.usage.append(&event).await.unwrap();
    }
    assert_eq!(
        admin_api::workers::settler::drain_once(&api.state, "t")
            .await
            .unwrap(),
        3
    );
    use sea_orm::{EntityTrait, PaginatorTrait};
    assert_eq!(
        entities::usage_records::Entity::find()
            .count(&api.state.db)
            .await
            .unwrap(),
        1
    );
    let spend = admin_api::ledger::balance(
        &api.state.db,
        &admin_api::ledger::AccountRef::org_spend(org).code,
    )
    .await
    .unwrap();
    assert_eq!(spend, nano(400_000), "charged once");
    let snap = w.snapshot(org).await.unwrap().unwrap();
    assert_eq!(
        (snap.balance, snap.pending),
        (nano(10_000_000_000 - 400_000), NanoUsd::ZERO)
    );
    let buckets = entities::usage_hourly::Entity::find()
        .all(&api.state.db)
        .await
        .unwrap();
    assert_eq!(
        (buckets.len(), buckets[0].requests, buckets[0].cost_nanos),
        (1, 1, 400_000)
    );
}

pub(super) fn settled_event(
    id: &str,
    org: i64,
    model: &str,
    at_ms: u64,
    cost: i64,
    charged: i64,
) -> opstate::UsageEvent {
    opstate::UsageEvent {
        request_id: id.into(),
        key_id: 1,
        org_id: org,
        group_id: 1,
        route: "chat_completions".into(),
        model_requested: model.into(),
        model_served: model.into(),
        account_id: "a".into(),
        input_tokens: 10,
        output_tokens: 5,
        cached_tokens: 0,
        cache_write_tokens: 0,
        cache_write_1h_tokens: 0,
        measurement: opstate::Measurement::Exact,
        status: 200,
        stream: false,
        started_at_ms: at_ms,
        latency_ms: 5,
        ttfb_ms: Some(1),
        attempts: 1,
        cost_nanos: nano(cost),
        charged_nanos: nano(charged),
        excess_nanos: nano(0),
        hold_nanos: nano(cost),
        project: None,
        workflow: None,
        audio_seconds: 0,
        images: 0,
        video_seconds: 0,
        retail_rate: None,
        wholesale_rate: None,
        resent: false,
        supplier: Default::default(),
        batch: None,
    }
}

#[tokio::test]
async fn one_batch_settles_many_requests_of_many_organizations_exactly() {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder};
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (_, rich) = api.active_customer(&owner, "rich", 10.0, 1.0).await;
    let (_, poor) = api.active_customer(&owner, "poor", 0.001, 1.0).await;
    let w = api.state.stores.wallets.clone();
    let hour = 1_700_000_000_000 - 1_700_000_000_000 % 3_600_000;
    // The rich organization: five calls the gateway charged (holds settled in the mirror), over
    // two hours and two models; one of them was settled by an earlier round and comes again.
    let mut events = Vec::new();
    for (i, (model, at)) in [
        ("gpt-4o-mini", hour),
        ("gpt-4o-mini", hour + 10),
        ("gpt-4o", hour + 20),
        ("gpt-4o-mini", hour + 3_600_000),
        ("gpt-4o-mini", hour + 3_600_001),
    ]
    .into_iter()
    .enumerate()
    {
        let id = format!("rich-{i}");
        w.reserve(rich, &id, nano(200_000), 600_000, "")
            .await
            .unwrap();
        w.settle(rich, &id, nano(100_000)).await.unwrap();
        events.push(settled_event(&id, rich, model, at, 100_000, 100_000));
    }
    api.state.stores.usage.append(&events[0]).await.unwrap();
    assert_eq!(
        admin_api::workers::settler::drain_once(&api.state, "t")
            .await
            .unwrap(),
        1
    );
    // The poor organization (0.001 USD): two calls whose holds were lost, each costing 0.0007 USD:
    // the ledger wallet pays the first in full and the second as far as it goes.
    let lost_a = settled_event("poor-a", poor, "gpt-4o-mini", hour, 700_000, 0);
    let lost_b = settled_event("poor-b", poor, "gpt-4o-mini", hour + 1, 700_000, 0);
    for e in events.iter().chain([&lost_a, &lost_b]) {
        api.state.stores.usage.append(e).await.unwrap();
    }
    assert_eq!(
        admin_api::workers::settler::drain_once(&api.state, "t")
            .await
            .unwrap(),
        7
    );
    assert_eq!(api.state.stores.usage.backlog().await.unwrap(), 0);

    let spend = |org: i64| {
        let db = api.state.db.clone();
        async move {
            admin_api::ledger::balance(&db, &admin_api::ledger::AccountRef::org_spend(org).code)
                .await
                .unwrap()
                .nanos()
        }
    };
    assert_eq!(spend(rich).await, 500_000, "each rich call charged once");
    assert_eq!(
        spend(poor).await,
        1_000_000,
        "never more than the wallet held"
    );
    let records = entities::usage_records::Entity::find()
        .filter(entities::usage_records::Column::OrganizationId.eq(poor))
        .order_by_asc(entities::usage_records::Column::RequestId)
        .all(&api.state.db)
        .await
        .unwrap();
    let charged: Vec<(i64, i64)> = records
        .iter()
        .map(|r| (r.charged_nanos, r.excess_nanos))
        .collect();
    assert_eq!(charged, [(700_000, 0), (300_000, 400_000)]);
    let poor_wallet = w.snapshot(poor).await.unwrap().unwrap();
    assert_eq!(
        (poor_wallet.balance, poor_wallet.pending),
        (NanoUsd::ZERO, NanoUsd::ZERO)
    );
    let rich_wallet = w.snapshot(rich).await.unwrap().unwrap();
    assert_eq!(
        (rich_wallet.balance, rich_wallet.pending),
        (nano(10_000_000_000 - 500_000), NanoUsd::ZERO)
    );
    let buckets: Vec<(String, i64, i64)> = entities::usage_hourly::Entity::find()
        .filter(entities::usage_hourly::Column::OrganizationId.eq(rich))
        .order_by_asc(entities::usage_hourly::Column::HourStart)
        .order_by_asc(entities::usage_hourly::Column::Model)
        .all(&api.state.db)
        .await
        .unwrap()
        .into_iter()
        .map(|b| (b.model, b.requests, b.cost_nanos))
        .collect();
    assert_eq!(
        buckets,
        [
            ("gpt-4o".to_string(), 1, 100_000),
            ("gpt-4o-mini".to_string(), 2, 200_000),
            ("gpt-4o-mini".to_string(), 2, 200_000),
        ]
    );
}

/// What a partner owes for a call is priced at the rates the call was charged at (carried by its
/// usage event), not at a group rate changed between the call and its settlement.
#[tokio::test]
async fn wholesale_accrual_uses_the_rates_the_call_was_priced_at() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (id, org) = api.active_customer(&owner, "rates", 10.0, 2.0).await;
    let w = api.state.stores.wallets.clone();
    w.reserve(org, "req-r", nano(1_000_000), 600_000, "")
        .await
        .unwrap();
    w.settle(org, "req-r", nano(400_000)).await.unwrap();
    let mut event = settled_event(
        "req-r",
        org,
        "gpt-4o-mini",
        1_700_000_000_000,
        400_000,
        400_000,
    );
    event.retail_rate = money::RateMultiplier::from_ppm(2_000_000);
    event.wholesale_rate = Some(money::RateMultiplier::ONE);
    // The partner reprices the group before the settler books the call.
    let (status, body) = api
        .write(
            &owner,
            Method::PUT,
            &format!("/customers/{id}/groups/1/rate"),
            Some(&json!({"retail_rate_multiplier": 4})),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    api.state.stores.usage.append(&event).await.unwrap();
    admin_api::workers::settler::drain_once(&api.state, "t")
        .await
        .unwrap();
    let owed = admin_api::ledger::balance(
        &api.state.db,
        &admin_api::ledger::AccountRef::partner_outstanding_usage(owner.id).code,
    )
    .await
    .unwrap();
    assert_eq!(
        owed,
        nano(200_000),
        "0.0004 USD charged at 2.0 retail, 1.0 wholesale"
    );
}
