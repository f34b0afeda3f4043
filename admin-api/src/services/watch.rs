//! Rules that watch balances (issue 32): low-balance alerts and automatic allocations, their
//! settings (partner API, both consoles) and one pass of the watcher over them
//! ([`watch_once`], run by `workers::watch` every `money.watch_interval_ms` in every admin-api).
//!
//! **Once per crossing across the fleet.** Each rule keeps the state of its last crossing in its
//! row (`balance_alerts.below`, `auto_allocation_rules.armed`) and a `generation` that every
//! change of that state counts up. A pass reads the row, then the balance; seeing it below the
//! threshold, it changes the state with an update conditional on the generation it read (`… SET
//! below = true, generation = g + 1 WHERE generation = g AND below = false`); only the instance
//! whose update took the row acts (sends the mail; allocates, in the same transaction as the
//! update), every other finds nothing to change. Seen back at or above the threshold, the state
//! is reset the same way, so the next crossing acts again. The generation is what makes a stale
//! reading harmless: a pass that read the balance before another pass's allocation and the reset
//! that followed it holds an old generation, and its claim takes nothing (a bare `WHERE armed`
//! was not enough — found by the concurrent-watchers test).
//!
//! **Never on an unknown balance.** An organization's balance is read only when reconciled
//! (`wallets::reconciled`); a mirror missing or disagreeing with the ledger skips the
//! organization this pass (it is neither above nor below).

use crate::caller::Caller;
use crate::error::ApiError;
use crate::ledger::{self, AccountRef};
use crate::services::funding::{self, Allocation};
use crate::state::AppState;
use chrono::{DateTime, Datelike, TimeZone, Utc};
use entities::{
    auto_allocation_rules as rules, auto_allocations as runs, balance_alerts as alerts, customers,
    org_members, organizations, partner_members, partners,
};
use money::NanoUsd;
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};

/// Whose balance an alert watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// An organization's available balance (balance − holds).
    Org(i64),
    /// A partner's available funding.
    Partner(i64),
}

impl Subject {
    fn parts(self) -> (&'static str, i64) {
        match self {
            Subject::Org(id) => ("org", id),
            Subject::Partner(id) => ("partner", id),
        }
    }
}

/// The largest threshold or amount a rule takes (1 million USD).
pub const MAX_RULE_USD: NanoUsd = NanoUsd::from_nanos(1_000_000 * 1_000_000_000);

/// The alert of `subject`, if one is set.
pub async fn alert_of(
    db: &impl ConnectionTrait,
    subject: Subject,
) -> Result<Option<alerts::Model>, ApiError> {
    let (kind, id) = subject.parts();
    Ok(alerts::Entity::find()
        .filter(alerts::Column::Subject.eq(kind))
        .filter(alerts::Column::SubjectId.eq(id))
        .one(db)
        .await?)
}

/// Sets (or, with `None`, removes) the low-balance threshold of `subject`. A new threshold starts
/// a new watch: the next pass alerts if the balance is already below it.
pub async fn set_alert(
    db: &impl ConnectionTrait,
    subject: Subject,
    threshold: Option<NanoUsd>,
    now: DateTime<Utc>,
) -> Result<Option<alerts::Model>, ApiError> {
    let existing = alert_of(db, subject).await?;
    let (kind, id) = subject.parts();
    match (existing, threshold) {
        (None, None) => Ok(None),
        (Some(row), None) => {
            alerts::Entity::delete_by_id(row.id).exec(db).await?;
            Ok(None)
        }
        (Some(row), Some(t)) => {
            let generation = row.generation + 1;
            let mut a: alerts::ActiveModel = row.into();
            a.threshold_nanos = Set(t.nanos());
            a.below = Set(false);
            a.generation = Set(generation);
            a.updated_at = Set(now);
            Ok(Some(a.update(db).await?))
        }
        (None, Some(t)) => Ok(Some(
            alerts::ActiveModel {
                subject: Set(kind.into()),
                subject_id: Set(id),
                threshold_nanos: Set(t.nanos()),
                below: Set(false),
                generation: Set(0),
                updated_at: Set(now),
                alerted_at: Set(None),
                ..Default::default()
            }
            .insert(db)
            .await?,
        )),
    }
}

/// An automatic allocation rule as set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoRule {
    pub below: NanoUsd,
    pub amount: NanoUsd,
    pub monthly_cap: NanoUsd,
}

