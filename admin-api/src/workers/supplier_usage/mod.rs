//! Reconciliation against the suppliers (issue 47): every `[reconciliation]
//! supplier_interval_ms`, for each account with a `usage_report_key` and each of the last
//! `supplier_days` UTC days, the supplier's own usage report of the day ([`report`]) is compared
//! per model with what the ledger booked on that account (its usage records of text models: the
//! calls the completions and messages reports cover, and the attempts calls abandoned on it,
//! which the supplier served too). Each day × account × model is written to
//! `supplier_reconciliations` (both sides, the cost of the difference at the supplier's prices,
//! whether it is beyond `drift_tolerance`), and the metrics say how many are flagged.
//!
//! A reported model is matched to the account's model whose id it is, or whose id it extends by
//! a `-` suffix (a dated snapshot: `gpt-4o-mini-2024-07-18` is `gpt-4o-mini`); one it does not
//! match keeps its own name (traffic on the key the ledger has no model for: all drift).
//!
//! Known limits (docs/ARCHITECTURE.md "Supplier cost"): a call is dated by its arrival here and
//! by the supplier's clock there, so a call at midnight can land on two days; a day's report lags
//! the supplier's traffic (minutes to an hour), so today's check flags drift until it catches
//! up (the alert waits two hours); an estimated call (a cut stream) differs from what the supplier
//! billed by the estimate's error.

pub mod report;

use crate::state::AppState;
use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use entities::{supplier_attempts, supplier_reconciliations as rec, usage_records};
use money::NanoUsd;
use report::Tokens;
use sea_orm::sea_query::{Expr, Func, OnConflict};
use sea_orm::{ColumnTrait, DbErr, EntityTrait, QueryFilter, QuerySelect, Set};
use settings::{Account, ModelKind, ModelPrices};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::watch;

/// One day × account × model, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub day: NaiveDate,
    pub account: String,
    pub model: String,
    pub ours: Tokens,
    pub theirs: Tokens,
    /// (theirs − ours) at the supplier's prices; `None` when a price it needs is unknown.
    pub drift_cost: Option<NanoUsd>,
    pub over_tolerance: bool,
}

/// Rounds every `supplier_interval_ms` until shutdown (nothing when it is 0, or no account has
/// a usage report).
pub async fn run(state: AppState, mut shutdown: watch::Receiver<bool>) {
    let interval = state.settings.reconciliation.supplier_interval_ms;
    if interval == 0
        || !state
            .settings
            .accounts
            .iter()
            .any(|a| a.usage_report.is_some())
    {
        return;
    }
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(Duration::from_millis(interval)) => {}
        }
        let _ = round(&state, Utc::now()).await;
    }
}

/// One round at `now`: every account with a usage report, the configured days up to `now`'s.
/// An account whose report cannot be read is logged and counted, and the others still checked.
pub async fn round(state: &AppState, now: DateTime<Utc>) -> Result<Vec<Check>, String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| e.to_string())?;
    let today = now.date_naive();
    let days = state.settings.reconciliation.supplier_days;
    let mut checks = Vec::new();
    let mut failed = Vec::new();
    for account in &state.settings.accounts {
        let Some(report) = &account.usage_report else {
            continue;
        };
        for back in (0..days).rev() {
            let day = today - TimeDelta::days(i64::from(back));
            match day_of(state, &client, account, report, day).await {
                Ok(mut found) => checks.append(&mut found),
                Err(e) => {
                    tracing::warn!(account = %account.id, %day, error = %e, "supplier usage report not checked");
                    state.meters.supplier.reconcile_errors.inc();
                    failed.push(format!("{} {day}: {e}", account.id));
                }
            }
        }
    }
    publish(state, &checks);
    match failed.is_empty() {
        true => Ok(checks),
        false => Err(failed.join("; ")),
    }
}

/// Sets the gauges from a round's checks.
fn publish(state: &AppState, checks: &[Check]) {
    let s = &state.meters.supplier;
    let flagged = checks.iter().filter(|c| c.over_tolerance).count();
    s.flagged.set(i64::try_from(flagged).unwrap_or(i64::MAX));
    let mut drift: BTreeMap<(&str, &str), i64> = BTreeMap::new();
    for c in checks {
        let d = (c.theirs.input - c.ours.input) + (c.theirs.output - c.ours.output);
        *drift
            .entry((c.account.as_str(), c.model.as_str()))
            .or_default() += d;
        if c.over_tolerance {
            tracing::warn!(account = %c.account, model = %c.model, day = %c.day, ours = ?c.ours, theirs = ?c.theirs, "supplier usage differs from the ledger beyond the tolerance");
        }
    }
    for ((account, model), d) in drift {
        s.drift_tokens
            .with_label_values(&[account, model])
            .set(d as f64);
    }
}

