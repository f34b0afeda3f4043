//! A batch (issue 46): an input file's lines run item by item as the key that created it, with
//! OpenAI's statuses and counts, and the runner's lease (one admin-api process runs a batch at a
//! time; a process that dies lets its lease lapse and another takes the batch on).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "batches")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    /// `batch_…`, what the API names it by.
    #[sea_orm(unique)]
    pub public_id: String,
    pub organization_id: i64,
    /// The key that created it: its lines run (and are paid for) as that key.
    pub api_key_id: i64,
    /// `/v1/chat/completions`, `/v1/responses` or `/v1/embeddings`.
    pub endpoint: String,
    pub completion_window: String,
    /// The `metadata` object given at creation, JSON.
    pub metadata: Option<String>,
    pub input_file_id: i64,
    pub output_file_id: Option<i64>,
    pub error_file_id: Option<i64>,
    /// `validating`, `in_progress`, `finalizing`, `completed`, `failed`, `expired`,
    /// `cancelling`, `cancelled`.
    pub status: String,
    pub total: i32,
    pub completed: i32,
    pub failed: i32,
    /// Why the batch failed as a whole (OpenAI's `errors.data`), JSON.
    pub errors: Option<String>,
    pub created_at: DateTimeUtc,
    pub in_progress_at: Option<DateTimeUtc>,
    pub finalizing_at: Option<DateTimeUtc>,
    pub completed_at: Option<DateTimeUtc>,
    pub failed_at: Option<DateTimeUtc>,
    pub expired_at: Option<DateTimeUtc>,
    pub cancelling_at: Option<DateTimeUtc>,
    pub cancelled_at: Option<DateTimeUtc>,
    /// The end of the completion window: lines not run by then expire.
    pub expires_at: DateTimeUtc,
    pub claimed_by: Option<String>,
    pub claimed_until: Option<DateTimeUtc>,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
