//! A setup-mode Checkout Session that saves a partner's card for automatic recharge.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "recharge_setups")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub partner_id: i64,
    /// Stripe's session id (`cs_…`), unique.
    pub provider_session_id: Option<String>,
    /// `open`, `saved` or `expired`.
    pub status: String,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