/// One account's day: the report, the ledger's side, compared and written.
async fn day_of(
    state: &AppState,
    client: &reqwest::Client,
    account: &Account,
    report_of: &settings::UsageReport,
    day: NaiveDate,
) -> Result<Vec<Check>, String> {
    let start = day.and_hms_opt(0, 0, 0).ok_or("no such day")?.and_utc();
    let reported = report::read(client, account, report_of, start).await?;
    let mut theirs: BTreeMap<String, Tokens> = BTreeMap::new();
    for (model, t) in reported {
        theirs
            .entry(ours_name(account, &model).to_string())
            .or_default()
            .add(&t);
    }
    let ours = ours(state, account, start)
        .await
        .map_err(|e| e.to_string())?;
    let mut models: Vec<&String> = theirs.keys().chain(ours.keys()).collect();
    models.sort();
    models.dedup();
    let tolerance = state.settings.reconciliation.drift_tolerance;
    let checks: Vec<Check> = models
        .into_iter()
        .map(|model| {
            let (o, t) = (
                ours.get(model).copied().unwrap_or_default(),
                theirs.get(model).copied().unwrap_or_default(),
            );
            let prices = state.settings.model(model).map(|m| &m.supplier_prices);
            Check {
                day,
                account: account.id.clone(),
                model: model.clone(),
                drift_cost: prices.and_then(|p| drift_cost(p, account, &o, &t)),
                over_tolerance: over(&o, &t, tolerance),
                ours: o,
                theirs: t,
            }
        })
        .collect();
    store(state, &checks).await.map_err(|e| e.to_string())?;
    Ok(checks)
}

/// The account's model a reported model name is: the same id, or the longest id it extends by a
/// `-` suffix; else the name itself.
fn ours_name<'a>(account: &'a Account, reported: &'a str) -> &'a str {
    account
        .models
        .iter()
        .filter(|m| {
            reported == m.as_str()
                || reported
                    .strip_prefix(m.as_str())
                    .is_some_and(|rest| rest.starts_with('-'))
        })
        .max_by_key(|m| m.len())
        .map_or(reported, String::as_str)
}

/// Whether the difference is beyond `tolerance` of the larger side (input and output tokens).
fn over(ours: &Tokens, theirs: &Tokens, tolerance: f64) -> bool {
    let diff =
        (theirs.input - ours.input).unsigned_abs() + (theirs.output - ours.output).unsigned_abs();
    let base = (ours.input + ours.output).max(theirs.input + theirs.output);
    diff > 0 && diff as f64 > tolerance * base as f64
}

/// Σ tokens × nano-USD per million tokens at the supplier's prices (the split every price of the
/// ledger uses: cache reads at their price, else input; cache writes at theirs, unknown without
/// one); `None` when a price it needs is unknown.
fn weighted(p: &ModelPrices, t: &Tokens) -> Option<i128> {
    let n = |v: i64| i128::from(v.max(0));
    let input = match (p.input_per_mtok, t.input) {
        (Some(price), _) => i128::from(price.nanos()),
        (None, 0) => 0,
        (None, _) => return None,
    };
    let output = match (p.output_per_mtok, t.output) {
        (Some(price), _) => i128::from(price.nanos()),
        (None, 0) => 0,
        (None, _) => return None,
    };
    let cached = p
        .cached_input_per_mtok
        .map_or(input, |c| i128::from(c.nanos()));
    let hour = n(t.cache_write_1h).min(n(t.cache_write));
    let write = match (p.cache_write_per_mtok, n(t.cache_write) - hour) {
        (Some(price), _) => i128::from(price.nanos()),
        (None, 0) => 0,
        (None, _) => return None,
    };
    let write_1h = match (p.cache_write_1h_per_mtok, hour) {
        (Some(price), _) => i128::from(price.nanos()),
        (None, 0) => 0,
        (None, _) => return None,
    };
    let uncached = (n(t.input) - n(t.cached) - n(t.cache_write)).max(0);
    Some(
        uncached * input
            + n(t.cached) * cached
            + (n(t.cache_write) - hour) * write
            + hour * write_1h
            + n(t.output) * output,
    )
}

/// What the difference costs at the account's supplier prices: ⌈(theirs − ours) × multiplier⌉.
fn drift_cost(
    p: &ModelPrices,
    account: &Account,
    ours: &Tokens,
    theirs: &Tokens,
) -> Option<NanoUsd> {
    let w = weighted(p, theirs)? - weighted(p, ours)?;
    let rate = i128::from(account.supplier_price_multiplier.ppm());
    NanoUsd::ceil_div(w.checked_mul(rate)?, 1_000_000 * 1_000_000)
}

