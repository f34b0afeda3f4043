//! Customer API keys through the partner API: create (secret once), list (previews), disable.

use super::customers::CustomerError;
use super::fault::Fault;
use super::group_prices;
use crate::caller::Caller;
use crate::dto::usd_of;
use crate::dto::{CreateKeyRequest, KeyBudgetView, KeyPreview, Usd};
use crate::keys as key_store;
use crate::services::customers;
use crate::services::effects::{Effect, Written};
use crate::state::AppState;
use chrono::{DateTime, SecondsFormat, Utc};
use entities::status::KeyStatus;
use entities::{customer_api_keys, customer_groups};
use money::NanoUsd;
use opstate::{BudgetPeriod, KeyBudget, KeyLimits};
use sea_orm::ActiveEnum;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, Set,
};
use serde_json::Value;

/// Why a customer key request is refused.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The request is malformed or outside the group's limits; the text says which field.
    #[error("invalid API key request: {0}")]
    Invalid(String),
    /// No key of this customer has this id.
    #[error("API key not found")]
    NotFound,
    #[error(transparent)]
    Customer(#[from] CustomerError),
    #[error(transparent)]
    Fault(Fault),
}
super::fault::faults!(KeyError);

/// The preview of a key (never the secret).
pub fn preview(row: &customer_api_keys::Model) -> KeyPreview {
    KeyPreview {
        api_key_id: row.id,
        name: row.name.clone(),
        group_id: row.group_id,
        preview: row.preview.clone(),
        status: row.status.to_value(),
        created_at: row.created_at.to_rfc3339_opts(SecondsFormat::Secs, true),
        disabled_at: row
            .disabled_at
            .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true)),
        expires_at: row
            .expires_at
            .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true)),
        expired: row.expires_at.is_some_and(|t| t <= Utc::now()),
        max_concurrency: row.max_concurrency.map(i64::from),
        requests_per_minute: row.requests_per_minute.map(i64::from),
        budget: key_store::budget_of(row).map(|b| KeyBudgetView {
            budget_usd: Usd(b.limit),
            budget_period: b.period.as_str(),
            spent_usd: None,
            held_usd: None,
            remaining_usd: None,
            resets_at: None,
        }),
        key: None,
    }
}

/// Fills the standing of the budgets among `previews` (keys of organization `org`) from the
/// operational store: spent in the current period, held by calls in flight, what is left, when
/// the period ends. A store that cannot answer (or has no mirror of the organization) leaves
/// them `null`, never zero.
pub async fn with_standing(state: &AppState, org: i64, previews: &mut [KeyPreview]) {
    let ids: Vec<i64> = previews
        .iter()
        .filter(|p| p.budget.is_some())
        .map(|p| p.api_key_id)
        .collect();
    if ids.is_empty() {
        return;
    }
    let report = match state.stores.wallets.key_spend(org, &ids).await {
        Ok(Some(report)) => report,
        Ok(None) => return,
        Err(e) => {
            tracing::warn!(error = %e, org, "key spend unreadable; budgets shown without standing");
            return;
        }
    };
    let windows = opstate::Windows::at(state.clock.now().timestamp_millis());
    for (id, spend) in ids.iter().zip(&report.keys) {
        if let Some(view) = previews
            .iter_mut()
            .find(|p| p.api_key_id == *id)
            .and_then(|p| p.budget.as_mut())
        {
            fill_standing(view, spend, &windows);
        }
    }
}

/// Writes a budget's standing from the key's spend at `windows`.
pub fn fill_standing(
    view: &mut KeyBudgetView,
    spend: &opstate::KeySpend,
    windows: &opstate::Windows,
) {
    let period = BudgetPeriod::parse(view.budget_period).unwrap_or(BudgetPeriod::Month);
    let budget = KeyBudget {
        limit: view.budget_usd.0,
        period,
    };
    let end = match period {
        BudgetPeriod::Day => windows.day_end_ms,
        BudgetPeriod::Month => windows.month_end_ms,
    };
    view.spent_usd = Some(Usd(spend.spent(period)));
    view.held_usd = Some(Usd(spend.held));
    view.remaining_usd = Some(Usd(spend.remaining(budget)));
    view.resets_at = DateTime::<Utc>::from_timestamp_millis(end)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true));
}

/// A validated create-key body.
pub struct NewKey {
    pub name: String,
    pub group_id: i64,
    pub expires_at: Option<DateTime<Utc>>,
    pub limits: KeyLimits,
    pub budget: Option<KeyBudget>,
}

