//! A partner's usage of one UTC day or ISO week, by one dimension's value (the dashboard's
//! rollup; the settler adds to it with the hourly buckets).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "partner_usage")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub partner_id: i64,
    /// `customer`, `key`, `group` or `model`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub dim: String,
    /// 1 (a UTC day) or 7 (an ISO week).
    #[sea_orm(primary_key, auto_increment = false)]
    pub span_days: i16,
    /// The day, or the week's Monday.
    #[sea_orm(primary_key, auto_increment = false)]
    pub day: Date,
    /// The organization, key or group id (0 for `model`).
    #[sea_orm(primary_key, auto_increment = false)]
    pub ref_id: i64,
    /// The model (empty but for `model`).
    #[sea_orm(primary_key, auto_increment = false)]
    pub model: String,
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_tokens: i64,
    pub cache_write_tokens: i64,
    pub estimated_requests: i64,
    pub cost_nanos: i64,
    pub charged_nanos: i64,
    pub wholesale_nanos: i64,
    pub images: i64,
    pub video_seconds: i64,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