/// A model's usage records (or abandoned attempts) summed: (model, count, input, output, cached,
/// cache writes, the hour-long ones).
type Sums = (
    String,
    i64,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

/// The ledger's side of the day starting at `start`: what the account served of text models —
/// its usage records, and the attempts calls abandoned on it (the supplier served and counts
/// them too) — summed by served model.
async fn ours(
    state: &AppState,
    account: &Account,
    start: DateTime<Utc>,
) -> Result<BTreeMap<String, Tokens>, DbErr> {
    use sea_orm::sea_query::ExprTrait;
    let text: Vec<&String> = account
        .models
        .iter()
        .filter(|m| {
            state
                .settings
                .model(m)
                .is_some_and(|m| m.kind == ModelKind::Text)
        })
        .collect();
    let end = start + TimeDelta::days(1);
    let records: Vec<Sums> = {
        use usage_records::Column as C;
        let sum = |c: C| Func::sum(Expr::col(c)).cast_as("BIGINT");
        // Requests the supplier served: a refusal (an error status, a connection that failed)
        // is not among the requests its report counts.
        let served = Expr::case(Expr::col(C::Status).lt(400), 1).finally(0);
        usage_records::Entity::find()
            .select_only()
            .column(C::ModelServed)
            .column_as(Func::sum(served).cast_as("BIGINT"), "n")
            .column_as(sum(C::InputTokens), "i")
            .column_as(sum(C::OutputTokens), "o")
            .column_as(sum(C::CachedTokens), "c")
            .column_as(sum(C::CacheWriteTokens), "w")
            .column_as(sum(C::CacheWrite1hTokens), "h")
            .filter(C::AccountId.eq(account.id.as_str()))
            .filter(C::ModelServed.is_in(text.clone()))
            .filter(C::StartedAt.gte(start))
            .filter(C::StartedAt.lt(end))
            .group_by(C::ModelServed)
            .into_tuple()
            .all(&state.db)
            .await?
    };
    let abandoned: Vec<Sums> = {
        use supplier_attempts::Column as C;
        let sum = |c: C| Func::sum(Expr::col(c)).cast_as("BIGINT");
        supplier_attempts::Entity::find()
            .select_only()
            .column(C::Model)
            .column_as(C::Id.count(), "n")
            .column_as(sum(C::InputTokens), "i")
            .column_as(sum(C::OutputTokens), "o")
            .column_as(sum(C::CachedTokens), "c")
            .column_as(sum(C::CacheWriteTokens), "w")
            .column_as(sum(C::CacheWrite1hTokens), "h")
            .filter(C::AccountId.eq(account.id.as_str()))
            .filter(C::Outcome.eq(opstate::AttemptOutcome::Abandoned.as_str()))
            .filter(C::Model.is_in(text))
            .filter(C::StartedAt.gte(start))
            .filter(C::StartedAt.lt(end))
            .group_by(C::Model)
            .into_tuple()
            .all(&state.db)
            .await?
    };
    let mut ours: BTreeMap<String, Tokens> = BTreeMap::new();
    for (model, n, i, o, c, w, h) in records.into_iter().chain(abandoned) {
        let v = |x: Option<i64>| x.unwrap_or(0);
        let t = Tokens {
            requests: Some(n),
            input: v(i),
            output: v(o),
            cached: v(c),
            cache_write: v(w),
            cache_write_1h: v(h),
        };
        ours.entry(model).or_default().add(&t);
    }
    Ok(ours)
}

/// Writes the checks, one row per day × account × model (a later check of the day replaces it).
async fn store(state: &AppState, checks: &[Check]) -> Result<(), DbErr> {
    use rec::Column as C;
    if checks.is_empty() {
        return Ok(());
    }
    let now = state.clock.now();
    let rows = checks.iter().map(|c| rec::ActiveModel {
        day: Set(c.day.to_string()),
        account_id: Set(c.account.clone()),
        model: Set(c.model.clone()),
        ours_requests: Set(c.ours.requests.unwrap_or(0)),
        ours_input: Set(c.ours.input),
        ours_output: Set(c.ours.output),
        ours_cached: Set(c.ours.cached),
        ours_cache_write: Set(c.ours.cache_write),
        theirs_requests: Set(c.theirs.requests),
        theirs_input: Set(c.theirs.input),
        theirs_output: Set(c.theirs.output),
        theirs_cached: Set(c.theirs.cached),
        theirs_cache_write: Set(c.theirs.cache_write),
        drift_cost_nanos: Set(c.drift_cost.map(NanoUsd::nanos)),
        over_tolerance: Set(c.over_tolerance),
        checked_at: Set(now),
        ..Default::default()
    });
    let replace = OnConflict::columns([C::Day, C::AccountId, C::Model])
        .update_columns([
            C::OursRequests,
            C::OursInput,
            C::OursOutput,
            C::OursCached,
            C::OursCacheWrite,
            C::TheirsRequests,
            C::TheirsInput,
            C::TheirsOutput,
            C::TheirsCached,
            C::TheirsCacheWrite,
            C::DriftCostNanos,
            C::OverTolerance,
            C::CheckedAt,
        ])
        .to_owned();
    rec::Entity::insert_many(rows)
        .on_conflict(replace)
        .exec_without_returning(&state.db)
        .await?;
    Ok(())
}