/// The largest key budget accepted (1 million USD per period).
const MAX_BUDGET: NanoUsd = NanoUsd::from_nanos(1_000_000 * 1_000_000_000);

/// The optional budget of a create-key body: `budget_usd` (positive, at most 1,000,000, at most
/// 9 decimals) and `budget_period` (`day` or `month`; `month` when only `budget_usd` is given; a
/// period without an amount is refused).
pub fn budget(
    amount: Option<&Value>,
    period: Option<&Value>,
) -> Result<Option<KeyBudget>, KeyError> {
    let period = match period {
        None | Some(Value::Null) => None,
        Some(v) => Some(v.as_str().and_then(BudgetPeriod::parse).ok_or_else(|| {
            KeyError::Invalid("budget_period must be \"day\" or \"month\"".into())
        })?),
    };
    match amount {
        None | Some(Value::Null) => match period {
            None => Ok(None),
            Some(_) => Err(KeyError::Invalid("budget_period needs budget_usd".into())),
        },
        Some(v) => {
            let limit = usd_of(v)
                .filter(|n| n.is_positive() && *n <= MAX_BUDGET)
                .ok_or_else(|| {
                    KeyError::Invalid(
                        "budget_usd must be a positive amount up to 1000000 with at most 9 decimals"
                            .into(),
                    )
                })?;
            Ok(Some(KeyBudget {
                limit,
                period: period.unwrap_or(BudgetPeriod::Month),
            }))
        }
    }
}

/// An optional positive limit of the create-key body (1 to 1,000,000).
fn limit(value: Option<&Value>, name: &str) -> Result<Option<u32>, KeyError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=1_000_000).contains(n))
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| {
                KeyError::Invalid(format!("{name} must be an integer from 1 to 1000000"))
            }),
    }
}

impl NewKey {
    /// Validates a create-key body (whether `expires_at` is still in the future is checked when
    /// the key is created, so a replay of a completed create still answers its first result).
    pub fn parse(body: CreateKeyRequest) -> Result<NewKey, KeyError> {
        if let Some(k) = body.unknown.keys().next() {
            return Err(KeyError::Invalid(format!("unknown field {k:?}")));
        }
        let name = match &body.name {
            Some(Value::String(s)) if crate::text::plain_text(s, 100) => s.trim().to_string(),
            _ => {
                return Err(KeyError::Invalid(
                    "name is required (1 to 100 characters, no control characters)".into(),
                ));
            }
        };
        let group_id = body
            .group_id
            .as_ref()
            .and_then(Value::as_i64)
            .filter(|g| *g > 0)
            .ok_or_else(|| KeyError::Invalid("group_id must be a positive integer".into()))?;
        let expires_at = match &body.expires_at {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => {
                let at = DateTime::parse_from_rfc3339(s.trim())
                    .map_err(|_| {
                        KeyError::Invalid(
                            "expires_at must be an ISO 8601 timestamp such as 2027-01-31T00:00:00Z"
                                .into(),
                        )
                    })?
                    .with_timezone(&Utc);
                Some(at)
            }
            Some(_) => {
                return Err(KeyError::Invalid(
                    "expires_at must be an ISO 8601 timestamp string".into(),
                ));
            }
        };
        let limits = KeyLimits {
            max_concurrency: limit(body.max_concurrency.as_ref(), "max_concurrency")?,
            requests_per_minute: limit(body.requests_per_minute.as_ref(), "requests_per_minute")?,
        };
        let budget = budget(body.budget_usd.as_ref(), body.budget_period.as_ref())?;
        Ok(NewKey {
            name,
            group_id,
            expires_at,
            limits,
            budget,
        })
    }
}

impl NewKey {
    /// Writes the key of organization `org_id` (its own limits checked against its group's);
    /// returns its row and its secret (shown once).
    pub(super) async fn insert(
        &self,
        txn: &impl ConnectionTrait,
        state: &AppState,
        org_id: i64,
    ) -> Result<key_store::CreatedKey, KeyError> {
        within_group_limits(state, self)?;
        let key = key_store::NewKey {
            organization_id: org_id,
            group_id: self.group_id,
            name: &self.name,
            permissions: opstate::KeyPermissions::default(),
            expires_at: self.expires_at,
            limits: self.limits,
            budget: self.budget,
        };
        Ok(key_store::insert_key(txn, &state.hasher, state.env, key).await?)
    }
}

