//! A partner's usage of one UTC hour, by group or model (the hourly charts' period totals).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "partner_usage_hourly")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub partner_id: i64,
    /// `group` or `model`.
    #[sea_orm(primary_key, auto_increment = false)]
    pub dim: String,
    #[sea_orm(primary_key, auto_increment = false)]
    pub hour_start: DateTimeUtc,
    /// The group id (0 for `model`).
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
