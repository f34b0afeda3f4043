//! A partner automation token. Only its keyed hash is stored.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "partner_tokens")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub partner_id: i64,
    #[sea_orm(unique)]
    pub token_hash: String,
    pub preview: String,
    /// Space-separated scopes (`partner:read`, `partner:write`).
    pub scopes: String,
    /// `active` or `revoked`.
    pub status: crate::status::TokenStatus,
    pub created_at: DateTimeUtc,
    pub revoked_at: Option<DateTimeUtc>,
    /// The team role of the person who made it in the dashboard, frozen at creation (the gate
    /// uses it in place of the partner's role); `None` for a token of the operator's command.
    pub role: Option<String>,
    /// The console user who made it (`None`: the operator's command).
    pub created_by: Option<i64>,
    /// When it was last used (written at most once a minute).
    pub last_used_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