impl AutoRule {
    /// Checks a rule: every amount positive and at most [`MAX_RULE_USD`], the amount at most the
    /// monthly cap. `Err`: the sentence to show.
    pub fn check(self) -> Result<AutoRule, String> {
        for (name, v) in [
            ("below_usd", self.below),
            ("amount_usd", self.amount),
            ("monthly_cap_usd", self.monthly_cap),
        ] {
            if !v.is_positive() || v > MAX_RULE_USD {
                return Err(format!(
                    "{name} must be a positive amount up to 1000000 with at most 9 decimals"
                ));
            }
        }
        if self.amount > self.monthly_cap {
            return Err("amount_usd must be at most monthly_cap_usd".into());
        }
        Ok(self)
    }
}

/// The automatic allocation rule of customer `customer_id`, if one is set.
pub async fn rule_of(
    db: &impl ConnectionTrait,
    customer_id: i64,
) -> Result<Option<rules::Model>, ApiError> {
    Ok(rules::Entity::find_by_id(customer_id).one(db).await?)
}

/// Sets (or, with `None`, removes) customer `customer_id`'s rule; a set rule starts armed.
pub async fn set_rule(
    db: &impl ConnectionTrait,
    customer_id: i64,
    rule: Option<AutoRule>,
    now: DateTime<Utc>,
) -> Result<Option<rules::Model>, ApiError> {
    let previous = rules::Entity::find_by_id(customer_id).one(db).await?;
    rules::Entity::delete_by_id(customer_id).exec(db).await?;
    let Some(rule) = rule else {
        return Ok(None);
    };
    // A new generation: a pass that read the old rule claims nothing.
    let generation = previous.map_or(0, |r| r.generation + 1);
    Ok(Some(
        rules::ActiveModel {
            customer_id: Set(customer_id),
            below_nanos: Set(rule.below.nanos()),
            amount_nanos: Set(rule.amount.nanos()),
            monthly_cap_nanos: Set(rule.monthly_cap.nanos()),
            armed: Set(true),
            generation: Set(generation),
            updated_at: Set(now),
        }
        .insert(db)
        .await?,
    ))
}

/// The last `limit` runs of customer `customer_id`'s rule, newest first.
pub async fn runs_of(
    db: &impl ConnectionTrait,
    customer_id: i64,
    limit: u64,
) -> Result<Vec<runs::Model>, ApiError> {
    Ok(runs::Entity::find()
        .filter(runs::Column::CustomerId.eq(customer_id))
        .order_by_desc(runs::Column::Id)
        .limit(limit)
        .all(db)
        .await?)
}

/// What allocated automatically for customer `customer_id` since `from`.
async fn allocated_since(
    db: &impl ConnectionTrait,
    customer_id: i64,
    from: DateTime<Utc>,
) -> Result<NanoUsd, ApiError> {
    let rows = runs::Entity::find()
        .filter(runs::Column::CustomerId.eq(customer_id))
        .filter(runs::Column::Outcome.eq("allocated"))
        .filter(runs::Column::CreatedAt.gte(from))
        .all(db)
        .await?;
    NanoUsd::checked_sum(rows.iter().map(|r| NanoUsd::from_nanos(r.amount_nanos)))
        .ok_or(ApiError::Internal)
}

/// The start of `now`'s UTC calendar month.
fn month_start(now: DateTime<Utc>) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
        .single()
        .unwrap_or(now)
}

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pass {
    pub alerts_sent: usize,
    pub allocated: usize,
    pub refused: usize,
    /// Automatic recharges charged (funding follows their webhooks) and declined.
    pub recharged: usize,
    pub declined: usize,
}

/// One pass over every rule: automatic allocations first (an allocation may lift a balance back
/// above its alert), automatic recharges (`services::recharge`), then alerts.
pub async fn watch_once(state: &AppState) -> Result<Pass, ApiError> {
    let mut pass = Pass::default();
    for rule in rules::Entity::find().all(&state.db).await? {
        match allocate_if_below(state, &rule).await {
            Ok(Some(true)) => pass.allocated += 1,
            Ok(Some(false)) => pass.refused += 1,
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, customer = rule.customer_id, "automatic allocation failed; retried next pass");
            }
        }
    }
    for rule in entities::recharge_rules::Entity::find()
        .all(&state.db)
        .await?
    {
        match crate::services::recharge::recharge_if_below(state, &rule).await {
            Ok(Some(true)) => pass.recharged += 1,
            Ok(Some(false)) => pass.declined += 1,
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, partner = rule.partner_id, "automatic recharge failed; retried next pass");
            }
        }
    }
    for alert in alerts::Entity::find().all(&state.db).await? {
        match alert_if_below(state, &alert).await {
            Ok(true) => pass.alerts_sent += 1,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(error = %e, alert = alert.id, "low-balance alert failed; retried next pass");
            }
        }
    }
    Ok(pass)
}

