//! The webhook outbox (issue 45): one event, written in the transaction of the change that
//! caused it.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_events")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    /// The event's stable id (`evt_…`), the same on every delivery of it.
    #[sea_orm(unique)]
    pub public_id: String,
    pub partner_id: i64,
    pub event_type: String,
    /// The event's `data`, JSON.
    pub data: String,
    /// What makes a swept event once-only (`invitation.expired:42`), unique; none for events a
    /// change writes.
    pub dedupe_key: Option<String>,
    pub created_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
