//! An organization's own keys, as its console sees them: the list with spend and last use, the
//! groups it may mint in, each budget's words, and create and disable under the partner route's
//! rules (`keys.rs`), each with its audit record.

use super::keys::{KeyError, NewKey, preview, with_standing};
use crate::dto::{KeyPreview, Usd};
use crate::keys as key_store;
use crate::state::AppState;
use chrono::{DateTime, Utc};
use entities::customer_api_keys;
use entities::status::KeyStatus;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder, Set,
};

/// How the console shows each key's budget, by key id: "25 USD per month: 3.5 spent, 1.2 held,
/// 20.3 left" (the standing omitted when the store cannot say), or "none".
pub async fn budget_texts(
    state: &AppState,
    org: i64,
    rows: &[customer_api_keys::Model],
) -> std::collections::HashMap<i64, String> {
    let mut previews: Vec<KeyPreview> = rows.iter().map(preview).collect();
    with_standing(state, org, &mut previews).await;
    let dec = |u: Option<Usd>| u.map(|u| u.0.to_decimal_usd().normalize().to_string());
    previews
        .iter()
        .map(|p| {
            let text = match &p.budget {
                None => "none".to_string(),
                Some(b) => {
                    let head = format!(
                        "{} USD per {}",
                        b.budget_usd.0.to_decimal_usd().normalize(),
                        b.budget_period
                    );
                    match (dec(b.spent_usd), dec(b.held_usd), dec(b.remaining_usd)) {
                        (Some(spent), Some(held), Some(left)) => {
                            format!("{head}: {spent} spent, {held} held, {left} left")
                        }
                        _ => format!("{head} (standing unavailable right now)"),
                    }
                }
            };
            (p.api_key_id, text)
        })
        .collect()
}

/// A key as the console lists it: its preview, and what it spent (usage cost, nano-USD) and when
/// it was last used, from the hourly buckets.
pub struct OrgKey {
    pub row: customer_api_keys::Model,
    pub spent: money::NanoUsd,
    pub last_used: Option<DateTime<Utc>>,
}

/// The keys of organization `org_id`, newest first.
pub async fn org_keys(db: &impl ConnectionTrait, org_id: i64) -> Result<Vec<OrgKey>, KeyError> {
    let rows = org_key_rows(db, org_id).await?;
    let buckets = entities::usage_hourly::Entity::find()
        .filter(entities::usage_hourly::Column::OrganizationId.eq(org_id))
        .all(db)
        .await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            let mine = buckets.iter().filter(|b| b.api_key_id == row.id);
            let spent = mine
                .clone()
                .fold(0i64, |a, b| a.saturating_add(b.cost_nanos));
            let last_used = mine.map(|b| b.hour_start).max();
            OrgKey {
                row,
                spent: money::NanoUsd::from_nanos(spent),
                last_used,
            }
        })
        .collect())
}

/// Every key of organization `org_id` (any status), newest first.
pub async fn org_key_rows(
    db: &impl ConnectionTrait,
    org_id: i64,
) -> Result<Vec<customer_api_keys::Model>, KeyError> {
    Ok(customer_api_keys::Entity::find()
        .filter(customer_api_keys::Column::OrganizationId.eq(org_id))
        .order_by_desc(customer_api_keys::Column::Id)
        .all(db)
        .await?)
}

/// The keys (any status) of the organizations partner `partner_id` resells: every one, or those
/// among `ids`.
pub async fn partner_key_rows(
    db: &impl ConnectionTrait,
    partner_id: i64,
    ids: Option<&[i64]>,
) -> Result<Vec<customer_api_keys::Model>, KeyError> {
    use sea_orm::sea_query::Query;
    let orgs = Query::select()
        .column(entities::customers::Column::OrganizationId)
        .from(entities::customers::Entity)
        .and_where(entities::customers::Column::PartnerId.eq(partner_id))
        .to_owned();
    let mut q = customer_api_keys::Entity::find()
        .filter(customer_api_keys::Column::OrganizationId.in_subquery(orgs));
    if let Some(ids) = ids {
        q = q.filter(customer_api_keys::Column::Id.is_in(ids.iter().copied()));
    }
    Ok(q.all(db).await?)
}