/// An organization's available balance when reconciled (`None`: unknown this pass).
async fn org_available(state: &AppState, org: i64) -> Result<Option<NanoUsd>, ApiError> {
    Ok(crate::services::wallets::reconciled(state, org)
        .await?
        .and_then(|(balance, reserved)| balance.checked_sub(reserved)))
}

/// A partner's available funding.
async fn partner_available(db: &impl ConnectionTrait, partner: i64) -> Result<NanoUsd, ApiError> {
    Ok(ledger::balance(db, &AccountRef::partner_available(partner).code).await?)
}

/// Checks one alert: below its threshold and not yet alerted → claims the crossing and mails;
/// back at or above → resets it. `true`: this pass sent the alert.
async fn alert_if_below(state: &AppState, alert: &alerts::Model) -> Result<bool, ApiError> {
    let subject = match alert.subject.as_str() {
        "org" => Subject::Org(alert.subject_id),
        _ => Subject::Partner(alert.subject_id),
    };
    let available = match subject {
        Subject::Org(org) => org_available(state, org).await?,
        Subject::Partner(p) => Some(partner_available(&state.db, p).await?),
    };
    let Some(available) = available else {
        return Ok(false);
    };
    let threshold = NanoUsd::from_nanos(alert.threshold_nanos);
    let now = state.clock.now();
    if available >= threshold {
        if alert.below {
            alerts::Entity::update_many()
                .col_expr(alerts::Column::Below, Expr::value(false))
                .col_expr(
                    alerts::Column::Generation,
                    Expr::value(alert.generation + 1),
                )
                .filter(alerts::Column::Id.eq(alert.id))
                .filter(alerts::Column::Generation.eq(alert.generation))
                .exec(&state.db)
                .await?;
        }
        return Ok(false);
    }
    if alert.below {
        return Ok(false);
    }
    // The claim: only the instance whose update takes the row sends the mail.
    let claimed = alerts::Entity::update_many()
        .col_expr(alerts::Column::Below, Expr::value(true))
        .col_expr(alerts::Column::AlertedAt, Expr::value(now))
        .col_expr(
            alerts::Column::Generation,
            Expr::value(alert.generation + 1),
        )
        .filter(alerts::Column::Id.eq(alert.id))
        .filter(alerts::Column::Generation.eq(alert.generation))
        .filter(alerts::Column::Below.eq(false))
        .exec(&state.db)
        .await?
        .rows_affected
        == 1;
    if !claimed {
        return Ok(false);
    }
    let (name, to) = match subject {
        Subject::Org(org) => org_contacts(&state.db, org).await?,
        Subject::Partner(p) => partner_contacts(&state.db, p).await?,
    };
    let subject_line = format!("Low balance: {name}");
    let body = format!(
        "Hello,\n\n{name} has {} USD available, below the alert threshold of {} USD set on Tollgate.\n\nCalls are refused once the balance cannot cover them. Add funds (or ask your provider to) to keep calls flowing.\n\nThis alert is sent once each time the balance falls below the threshold.\n",
        available.to_decimal_usd().normalize(),
        threshold.to_decimal_usd().normalize()
    );
    mail_all(state, &to, &subject_line, &body).await;
    Ok(true)
}

/// The organization's name and who hears about its balance: its billing contact and its owners.
pub async fn org_contacts(
    db: &impl ConnectionTrait,
    org: i64,
) -> Result<(String, Vec<String>), ApiError> {
    let o = organizations::Entity::find_by_id(org)
        .one(db)
        .await?
        .ok_or(ApiError::Internal)?;
    let owners = org_members::Entity::find()
        .filter(org_members::Column::OrganizationId.eq(org))
        .filter(org_members::Column::Role.eq("owner"))
        .all(db)
        .await?;
    let emails = crate::services::people::emails_of(db, owners.iter().map(|m| m.user_id)).await?;
    let mut to: Vec<String> = o
        .billing_email
        .iter()
        .chain(o.owner_email.iter())
        .cloned()
        .collect();
    to.extend(emails.into_values());
    Ok((o.name, dedup(to)))
}

