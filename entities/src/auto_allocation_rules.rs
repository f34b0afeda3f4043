//! A partner's automatic allocation rule for one customer: when the organization's available
//! balance falls below `below_nanos`, allocate `amount_nanos` from partner funding, at most
//! `monthly_cap_nanos` per UTC calendar month.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "auto_allocation_rules")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub customer_id: i64,
    pub below_nanos: i64,
    pub amount_nanos: i64,
    pub monthly_cap_nanos: i64,
    /// Ready to act at the next crossing (disarmed by the run, re-armed above the threshold).
    pub armed: bool,
    /// Counted up by every change of the crossing state (the watcher's claims are conditional on it).
    pub generation: i64,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
