//! One UTC day × supplier account × model, checked against the supplier's own usage report
//! (issue 47): what the ledger booked on the account (`ours_*`: its usage records), what the
//! report says (`theirs_*`), the cost of the difference at the supplier's prices, and whether it
//! is beyond `[reconciliation] drift_tolerance`. Rewritten by each check of the day.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "supplier_reconciliations")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    /// `YYYY-MM-DD` (UTC).
    pub day: String,
    pub account_id: String,
    pub model: String,
    pub ours_requests: i64,
    /// All input tokens (cache reads and writes included), as everywhere in the ledger.
    pub ours_input: i64,
    pub ours_output: i64,
    pub ours_cached: i64,
    pub ours_cache_write: i64,
    /// Requests the report counts (OpenAI's `num_model_requests`; null: Anthropic counts none).
    pub theirs_requests: Option<i64>,
    pub theirs_input: i64,
    pub theirs_output: i64,
    pub theirs_cached: i64,
    pub theirs_cache_write: i64,
    /// (theirs − ours) at the supplier's prices × the account's multiplier; null when a price it
    /// needs is unknown.
    pub drift_cost_nanos: Option<i64>,
    pub over_tolerance: bool,
    pub checked_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
