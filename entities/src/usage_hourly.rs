//! Usage of one organization, key and model in one UTC hour.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "usage_hourly")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub organization_id: i64,
    pub api_key_id: i64,
    pub model: String,
    pub hour_start: DateTimeUtc,
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_tokens: i64,
    pub cache_write_tokens: i64,
    /// Requests whose usage was estimated (the supplier's count never arrived).
    pub estimated_requests: i64,
    /// Retail cost in nano-USD (what the organization's wallet is charged).
    pub cost_nanos: i64,
    /// Debited from the wallet (the ledger's spend postings), nano-USD.
    pub charged_nanos: i64,
    /// The partner's wholesale cost of these charges (its outstanding-usage accruals), nano-USD.
    pub wholesale_nanos: i64,
    /// Images served (image calls).
    pub images: i64,
    /// Seconds of video charged (video tasks).
    pub video_seconds: i64,
    /// Requests that failed (status 400 or above): with `requests`, they tell the request log
    /// which hours hold the calls a status filter asks for.
    pub failed_requests: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