/// The partner's name and its team's owners.
pub async fn partner_contacts(
    db: &impl ConnectionTrait,
    partner: i64,
) -> Result<(String, Vec<String>), ApiError> {
    let p = partners::Entity::find_by_id(partner)
        .one(db)
        .await?
        .ok_or(ApiError::Internal)?;
    let owners = partner_members::Entity::find()
        .filter(partner_members::Column::PartnerId.eq(partner))
        .filter(partner_members::Column::Role.eq("owner"))
        .all(db)
        .await?;
    let emails = crate::services::people::emails_of(db, owners.iter().map(|m| m.user_id)).await?;
    Ok((p.name, dedup(emails.into_values().collect())))
}

fn dedup(mut to: Vec<String>) -> Vec<String> {
    for e in &mut to {
        *e = e.trim().to_ascii_lowercase();
    }
    to.retain(|e| !e.is_empty());
    to.sort();
    to.dedup();
    to
}

/// Mails `body` to each of `to`; a failure is logged (the alert's state stays claimed: one
/// attempt per crossing, never a storm of retries).
pub async fn mail_all(state: &AppState, to: &[String], subject: &str, body: &str) {
    for address in to {
        if let Err(e) = state.mailer.send(address, subject, body.to_string()).await {
            tracing::warn!(error = %e, subject, "an alert mail was not sent");
        }
    }
}

/// Checks one automatic allocation rule. `Some(true)`: allocated; `Some(false)`: refused (partner
/// funding short, or the month's cap reached), recorded and alerted; `None`: nothing to do.
async fn allocate_if_below(
    state: &AppState,
    rule: &rules::Model,
) -> Result<Option<bool>, ApiError> {
    let Some(customer) = customers::Entity::find_by_id(rule.customer_id)
        .one(&state.db)
        .await?
    else {
        return Ok(None);
    };
    let Some(available) = org_available(state, customer.organization_id).await? else {
        return Ok(None);
    };
    let below = NanoUsd::from_nanos(rule.below_nanos);
    if available >= below {
        if !rule.armed {
            rules::Entity::update_many()
                .col_expr(rules::Column::Armed, Expr::value(true))
                .col_expr(rules::Column::Generation, Expr::value(rule.generation + 1))
                .filter(rules::Column::CustomerId.eq(rule.customer_id))
                .filter(rules::Column::Generation.eq(rule.generation))
                .exec(&state.db)
                .await?;
        }
        return Ok(None);
    }
    if !rule.armed {
        return Ok(None);
    }
    let amount = NanoUsd::from_nanos(rule.amount_nanos);
    let now = state.clock.now();
    let caller = system_caller(&state.db, customer.partner_id).await?;
    let txn = crate::db::begin(&state.db).await?;
    if !claim(&txn, rule).await? {
        return Ok(None);
    }
    let used = allocated_since(&txn, customer.id, month_start(now)).await?;
    if used
        .checked_add(amount)
        .is_none_or(|t| t > NanoUsd::from_nanos(rule.monthly_cap_nanos))
    {
        record(&txn, customer.id, amount, "refused_cap", "", now).await?;
        txn.commit().await?;
        refused_mail(
            state,
            &customer,
            amount,
            "the rule's monthly cap is reached",
        )
        .await?;
        return Ok(Some(false));
    }
    let run = record(&txn, customer.id, amount, "allocated", "", now).await?;
    let op = format!("auto-allocation:{}", run.id);
    let done = funding::allocate(
        &txn,
        state,
        &caller,
        &op,
        &customer.id.to_string(),
        Allocation::Increase(amount),
    )
    .await;
    match done {
        Ok(success) => {
            let mut r: runs::ActiveModel = run.into();
            r.reference = Set(op);
            r.update(&txn).await?;
            txn.commit().await?;
            crate::partner::idempotency::apply(state, success.effects).await;
            tracing::info!(customer = customer.id, amount = %amount.to_decimal_usd(), "automatic allocation made");
            Ok(Some(true))
        }
        Err(ApiError::FundingInsufficient { .. }) => {
            txn.rollback().await?;
            // The refusal is recorded in a transaction of its own, under the same claim.
            let txn = crate::db::begin(&state.db).await?;
            if !claim(&txn, rule).await? {
                return Ok(None);
            }
            record(&txn, customer.id, amount, "refused_funding", "", now).await?;
            txn.commit().await?;
            refused_mail(state, &customer, amount, "partner funding cannot cover it").await?;
            Ok(Some(false))
        }
        Err(e) => Err(e),
    }
}

