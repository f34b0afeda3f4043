//! A single-use link mailed to an address: `signup` (prove the address, then choose a password),
//! `reset` (a new password), `org_invite` / `partner_invite` (join with a role). Only the token's
//! keyed hash is stored.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "console_tokens")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    #[sea_orm(unique)]
    pub token_hash: String,
    pub purpose: String,
    pub email: String,
    pub organization_id: Option<i64>,
    pub partner_id: Option<i64>,
    pub role: Option<String>,
    /// The console user who sent it (`None`: the operator's command).
    pub invited_by: Option<i64>,
    pub created_at: DateTimeUtc,
    pub expires_at: DateTimeUtc,
    pub used_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
