//! Partner automation tokens (SPEC "Partner token rules"): minted by the operator's command or in
//! the partner dashboard, only their keyed hash stored, the full value shown once.
//!
//! A token made in the dashboard carries the team role of the person who made it, frozen at
//! creation (`role`); the partner gate uses it in place of the partner's role, so a token acts
//! with what its maker could do then. A token the operator's command made has no role of its own
//! and acts with its partner's role, as before. Tokens belong to the partner, not to the person:
//! they outlive a maker's removal from the team until an owner or admin revokes them (decision).

use super::audit;
use super::memberships;
use crate::state::AppState;
use chrono::{DateTime, Duration, Utc};
use credentials::{Kind, Secret};
use entities::partner_tokens;
use entities::status::TokenStatus;
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, QueryFilter,
    QueryOrder, Set, TransactionTrait,
};

/// The two scopes (SPEC): reads, or reads and writes.
pub const SCOPES: [&str; 2] = ["partner:read", "partner:write"];

/// How often `last_used_at` is written at most, per token.
pub const TOUCH_EVERY: Duration = Duration::seconds(60);

/// Why a token change was refused.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// not a token of this partner, or not active
    #[error("No such active token")]
    NotFound,
    /// not one of [`SCOPES`]
    #[error("The scope must be partner:read or partner:write")]
    BadScope,
    /// a database failure
    #[error("database error: {0}")]
    Db(#[from] DbErr),
}

/// Mints a token of `partner_id` with `scopes` (in the caller's transaction); `role` and
/// `created_by` are set for a token made in the dashboard.
pub async fn mint(
    state: &AppState,
    db: &impl ConnectionTrait,
    partner_id: i64,
    scopes: &[String],
    role: Option<&str>,
    created_by: Option<i64>,
    now: DateTime<Utc>,
) -> Result<(partner_tokens::Model, Secret), DbErr> {
    let secret = credentials::generate(Kind::PartnerToken, state.env);
    let row = partner_tokens::ActiveModel {
        partner_id: Set(partner_id),
        token_hash: Set(state.hasher.hash(secret.expose())),
        preview: Set(credentials::preview(secret.expose())),
        scopes: Set(scopes.join(" ")),
        status: Set(TokenStatus::Active),
        created_at: Set(now),
        revoked_at: Set(None),
        role: Set(role.map(str::to_string)),
        created_by: Set(created_by),
        last_used_at: Set(None),
        ..Default::default()
    }
    .insert(db)
    .await?;
    Ok((row, secret))
}

/// A token as the dashboard lists it.
pub struct Listed {
    pub row: partner_tokens::Model,
    /// The address of the person who made it (`None`: the operator's command).
    pub creator: Option<String>,
}

/// The tokens of `partner_id`: every active one, then the 20 most recently revoked; newest
/// first in each.
pub async fn list(db: &impl ConnectionTrait, partner_id: i64) -> Result<Vec<Listed>, DbErr> {
    let mut rows = partner_tokens::Entity::find()
        .filter(partner_tokens::Column::PartnerId.eq(partner_id))
        .filter(partner_tokens::Column::Status.eq(TokenStatus::Active))
        .order_by_desc(partner_tokens::Column::Id)
        .all(db)
        .await?;
    let revoked = partner_tokens::Entity::find()
        .filter(partner_tokens::Column::PartnerId.eq(partner_id))
        .filter(partner_tokens::Column::Status.eq(TokenStatus::Revoked))
        .order_by_desc(partner_tokens::Column::Id)
        .all(db)
        .await?;
    rows.extend(revoked.into_iter().take(20));
    let emails = memberships::emails_of(db, rows.iter().filter_map(|r| r.created_by)).await?;
    Ok(rows
        .into_iter()
        .map(|row| Listed {
            creator: row.created_by.and_then(|id| emails.get(&id).cloned()),
            row,
        })
        .collect())
}

/// Who changes tokens: a team member with their role, from an address.
pub struct Actor<'a> {
    pub user_id: i64,
    pub role: &'a str,
    pub ip: Option<String>,
}

fn audit<'a>(
    partner_id: i64,
    actor: &Actor<'_>,
    action: &'a str,
    token: &partner_tokens::Model,
) -> audit::Audit<'a> {
    audit::Audit {
        organization: None,
        partner: Some(partner_id),
        actor: Some(actor.user_id),
        action,
        target: Some(token.preview.clone()),
        detail: serde_json::json!({"token_id": token.id, "scopes": token.scopes}),
        ip: actor.ip.clone(),
    }
}