/// A key's own limits may only tighten its group's limits per key.
fn within_group_limits(state: &AppState, new: &NewKey) -> Result<(), KeyError> {
    let Some(group) = state.group(new.group_id) else {
        return Ok(());
    };
    for (name, asked, most) in [
        (
            "max_concurrency",
            new.limits.max_concurrency,
            group.key_max_concurrency,
        ),
        (
            "requests_per_minute",
            new.limits.requests_per_minute,
            group.key_requests_per_minute,
        ),
    ] {
        if let (Some(asked), Some(most)) = (asked, most)
            && asked > most
        {
            return Err(KeyError::Invalid(format!(
                "{name} must be at most {most}, the group's limit per key"
            )));
        }
    }
    Ok(())
}

/// `POST /customers/{id}/api-keys`: the secret is in this response only.
pub async fn create(
    txn: &impl ConnectionTrait,
    state: &AppState,
    caller: &Caller,
    customer_id: &str,
    new: NewKey,
) -> Result<Written<KeyPreview>, KeyError> {
    if new.expires_at.is_some_and(|at| at <= Utc::now()) {
        return Err(KeyError::Invalid("expires_at must be in the future".into()));
    }
    let customer = customers::find(txn, caller, customer_id).await?;
    let org = customers::require_active(txn, &customer, state.clock.now()).await?;
    let rate = customer_groups::Entity::find()
        .filter(customer_groups::Column::CustomerId.eq(customer.id))
        .filter(customer_groups::Column::GroupId.eq(new.group_id))
        .one(txn)
        .await?
        .ok_or(KeyError::Customer(CustomerError::NotFound))?;
    let rate = group_prices::stored_rate(rate.retail_rate_multiplier_ppm)?;
    let key_store::CreatedKey { row, secret } = new.insert(txn, state, org.id).await?;
    let mut data = KeyPreview {
        key: Some(secret.expose().to_string()),
        ..preview(&row)
    };
    with_standing(state, org.id, std::slice::from_mut(&mut data)).await;
    let stored = data.without_secrets();
    Ok(Written {
        data,
        stored,
        effects: vec![Effect::PublishKey {
            hash: row.key_hash.clone(),
            record: key_store::record_of(&row, Some(rate)),
        }],
    })
}

/// `GET /customers/{id}/api-keys`: previews, with each budget's standing.
pub async fn list(
    state: &AppState,
    caller: &Caller,
    customer_id: &str,
) -> Result<Vec<KeyPreview>, KeyError> {
    let db = &state.db;
    let customer = customers::find(db, caller, customer_id).await?;
    let rows = customer_api_keys::Entity::find()
        .filter(customer_api_keys::Column::OrganizationId.eq(customer.organization_id))
        .order_by_asc(customer_api_keys::Column::Id)
        .all(db)
        .await?;
    let mut previews: Vec<KeyPreview> = rows.iter().map(preview).collect();
    with_standing(state, customer.organization_id, &mut previews).await;
    Ok(previews)
}

/// A key of the customer (disabled ones included); anything else reads as not found.
pub async fn find(
    db: &impl ConnectionTrait,
    caller: &Caller,
    customer_id: &str,
    key_id: &str,
) -> Result<(entities::customers::Model, customer_api_keys::Model), KeyError> {
    let customer = customers::find(db, caller, customer_id).await?;
    let id: i64 = key_id
        .parse()
        .map_err(|_| KeyError::Invalid("api_key_id must be an integer".into()))?;
    let key = customer_api_keys::Entity::find_by_id(id)
        .filter(customer_api_keys::Column::OrganizationId.eq(customer.organization_id))
        .one(db)
        .await?
        .ok_or(KeyError::NotFound)?;
    Ok((customer, key))
}

/// `DELETE /customers/{id}/api-keys/{key}`: permanent. The key leaves the gateway's directory
/// before the database commits and before the response, so the next call with it gets 401;
/// requests already admitted finish. Disabling a disabled key answers its (disabled) preview.
pub async fn disable(
    txn: &impl ConnectionTrait,
    state: &AppState,
    caller: &Caller,
    customer_id: &str,
    key_id: &str,
) -> Result<Written<KeyPreview>, KeyError> {
    let (_, key) = find(txn, caller, customer_id, key_id).await?;
    if key.status == KeyStatus::Disabled {
        return Ok(Written::plain(preview(&key)));
    }
    state.stores.keys.revoke(&key.key_hash).await?;
    let mut row: customer_api_keys::ActiveModel = key.into();
    row.status = Set(KeyStatus::Disabled);
    row.disabled_at = Set(Some(Utc::now()));
    let key = row.update(txn).await?;
    Ok(Written::plain(preview(&key)))
}
