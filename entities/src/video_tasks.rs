//! One video task: who created it, where it runs, what is held for it and how it ended.

use crate::status::VideoTaskStatus;
use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "video_tasks")]
pub struct Model {
    /// The gateway's opaque task id (`video_` + 32 hex), never the supplier's.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub organization_id: i64,
    pub api_key_id: i64,
    pub group_id: i64,
    pub model_requested: String,
    pub model_served: String,
    /// `720p`, `1080p` or `4k` (the per-second price depends on it).
    pub resolution: String,
    /// `durationSeconds` as asked (`None`: the supplier's default; the hold is the model's maximum).
    pub seconds_requested: Option<i64>,
    /// The supplier account the task runs on (`None` until the supplier accepted it).
    pub account_id: Option<String>,
    pub supplier_task_id: Option<String>,
    /// The wallet hold (the create request's id) and its amount, nano-USD.
    pub hold_id: String,
    pub hold_nanos: i64,
    pub retail_rate_ppm: i64,
    pub wholesale_rate_ppm: Option<i64>,
    pub status: VideoTaskStatus,
    pub progress: i32,
    pub failure_code: Option<String>,
    pub failure_message: Option<String>,
    /// Seconds charged once the task ended (0 for a failed task).
    pub seconds_charged: Option<i64>,
    pub cost_nanos: Option<i64>,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
    /// When the supplier was last asked (the sweeper asks again after `video.sweep_interval_ms`).
    pub checked_at: DateTimeUtc,
    pub completed_at: Option<DateTimeUtc>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
