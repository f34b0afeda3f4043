//! A batch file (issue 46): an uploaded input (`purpose` `batch`, its JSONL content kept here), or
//! a batch's output or error file (`batch_output`, `batch_error`: written from its lines when the
//! batch ends, no content of its own).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "batch_files")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    /// `file-…`, what the API names it by.
    #[sea_orm(unique)]
    pub public_id: String,
    pub organization_id: i64,
    pub purpose: String,
    pub filename: String,
    pub bytes: i64,
    pub lines: i32,
    /// The uploaded JSONL (input files only).
    pub content: Option<Vec<u8>>,
    /// The batch an output or error file belongs to.
    pub batch_id: Option<i64>,
    pub created_at: DateTimeUtc,
    /// When the retention sweep removes it (an input file: pushed back while a batch uses it).
    pub expires_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
