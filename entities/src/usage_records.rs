//! One metered gateway request, as settled.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "usage_records")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    #[sea_orm(unique)]
    pub request_id: String,
    pub organization_id: i64,
    pub api_key_id: i64,
    pub group_id: i64,
    pub route: String,
    pub model_requested: String,
    pub model_served: String,
    pub account_id: String,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_tokens: i64,
    /// Input tokens written to the supplier's prompt cache (part of `input_tokens`).
    pub cache_write_tokens: i64,
    /// The part of `cache_write_tokens` written for an hour (Anthropic's 1-hour lifetime).
    pub cache_write_1h_tokens: i64,
    /// `exact` or `estimated`.
    pub measurement: String,
    pub status: i32,
    pub stream: bool,
    pub cost_nanos: i64,
    pub charged_nanos: i64,
    /// What the call cost the partner at wholesale (the charge × wholesale / retail of its
    /// group, rounded down; 0 for an organization no partner resells): exactly the settler's
    /// accrual on the partner's outstanding usage.
    pub wholesale_nanos: i64,
    pub excess_nanos: i64,
    pub started_at: DateTimeUtc,
    pub settled_at: DateTimeUtc,
    pub project: Option<String>,
    pub workflow: Option<String>,
    /// Seconds of audio transcribed (audio models; 0 otherwise).
    pub audio_seconds: i64,
    /// Images served (image calls, priced per image).
    pub images: i64,
    /// Seconds of video charged (video tasks, priced per second).
    pub video_seconds: i64,
    /// The wallet mirror was told this charge (the settler confirms each charge once).
    pub mirror_confirmed: bool,
    /// Milliseconds from the request's arrival to its last byte (absent on records settled
    /// before the request log, migration 000023).
    pub latency_ms: Option<i64>,
    /// The batch (its public id, `batch_…`) whose line this call ran; null for other calls.
    pub batch_id: Option<String>,
    /// That line's number in the batch's input file (from 0).
    pub batch_line: Option<i32>,
    /// What the answering attempt costs at the supplier's prices (issue 47); null when a price it
    /// needs is unknown, and on records settled before migration 000027.
    pub supplier_cost_nanos: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
