//! One attempt of a delivery (issue 45): the receiver's status and the first bytes of its answer,
//! or why there was none.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_attempts")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub delivery_id: i64,
    pub attempt: i32,
    pub started_at: DateTimeUtc,
    pub duration_ms: i64,
    pub status_code: Option<i32>,
    /// The first bytes of the answer (at most 512).
    pub answer: Option<String>,
    pub error: Option<String>,
    /// The admin-api process that made it.
    pub worker: String,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
