//! The audit log: one record for every change a person makes, written in the change's own
//! transaction so that the change and its record commit together (DESIGN §6c).

use chrono::{DateTime, Utc};
use entities::audit_records;
use sea_orm::{ActiveModelTrait, ConnectionTrait, DbErr, Set};

/// What an audit record says.
pub struct Audit<'a> {
    pub organization: Option<i64>,
    pub partner: Option<i64>,
    pub actor: Option<i64>,
    pub action: &'a str,
    pub target: Option<String>,
    pub detail: serde_json::Value,
    pub ip: Option<String>,
}

/// Writes an audit record (in the caller's transaction, so the change and its record commit
/// together).
pub async fn audit(
    db: &impl ConnectionTrait,
    a: Audit<'_>,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    audit_records::ActiveModel {
        organization_id: Set(a.organization),
        partner_id: Set(a.partner),
        actor_user_id: Set(a.actor),
        action: Set(a.action.to_string()),
        target: Set(a.target),
        detail: Set(a.detail.to_string()),
        ip: Set(a.ip),
        created_at: Set(now),
        ..Default::default()
    }
    .insert(db)
    .await?;
    Ok(())
}

/// A person's own records, the latest `limit` (their account page): what they did or what was
/// done to their address, outside any organization or partner.
pub async fn personal(
    db: &impl ConnectionTrait,
    user: &entities::console_users::Model,
    limit: u64,
) -> Result<Vec<audit_records::Model>, DbErr> {
    use sea_orm::sea_query::ExprTrait;
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
    audit_records::Entity::find()
        .filter(
            audit_records::Column::ActorUserId
                .eq(user.id)
                .or(audit_records::Column::Target.eq(user.email.clone())),
        )
        .filter(audit_records::Column::OrganizationId.is_null())
        .filter(audit_records::Column::PartnerId.is_null())
        .order_by_desc(audit_records::Column::Id)
        .limit(limit)
        .all(db)
        .await
}