/// The groups organization `org_id` may mint keys in (its customer's groups, or every configured
/// group for an organization no partner resells), with their names.
pub async fn org_groups(
    db: &impl ConnectionTrait,
    state: &AppState,
    org_id: i64,
) -> Result<Vec<(i64, String)>, KeyError> {
    let mut out = Vec::new();
    for g in state.groups().iter() {
        if key_store::rate_of(db, org_id, g.id).await?.is_some() {
            out.push((g.id, g.name.clone()));
        }
    }
    Ok(out)
}

/// Creates a key of organization `org_id` from the console, under the partner route's rules
/// (name, group of the organization, expiry in the future, limits within the group's), published
/// to the gateway's directory before it is answered; returns the preview with the secret (shown
/// once). The audit record commits with the key.
pub async fn org_create(
    state: &AppState,
    org_id: i64,
    new: NewKey,
    actor: i64,
    ip: Option<String>,
) -> Result<KeyPreview, KeyError> {
    if new.expires_at.is_some_and(|at| at <= state.clock.now()) {
        return Err(KeyError::Invalid("expires_at must be in the future".into()));
    }
    let txn = crate::db::begin(&state.db).await?;
    let rate = key_store::rate_of(&txn, org_id, new.group_id)
        .await?
        .ok_or_else(|| KeyError::Invalid("the group is not one of the organization's".into()))?;
    if state.group(new.group_id).is_none() {
        return Err(KeyError::Invalid("no such group".into()));
    }
    let key_store::CreatedKey { row, secret } = new.insert(&txn, state, org_id).await?;
    let detail = serde_json::json!({"name": row.name, "group_id": row.group_id});
    let by = (org_id, actor, ip);
    audited(&txn, state, by, "key_created", row.id, detail).await?;
    txn.commit().await?;
    // Published before the answer, as the partner route does; a failed publish is rebuilt by the
    // directory keeper at its next tick.
    if let Err(e) = state
        .stores
        .keys
        .publish(&row.key_hash, &key_store::record_of(&row, Some(rate)))
        .await
    {
        tracing::warn!(error = %e, "key not published yet; the keeper rebuilds the directory");
        state.directory_stale();
    }
    Ok(KeyPreview {
        key: Some(secret.expose().to_string()),
        ..preview(&row)
    })
}

/// Disables key `key_id` of organization `org_id` from the console (SPEC's DELETE semantics: it
/// leaves the gateway's directory before the answer; calls in flight finish). Another
/// organization's key reads as not found.
pub async fn org_disable(
    state: &AppState,
    org_id: i64,
    key_id: i64,
    actor: i64,
    ip: Option<String>,
) -> Result<KeyPreview, KeyError> {
    let txn = crate::db::begin(&state.db).await?;
    let key = customer_api_keys::Entity::find_by_id(key_id)
        .filter(customer_api_keys::Column::OrganizationId.eq(org_id))
        .one(&txn)
        .await?
        .ok_or(KeyError::NotFound)?;
    if key.status == KeyStatus::Disabled {
        return Ok(preview(&key));
    }
    state.stores.keys.revoke(&key.key_hash).await?;
    let mut row: customer_api_keys::ActiveModel = key.into();
    row.status = Set(KeyStatus::Disabled);
    row.disabled_at = Set(Some(Utc::now()));
    let key = row.update(&txn).await?;
    let detail = serde_json::json!({"name": key.name});
    audited(
        &txn,
        state,
        (org_id, actor, ip),
        "key_disabled",
        key.id,
        detail,
    )
    .await?;
    txn.commit().await?;
    Ok(preview(&key))
}

/// The audit record of a change to key `key_id`, made in organization `by.0`'s console by user
/// `by.1` from address `by.2`, in the change's transaction.
async fn audited(
    txn: &impl ConnectionTrait,
    state: &AppState,
    by: (i64, i64, Option<String>),
    action: &'static str,
    key_id: i64,
    detail: serde_json::Value,
) -> Result<(), KeyError> {
    let (org_id, actor, ip) = by;
    let record = crate::services::audit::Audit {
        organization: Some(org_id),
        partner: None,
        actor: Some(actor),
        action,
        target: Some(format!("key:{key_id}")),
        detail,
        ip,
    };
    crate::services::audit::audit(txn, record, state.clock.now()).await?;
    Ok(())
}
