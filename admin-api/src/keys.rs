//! Customer keys: creation (secret shown once), and the key directory of the operational store as
//! a mirror of the database.
//!
//! Order of writes: the database first (the record of truth), then the directory. A key whose
//! directory write failed is in the database and becomes usable at the next rebuild; a revoked key
//! is removed from the directory before the revocation is reported done.

use chrono::Utc;
use credentials::{Env, KeyHasher, Kind, Secret};
use entities::customer_api_keys;
use entities::status::KeyStatus;
use money::RateMultiplier;
use opstate::{KeyDirectory, KeyLimits, KeyPermissions, KeyRecord, StoreError};
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, Set,
};
use std::collections::HashMap;

/// Why a key operation failed.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("database: {0}")]
    Database(#[from] DbErr),
    #[error("operational store: {0}")]
    Store(#[from] StoreError),
}

/// A newly created key: its row and its secret (to be shown once, then dropped).
pub struct CreatedKey {
    pub row: customer_api_keys::Model,
    pub secret: Secret,
}

/// The retail multiplier a key of `group_id` pays in `organization_id`: its customer's group
/// price, or the official price (1.0) for organizations no partner resells. `None` when the
/// organization is a partner's customer without that group (or a stored price that is not a
/// positive multiplier): the gateway then refuses to price, never serves free.
pub async fn rate_of(
    db: &impl ConnectionTrait,
    organization_id: i64,
    group_id: i64,
) -> Result<Option<RateMultiplier>, DbErr> {
    use entities::{customer_groups, customers};
    let Some(customer) = customers::Entity::find()
        .filter(customers::Column::OrganizationId.eq(organization_id))
        .one(db)
        .await?
    else {
        return Ok(Some(RateMultiplier::ONE));
    };
    Ok(customer_groups::Entity::find()
        .filter(customer_groups::Column::CustomerId.eq(customer.id))
        .filter(customer_groups::Column::GroupId.eq(group_id))
        .one(db)
        .await?
        .and_then(|g| RateMultiplier::from_ppm(g.retail_rate_multiplier_ppm)))
}

/// The directory record of a key row priced at `rate`.
pub fn record_of(row: &customer_api_keys::Model, rate: Option<RateMultiplier>) -> KeyRecord {
    KeyRecord {
        key_id: row.id,
        org_id: row.organization_id,
        group_id: row.group_id,
        permissions: KeyPermissions {
            openai: row.allow_openai,
            gemini: row.allow_gemini,
            anthropic: row.allow_anthropic,
        },
        rate,
        expires_at: row.expires_at.map(|t| t.timestamp()),
        limits: KeyLimits {
            max_concurrency: row.max_concurrency.and_then(|n| u32::try_from(n).ok()),
            requests_per_minute: row.requests_per_minute.and_then(|n| u32::try_from(n).ok()),
        },
        budget: budget_of(row),
    }
}

/// The budget a key row carries: a positive amount with a known period, else none.
pub fn budget_of(row: &customer_api_keys::Model) -> Option<opstate::KeyBudget> {
    let limit = money::NanoUsd::from_nanos(row.budget_nanos?);
    let period = opstate::BudgetPeriod::parse(row.budget_period.as_deref()?)?;
    limit
        .is_positive()
        .then_some(opstate::KeyBudget { limit, period })
}

/// What a new key is for.
pub struct NewKey<'a> {
    pub organization_id: i64,
    pub group_id: i64,
    pub name: &'a str,
    pub permissions: KeyPermissions,
    /// When the key stops authenticating (`None`: never).
    pub expires_at: Option<chrono::DateTime<Utc>>,
    /// The key's own limits (each at most its group's default).
    pub limits: KeyLimits,
    /// The key's spend budget (`None`: none).
    pub budget: Option<opstate::KeyBudget>,
}

