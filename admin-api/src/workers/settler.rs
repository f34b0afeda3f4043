//! The settler: drains the usage stream into the ledger of record, exactly once per request.
//! Its loop, over the streams it leases, is `settler_share`'s (issue 48).
//!
//! For each claimed batch of events, in one database transaction: the usage records (unique request
//! id: a redelivered event changes nothing), the hourly buckets (one upsert per organization, key,
//! model and hour of the batch), and per organization one ledger spend posting `org:O:wallet →
//! org:O:spend` of what the gateway charged for the batch's new events (reference
//! `spend:{first request id}+{count}`; the records, inserted in the same transaction, are what make
//! a redelivery a no-op). After the commit the wallet mirror is told (`confirm`) so each charge stops
//! being pending, then the stream entries are acknowledged. A crash anywhere redelivers the
//! entries; every step is idempotent. Should another settler record one of the batch's events
//! concurrently (two admin-api instances), the batch is rolled back and its events are settled one
//! transaction each (the same path over a batch of one).
//!
//! Decision: batching turns about ten statements and one commit per request into a few statements
//! per request and one commit per batch; the benchmark showed per-event transactions costing more
//! CPU than the whole request path (docs/ARCHITECTURE.md §10).
//!
//! A request whose hold was already gone when it settled (store lost, or resolved after its
//! deadline) arrives with nothing charged: the settler charges its cost from the ledger wallet, at
//! most the wallet's balance, and the mirror takes the debit on confirmation. Cost that could not be
//! charged stays recorded as `excess_nanos` on the usage record (a loss, visible in reports).

use super::batch::{Charge, SettleError, gateway_id_time, started_at};
use super::rollup::*;
use super::wholesale::*;
use crate::db::begin;
use crate::ledger::{self, AccountRef};
use crate::state::AppState;
use chrono::{DateTime, Utc};
use entities::usage_records;
use money::NanoUsd;
use opstate::{Measurement, StreamEntry, UsageEvent};
use sea_orm::sea_query::OnConflict;
use sea_orm::{ConnectionTrait, DbBackend, DbErr, EntityTrait, Set};
use std::time::Duration;

/// Events claimed per round.
pub(super) const BATCH: usize = 200;
/// An entry claimed by a settler that has not acknowledged it for this long is taken over.
pub(super) const CLAIM_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest a stopping settler keeps draining what is left in the stream.
pub(super) const FINAL_DRAIN: Duration = Duration::from_secs(10);

/// Settles one batch from every stream, leased or not (tests, tools); returns how many entries it
/// acknowledged.
pub async fn drain_once(state: &AppState, consumer: &str) -> Result<usize, SettleError> {
    let entries = state
        .stores
        .usage
        .claim(consumer, BATCH, CLAIM_TIMEOUT)
        .await?;
    settle_entries(state, entries).await
}

/// Settles claimed `entries` and acknowledges them; on a failure the entries come back with the
/// error ([`SettleError::Held`]) so the caller can retry them.
pub(super) async fn settle_entries(
    state: &AppState,
    entries: Vec<StreamEntry>,
) -> Result<usize, SettleError> {
    if entries.is_empty() {
        return Ok(0);
    }
    match settle_claimed(state, &entries).await {
        Ok(()) => {}
        Err(e) => return Err(SettleError::Held(Box::new(e), entries)),
    }
    let acked: Vec<String> = entries.into_iter().map(|e| e.id).collect();
    state.stores.usage.ack(&acked).await?;
    Ok(acked.len())
}

pub(super) async fn settle_claimed(
    state: &AppState,
    entries: &[StreamEntry],
) -> Result<(), SettleError> {
    let events: Vec<&UsageEvent> = entries.iter().map(|e| &e.event).collect();
    let confirmations = match settle_batch(state, &events).await? {
        Some(confirmations) => confirmations,
        // Another settler recorded one of these meanwhile: one event per transaction, where such
        // a race leaves the event recorded by the other, which the next attempt sees.
        None => {
            let mut all = Vec::with_capacity(events.len());
            for e in &events {
                all.extend(settle_alone(state, e).await?);
            }
            all
        }
    };
    confirm(state, &confirmations).await?;
    Ok(())
}

/// Usage records inserted per statement (23 values each, under SQLite's 999-parameter limit).
pub(super) const RECORDS_PER_INSERT: usize = 40;

