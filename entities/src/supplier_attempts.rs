//! An attempt a call moved on from before the one that answered (issue 47; the answering
//! attempt's supplier cost is on its usage record): the account, the supplier's status and why
//! the gateway moved on (`refused`: an error status; `unreachable`: no connection; `abandoned`:
//! the answer broke before it reached the client, and what it served).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "supplier_attempts")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub request_id: String,
    /// From 1, in the order the attempts were made.
    pub attempt: i32,
    pub organization_id: i64,
    pub account_id: String,
    pub model: String,
    pub outcome: String,
    /// The supplier's status (0: none).
    pub status: i32,
    /// What the supplier bills for the attempt (0 for a refusal or no connection; null: unknown).
    pub supplier_cost_nanos: Option<i64>,
    /// What an abandoned attempt served (0 for the others): tokens as reported, or estimated
    /// (`measurement`), and images.
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_tokens: i64,
    pub cache_write_tokens: i64,
    pub cache_write_1h_tokens: i64,
    pub images: i64,
    /// `exact` or `estimated`.
    pub measurement: String,
    pub started_at: DateTimeUtc,
    pub settled_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
