//! The settler: drains the usage stream into the ledger of record, exactly once per request.
//!
//! For each event, in one database transaction: the usage record (unique request id: a redelivered
//! event changes nothing), the hourly bucket, and the ledger spend posting `org:O:wallet →
//! org:O:spend` of what the gateway charged (reference `spend:{request_id}`). After the commit the
//! wallet mirror is told (`confirm`) so the charge stops being pending, then the stream entry is
//! acknowledged. A crash anywhere redelivers the entry; every step is idempotent.
//!
//! A request whose hold was already gone when it settled (store lost, or resolved after its
//! deadline) arrives with nothing charged: the settler charges its cost from the ledger wallet, at
//! most the wallet's balance, and the mirror takes the debit on confirmation. Cost that could not be
//! charged stays recorded as `excess_nanos` on the usage record (a loss, visible in reports).

use crate::ledger::{self, AccountRef};
use crate::partner::idempotency::begin;
use crate::state::AppState;
use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use entities::usage_records;
use opstate::{Measurement, StreamEntry, UsageEvent};
use sea_orm::sea_query::OnConflict;
use sea_orm::{ConnectionTrait, DbBackend, DbErr, EntityTrait, Set, Statement};
use settings::NanoUsd;
use std::time::Duration;
use tokio::sync::watch;

/// Events claimed per round.
const BATCH: usize = 200;
/// An entry claimed by a settler that has not acknowledged it for this long is taken over.
const CLAIM_TIMEOUT: Duration = Duration::from_secs(30);