/// Inserts an active key row for an organization and returns it with its secret. Publishing it
/// to the directory is the caller's (right away, or after its transaction commits).
pub async fn insert_key(
    db: &impl ConnectionTrait,
    hasher: &KeyHasher,
    env: Env,
    new: NewKey<'_>,
) -> Result<CreatedKey, DbErr> {
    let secret = credentials::generate(Kind::CustomerKey, env);
    let row = customer_api_keys::ActiveModel {
        organization_id: Set(new.organization_id),
        group_id: Set(new.group_id),
        name: Set(new.name.to_string()),
        key_hash: Set(hasher.hash(secret.expose())),
        preview: Set(credentials::preview(secret.expose())),
        status: Set(KeyStatus::Active),
        allow_openai: Set(new.permissions.openai),
        allow_gemini: Set(new.permissions.gemini),
        allow_anthropic: Set(new.permissions.anthropic),
        created_at: Set(Utc::now()),
        disabled_at: Set(None),
        expires_at: Set(new.expires_at),
        max_concurrency: Set(new
            .limits
            .max_concurrency
            .and_then(|n| i32::try_from(n).ok())),
        requests_per_minute: Set(new
            .limits
            .requests_per_minute
            .and_then(|n| i32::try_from(n).ok())),
        budget_nanos: Set(new.budget.map(|b| b.limit.nanos())),
        budget_period: Set(new.budget.map(|b| b.period.as_str().to_string())),
        ..Default::default()
    }
    .insert(db)
    .await?;
    Ok(CreatedKey { row, secret })
}

/// Creates a usable key for an organization and publishes it to the directory.
pub async fn create_key(
    db: &impl ConnectionTrait,
    directory: &dyn KeyDirectory,
    hasher: &KeyHasher,
    env: Env,
    new: NewKey<'_>,
) -> Result<CreatedKey, KeyError> {
    let created = insert_key(db, hasher, env, new).await?;
    let row = &created.row;
    let rate = rate_of(db, row.organization_id, row.group_id).await?;
    directory
        .publish(&row.key_hash, &record_of(row, rate))
        .await?;
    Ok(created)
}

/// Publishes every active key of the database to the directory and marks it loaded. Returns the
/// number of keys published.
pub async fn rebuild_directory(
    db: &impl ConnectionTrait,
    directory: &dyn KeyDirectory,
) -> Result<usize, KeyError> {
    let rows = customer_api_keys::Entity::find()
        .filter(customer_api_keys::Column::Status.eq(KeyStatus::Active))
        .all(db)
        .await?;
    // Two queries for every price instead of two per key: the same answer as `rate_of`.
    let customer_of: HashMap<i64, i64> = entities::customers::Entity::find()
        .all(db)
        .await?
        .into_iter()
        .map(|c| (c.organization_id, c.id))
        .collect();
    let price: HashMap<(i64, i64), Option<RateMultiplier>> =
        entities::customer_groups::Entity::find()
            .all(db)
            .await?
            .into_iter()
            .map(|g| {
                (
                    (g.customer_id, g.group_id),
                    RateMultiplier::from_ppm(g.retail_rate_multiplier_ppm),
                )
            })
            .collect();
    let entries: Vec<(String, KeyRecord)> = rows
        .iter()
        .map(|r| {
            let rate = match customer_of.get(&r.organization_id) {
                None => Some(RateMultiplier::ONE),
                Some(customer) => price.get(&(*customer, r.group_id)).copied().flatten(),
            };
            (r.key_hash.clone(), record_of(r, rate))
        })
        .collect();
    directory.load(&entries).await?;
    Ok(entries.len())
}

/// Revokes in the directory every key disabled since `since` (repairs a rebuild that raced with a
/// disable). Returns how many were revoked.
pub async fn revoke_disabled_since(
    db: &impl ConnectionTrait,
    directory: &dyn KeyDirectory,
    since: chrono::DateTime<Utc>,
) -> Result<usize, KeyError> {
    let rows = customer_api_keys::Entity::find()
        .filter(customer_api_keys::Column::Status.eq(KeyStatus::Disabled))
        .filter(customer_api_keys::Column::DisabledAt.gte(since))
        .all(db)
        .await?;
    for r in &rows {
        directory.revoke(&r.key_hash).await?;
    }
    Ok(rows.len())
}
