//! Low-balance alerts (issue 32): an organization's available balance or a partner's funding
//! watched against a threshold, mailed once per crossing across the fleet (see `watch` for how a
//! crossing is claimed); their settings for the partner API and both consoles.

use super::MAX_RULE_USD;
use super::contacts::{mail_all, org_contacts, partner_contacts};
use super::customers::CustomerError;
use super::fault::Fault;
use super::wallets::available;
use crate::caller::Caller;
use crate::ledger::{self, AccountRef};
use crate::state::AppState;
use chrono::{DateTime, Utc};
use entities::balance_alerts as alerts;
use money::NanoUsd;
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Set};

/// Why a low-balance alert is refused.
#[derive(Debug, thiserror::Error)]
pub enum AlertError {
    /// The alert body is malformed; the text says which field.
    #[error("invalid alert: {0}")]
    Invalid(String),
    #[error(transparent)]
    Customer(#[from] CustomerError),
    #[error(transparent)]
    Fault(Fault),
}
super::fault::faults!(AlertError);

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

/// The alert of `subject`, if one is set.
pub async fn alert_of(
    db: &impl ConnectionTrait,
    subject: Subject,
) -> Result<Option<alerts::Model>, AlertError> {
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
) -> Result<Option<alerts::Model>, AlertError> {
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

/// A partner's available funding.
async fn partner_available(db: &impl ConnectionTrait, partner: i64) -> Result<NanoUsd, AlertError> {
    Ok(ledger::balance(db, &AccountRef::partner_available(partner).code).await?)
}

/// Checks one alert: below its threshold and not yet alerted → claims the crossing and mails;
/// back at or above → resets it. `true`: this pass sent the alert.
pub(crate) async fn alert_if_below(
    state: &AppState,
    alert: &alerts::Model,
) -> Result<bool, AlertError> {
    let subject = match alert.subject.as_str() {
        "org" => Subject::Org(alert.subject_id),
        _ => Subject::Partner(alert.subject_id),
    };
    let available = match subject {
        Subject::Org(org) => available(state, org).await?,
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
    // The claim: only the instance whose update takes the row sends the mail; the partner's
    // webhook event commits with it.
    let txn = crate::db::begin(&state.db).await?;
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
        .exec(&txn)
        .await?
        .rows_affected
        == 1;
    if !claimed {
        return Ok(false);
    }
    crossing_event(&txn, state, subject, available, threshold).await?;
    txn.commit().await?;
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

/// The partner's webhook event of a crossing, in the crossing's transaction:
/// `organization.balance_low` for a customer's organization (none for an organization no partner
/// resells), `funding.balance_low` for the partner's funding.
async fn crossing_event(
    txn: &impl ConnectionTrait,
    state: &AppState,
    subject: Subject,
    available: NanoUsd,
    threshold: NanoUsd,
) -> Result<(), AlertError> {
    let amounts = serde_json::json!({
        "available_usd": crate::dto::usd_json(available),
        "threshold_usd": crate::dto::usd_json(threshold),
    });
    match subject {
        Subject::Org(org) => {
            let customer = crate::services::customers::of_organization(txn, org).await?;
            if let Some(c) = customer {
                let mut data = amounts;
                data["customer_id"] = c.id.into();
                data["external_customer_id"] = c.external_id.into();
                data["organization_id"] = org.into();
                webhook(txn, state, c.partner_id, "organization.balance_low", data).await?;
            }
        }
        Subject::Partner(p) => webhook(txn, state, p, "funding.balance_low", amounts).await?,
    }
    Ok(())
}

async fn webhook(
    txn: &impl ConnectionTrait,
    state: &AppState,
    partner: i64,
    event: &'static str,
    data: serde_json::Value,
) -> Result<(), AlertError> {
    crate::services::partner_webhooks::emit(txn, state, partner, event, data, None).await?;
    Ok(())
}

/// Validates an alert body: `threshold_usd` a non-negative amount (at most 1,000,000, 9
/// decimals), or `null` to remove the alert.
pub fn parse_alert(body: crate::dto::AlertRequest) -> Result<Option<NanoUsd>, AlertError> {
    if let Some(k) = body.unknown.keys().next() {
        return Err(AlertError::Invalid(format!("unknown field {k:?}")));
    }
    match body.threshold_usd {
        None => Err(AlertError::Invalid(
            "threshold_usd is required (null removes the alert)".into(),
        )),
        Some(serde_json::Value::Null) => Ok(None),
        Some(v) => crate::dto::usd_of(&v)
            .filter(|n| !n.is_negative() && *n <= MAX_RULE_USD)
            .map(Some)
            .ok_or_else(|| {
                AlertError::Invalid(
                    "threshold_usd must be an amount from 0 to 1000000 with at most 9 decimals"
                        .into(),
                )
            }),
    }
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

/// `GET /customers/{id}/low-balance-alert`.
pub async fn customer_alert(
    db: &impl ConnectionTrait,
    caller: &Caller,
    customer_id: &str,
) -> Result<crate::dto::AlertView, AlertError> {
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
) -> Result<crate::dto::AlertView, AlertError> {
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
) -> Result<crate::dto::AlertView, AlertError> {
    let row = set_alert(
        txn,
        Subject::Partner(caller.partner_id),
        threshold,
        state.clock.now(),
    )
    .await?;
    Ok(alert_view(row.as_ref()))
}
