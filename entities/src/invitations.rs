//! The invitation that activates a customer. Only its token's keyed hash is stored.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "invitations")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub customer_id: i64,
    #[sea_orm(unique)]
    pub token_hash: String,
    pub email: String,
    /// `pending`, `accepted`, `expired` or `revoked` (expiry is also derived from `expires_at`).
    pub status: crate::status::InvitationStatus,
    pub expires_at: DateTimeUtc,
    pub accepted_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
