//! A hosted partner top-up link and its state.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "top_up_sessions")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub partner_id: i64,
    #[sea_orm(unique)]
    pub token_hash: String,
    pub amount_nanos: i64,
    /// `open`, then `paid`, `expired` or `failed` (final).
    pub status: crate::status::TopUpStatus,
    pub created_at: DateTimeUtc,
    pub paid_at: Option<DateTimeUtc>,
    /// `stripe` when a payment provider hosts the payment; `None`: the operator settles it.
    pub provider: Option<String>,
    /// The provider's session id (Stripe: `cs_…`), unique.
    pub provider_session_id: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
