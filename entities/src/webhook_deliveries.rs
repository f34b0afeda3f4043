//! One event to one endpoint (issue 45): pending until delivered (a 2xx) or past its deadline.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_deliveries")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    /// The event's row (`webhook_events.id`).
    pub event_id: i64,
    pub endpoint_id: i64,
    pub partner_id: i64,
    /// `pending`, `succeeded` or `failed`.
    pub status: String,
    pub attempts: i32,
    pub next_attempt_at: DateTimeUtc,
    /// No attempt is made past it (72 hours after the event, or after a redelivery).
    pub deadline_at: DateTimeUtc,
    /// A process holds it until then (a crash lets it go when this passes).
    pub claimed_until: Option<DateTimeUtc>,
    pub claimed_by: Option<String>,
    pub last_status: Option<i32>,
    pub last_error: Option<String>,
    pub succeeded_at: Option<DateTimeUtc>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