/// Why settling failed (the entry stays in the stream and is retried).
#[derive(Debug, thiserror::Error)]
pub enum SettleError {
    #[error("database: {0}")]
    Database(#[from] DbErr),
    #[error("ledger: {0}")]
    Ledger(#[from] ledger::LedgerError),
    #[error("store: {0}")]
    Store(#[from] opstate::StoreError),
}

/// Drains until `shutdown` turns true, pausing `idle` when the stream is empty.
pub async fn run(
    state: AppState,
    consumer: String,
    idle: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let drained = match drain_once(&state, &consumer).await {
            Ok(n) => n,
            Err(e) => {
                tracing::error!(error = %e, "settler round failed; retrying");
                0
            }
        };
        if drained == 0 {
            tokio::select! {
                _ = shutdown.wait_for(|s| *s) => return,
                _ = tokio::time::sleep(idle) => {}
            }
        } else if *shutdown.borrow() {
            return;
        }
    }
}

/// Settles one batch; returns how many entries it acknowledged.
pub async fn drain_once(state: &AppState, consumer: &str) -> Result<usize, SettleError> {
    let entries = state
        .stores
        .usage
        .claim(consumer, BATCH, CLAIM_TIMEOUT)
        .await?;
    let mut acked = Vec::with_capacity(entries.len());
    for StreamEntry { id, event } in entries {
        settle_event(state, &event).await?;
        acked.push(id);
    }
    state.stores.usage.ack(&acked).await?;
    Ok(acked.len())
}

fn at_ms(ms: u64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(i64::try_from(ms).unwrap_or(i64::MAX)).unwrap_or_else(Utc::now)
}

async fn settle_event(state: &AppState, e: &UsageEvent) -> Result<(), SettleError> {
    let txn = begin(&state.db).await?;
    let started = at_ms(e.started_at_ms);
    let mut charged = e.charged_nanos.max(0);
    let mut excess = e.excess_nanos.max(0);
    let unresolved = charged == 0 && e.cost_nanos > 0;
    if unresolved {
        // The hold was gone at settlement: charge from the ledger wallet what it can pay.
        let wallet = ledger::balance(&txn, &AccountRef::org_wallet(e.org_id).code).await?;
        charged = e.cost_nanos.min(wallet.0.max(0));
        excess = e.cost_nanos - charged;
    }
    let inserted = usage_records::Entity::insert(usage_records::ActiveModel {
        request_id: Set(e.request_id.clone()),
        organization_id: Set(e.org_id),
        api_key_id: Set(e.key_id),
        group_id: Set(e.group_id),
        route: Set(e.route.clone()),
        model_requested: Set(e.model_requested.clone()),
        model_served: Set(e.model_served.clone()),
        account_id: Set(e.account_id.clone()),
        input_tokens: Set(i64::try_from(e.input_tokens).unwrap_or(i64::MAX)),
        output_tokens: Set(i64::try_from(e.output_tokens).unwrap_or(i64::MAX)),
        cached_tokens: Set(i64::try_from(e.cached_tokens).unwrap_or(i64::MAX)),
        measurement: Set(match e.measurement {
            Measurement::Exact => "exact".into(),
            Measurement::Estimated => "estimated".into(),
        }),
        status: Set(i32::from(e.status)),
        stream: Set(e.stream),
        cost_nanos: Set(e.cost_nanos),
        charged_nanos: Set(charged),
        excess_nanos: Set(excess),
        started_at: Set(started),
        settled_at: Set(Utc::now()),
        project: Set(e.project.clone()),
        workflow: Set(e.workflow.clone()),
        audio_seconds: Set(i64::try_from(e.audio_seconds).unwrap_or(i64::MAX)),
        ..Default::default()
    })
    .on_conflict(
        OnConflict::column(usage_records::Column::RequestId)
            .do_nothing()
            .to_owned(),
    )
    .exec_without_returning(&txn)
    .await?;
    if inserted == 0 {
        // Settled before (a redelivery): nothing more to book. The mirror may still need the
        // confirmation if the previous round died after its commit.
        txn.rollback().await?;
        confirm(state, e, charged).await?;
        return Ok(());
    }
    let hour = started
        .duration_trunc(TimeDelta::hours(1))
        .unwrap_or(started);
    add_to_bucket(&txn, e, hour).await?;
    ledger::transfer(
        &txn,
        &format!("spend:{}", e.request_id),
        "spend",
        &AccountRef::org_wallet(e.org_id),
        &AccountRef::org_spend(e.org_id),
        NanoUsd(charged),
    )
    .await?;
    book_partner_usage(&txn, state, e, charged).await?;
    txn.commit().await?;
    confirm(state, e, charged).await
}

/// The partner's side of a charge: its wholesale cost (charge × wholesale / retail of the group),
/// accrued on `partner:P:outstanding_usage` against `partner:P:usage_payable` (what the partner
/// owes for its customers' usage). Organizations no partner resells have none.
async fn book_partner_usage(
    txn: &impl ConnectionTrait,
    state: &AppState,
    e: &UsageEvent,
    charged: i64,
) -> Result<(), SettleError> {
    use entities::{customer_groups, customers};
    use sea_orm::{ColumnTrait, QueryFilter};
    if charged <= 0 {
        return Ok(());
    }
    let Some(customer) = customers::Entity::find()
        .filter(customers::Column::OrganizationId.eq(e.org_id))
        .one(txn)
        .await?
    else {
        return Ok(());
    };
    let retail = customer_groups::Entity::find()
        .filter(customer_groups::Column::CustomerId.eq(customer.id))
        .filter(customer_groups::Column::GroupId.eq(e.group_id))
        .one(txn)
        .await?
        .map(|g| g.retail_rate_multiplier_ppm);
    let wholesale = state
        .settings
        .group(e.group_id)
        .map(|g| g.wholesale_rate_multiplier.0);
    let (Some(retail), Some(wholesale)) = (retail, wholesale) else {
        return Ok(());
    };
    let cost = (i128::from(charged) * i128::from(wholesale)).div_euclid(i128::from(retail.max(1)));
    let payable = AccountRef {
        code: format!("partner:{}:usage_payable", customer.partner_id),
        kind: ledger::AccountKind::PartnerUsagePayable,
        partner_id: Some(customer.partner_id),
        organization_id: None,
    };
    ledger::transfer(
        txn,
        &format!("wholesale:{}", e.request_id),
        "wholesale_usage",
        &payable,
        &AccountRef::partner_outstanding_usage(customer.partner_id),
        NanoUsd(i64::try_from(cost).unwrap_or(i64::MAX)),
    )
    .await?;
    Ok(())
}

async fn confirm(state: &AppState, e: &UsageEvent, charged: i64) -> Result<(), SettleError> {
    if charged > 0
        && state
            .stores
            .wallets
            .confirm(e.org_id, &e.request_id, charged)
            .await?
            == opstate::Confirmation::Missing
    {
        // No mirror: it is rebuilt from the ledger, which now has the charge.
        state.wallet_stale(e.org_id);
    }
    Ok(())
}

async fn add_to_bucket(
    db: &impl ConnectionTrait,
    e: &UsageEvent,
    hour: DateTime<Utc>,
) -> Result<(), DbErr> {
    let backend = db.get_database_backend();
    let p = |n: usize| match backend {
        DbBackend::Postgres => format!("${n}"),
        _ => "?".to_string(),
    };
    let sql = format!(
        "INSERT INTO usage_hourly (organization_id, api_key_id, model, hour_start, requests, input_tokens, output_tokens, cached_tokens, estimated_requests, cost_nanos) \
         VALUES ({}, {}, {}, {}, 1, {}, {}, {}, {}, {}) \
         ON CONFLICT (organization_id, hour_start, api_key_id, model) DO UPDATE SET \
         requests = usage_hourly.requests + 1, \
         input_tokens = usage_hourly.input_tokens + EXCLUDED.input_tokens, \
         output_tokens = usage_hourly.output_tokens + EXCLUDED.output_tokens, \
         cached_tokens = usage_hourly.cached_tokens + EXCLUDED.cached_tokens, \
         estimated_requests = usage_hourly.estimated_requests + EXCLUDED.estimated_requests, \
         cost_nanos = usage_hourly.cost_nanos + EXCLUDED.cost_nanos",
        p(1),
        p(2),
        p(3),
        p(4),
        p(5),
        p(6),
        p(7),
        p(8),
        p(9)
    );
    let tokens = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    db.execute_raw(Statement::from_sql_and_values(
        backend,
        sql,
        [
            e.org_id.into(),
            e.key_id.into(),
            e.model_served.clone().into(),
            hour.into(),
            tokens(e.input_tokens).into(),
            tokens(e.output_tokens).into(),
            tokens(e.cached_tokens).into(),
            i64::from(e.measurement == Measurement::Estimated).into(),
            e.cost_nanos.into(),
        ],
    ))
    .await?;
    Ok(())
}
