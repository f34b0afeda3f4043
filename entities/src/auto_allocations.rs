//! One run of an automatic allocation rule.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "auto_allocations")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub customer_id: i64,
    pub amount_nanos: i64,
    /// `allocated`, `refused_funding` (partner funding could not cover it) or `refused_cap` (the
    /// month's cap reached).
    pub outcome: String,
    /// The ledger reference of an allocation made.
    pub reference: String,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