/// Creates a token with one scope; the token, and its audit record, commit together.
pub async fn create(
    state: &AppState,
    partner_id: i64,
    scope: &str,
    actor: &Actor<'_>,
) -> Result<Secret, TokenError> {
    if !SCOPES.contains(&scope) {
        return Err(TokenError::BadScope);
    }
    let now = state.clock.now();
    let txn = state.db.begin().await?;
    let (row, secret) = mint(
        state,
        &txn,
        partner_id,
        &[scope.to_string()],
        Some(actor.role),
        Some(actor.user_id),
        now,
    )
    .await?;
    audit::audit(
        &txn,
        audit(partner_id, actor, "partner_token_created", &row),
        now,
    )
    .await?;
    txn.commit().await?;
    Ok(secret)
}

/// Revokes active token `token_id` of `partner_id` (a conditional update: of two revocations or
/// rotations of one token, one wins); `None` when it is not an active token of this partner.
async fn revoke_in(
    db: &impl ConnectionTrait,
    partner_id: i64,
    token_id: i64,
    now: DateTime<Utc>,
) -> Result<Option<partner_tokens::Model>, DbErr> {
    let Some(row) = partner_tokens::Entity::find_by_id(token_id)
        .filter(partner_tokens::Column::PartnerId.eq(partner_id))
        .one(db)
        .await?
    else {
        return Ok(None);
    };
    let done = partner_tokens::Entity::update_many()
        .col_expr(
            partner_tokens::Column::Status,
            Expr::value(TokenStatus::Revoked),
        )
        .col_expr(partner_tokens::Column::RevokedAt, Expr::value(Some(now)))
        .filter(partner_tokens::Column::Id.eq(token_id))
        .filter(partner_tokens::Column::Status.eq(TokenStatus::Active))
        .exec(db)
        .await?;
    Ok((done.rows_affected == 1).then_some(row))
}

/// Rotates token `token_id`: it stops at once and a new one with the same scopes (and the
/// rotating person's role) replaces it; both, and the audit record, commit together.
pub async fn rotate(
    state: &AppState,
    partner_id: i64,
    token_id: i64,
    actor: &Actor<'_>,
) -> Result<Secret, TokenError> {
    let now = state.clock.now();
    let txn = state.db.begin().await?;
    let old = revoke_in(&txn, partner_id, token_id, now)
        .await?
        .ok_or(TokenError::NotFound)?;
    let scopes: Vec<String> = old.scopes.split_whitespace().map(str::to_string).collect();
    let (row, secret) = mint(
        state,
        &txn,
        partner_id,
        &scopes,
        Some(actor.role),
        Some(actor.user_id),
        now,
    )
    .await?;
    let mut record = audit(partner_id, actor, "partner_token_rotated", &row);
    record.detail =
        serde_json::json!({"token_id": row.id, "replaces": old.id, "scopes": row.scopes});
    audit::audit(&txn, record, now).await?;
    txn.commit().await?;
    Ok(secret)
}

/// Revokes token `token_id`; it stops at once. Audited in the same transaction.
pub async fn revoke(
    state: &AppState,
    partner_id: i64,
    token_id: i64,
    actor: &Actor<'_>,
) -> Result<(), TokenError> {
    let now = state.clock.now();
    let txn = state.db.begin().await?;
    let old = revoke_in(&txn, partner_id, token_id, now)
        .await?
        .ok_or(TokenError::NotFound)?;
    audit::audit(
        &txn,
        audit(partner_id, actor, "partner_token_revoked", &old),
        now,
    )
    .await?;
    txn.commit().await?;
    Ok(())
}

/// Records that `token_id` was used at `now`, at most once per [`TOUCH_EVERY`] (a conditional
/// update: most calls write nothing).
pub async fn touch(
    db: &impl ConnectionTrait,
    token_id: i64,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    partner_tokens::Entity::update_many()
        .col_expr(partner_tokens::Column::LastUsedAt, Expr::value(Some(now)))
        .filter(partner_tokens::Column::Id.eq(token_id))
        .filter(
            Condition::any()
                .add(partner_tokens::Column::LastUsedAt.is_null())
                .add(partner_tokens::Column::LastUsedAt.lt(now - TOUCH_EVERY)),
        )
        .exec(db)
        .await?;
    Ok(())
}
