//! A chunk of a batch sent to a supplier's own batch API (issue 46): the account, the
//! supplier's input file and batch, and where the chunk stands (`uploading` until the supplier
//! has the batch, `submitted` while it runs, `booked` once every line of it is booked).

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "supplier_batches")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    /// The batch (`batches.id`) the chunk's lines are of.
    pub batch_id: i64,
    pub account_id: String,
    pub supplier_file_id: Option<String>,
    pub supplier_batch_id: Option<String>,
    pub status: String,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