/// Settles a batch in one transaction. Returns what to confirm (every event of the batch, with
/// what it was charged; redeliveries with what their record says), or `None` when another settler
/// recorded one of its events meanwhile (nothing was written; settle one by one).
pub(super) async fn settle_batch<'a>(
    state: &AppState,
    events: &[&'a UsageEvent],
) -> Result<Option<Vec<(&'a UsageEvent, NanoUsd)>>, SettleError> {
    use sea_orm::{QueryFilter, QuerySelect};
    use std::collections::HashMap;
    let txn = begin(&state.db).await?;
    let recorded: HashMap<String, (i64, bool)> = usage_records::Entity::find()
        .select_only()
        .column(usage_records::Column::RequestId)
        .column(usage_records::Column::ChargedNanos)
        .column(usage_records::Column::MirrorConfirmed)
        .filter(booked_as(
            txn.get_database_backend(),
            events.iter().copied(),
        ))
        .into_tuple::<(String, i64, bool)>()
        .all(&txn)
        .await?
        .into_iter()
        .map(|(id, charged, confirmed)| (id, (charged, confirmed)))
        .collect();
    let (confirmations, mut fresh) = resolve(&txn, events, &recorded).await?;
    // Each charge's wholesale cost, before anything is written: the records, the buckets and
    // the partner's accrual then carry the same figures.
    let partners = price_wholesale(&txn, state, &mut fresh).await?;
    let now = Utc::now();
    let mut inserted = 0u64;
    for chunk in fresh.chunks(RECORDS_PER_INSERT) {
        inserted += usage_records::Entity::insert_many(
            chunk
                .iter()
                .map(|c| record(c.event, c.charged, c.excess, c.wholesale, now)),
        )
        .on_conflict(once_per_request(txn.get_database_backend()))
        .exec_without_returning(&txn)
        .await?;
    }
    if inserted != fresh.len() as u64 {
        txn.rollback().await?;
        return Ok(None);
    }
    add_usage(&txn, &fresh, &partners).await?;
    record_attempts(&txn, &fresh, now).await?;
    post_spend(&txn, &fresh, &partners, now).await?;
    super::budget_events::budget_events(&txn, state, &fresh, &partners, now).await?;
    txn.commit().await?;
    state
        .meters
        .booked(fresh.iter().map(|c| (c.event, c.charged)));
    state.meters.supplier_booked(fresh.iter().map(|c| {
        let resold = matches!(partners.get(&c.event.org_id), Some(Some(_)));
        (c.event, if resold { c.wholesale } else { c.charged })
    }));
    Ok(Some(confirmations))
}