/// Disarms the rule if it is still in the generation read (armed): `true` when this transaction
/// did. The refusal's second claim (after a rollback) asks the same generation again.
async fn claim(txn: &impl ConnectionTrait, rule: &rules::Model) -> Result<bool, ApiError> {
    Ok(rules::Entity::update_many()
        .col_expr(rules::Column::Armed, Expr::value(false))
        .col_expr(rules::Column::Generation, Expr::value(rule.generation + 1))
        .filter(rules::Column::CustomerId.eq(rule.customer_id))
        .filter(rules::Column::Generation.eq(rule.generation))
        .filter(rules::Column::Armed.eq(true))
        .exec(txn)
        .await?
        .rows_affected
        == 1)
}

async fn record(
    txn: &impl ConnectionTrait,
    customer_id: i64,
    amount: NanoUsd,
    outcome: &str,
    reference: &str,
    now: DateTime<Utc>,
) -> Result<runs::Model, ApiError> {
    Ok(runs::ActiveModel {
        customer_id: Set(customer_id),
        amount_nanos: Set(amount.nanos()),
        outcome: Set(outcome.into()),
        reference: Set(reference.into()),
        created_at: Set(now),
        ..Default::default()
    }
    .insert(txn)
    .await?)
}

/// Tells the partner's owners that an automatic allocation was refused.
async fn refused_mail(
    state: &AppState,
    customer: &customers::Model,
    amount: NanoUsd,
    why: &str,
) -> Result<(), ApiError> {
    let (partner, to) = partner_contacts(&state.db, customer.partner_id).await?;
    let body = format!(
        "Hello,\n\nThe automatic allocation of {} USD to {} ({partner}'s customer {}) was refused: {why}.\n\nThe customer's balance stays below the rule's threshold; calls are refused once it cannot cover them. The rule acts again the next time the balance falls below its threshold.\n",
        amount.to_decimal_usd().normalize(),
        customer.display_name,
        customer.id,
    );
    mail_all(
        state,
        &to,
        &format!("Automatic allocation refused: {}", customer.display_name),
        &body,
    )
    .await;
    Ok(())
}

/// The partner acting through its own rules (the watcher): its owner role and agreement rate.
async fn system_caller(db: &impl ConnectionTrait, partner: i64) -> Result<Caller, ApiError> {
    let p = partners::Entity::find_by_id(partner)
        .one(db)
        .await?
        .ok_or(ApiError::Internal)?;
    Ok(Caller {
        partner_id: p.id,
        partner_name: p.name,
        token_id: 0,
        token_preview: "automatic".into(),
        scopes: vec!["partner:write".into()],
        role: "owner".into(),
        min_rate: money::RateMultiplier::from_ppm(p.min_rate_multiplier_ppm)
            .ok_or(ApiError::Internal)?,
    })
}

/// Validates an alert body: `threshold_usd` a non-negative amount (at most 1,000,000, 9
/// decimals), or `null` to remove the alert.
pub fn parse_alert(body: crate::dto::AlertRequest) -> Result<Option<NanoUsd>, ApiError> {
    if let Some(k) = body.unknown.keys().next() {
        return Err(ApiError::InvalidAlert(format!("unknown field {k:?}")));
    }
    match body.threshold_usd {
        None => Err(ApiError::InvalidAlert(
            "threshold_usd is required (null removes the alert)".into(),
        )),
        Some(serde_json::Value::Null) => Ok(None),
        Some(v) => crate::dto::usd_of(&v)
            .filter(|n| !n.is_negative() && *n <= MAX_RULE_USD)
            .map(Some)
            .ok_or_else(|| {
                ApiError::InvalidAlert(
                    "threshold_usd must be an amount from 0 to 1000000 with at most 9 decimals"
                        .into(),
                )
            }),
    }
}

/// Validates an automatic allocation body (see [`AutoRule::check`]).
pub fn parse_rule(body: crate::dto::AutoAllocationRequest) -> Result<AutoRule, ApiError> {
    if let Some(k) = body.unknown.keys().next() {
        return Err(ApiError::InvalidAutoAllocation(format!(
            "unknown field {k:?}"
        )));
    }
    let amount = |v: &Option<serde_json::Value>, name: &str| {
        v.as_ref().and_then(crate::dto::usd_of).ok_or_else(|| {
            ApiError::InvalidAutoAllocation(format!(
                "{name} must be a positive amount up to 1000000 with at most 9 decimals"
            ))
        })
    };
    AutoRule {
        below: amount(&body.below_usd, "below_usd")?,
        amount: amount(&body.amount_usd, "amount_usd")?,
        monthly_cap: amount(&body.monthly_cap_usd, "monthly_cap_usd")?,
    }
    .check()
    .map_err(ApiError::InvalidAutoAllocation)
}

