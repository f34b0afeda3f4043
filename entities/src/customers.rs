//! A partner's customer: the partner's view of one organization.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "customers")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub partner_id: i64,
    pub external_id: String,
    #[sea_orm(unique)]
    pub organization_id: i64,
    pub display_name: String,
    pub contact_email: String,
    pub billing_mode: String,
    pub billing_allocation_mode: String,
    /// Partner-funded allocation (reporting target), nano-USD.
    pub allocation_cap_nanos: i64,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
