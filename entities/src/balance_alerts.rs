//! A low-balance alert: an organization's available balance or a partner's available funding
//! watched against a threshold; one mail per crossing below it.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "balance_alerts")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    /// `org` or `partner`.
    pub subject: String,
    pub subject_id: i64,
    pub threshold_nanos: i64,
    /// Last seen below the threshold (the alert of this crossing was sent).
    pub below: bool,
    /// Counted up by every change of the crossing state (the watcher's claims are conditional on it).
    pub generation: i64,
    pub updated_at: DateTimeUtc,
    pub alerted_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
