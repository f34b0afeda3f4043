//! One line of a batch (issue 46): the request as uploaded, its state, the request id it runs
//! under (fixed before it is first sent, so a line sent again is the same call) and its answer.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "batch_lines")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub batch_id: i64,
    /// From 0, in the input file's order.
    #[sea_orm(primary_key, auto_increment = false)]
    pub line: i32,
    pub custom_id: String,
    /// The line's `body`, JSON.
    pub body: String,
    /// `pending`, `running`, `held` (held for a supplier's batch), `submitted` (in one),
    /// `succeeded`, `failed`, `cancelled`, `expired`.
    pub status: String,
    pub request_id: Option<String>,
    /// The gateway's status for the line.
    pub answer_status: Option<i32>,
    /// The gateway's answer, JSON.
    pub answer: Option<String>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    pub attempts: i32,
    pub updated_at: DateTimeUtc,
    /// Run in a supplier's own batch API (migration 000026): the chunk it was sent in
    /// (`supplier_batches`), the account that holds it and the body to send that account.
    pub supplier_batch: Option<i64>,
    pub supplier_account: Option<String>,
    pub supplier_body: Option<String>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
