//! Random sequences of create / activate / allocate / rate-change keep partner funding sound:
//! available ≥ 0, reserved = Σ allocation × highest wholesale/retail ratio, funding conserved,
//! and the ledger balanced.

use super::*;
use admin_api::caller::Caller;
use admin_api::db::begin;
use admin_api::services::group_prices;
use admin_api::services::{customers, funding};
use money::{NanoUsd, RateMultiplier};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Create {
        allocation_usd: u32,
        rate_tenths: u8,
    },
    Activate(usize),
    Increase(usize, u32),
    Decrease(usize, u32),
    SetLimit(usize, u32),
    Rate(usize, i64, u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u32..400, 10u8..30).prop_map(|(a, r)| Op::Create {
            allocation_usd: a,
            rate_tenths: r
        }),
        (0usize..6).prop_map(Op::Activate),
        (0usize..6, 1u32..300).prop_map(|(i, a)| Op::Increase(i, a)),
        (0usize..6, 1u32..300).prop_map(|(i, a)| Op::Decrease(i, a)),
        (0usize..6, 0u32..400).prop_map(|(i, a)| Op::SetLimit(i, a)),
        (0usize..6, 1i64..3, 8u8..30).prop_map(|(i, g, r)| Op::Rate(i, g, r)),
    ]
}

const FUNDING_USD: i64 = 500;

async fn check(api: &Api, partner: &Partner, caller: &Caller, step: usize) {
    use sea_orm::EntityTrait;
    let db = &api.state.db;
    let available = admin_api::ledger::balance(
        db,
        &admin_api::ledger::AccountRef::partner_available(partner.id).code,
    )
    .await
    .unwrap();
    let reserved = admin_api::ledger::partner_total(
        db,
        partner.id,
        admin_api::ledger::AccountKind::PartnerReserved,
    )
    .await
    .unwrap();
    assert!(
        !available.is_negative(),
        "step {step}: available {available:?} < 0"
    );
    assert_eq!(
        available.nanos() + reserved.nanos(),
        FUNDING_USD * 1_000_000_000,
        "step {step}: funding conserved"
    );
    let mut formula = 0i64;
    for c in entities::customers::Entity::find().all(db).await.unwrap() {
        let pairs = group_prices::price_pairs(db, &api.state, c.id)
            .await
            .unwrap();
        formula +=
            admin_api::pricing::reservation(NanoUsd::from_nanos(c.allocation_cap_nanos), &pairs)
                .unwrap()
                .nanos();
    }
    assert_eq!(
        reserved.nanos(),
        formula,
        "step {step}: reserved equals the formula"
    );
    assert_eq!(
        admin_api::ledger::imbalance(db).await.unwrap(),
        NanoUsd::ZERO,
        "step {step}: ledger balanced"
    );
    let _ = caller;
}

async fn run(ops: Vec<Op>) {
    let api = Api::start().await;
    let partner = api.owner(&FUNDING_USD.to_string()).await;
    let caller = Caller {
        partner_id: partner.id,
        partner_name: "Acme".into(),
        token_id: 1,
        token_preview: String::new(),
        scopes: vec!["partner:write".into()],
        role: "owner".into(),
        min_rate: RateMultiplier::ONE,
    };
    let mut ids: Vec<(i64, String)> = Vec::new();
    for (step, op) in ops.into_iter().enumerate() {
        let reference = format!("prop:{step}");
        let txn = begin(&api.state.db).await.unwrap();
        let pick = |i: usize| ids.get(i % ids.len().max(1)).cloned();
        let result: Result<(), admin_api::error::ApiError> = match op {
            Op::Create {
                allocation_usd,
                rate_tenths,
            } => {
                let new = customers::NewCustomer {
                    name: format!("Org {step}"),
                    slug: format!("org-{step}"),
                    contact_email: format!("o{step}@x.example"),
                    billing_email: None,
                    initial_allocation: NanoUsd::from_nanos(
                        i64::from(allocation_usd) * 1_000_000_000,
                    ),
                    retail_rate: RateMultiplier::from_ppm(i64::from(rate_tenths) * 100_000)
                        .unwrap(),
                };
                customers::create(
                    &txn,
                    &api.state,
                    &caller,
                    &reference,
                    &format!("ext-{step}"),
                    new,
                )
                .await
                .map(|s| {
                    ids.push((s.data.customer.id, format!("o{step}@x.example")));
                })
                .map_err(Into::into)
            }
            Op::Activate(i) => {
                txn.rollback().await.unwrap();
                if let Some((id, email)) = pick(i) {
                    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
                    let inv = entities::invitations::Entity::find()
                        .filter(entities::invitations::Column::CustomerId.eq(id))
                        .one(&api.state.db)
                        .await
                        .unwrap()
                        .unwrap();
                    // Accept through the service with a token we know the hash of: re-key it.
                    let token = format!("prop-token-{id}");
                    let mut am: entities::invitations::ActiveModel = inv.into();
                    am.token_hash = sea_orm::Set(api.state.hasher.hash(&token));
                    sea_orm::ActiveModelTrait::update(am, &api.state.db)
                        .await
                        .unwrap();
                    // The money path, not the proof of address: an owner the operator vouches for.
                    let now = chrono::Utc::now();
                    let owner = match admin_api::services::people::find_user(&api.state.db, &email)
                        .await
                        .unwrap()
                    {
                        Some(u) => u,
                        None => admin_api::services::people::create_user(
                            &api.state.db,
                            &email,
                            console::PASSWORD,
                            Some(now),
                            now,
                        )
                        .await
                        .unwrap(),
                    };
                    let _ = admin_api::services::invitations::accept_vouched(
                        &api.state, &token, owner.id,
                    )
                    .await;
                }
                check(&api, &partner, &caller, step).await;
                continue;
            }
            Op::Increase(i, a) | Op::Decrease(i, a) | Op::SetLimit(i, a) => match pick(i) {
                Some((id, _)) => {
                    let amount = NanoUsd::from_nanos(i64::from(a) * 1_000_000_000);
                    let change = match op {
                        Op::Increase(..) => funding::Allocation::Increase(amount),
                        Op::Decrease(..) => funding::Allocation::Decrease(amount),
                        _ => funding::Allocation::SetLimit(amount),
                    };
                    funding::allocate(
                        &txn,
                        &api.state,
                        &caller,
                        &reference,
                        &id.to_string(),
                        change,
                    )
                    .await
                    .map(|_| ())
                    .map_err(Into::into)
                }
                None => Ok(()),
            },
            Op::Rate(i, group, tenths) => match pick(i) {
                Some((id, _)) => funding::set_rate(
                    &txn,
                    &api.state,
                    &caller,
                    &reference,
                    &id.to_string(),
                    &group.to_string(),
                    money::RateMultiplier::from_ppm(i64::from(tenths) * 100_000).unwrap(),
                )
                .await
                .map(|_| ())
                .map_err(Into::into),
                None => Ok(()),
            },
        };
        match result {
            Ok(()) => txn.commit().await.unwrap(),
            Err(_) => txn.rollback().await.unwrap(),
        }
        check(&api, &partner, &caller, step).await;
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(24), .. ProptestConfig::default() })]
    #[test]
    fn funding_invariants_hold(ops in proptest::collection::vec(op(), 1..30)) {
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap().block_on(run(ops));
    }
}
