//! A partner's webhook endpoint (issue 45): where its events are delivered and which.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_endpoints")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub partner_id: i64,
    pub url: String,
    pub description: Option<String>,
    /// The event types delivered, space-separated.
    pub events: String,
    /// The signing secret, sealed (AES-256-GCM under a key derived from the server's secret).
    pub secret_sealed: String,
    /// The secret's first characters, to tell endpoints apart.
    pub secret_preview: String,
    /// `active` or `disabled`.
    pub status: String,
    pub created_at: DateTimeUtc,
    pub updated_at: DateTimeUtc,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