/// The view of an alert (`None`: none set).
pub fn alert_view(row: Option<&alerts::Model>) -> crate::dto::AlertView {
    crate::dto::AlertView {
        threshold_usd: row.map(|r| crate::dto::Usd(NanoUsd::from_nanos(r.threshold_nanos))),
        below: row.is_some_and(|r| r.below),
        alerted_at: row
            .and_then(|r| r.alerted_at)
            .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
    }
}

/// The view of customer `customer_id`'s rule and its last runs.
pub async fn rule_view(
    db: &impl ConnectionTrait,
    customer_id: i64,
    now: DateTime<Utc>,
) -> Result<crate::dto::AutoAllocationView, ApiError> {
    use crate::dto::{AutoAllocationView, AutoRuleView, AutoRunView, Usd};
    let rule = match rule_of(db, customer_id).await? {
        None => None,
        Some(r) => Some(AutoRuleView {
            below_usd: Usd(NanoUsd::from_nanos(r.below_nanos)),
            amount_usd: Usd(NanoUsd::from_nanos(r.amount_nanos)),
            monthly_cap_usd: Usd(NanoUsd::from_nanos(r.monthly_cap_nanos)),
            armed: r.armed,
            allocated_this_month_usd: Usd(allocated_since(db, customer_id, month_start(now)).await?),
        }),
    };
    let runs = runs_of(db, customer_id, 20)
        .await?
        .into_iter()
        .map(|r| AutoRunView {
            amount_usd: Usd(NanoUsd::from_nanos(r.amount_nanos)),
            outcome: r.outcome,
            created_at: r
                .created_at
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        })
        .collect();
    Ok(AutoAllocationView { rule, runs })
}

/// `GET /customers/{id}/low-balance-alert`.
pub async fn customer_alert(
    db: &impl ConnectionTrait,
    caller: &Caller,
    customer_id: &str,
) -> Result<crate::dto::AlertView, ApiError> {
    let customer = crate::services::customers::find(db, caller, customer_id).await?;
    let row = alert_of(db, Subject::Org(customer.organization_id)).await?;
    Ok(alert_view(row.as_ref()))
}

/// `PUT /customers/{id}/low-balance-alert`.
pub async fn set_customer_alert(
    txn: &impl ConnectionTrait,
    state: &AppState,
    caller: &Caller,
    customer_id: &str,
    threshold: Option<NanoUsd>,
) -> Result<crate::dto::AlertView, ApiError> {
    let customer = crate::services::customers::find(txn, caller, customer_id).await?;
    let row = set_alert(
        txn,
        Subject::Org(customer.organization_id),
        threshold,
        state.clock.now(),
    )
    .await?;
    Ok(alert_view(row.as_ref()))
}

/// `GET` and `PUT /funding/low-balance-alert`: the partner's own funding.
pub async fn set_funding_alert(
    txn: &impl ConnectionTrait,
    state: &AppState,
    caller: &Caller,
    threshold: Option<NanoUsd>,
) -> Result<crate::dto::AlertView, ApiError> {
    let row = set_alert(
        txn,
        Subject::Partner(caller.partner_id),
        threshold,
        state.clock.now(),
    )
    .await?;
    Ok(alert_view(row.as_ref()))
}

/// `GET /customers/{id}/automatic-allocation`.
pub async fn customer_rule(
    db: &impl ConnectionTrait,
    state: &AppState,
    caller: &Caller,
    customer_id: &str,
) -> Result<crate::dto::AutoAllocationView, ApiError> {
    let customer = crate::services::customers::find(db, caller, customer_id).await?;
    rule_view(db, customer.id, state.clock.now()).await
}

/// `PUT` (a rule) and `DELETE` (`None`) `/customers/{id}/automatic-allocation`.
pub async fn set_customer_rule(
    txn: &impl ConnectionTrait,
    state: &AppState,
    caller: &Caller,
    customer_id: &str,
    rule: Option<AutoRule>,
) -> Result<crate::dto::AutoAllocationView, ApiError> {
    let customer = crate::services::customers::find(txn, caller, customer_id).await?;
    set_rule(txn, customer.id, rule, state.clock.now()).await?;
    rule_view(txn, customer.id, state.clock.now()).await
}