/// What each event of a batch is charged. An event already booked (`recorded`: its charge and
/// whether its mirror was told) only needs its confirmation; of one request twice in a batch the
/// first counts; an event whose hold was gone at settlement is charged from the ledger wallet what
/// it can pay (less this batch's earlier charges), the rest its excess. Returns the
/// confirmations and the new charges.
async fn resolve<'a>(
    txn: &impl ConnectionTrait,
    events: &[&'a UsageEvent],
    recorded: &std::collections::HashMap<String, (i64, bool)>,
) -> Result<(Vec<(&'a UsageEvent, NanoUsd)>, Vec<Charge<'a>>), SettleError> {
    use std::collections::{HashMap, HashSet};
    let mut confirmations = Vec::with_capacity(events.len());
    let mut seen = HashSet::new();
    let mut fresh: Vec<Charge<'a>> = Vec::new();
    // Ledger wallet balances, loaded when an unresolved event needs one, less this batch's charges.
    let mut wallets: HashMap<i64, NanoUsd> = HashMap::new();
    let mut spent: HashMap<i64, NanoUsd> = HashMap::new();
    for &e in events {
        if let Some(&(charged, mirror_confirmed)) = recorded.get(&e.request_id) {
            // Settled before (a redelivery, or a second event of one request: its gateway and the
            // reconciler): the mirror still needs the confirmation only when the settler that
            // booked it could not mark it told, and never for an event re-sent after the store
            // lost its data (the mirror was reloaded from the ledger, which has the charge).
            if !mirror_confirmed && !e.resent {
                confirmations.push((e, NanoUsd::from_nanos(charged)));
            }
            continue;
        }
        if !seen.insert(e.request_id.as_str()) {
            continue;
        }
        let mut charged = e.charged_nanos.max(NanoUsd::ZERO);
        let mut excess = e.excess_nanos.max(NanoUsd::ZERO);
        if charged.is_zero() && e.cost_nanos.is_positive() {
            let balance = match wallets.get(&e.org_id) {
                Some(b) => *b,
                None => {
                    let b = ledger::balance(txn, &AccountRef::org_wallet(e.org_id).code).await?;
                    wallets.insert(e.org_id, b);
                    b
                }
            };
            let spent_so_far = spent.get(&e.org_id).copied().unwrap_or(NanoUsd::ZERO);
            let left = balance.remaining_after(spent_so_far);
            charged = e.cost_nanos.min(left);
            excess = e
                .cost_nanos
                .checked_sub(charged)
                .ok_or(ledger::LedgerError::Overflow)?;
        }
        let total = spent.entry(e.org_id).or_default();
        *total = total
            .checked_add(charged)
            .ok_or(ledger::LedgerError::Overflow)?;
        confirmations.push((e, charged));
        fresh.push(Charge {
            event: e,
            charged,
            excess,
            wholesale: NanoUsd::ZERO,
        });
    }
    Ok((confirmations, fresh))
}

/// One spend posting (and one wholesale accrual for a partner's customer) per organization of
/// the batch's new charges.
async fn post_spend(
    txn: &impl ConnectionTrait,
    fresh: &[Charge<'_>],
    partners: &Partners,
    now: DateTime<Utc>,
) -> Result<(), SettleError> {
    let mut by_org: std::collections::BTreeMap<i64, Vec<&Charge<'_>>> = Default::default();
    for c in fresh {
        by_org.entry(c.event.org_id).or_default().push(c);
    }
    for (org, charges) in by_org {
        let total = NanoUsd::checked_sum(charges.iter().map(|c| c.charged))
            .ok_or(ledger::LedgerError::Overflow)?;
        let Some(first) = charges.first() else {
            continue;
        };
        let reference = format!("{}+{}", first.event.request_id, charges.len());
        ledger::transfer_at(
            txn,
            &format!("spend:{reference}"),
            "spend",
            &AccountRef::org_wallet(org),
            &AccountRef::org_spend(org),
            total,
            now,
        )
        .await?;
        if let Some(Some(p)) = partners.get(&org) {
            book_partner_usage(txn, p.partner_id, &charges, &reference, now).await?;
        }
    }
    Ok(())
}

/// A usage record is written once per request id; a second insert does nothing. On PostgreSQL
/// the table is partitioned by `started_at` (migration 000017), whose unique index must hold it:
/// `(request_id, started_at)`, the same thing since a record's `started_at` is a function of its
/// request id ([`started_at`]).
pub(super) fn once_per_request(backend: DbBackend) -> OnConflict {
    match backend {
        DbBackend::Postgres => OnConflict::columns([
            usage_records::Column::RequestId,
            usage_records::Column::StartedAt,
        ]),
        _ => OnConflict::column(usage_records::Column::RequestId),
    }
    .do_nothing()
    .to_owned()
}

pub(super) fn record(
    e: &UsageEvent,
    charged: NanoUsd,
    excess: NanoUsd,
    wholesale: NanoUsd,
    now: DateTime<Utc>,
) -> usage_records::ActiveModel {
    usage_records::ActiveModel {
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
        cache_write_tokens: Set(i64::try_from(e.cache_write_tokens).unwrap_or(i64::MAX)),
        cache_write_1h_tokens: Set(i64::try_from(e.cache_write_1h_tokens).unwrap_or(i64::MAX)),
        measurement: Set(measurement_label(e.measurement).into()),
        status: Set(i32::from(e.status)),
        stream: Set(e.stream),
        cost_nanos: Set(e.cost_nanos.nanos()),
        charged_nanos: Set(charged.nanos()),
        wholesale_nanos: Set(wholesale.nanos()),
        excess_nanos: Set(excess.nanos()),
        started_at: Set(started_at(e)),
        settled_at: Set(now),
        project: Set(e.project.clone()),
        workflow: Set(e.workflow.clone()),
        audio_seconds: Set(i64::try_from(e.audio_seconds).unwrap_or(i64::MAX)),
        images: Set(i64::try_from(e.images).unwrap_or(i64::MAX)),
        video_seconds: Set(i64::try_from(e.video_seconds).unwrap_or(i64::MAX)),
        mirror_confirmed: Set(false),
        latency_ms: Set(Some(i64::try_from(e.latency_ms).unwrap_or(i64::MAX))),
        batch_id: Set(e.batch.as_ref().map(|b| b.id.clone())),
        batch_line: Set(e
            .batch
            .as_ref()
            .map(|b| i32::try_from(b.line).unwrap_or(i32::MAX))),
        supplier_cost_nanos: Set(e.supplier.cost_nanos.map(NanoUsd::nanos)),
        ..Default::default()
    }
}

/// The attempts the batch's new events moved on from (a failover), once each per request and
/// attempt (issue 47: the supplier's side; docs/ARCHITECTURE.md "Supplier cost").
async fn record_attempts(
    txn: &impl ConnectionTrait,
    fresh: &[Charge<'_>],
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    use entities::supplier_attempts as sa;
    let rows: Vec<sa::ActiveModel> = fresh
        .iter()
        .flat_map(|c| {
            let e = c.event;
            e.supplier
                .earlier
                .iter()
                .enumerate()
                .map(move |(i, a)| attempt_row(e, i, a, now))
        })
        .collect();
    if rows.is_empty() {
        return Ok(());
    }
    for chunk in rows.chunks(RECORDS_PER_INSERT) {
        sa::Entity::insert_many(chunk.to_vec())
            .on_conflict(
                OnConflict::columns([sa::Column::RequestId, sa::Column::Attempt])
                    .do_nothing()
                    .to_owned(),
            )
            .exec_without_returning(txn)
            .await?;
    }
    Ok(())
}

/// The `i`-th (from 0) attempt `e` moved on from. Neither a refusal nor a connection that failed
/// is billed; an abandoned attempt carries what it served and its cost (null: unknown).
fn attempt_row(
    e: &UsageEvent,
    i: usize,
    a: &opstate::EarlierAttempt,
    now: DateTime<Utc>,
) -> entities::supplier_attempts::ActiveModel {
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    let served = a.served.unwrap_or(opstate::Served {
        input_tokens: 0,
        output_tokens: 0,
        cached_tokens: 0,
        cache_write_tokens: 0,
        cache_write_1h_tokens: 0,
        images: 0,
        measurement: Measurement::Exact,
        cost_nanos: Some(NanoUsd::ZERO),
    });
    entities::supplier_attempts::ActiveModel {
        request_id: Set(e.request_id.clone()),
        attempt: Set(i32::try_from(i + 1).unwrap_or(i32::MAX)),
        organization_id: Set(e.org_id),
        account_id: Set(a.account_id.clone()),
        model: Set(e.model_served.clone()),
        outcome: Set(a.outcome.as_str().into()),
        status: Set(i32::from(a.status)),
        supplier_cost_nanos: Set(served.cost_nanos.map(NanoUsd::nanos)),
        input_tokens: Set(n(served.input_tokens)),
        output_tokens: Set(n(served.output_tokens)),
        cached_tokens: Set(n(served.cached_tokens)),
        cache_write_tokens: Set(n(served.cache_write_tokens)),
        cache_write_1h_tokens: Set(n(served.cache_write_1h_tokens)),
        images: Set(n(served.images)),
        measurement: Set(measurement_label(served.measurement).into()),
        started_at: Set(started_at(e)),
        settled_at: Set(now),
        ..Default::default()
    }
}

fn measurement_label(m: Measurement) -> &'static str {
    match m {
        Measurement::Exact => "exact",
        Measurement::Estimated => "estimated",
    }
}

/// Settles one event in its own transaction (the batch path over a batch of one). A race with
/// another settler can only make the event recorded, so a second attempt finds it settled.
pub(super) async fn settle_alone<'a>(
    state: &AppState,
    e: &'a UsageEvent,
) -> Result<Vec<(&'a UsageEvent, NanoUsd)>, SettleError> {
    for _ in 0..2 {
        if let Some(confirmations) = settle_batch(state, &[e]).await? {
            return Ok(confirmations);
        }
    }
    Err(SettleError::Database(DbErr::Custom(format!(
        "usage record {} neither inserted nor found",
        e.request_id
    ))))
}

/// Tells the wallet mirrors the ledger now has these charges (one round trip for the batch), then
/// marks their records told (`mirror_confirmed`, one statement per chunk), so a redelivered or
/// duplicate event of the same request is never confirmed twice. Between the two steps the
/// mirror's own short memory of confirmations (`opstate`) covers a redelivery.
pub(super) async fn confirm(
    state: &AppState,
    confirmations: &[(&UsageEvent, NanoUsd)],
) -> Result<(), SettleError> {
    use sea_orm::{QueryFilter, sea_query::Expr};
    let charges: Vec<(&UsageEvent, (i64, &str, NanoUsd))> = confirmations
        .iter()
        .filter(|(_, charged)| charged.is_positive())
        .map(|(e, charged)| (*e, (e.org_id, e.request_id.as_str(), *charged)))
        .collect();
    if charges.is_empty() {
        return Ok(());
    }
    let asks: Vec<(i64, &str, NanoUsd)> = charges.iter().map(|(_, c)| *c).collect();
    let outcomes = state.stores.wallets.confirm_many(&asks).await?;
    for ((e, _), outcome) in charges.iter().zip(outcomes) {
        if outcome == opstate::Confirmation::Missing {
            // No mirror: it is rebuilt from the ledger, which now has the charge.
            state.wallet_stale(e.org_id);
        }
    }
    let told: Vec<&UsageEvent> = charges.iter().map(|(e, _)| *e).collect();
    for chunk in told.chunks(500) {
        usage_records::Entity::update_many()
            .col_expr(usage_records::Column::MirrorConfirmed, Expr::value(true))
            .filter(booked_as(
                state.db.get_database_backend(),
                chunk.iter().copied(),
            ))
            .exec(&state.db)
            .await?;
    }
    Ok(())
}

/// The records of `events`' requests. On PostgreSQL a gateway's request id (UUIDv7) is looked
/// up with its start ([`started_at`]): the pair is unique (the partitioned table's unique
/// index), so the database reads one index entry in one month's partition per request, with or
/// without statistics (by the id alone, a month's partition not yet analyzed is read whole for
/// each batch); a request id of another form (none the gateway mints) by the id alone, in every
/// partition, whatever start its record was written with. SQLite (one table, `UNIQUE
/// (request_id)`, and no row-value lists) looks every id up alone.
pub(crate) fn booked_as<'a>(
    backend: DbBackend,
    events: impl Iterator<Item = &'a UsageEvent>,
) -> sea_orm::Condition {
    use sea_orm::ColumnTrait;
    use sea_orm::sea_query::{Expr, ExprTrait};
    let (mut pairs, mut others) = (Vec::new(), Vec::new());
    for e in events {
        match gateway_id_time(&e.request_id) {
            Some(at) if backend == DbBackend::Postgres => pairs.push((e.request_id.clone(), at)),
            _ => others.push(e.request_id.clone()),
        }
    }
    let mut any = sea_orm::Condition::any();
    if !pairs.is_empty() {
        any = any.add(
            Expr::tuple([
                Expr::col(usage_records::Column::RequestId),
                Expr::col(usage_records::Column::StartedAt),
            ])
            .in_tuples(pairs),
        );
    }
    if !others.is_empty() || any.is_empty() {
        any = any.add(usage_records::Column::RequestId.is_in(others));
    }
    any
}

