//! One partner write, by idempotency key: its fingerprint and (redacted) outcome.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "idempotency_records")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub partner_id: i64,
    pub idem_key: String,
    pub method: String,
    pub path: String,
    pub fingerprint: String,
    /// `in_progress` or `completed`.
    pub state: crate::status::RecordState,
    pub response_status: Option<i32>,
    /// The response body with secrets removed.
    pub response_body: Option<String>,
    pub created_at: DateTimeUtc,
    pub locked_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