#[cfg(test)]
mod tests {
    use super::wholesale_cost;
    use money::NanoUsd;
    use proptest::prelude::*;

    #[test]
    fn wholesale_is_the_charge_at_the_wholesale_rate_rounded_down() {
        let n = NanoUsd::from_nanos;
        assert_eq!(wholesale_cost(n(1_000), 800_000, 1_000_000), n(800));
        assert_eq!(
            wholesale_cost(n(7), 800_000, 1_200_000),
            n(4),
            "4.67 rounds down"
        );
        assert_eq!(wholesale_cost(n(0), 800_000, 1_000_000), n(0));
        assert_eq!(
            wholesale_cost(n(-5), 800_000, 1_000_000),
            n(0),
            "never negative"
        );
        assert_eq!(
            wholesale_cost(n(i64::MAX), 2_000_000, 1),
            n(i64::MAX),
            "capped"
        );
    }

    proptest! {
        /// A partner's cost never exceeds the charge when its wholesale rate is at most the
        /// retail rate (the floor guarantees it), and the margin is never negative then.
        #[test]
        fn wholesale_never_exceeds_the_charge_at_or_above_the_floor(
            charged in 0i64..=1_000_000_000_000,
            wholesale in 1i64..=10_000_000,
            extra in 0i64..=10_000_000,
        ) {
            let retail = wholesale + extra;
            let cost = wholesale_cost(NanoUsd::from_nanos(charged), wholesale, retail);
            prop_assert!(cost.nanos() >= 0 && cost.nanos() <= charged);
        }
    }
}
